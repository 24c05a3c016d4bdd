// Transactions with the Apache Kafka Java client (kafka-clients), for
// tests/integration/test_txn_java.py.
//
//   java -cp kafka-clients.jar:... TxnScenario BOOTSTRAP SCENARIO [SCENARIO ...]
//
// Scenarios (their topics are created beforehand by the test, see TOPICS there):
//   commit        a transaction across commit-a and commit-b (3 partitions each), committed
//   abort         a transaction over abort-a/abort-b aborted, then one record committed
//   lso           an open transaction holds the last stable offset of lso-0, also over
//                 another producer's committed records, until it commits
//   fence_commit  a second instance fences the first; the first's commit fails
//   fence_send    as fence_commit, but the first's next send fails
//   offsets       sendOffsetsToTransaction: offsets committed with one transaction,
//                 dropped with an aborted one (consume-transform-produce's commit)
//   commit_then_empty_abort
//                 20 rounds of: a transaction over commit-abort (3 partitions) committed,
//                 then one record sent and its transaction aborted at once (under
//                 transaction version 2 while the commit's markers may still be on
//                 their way), then read_committed
//
// One JVM runs every scenario named. Results are lines "RESULT <scenario> <key> <value>"
// on stdout (values without spaces); a scenario that throws prints
// "RESULT <scenario> error <class>: <message>" and its stack trace on stderr, and the
// next scenario still runs.

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerGroupMetadata;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.apache.kafka.common.utils.AppInfoParser;

public final class TxnScenario {
    private static final Duration DEADLINE = Duration.ofSeconds(30);
    private static final Duration CLOSE_TIMEOUT = Duration.ofSeconds(5);

    private final String bootstrap;

    private TxnScenario(String bootstrap) {
        this.bootstrap = bootstrap;
    }

    public static void main(String[] args) {
        if (args.length < 2) {
            System.err.println("usage: TxnScenario BOOTSTRAP SCENARIO [SCENARIO ...]");
            System.exit(2);
        }
        TxnScenario runner = new TxnScenario(args[0]);
        result("client", "version", AppInfoParser.getVersion());
        for (int i = 1; i < args.length; i++) {
            String scenario = args[i];
            try {
                runner.run(scenario);
                result(scenario, "done", "ok");
            } catch (Throwable error) {
                result(scenario, "error", describe(error));
                System.err.println("scenario " + scenario + " failed:");
                error.printStackTrace();
            }
        }
        System.out.flush();
        // Producer and consumer threads are closed, but exit explicitly so a stuck
        // background thread of a failed scenario cannot keep the JVM alive.
        System.exit(0);
    }

    private void run(String scenario) throws Exception {
        switch (scenario) {
            case "commit" -> commitAcrossTopics();
            case "abort" -> abortIsInvisibleToReadCommitted();
            case "lso" -> openTransactionHoldsLastStableOffset();
            case "fence_commit" -> secondInstanceFencesFirst(false);
            case "fence_send" -> secondInstanceFencesFirst(true);
            case "offsets" -> offsetsCommitWithTheTransaction();
            case "commit_then_empty_abort" -> commitThenEmptyAbort();
            default -> throw new IllegalArgumentException("unknown scenario " + scenario);
        }
    }

    // -- the scenarios ----------------------------------------------------------------

    private void commitAcrossTopics() {
        List<TopicPartition> partitions = partitions(3, "commit-a", "commit-b");
        try (KafkaProducer<String, String> producer = transactional("java-commit")) {
            producer.initTransactions();
            producer.beginTransaction();
            for (TopicPartition tp : partitions) {
                for (int i = 0; i < 4; i++) {
                    producer.send(new ProducerRecord<>(tp.topic(), tp.partition(), null, tp + "/" + i));
                }
            }
            producer.commitTransaction();
        }
        readToEnd("commit", "read_committed", partitions);
    }

