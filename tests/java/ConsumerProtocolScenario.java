// The consumer group protocol (KIP-848, group.protocol=consumer) with the Apache Kafka
// Java client, for tests/integration/test_consumer_group_protocol.py.
//
//   java -cp kafka-clients.jar:... ConsumerProtocolScenario BOOTSTRAP INPUT OUTPUT GROUP COUNT
//   java -cp kafka-clients.jar:... ConsumerProtocolScenario loop BOOTSTRAP INPUT OUTPUT GROUP TRANSACTIONAL_ID
//
// Scenario "ctp": consume-transform-produce workers, each a KafkaConsumer of GROUP with
// group.protocol=consumer (read_committed) and a transactional KafkaProducer, write
// "enriched:<value>" of every INPUT record to OUTPUT and commit the consumed offsets
// with the transaction (sendOffsetsToTransaction with the consumer's group metadata).
// A second worker joins when a third of the COUNT records are done (the group
// rebalances), the group is described while both run, and the first worker leaves at
// two thirds (it rebalances again); the second finishes. A transaction that fails
// (an epoch that moved on, a revoked partition) is aborted and its records read again
// from the committed offsets. The test checks the output holds each record once.
//
// Results are lines "RESULT ctp <key> <value>"; "RESULT ctp done ok" at the end, or
// "RESULT ctp error <class>: <message>".
//
// "loop": one such worker, with a fixed transactional id (a restarted instance fences
// the one before), printing "committed <n>" after each transaction, until it has been
// idle for 3 s (15 s before its first records: a killed predecessor's partitions come
// free when its session expires). The test kills it with SIGKILL again and again.

