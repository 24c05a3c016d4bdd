// The Apache Kafka Java client (kafka-clients) over a secured listener, for
// tests/integration/test_security_clients.py.
//
//   java -cp kafka-clients.jar:... SecureRoundTrip BOOTSTRAP PROPERTIES TOPIC TRANSACTIONAL_ID [...]
//
// Arguments come in groups of four, one group a case: the listener's bootstrap address,
// a properties file with the client's security settings (security.protocol, ssl.*,
// sasl.*), a topic with one partition (created beforehand by the test) and a
// transactional id, which also names the case in the output. For each case one
// transactional producer does initTransactions, one transaction of RECORDS records to
// partition 0 and its commit; then a read_committed consumer with the same settings reads
// the partition from the beginning up to its end offset (the last stable offset).
//
// One JVM runs every case. Results are lines "RESULT <transactional id> <key> <value>" on
// stdout: read (the values read back, comma separated), end_offset_read_committed, and
// done ok; a case that throws (as it must with a wrong password) prints
// "RESULT <transactional id> error <class>: <message>" with the class of the root cause
// as "root", its stack trace on stderr, and the next case still runs.

import java.io.FileInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Properties;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.apache.kafka.common.utils.AppInfoParser;

public final class SecureRoundTrip {
    private static final Duration DEADLINE = Duration.ofSeconds(20);
    private static final Duration CLOSE_TIMEOUT = Duration.ofSeconds(2);
    private static final int RECORDS = 3;

    private SecureRoundTrip() {
    }

    public static void main(String[] args) {
        if (args.length == 0 || args.length % 4 != 0) {
            System.err.println("usage: SecureRoundTrip BOOTSTRAP PROPERTIES TOPIC TRANSACTIONAL_ID [...]");
            System.exit(2);
        }
        result("client", "version", AppInfoParser.getVersion());
        for (int i = 0; i < args.length; i += 4) {
            String transactionalId = args[i + 3];
            long started = System.nanoTime();
            try {
                roundTrip(args[i], load(args[i + 1]), args[i + 2], transactionalId);
                result(transactionalId, "done", "ok");
            } catch (Throwable error) {
                result(transactionalId, "error", describe(error));
                result(transactionalId, "root", root(error).getClass().getName());
                System.err.println("case " + transactionalId + " failed:");
                error.printStackTrace();
            }
            result(transactionalId, "elapsed_ms", (System.nanoTime() - started) / 1_000_000);
        }
        System.out.flush();
        // Exit explicitly so a stuck background thread of a failed case cannot keep the JVM alive.
        System.exit(0);
    }

    private static void roundTrip(String bootstrap, Properties security, String topic, String transactionalId) {
        TopicPartition tp = new TopicPartition(topic, 0);
        KafkaProducer<String, String> producer = new KafkaProducer<>(producerConfig(bootstrap, security, transactionalId));
        try {
            producer.initTransactions();
            producer.beginTransaction();
            for (int i = 0; i < RECORDS; i++) {
                producer.send(new ProducerRecord<>(topic, 0, null, transactionalId + "-" + i));
            }
            producer.commitTransaction();
        } finally {
            producer.close(CLOSE_TIMEOUT);
        }
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(consumerConfig(bootstrap, security))) {
            consumer.assign(List.of(tp));
            consumer.seekToBeginning(List.of(tp));
            long end = consumer.endOffsets(List.of(tp), DEADLINE).get(tp);
            List<String> read = new ArrayList<>();
            long deadline = System.nanoTime() + DEADLINE.toNanos();
            while (consumer.position(tp, DEADLINE) < end) {
                if (System.nanoTime() > deadline) {
                    throw new IllegalStateException("position " + consumer.position(tp) + " short of " + end);
                }
                for (ConsumerRecord<String, String> record : consumer.poll(Duration.ofMillis(200))) {
                    read.add(record.value());
                }
            }
            result(transactionalId, "end_offset_read_committed", end);
            result(transactionalId, "read", read.isEmpty() ? "-" : String.join(",", read));
        }
    }

    private static Properties load(String path) throws IOException {
        Properties security = new Properties();
        try (InputStream in = new FileInputStream(path)) {
            security.load(in);
        }
        return security;
    }

    private static Properties producerConfig(String bootstrap, Properties security, String transactionalId) {
        Properties config = new Properties();
        config.putAll(security);
        config.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        config.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        config.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        config.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, transactionalId);
        config.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, (int) DEADLINE.toMillis());
        config.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, (int) DEADLINE.toMillis());
        config.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, 10_000);
        return config;
    }

    private static Properties consumerConfig(String bootstrap, Properties security) {
        Properties config = new Properties();
        config.putAll(security);
        config.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        config.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        config.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        config.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        config.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, false);
        config.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        config.put(ConsumerConfig.FETCH_MAX_WAIT_MS_CONFIG, 100);
        config.put(ConsumerConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, (int) DEADLINE.toMillis());
        return config;
    }

    // -- output -------------------------------------------------------------------------

    private static Throwable root(Throwable error) {
        Throwable cause = error;
        while (cause.getCause() != null && cause.getCause() != cause) {
            cause = cause.getCause();
        }
        return cause;
    }

    private static String describe(Throwable error) {
        return (error.getClass().getName() + ": " + error.getMessage()).replace('\n', ' ');
    }

    private static synchronized void result(String scenario, String key, Object value) {
        System.out.println("RESULT " + scenario + " " + key + " " + value);
    }
}
