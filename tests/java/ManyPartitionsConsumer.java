// The Apache Kafka Java client (kafka-clients) consuming many partitions through a fetch
// session (KIP-227), for tests/integration/test_fetch_sessions.py.
//
//   java -cp kafka-clients.jar:... ManyPartitionsConsumer BOOTSTRAP TOPIC PARTITIONS
//
// The topic (created beforehand with PARTITIONS partitions) gets one record per partition;
// one consumer (assign, no group) reads them all. Then, ROUNDS times, while its fetch
// waits at the broker (nothing new: a long poll), the consumer's assignment changes
// (every other partition, then all again), one record goes to every partition, and the
// consumer reads until it has one from each assigned partition, none from the others.
//
// FetchSessionHandler logs at INFO, so its complaints about the broker's answers
// ("invalid full fetch response", "invalid incremental fetch response") reach stdout for
// the test to look for. Results are lines "RESULT many <key> <value>": first_read,
// round_<n>_read, round_<n>_foreign (records of unassigned partitions) and done ok; on
// failure "RESULT many error <class>: <message>".

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Properties;
import java.util.Set;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.apache.logging.log4j.Level;
import org.apache.logging.log4j.core.config.Configurator;

public final class ManyPartitionsConsumer {
    private static final Duration DEADLINE = Duration.ofSeconds(30);
    private static final int ROUNDS = 4;

    private ManyPartitionsConsumer() {
    }

    public static void main(String[] args) {
        Configurator.setLevel("org.apache.kafka.clients.FetchSessionHandler", Level.INFO);
        try {
            run(args[0], args[1], Integer.parseInt(args[2]));
            result("done", "ok");
        } catch (Throwable error) {
            error.printStackTrace();
            result("error", error.getClass().getName() + ": " + error.getMessage());
        }
        System.out.flush();
    }

    private static void run(String bootstrap, String topic, int partitions) throws Exception {
        List<TopicPartition> all = new ArrayList<>();
        for (int p = 0; p < partitions; p++) {
            all.add(new TopicPartition(topic, p));
        }
        try (KafkaProducer<String, String> producer = producer(bootstrap);
             KafkaConsumer<String, String> consumer = consumer(bootstrap)) {
            produceToEach(producer, all, "first");
            consumer.assign(all);
            consumer.seekToBeginning(all);
            result("first_read", String.valueOf(readOnePerPartition(consumer, new HashSet<>(all), "first").size()));
            for (int round = 1; round <= ROUNDS; round++) {
                // Nothing new: this poll's fetch is still waiting at the broker when it returns.
                consumer.poll(Duration.ofMillis(50));
                List<TopicPartition> assigned = round % 2 == 1 ? everyOther(all) : all;
                consumer.assign(assigned);
                produceToEach(producer, all, "round-" + round);
                Set<TopicPartition> seen = readOnePerPartition(consumer, new HashSet<>(assigned), "round_" + round);
                seen.retainAll(assigned);
                result("round_" + round + "_read", String.valueOf(seen.size()));
            }
        }
    }

    private static List<TopicPartition> everyOther(List<TopicPartition> all) {
        List<TopicPartition> half = new ArrayList<>();
        for (int i = 0; i < all.size(); i += 2) {
            half.add(all.get(i));
        }
        return half;
    }

    // Polls until a record of every partition in `wanted` came; reports records of others.
    private static Set<TopicPartition> readOnePerPartition(KafkaConsumer<String, String> consumer,
                                                           Set<TopicPartition> wanted, String label) {
        Set<TopicPartition> seen = new HashSet<>();
        int foreign = 0;
        long deadline = System.nanoTime() + DEADLINE.toNanos();
        while (!seen.containsAll(wanted)) {
            if (System.nanoTime() > deadline) {
                throw new IllegalStateException("read " + seen.size() + " of " + wanted.size() + " partitions");
            }
            for (ConsumerRecord<String, String> record : consumer.poll(Duration.ofMillis(200))) {
                TopicPartition tp = new TopicPartition(record.topic(), record.partition());
                seen.add(tp);
                if (!wanted.contains(tp)) {
                    foreign++;
                }
            }
        }
        result(label + "_foreign", String.valueOf(foreign));
        return seen;
    }

    private static void produceToEach(KafkaProducer<String, String> producer, List<TopicPartition> partitions,
                                      String value) throws Exception {
        for (TopicPartition tp : partitions) {
            producer.send(new ProducerRecord<>(tp.topic(), tp.partition(), null, value));
        }
        producer.flush();
    }

    private static KafkaProducer<String, String> producer(String bootstrap) {
        Properties props = new Properties();
        props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        return new KafkaProducer<>(props, new StringSerializer(), new StringSerializer());
    }

    private static KafkaConsumer<String, String> consumer(String bootstrap) {
        Properties props = new Properties();
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        props.put(ConsumerConfig.FETCH_MAX_WAIT_MS_CONFIG, "500");
        props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");  // partitions assigned again
        return new KafkaConsumer<>(props, new StringDeserializer(), new StringDeserializer());
    }

    private static void result(String key, String value) {
        System.out.println("RESULT many " + key + " " + value);
    }
}