import java.time.Duration;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public final class ConsumerProtocolScenario {
    private static final Duration POLL = Duration.ofMillis(200);

    private final String bootstrap;
    private final String input;
    private final String output;
    private final String group;
    private final AtomicInteger processed = new AtomicInteger();
    private final AtomicInteger aborted = new AtomicInteger();
    private final AtomicReference<Throwable> failure = new AtomicReference<>();

    private ConsumerProtocolScenario(String bootstrap, String input, String output, String group) {
        this.bootstrap = bootstrap;
        this.input = input;
        this.output = output;
        this.group = group;
    }

    public static void main(String[] args) {
        if (args.length == 6 && args[0].equals("loop")) {
            ConsumerProtocolScenario loop = new ConsumerProtocolScenario(args[1], args[2], args[3], args[4]);
            Worker worker = loop.new Worker(args[5]);
            worker.printProgress = true;
            worker.run();
            System.out.flush();
            System.exit(loop.failure.get() == null ? 0 : 1);
        }
        if (args.length != 5) {
            System.err.println("usage: ConsumerProtocolScenario BOOTSTRAP INPUT OUTPUT GROUP COUNT");
            System.exit(2);
        }
        ConsumerProtocolScenario scenario = new ConsumerProtocolScenario(args[0], args[1], args[2], args[3]);
        try {
            scenario.run(Integer.parseInt(args[4]));
            result("done", "ok");
        } catch (Throwable error) {
            result("error", error.getClass().getName() + ": " + error.getMessage());
            error.printStackTrace();
        }
        System.out.flush();
        System.exit(0);
    }

    private static void result(String key, Object value) {
        System.out.println("RESULT ctp " + key + " " + String.valueOf(value).replace(' ', '_'));
    }

    private void run(int count) throws Exception {
        Worker first = new Worker("java-ctp-1");
        Worker second = new Worker("java-ctp-2");
        first.start();
        await(() -> processed.get() >= count / 3, "a third of the records");
        second.start();
        try (Admin admin = Admin.create(Map.of(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap))) {
            long deadline = System.nanoTime() + Duration.ofSeconds(20).toNanos();
            ConsumerGroupDescription description;
            do {
                description = admin.describeConsumerGroups(List.of(group)).all().get().get(group);
                if (description.members().size() == 2) {
                    break;
                }
                Thread.sleep(100);
            } while (System.nanoTime() < deadline);
            result("group_type", description.type());
            result("members_while_both_run", description.members().size());
            result("group_state_while_both_run", description.groupState());
        }
        await(() -> processed.get() >= 2 * count / 3, "two thirds of the records");
        first.stop();
        await(() -> processed.get() >= count, "every record");
        second.stop();
        result("processed", processed.get());
        result("aborted_transactions", aborted.get());
        if (failure.get() != null) {
            throw new RuntimeException("a worker failed", failure.get());
        }
    }

    private interface Condition {
        boolean holds();
    }

    private void await(Condition condition, String what) throws InterruptedException {
        long deadline = System.nanoTime() + Duration.ofSeconds(60).toNanos();
        while (!condition.holds()) {
            if (failure.get() != null) {
                throw new RuntimeException("a worker failed before " + what, failure.get());
            }
            if (System.nanoTime() > deadline) {
                throw new IllegalStateException("timed out waiting for " + what + " (processed "
                    + processed.get() + ")");
            }
            Thread.sleep(50);
        }
    }

    private final class Worker implements Runnable {
        private final String transactionalId;
        private final AtomicBoolean stopping = new AtomicBoolean();
        private final Thread thread;
        private boolean printProgress;

        Worker(String transactionalId) {
            this.transactionalId = transactionalId;
            this.thread = new Thread(this, transactionalId);
        }

        void start() {
            thread.start();
        }

        void stop() throws InterruptedException {
            stopping.set(true);
            thread.join(30_000);
        }

        @Override
        public void run() {
            Properties consumerConfig = new Properties();
            consumerConfig.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
            consumerConfig.put(ConsumerConfig.GROUP_ID_CONFIG, group);
            consumerConfig.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, "consumer");
            consumerConfig.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
            consumerConfig.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
            consumerConfig.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
            consumerConfig.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
            consumerConfig.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
            if (printProgress) {
                consumerConfig.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "50");  // many small transactions
            }
            Properties producerConfig = new Properties();
            producerConfig.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
            producerConfig.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, transactionalId);
            producerConfig.put(ProducerConfig.LINGER_MS_CONFIG, "5");
            producerConfig.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
            producerConfig.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
            try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(consumerConfig);
                 KafkaProducer<String, String> producer = new KafkaProducer<>(producerConfig)) {
                producer.initTransactions();
                consumer.subscribe(List.of(input));
                long idleSince = System.nanoTime();
                int committed = 0;
                while (!stopping.get()) {
                    ConsumerRecords<String, String> records = consumer.poll(POLL);
                    if (records.isEmpty()) {
                        long idleLimit = Duration.ofSeconds(committed > 0 ? 3 : 15).toNanos();
                        if (printProgress && System.nanoTime() - idleSince > idleLimit) {
                            break;
                        }
                        continue;
                    }
                    producer.beginTransaction();
                    try {
                        Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
                        for (TopicPartition partition : records.partitions()) {
                            List<ConsumerRecord<String, String>> batch = records.records(partition);
                            for (ConsumerRecord<String, String> record : batch) {
                                producer.send(new ProducerRecord<>(output, record.key(), "enriched:" + record.value()));
                            }
                            offsets.put(partition, new OffsetAndMetadata(batch.get(batch.size() - 1).offset() + 1));
                        }
                        producer.sendOffsetsToTransaction(offsets, consumer.groupMetadata());
                        producer.commitTransaction();
                        processed.addAndGet(records.count());
                        committed += records.count();
                        idleSince = System.nanoTime();
                        if (printProgress) {
                            System.out.println("committed " + committed);
                            System.out.flush();
                        }
                    } catch (ProducerFencedException fenced) {
                        throw fenced;
                    } catch (KafkaException error) {
                        // The member's epoch moved on, or a partition went to another member:
                        // the transaction's records are read again from the committed offsets.
                        producer.abortTransaction();
                        aborted.incrementAndGet();
                        rewind(consumer);
                    }
                }
            } catch (Throwable error) {
                failure.compareAndSet(null, error);
                error.printStackTrace();
            }
        }

        private void rewind(KafkaConsumer<String, String> consumer) {
            Set<TopicPartition> assigned = consumer.assignment();
            Map<TopicPartition, OffsetAndMetadata> committed = consumer.committed(assigned);
            for (TopicPartition partition : assigned) {
                OffsetAndMetadata offset = committed.get(partition);
                if (offset == null) {
                    consumer.seekToBeginning(List.of(partition));
                } else {
                    consumer.seek(partition, offset.offset());
                }
            }
        }
    }
}