    private void abortIsInvisibleToReadCommitted() {
        List<TopicPartition> partitions = partitions(3, "abort-a", "abort-b");
        try (KafkaProducer<String, String> producer = transactional("java-abort")) {
            producer.initTransactions();
            producer.beginTransaction();
            for (TopicPartition tp : partitions) {
                for (int i = 0; i < 3; i++) {
                    producer.send(new ProducerRecord<>(tp.topic(), tp.partition(), null, "aborted-" + tp + "-" + i));
                }
            }
            producer.flush(); // on the log before the abort: an abort drops unsent records
            producer.abortTransaction();
            producer.beginTransaction();
            producer.send(new ProducerRecord<>("abort-a", 0, null, "committed-after"));
            producer.commitTransaction();
        }
        readToEnd("abort", "read_committed", partitions);
        readToEnd("abort", "read_uncommitted", partitions);
    }

    private void openTransactionHoldsLastStableOffset() throws Exception {
        TopicPartition tp = new TopicPartition("lso", 0);
        List<TopicPartition> partitions = List.of(tp);
        Properties plainConfig = producerConfig();
        try (KafkaProducer<String, String> plain = new KafkaProducer<>(plainConfig)) {
            for (int i = 0; i < 2; i++) {
                plain.send(new ProducerRecord<>("lso", 0, null, "before-" + i)).get(); // offsets 0-1
            }
        }
        try (KafkaProducer<String, String> open = transactional("java-open");
             KafkaProducer<String, String> other = transactional("java-other");
             KafkaConsumer<String, String> consumer = consumer("read_committed", partitions)) {
            open.initTransactions();
            open.beginTransaction();
            for (int i = 0; i < 3; i++) {
                open.send(new ProducerRecord<>("lso", 0, null, "open-" + i));
            }
            open.flush(); // offsets 2-4, uncommitted
            other.initTransactions();
            other.beginTransaction();
            for (int i = 0; i < 2; i++) {
                other.send(new ProducerRecord<>("lso", 0, null, "other-" + i));
            }
            other.commitTransaction(); // offsets 5-6, COMMIT at 7

            result("lso", "end_offset_read_committed_while_open", endOffsets("read_committed", partitions).get(tp));
            result("lso", "end_offset_read_uncommitted_while_open", endOffsets("read_uncommitted", partitions).get(tp));
            result("lso", "read_committed_while_open", join(readUntil(consumer, Map.of(tp, 2L)).get(tp)));
            int stalled = 0;
            long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(2);
            while (System.nanoTime() < until) {
                stalled += consumer.poll(Duration.ofMillis(200)).count();
            }
            result("lso", "records_past_lso_while_open", stalled);
            result("lso", "position_while_open", consumer.position(tp));

            open.commitTransaction(); // COMMIT at 8
            result("lso", "read_committed_after_commit", join(readUntil(consumer, Map.of(tp, 9L)).get(tp)));
            result("lso", "end_offset_read_committed_after_commit", endOffsets("read_committed", partitions).get(tp));
        }
    }

    private void secondInstanceFencesFirst(boolean sendFirst) {
        String scenario = sendFirst ? "fence_send" : "fence_commit";
        String topic = sendFirst ? "fence-send" : "fence-commit";
        String transactionalId = "java-" + topic;
        List<TopicPartition> partitions = List.of(new TopicPartition(topic, 0));
        KafkaProducer<String, String> zombie = transactional(transactionalId);
        try {
            zombie.initTransactions();
            zombie.beginTransaction();
            for (int i = 0; i < 2; i++) {
                zombie.send(new ProducerRecord<>(topic, 0, null, "zombie-" + i));
            }
            zombie.flush(); // offsets 0-1 in the zombie's open transaction

            try (KafkaProducer<String, String> successor = transactional(transactionalId)) {
                successor.initTransactions(); // returns once the zombie's transaction is aborted (ABORT at 2)
                successor.beginTransaction();
                successor.send(new ProducerRecord<>(topic, 0, null, "successor")); // offset 3
                successor.commitTransaction(); // COMMIT at 4
            }

            if (sendFirst) {
                try {
                    zombie.send(new ProducerRecord<>(topic, 0, null, "zombie-late")).get(30, TimeUnit.SECONDS);
                    result(scenario, "zombie_send", "succeeded");
                } catch (ExecutionException error) {
                    result(scenario, "zombie_send", error.getCause().getClass().getName());
                } catch (Exception error) {
                    result(scenario, "zombie_send", error.getClass().getName());
                }
            }
            try {
                zombie.commitTransaction();
                result(scenario, "zombie_commit", "succeeded");
            } catch (Exception error) {
                result(scenario, "zombie_commit", chain(error));
            }
            if (sendFirst) {
                // After an abortable error the application aborts; a fenced producer
                // learns it is fenced at the latest from EndTxn(abort).
                try {
                    zombie.abortTransaction();
                    result(scenario, "zombie_abort", "succeeded");
                } catch (Exception error) {
                    result(scenario, "zombie_abort", chain(error));
                }
            }
        } finally {
            zombie.close(CLOSE_TIMEOUT);
        }
        readToEnd(scenario, "read_committed", partitions);
        readToEnd(scenario, "read_uncommitted", partitions);
    }

