// What Apache Kafka makes of a client certificate's subject, for
// tests/integration/test_certificate_principals_java.py: the JDK's X500Principal.getName()
// (RFC 2253, the text Kafka's DefaultKafkaPrincipalBuilder maps) and kafka-clients'
// SslPrincipalMapper applied to a DN.
//
//   java -cp kafka-clients.jar:... PrincipalNames QUERIES
//
// QUERIES is a file of lines, one query a line:
//   dn <hex of a DER Name>                        the Name as X500Principal.getName() prints it
//   map <base64 of the rules> <base64 of a DN>    SslPrincipalMapper.fromRules(rules).getName(dn)
// Each gets one line "RESULT <line number, from 0> <outcome> <value>" on stdout: outcome ok
// with the base64 of the UTF-8 answer, nomatch (no rule applies), or error with the
// exception's class and message.

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Base64;
import java.util.HexFormat;
import java.util.List;

import javax.security.auth.x500.X500Principal;

import org.apache.kafka.common.security.ssl.SslPrincipalMapper;

public class PrincipalNames {
    public static void main(String[] args) throws Exception {
        List<String> queries = Files.readAllLines(Path.of(args[0]), StandardCharsets.UTF_8);
        for (int index = 0; index < queries.size(); index++) {
            System.out.println("RESULT " + index + " " + answer(queries.get(index).split(" ", -1)));
        }
    }

    private static String answer(String[] query) {
        try {
            String text;
            if (query[0].equals("dn")) {
                text = new X500Principal(HexFormat.of().parseHex(query[1])).getName();
            } else {
                String rules = decode(query[1]);
                try {
                    text = SslPrincipalMapper.fromRules(rules).getName(decode(query[2]));
                } catch (SslPrincipalMapper.NoMatchingRule noRule) {
                    return "nomatch -";
                }
            }
            return "ok " + Base64.getEncoder().encodeToString(text.getBytes(StandardCharsets.UTF_8));
        } catch (Exception error) {
            return "error " + error.getClass().getSimpleName() + ": " + String.valueOf(error.getMessage()).replace('\n', ' ');
        }
    }

    private static String decode(String base64) {
        return new String(Base64.getDecoder().decode(base64), StandardCharsets.UTF_8);
    }
}
