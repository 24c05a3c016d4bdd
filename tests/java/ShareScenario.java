import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.atomic.AtomicBoolean;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.serialization.StringDeserializer;

/**
 * Share groups (KIP-932) through the Java client's KafkaShareConsumer, against a broker
 * whose topic the Python test filled. Prints "RESULT <scenario> <key> <value>" lines.
 *
 * Usage: ShareScenario <bootstrap> <scenario> <topic> <group> <expected records> [consumers]
 *
 *   implicit  <consumers> consumers in implicit acknowledgement mode read until
 *             <expected> distinct records arrived: each record's value, consumer and
 *             delivery count ("deliveries" lists value@consumer#count).
 *   explicit  one consumer acknowledges explicitly: values starting "release" are
 *             RELEASEd at their first delivery, "reject" REJECTed, the rest ACCEPTed;
 *             it reads until every non-rejected value was accepted.
 *   hold      acquires records and never acknowledges them; prints "held" and waits to
 *             be killed.
 *
 * Before consuming, each scenario sets the group's configs given as -Dgroup.configs
 * (k=v,k=v) through Admin.incrementalAlterConfigs.
 */
public class ShareScenario {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], scenario = args[1], topic = args[2], group = args[3];
        int expected = Integer.parseInt(args[4]);
        int consumers = args.length > 5 ? Integer.parseInt(args[5]) : 1;
        try {
            setGroupConfigs(bootstrap, group, System.getProperty("group.configs", ""));
            switch (scenario) {
                case "implicit" -> implicit(bootstrap, topic, group, expected, consumers);
                case "explicit" -> explicit(bootstrap, topic, group, expected);
                case "hold" -> hold(bootstrap, topic, group, expected);
                default -> throw new IllegalArgumentException("unknown scenario " + scenario);
            }
            result(scenario, "done", "ok");
        } catch (Throwable error) {
            error.printStackTrace();
            result(scenario, "error", error.toString().replace('\n', ' '));
        }
        System.out.flush();
        System.exit(0);
    }

    static void result(String scenario, String key, Object value) {
        System.out.println("RESULT " + scenario + " " + key + " " + value);
        System.out.flush();
    }

    static void setGroupConfigs(String bootstrap, String group, String configs) throws Exception {
        if (configs.isEmpty()) {
            return;
        }
        List<AlterConfigOp> ops = new ArrayList<>();
        for (String pair : configs.split(",")) {
            String[] kv = pair.split("=", 2);
            ops.add(new AlterConfigOp(new ConfigEntry(kv[0], kv[1]), AlterConfigOp.OpType.SET));
        }
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        try (Admin admin = Admin.create(props)) {
            ConfigResource resource = new ConfigResource(ConfigResource.Type.GROUP, group);
            admin.incrementalAlterConfigs(Map.of(resource, ops)).all().get();
        }
    }

    static KafkaShareConsumer<String, String> consumer(String bootstrap, String group, String clientId, String mode) {
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        props.put("group.id", group);
        props.put("client.id", clientId);
        props.put("share.acknowledgement.mode", mode);
        props.put("max.poll.records", "7");  // several polls, shared between the members
        return new KafkaShareConsumer<>(props, new StringDeserializer(), new StringDeserializer());
    }

    static short deliveries(ConsumerRecord<String, String> record) {
        Optional<Short> count = record.deliveryCount();
        return count.orElse((short) -1);
    }

    static void implicit(String bootstrap, String topic, String group, int expected, int consumers) throws Exception {
        Map<String, String> firstSeenBy = new ConcurrentHashMap<>();
        ConcurrentLinkedQueue<String> deliveries = new ConcurrentLinkedQueue<>();
        AtomicBoolean stop = new AtomicBoolean(false);
        List<Thread> threads = new ArrayList<>();
        ConcurrentLinkedQueue<Throwable> failures = new ConcurrentLinkedQueue<>();
        for (int i = 0; i < consumers; i++) {
            String name = "c" + i;
            Thread thread = new Thread(() -> {
                try (KafkaShareConsumer<String, String> consumer = consumer(bootstrap, group, name, "implicit")) {
                    consumer.subscribe(List.of(topic));
                    while (!stop.get()) {
                        ConsumerRecords<String, String> records = consumer.poll(Duration.ofMillis(200));
                        for (ConsumerRecord<String, String> record : records) {
                            deliveries.add(record.value() + "@" + name + "#" + deliveries(record));
                            firstSeenBy.putIfAbsent(record.value(), name);
                        }
                        if (firstSeenBy.size() >= expected) {
                            consumer.commitSync();  // the last poll's records, acknowledged before leaving
                            stop.set(true);
                        }
                    }
                } catch (Throwable error) {
                    failures.add(error);
                    stop.set(true);
                }
            });
            threads.add(thread);
            thread.start();
        }
        long deadline = System.currentTimeMillis() + 90_000;
        for (Thread thread : threads) {
            thread.join(Math.max(1, deadline - System.currentTimeMillis()));
        }
        stop.set(true);
        for (Thread thread : threads) {
            thread.join(10_000);
        }
        if (!failures.isEmpty()) {
            throw new RuntimeException(failures.peek());
        }
        result("implicit", "distinct", firstSeenBy.size());
        result("implicit", "deliveries", String.join(",", deliveries));
    }

    static void explicit(String bootstrap, String topic, String group, int expected) throws Exception {
        List<String> delivered = new ArrayList<>();
        Map<String, Integer> accepted = new HashMap<>();
        int rejected = 0;
        try (KafkaShareConsumer<String, String> consumer = consumer(bootstrap, group, "explicit", "explicit")) {
            consumer.subscribe(List.of(topic));
            long deadline = System.currentTimeMillis() + 90_000;
            while (accepted.size() + rejected < expected && System.currentTimeMillis() < deadline) {
                ConsumerRecords<String, String> records = consumer.poll(Duration.ofMillis(200));
                for (ConsumerRecord<String, String> record : records) {
                    String value = record.value();
                    short count = deliveries(record);
                    delivered.add(value + "#" + count);
                    if (value.startsWith("release") && count == 1) {
                        consumer.acknowledge(record, AcknowledgeType.RELEASE);
                    } else if (value.startsWith("reject")) {
                        consumer.acknowledge(record, AcknowledgeType.REJECT);
                        rejected++;
                    } else {
                        consumer.acknowledge(record, AcknowledgeType.ACCEPT);
                        accepted.merge(value, 1, Integer::sum);
                    }
                }
                if (!records.isEmpty()) {
                    Map<TopicIdPartition, Optional<KafkaException>> committed = consumer.commitSync();
                    for (Map.Entry<TopicIdPartition, Optional<KafkaException>> entry : committed.entrySet()) {
                        if (entry.getValue().isPresent()) {
                            throw entry.getValue().get();
                        }
                    }
                }
            }
            // Nothing else may come: the rejected records are archived, the rest accepted.
            ConsumerRecords<String, String> after = consumer.poll(Duration.ofMillis(1500));
            result("explicit", "after", after.count());
        }
        result("explicit", "delivered", String.join(",", delivered));
        result("explicit", "accepted", accepted.size());
        result("explicit", "rejected", rejected);
    }

    static void hold(String bootstrap, String topic, String group, int expected) throws Exception {
        KafkaShareConsumer<String, String> consumer = consumer(bootstrap, group, "holder", "explicit");
        consumer.subscribe(List.of(topic));
        int held = 0;
        long deadline = System.currentTimeMillis() + 60_000;
        List<String> values = new ArrayList<>();
        while (held < expected && System.currentTimeMillis() < deadline) {
            for (ConsumerRecord<String, String> record : consumer.poll(Duration.ofMillis(200))) {
                held++;
                values.add(record.value());
            }
            if (held > 0) {
                break;  // a poll with records: they are acquired, and stay unacknowledged
            }
        }
        result("hold", "held", String.join(",", values));
        Thread.sleep(600_000);  // killed by the test
    }
}