    private void offsetsCommitWithTheTransaction() {
        TopicPartition input = new TopicPartition("offsets-in", 0);
        String group = "java-offsets-group";
        try (KafkaProducer<String, String> producer = transactional("java-offsets")) {
            producer.initTransactions();
            producer.beginTransaction();
            producer.send(new ProducerRecord<>("offsets-out", 0, null, "committed"));
            producer.sendOffsetsToTransaction(Map.of(input, new OffsetAndMetadata(7)), new ConsumerGroupMetadata(group));
            producer.commitTransaction();
            producer.beginTransaction();
            producer.send(new ProducerRecord<>("offsets-out", 0, null, "aborted"));
            producer.sendOffsetsToTransaction(Map.of(input, new OffsetAndMetadata(9)), new ConsumerGroupMetadata(group));
            producer.flush();
            producer.abortTransaction();
        }
        Properties config = new Properties();
        config.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        config.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        config.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        config.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        config.put(ConsumerConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, (int) DEADLINE.toMillis());
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(config)) {
            OffsetAndMetadata committed = consumer.committed(java.util.Set.of(input), DEADLINE).get(input);
            result("offsets", "committed_offset", committed == null ? "-" : Long.toString(committed.offset()));
        }
        readToEnd("offsets", "read_committed", List.of(new TopicPartition("offsets-out", 0)));
    }

    private void commitThenEmptyAbort() {
        List<TopicPartition> partitions = partitions(3, "commit-abort");
        int rounds = 20;
        try (KafkaProducer<String, String> producer = transactional("java-commit-then-abort")) {
            producer.initTransactions();
            for (int round = 0; round < rounds; round++) {
                producer.beginTransaction();
                for (TopicPartition tp : partitions) {
                    producer.send(new ProducerRecord<>(tp.topic(), tp.partition(), null, "r" + round));
                }
                producer.commitTransaction();
                producer.beginTransaction();
                // Sent and aborted at once: the client counts the transaction as started
                // and ends it with EndTxn, which meets the commit still completing.
                producer.send(new ProducerRecord<>(partitions.get(round % 3).topic(), round % 3, null, "aborted"));
                producer.abortTransaction();
            }
        }
        result("commit_then_empty_abort", "rounds", rounds);
        readToEnd("commit_then_empty_abort", "read_committed", partitions);
    }

    // -- clients ------------------------------------------------------------------------

    private Properties producerConfig() {
        Properties config = new Properties();
        config.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        config.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        config.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        config.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, (int) DEADLINE.toMillis());
        config.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, (int) DEADLINE.toMillis());
        config.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, 10_000);
        return config;
    }

    private KafkaProducer<String, String> transactional(String transactionalId) {
        Properties config = producerConfig();
        config.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, transactionalId);
        return new KafkaProducer<>(config);
    }

    private KafkaConsumer<String, String> consumer(String isolation, Collection<TopicPartition> partitions) {
        Properties config = new Properties();
        config.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        config.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        config.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        config.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, isolation);
        config.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, false);
        config.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        config.put(ConsumerConfig.FETCH_MAX_WAIT_MS_CONFIG, 100);
        config.put(ConsumerConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, (int) DEADLINE.toMillis());
        KafkaConsumer<String, String> consumer = new KafkaConsumer<>(config);
        consumer.assign(partitions);
        consumer.seekToBeginning(partitions);
        return consumer;
    }

    /** ListOffsets(latest) in the isolation level: the LSO for read_committed. */
    private Map<TopicPartition, Long> endOffsets(String isolation, Collection<TopicPartition> partitions) {
        try (KafkaConsumer<String, String> consumer = consumer(isolation, partitions)) {
            return consumer.endOffsets(partitions, DEADLINE);
        }
    }

    /** Read every partition from the start to its end offset in `isolation`, printing the
     * end offsets and each partition's values. */
    private void readToEnd(String scenario, String isolation, List<TopicPartition> partitions) {
        Map<TopicPartition, Long> ends = endOffsets(isolation, partitions);
        try (KafkaConsumer<String, String> consumer = consumer(isolation, partitions)) {
            Map<TopicPartition, List<String>> read = readUntil(consumer, ends);
            for (TopicPartition tp : partitions) {
                result(scenario, "end_offset_" + isolation + "_" + tp, ends.get(tp));
                result(scenario, isolation + "_" + tp, join(read.get(tp)));
            }
        }
    }

    /** Poll until the consumer's position reaches `targets` on every partition. */
    private static Map<TopicPartition, List<String>> readUntil(
            KafkaConsumer<String, String> consumer, Map<TopicPartition, Long> targets) {
        Map<TopicPartition, List<String>> read = new LinkedHashMap<>();
        for (TopicPartition tp : targets.keySet()) {
            read.put(tp, new ArrayList<>());
        }
        long deadline = System.nanoTime() + DEADLINE.toNanos();
        while (behind(consumer, targets)) {
            if (System.nanoTime() > deadline) {
                Map<TopicPartition, Long> positions = new TreeMap<>((a, b) -> a.toString().compareTo(b.toString()));
                for (TopicPartition tp : targets.keySet()) {
                    positions.put(tp, consumer.position(tp));
                }
                throw new IllegalStateException("positions " + positions + " did not reach " + targets);
            }
            for (ConsumerRecord<String, String> record : consumer.poll(Duration.ofMillis(200))) {
                read.get(new TopicPartition(record.topic(), record.partition())).add(record.value());
            }
        }
        return read;
    }

    private static boolean behind(KafkaConsumer<String, String> consumer, Map<TopicPartition, Long> targets) {
        for (Map.Entry<TopicPartition, Long> target : targets.entrySet()) {
            if (consumer.position(target.getKey()) < target.getValue()) {
                return true;
            }
        }
        return false;
    }

    // -- output -------------------------------------------------------------------------

    private static List<TopicPartition> partitions(int count, String... topics) {
        List<TopicPartition> partitions = new ArrayList<>();
        for (String topic : topics) {
            for (int p = 0; p < count; p++) {
                partitions.add(new TopicPartition(topic, p));
            }
        }
        return partitions;
    }

    private static String join(List<String> values) {
        return values.isEmpty() ? "-" : String.join(",", values);
    }

    /** The exception and its causes, outermost first: "a.B>c.D". */
    private static String chain(Throwable error) {
        List<String> names = new ArrayList<>();
        for (Throwable link = error; link != null && names.size() < 5; link = link.getCause()) {
            names.add(link.getClass().getName());
        }
        return String.join(">", names);
    }

    private static String describe(Throwable error) {
        return (error.getClass().getName() + ": " + error.getMessage()).replace('\n', ' ');
    }

    private static synchronized void result(String scenario, String key, Object value) {
        System.out.println("RESULT " + scenario + " " + key + " " + value);
        System.out.flush();
    }
}
