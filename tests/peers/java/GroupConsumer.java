// Kafka's Java KafkaConsumer as a group-consumer test process, the Java twin of
// tests/peers/kafka_group_consumer.py (same arguments, same JSON lines).  Run from source with
// Apache Kafka's jars on the class path (tests/peers/group_peers.py's KafkaPeer("java", ...)):
//
//   java -cp '<kafka jars>/*' GroupConsumer.java java BOOTSTRAP GROUP TOPIC CLIENT_ID SESSION_MS [STRATEGY]
//
// STRATEGY "consumer" is Kafka 4's consumer group protocol (group.protocol=consumer, KIP-848: the
// coordinator sets the session and heartbeat interval and assigns, so neither is configured);
// "cooperative-sticky" the classic protocol with the CooperativeStickyAssignor; absent, the
// classic protocol with the client's default assignors.  With GROUP_INSTANCE_ID in the
// environment it is a static member (group.instance.id, KIP-345).
//
// It prints one JSON object per line on stdout: "assigned" / "revoked" / "lost" (the partitions
// each rebalance callback received, with the time; "assigned" with the member id), "records"
// (partition -> offsets of what one poll returned), "read" (records so far, at most every half
// second) and "closed" at the end.  Auto-commit is off: an offset is committed (every 200 ms,
// and synchronously when its partition is revoked or the consumer closes) only after the
// "records" line naming it was written, so even a SIGKILL never commits a record this process
// did not report.  SIGTERM: the poll loop ends, then it commits what it reported and closes
// (leaving the group).
import java.time.Duration;
import java.util.*;
import java.util.concurrent.atomic.AtomicBoolean;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public class GroupConsumer {
    static final AtomicBoolean stop = new AtomicBoolean();
    /** partition -> the next offset to commit: one past the last record this process reported */
    static final Map<TopicPartition, OffsetAndMetadata> reported = new HashMap<>();
    /** what the last commit sent, per partition (nothing is sent twice) */
    static final Map<TopicPartition, OffsetAndMetadata> sent = new HashMap<>();
    static long read = 0;

    static synchronized void emit(String event, String fields) {
        double ts = System.currentTimeMillis() / 1000.0;
        System.out.println("{\"ts\": " + ts + ", \"event\": \"" + event + "\"" + (fields.isEmpty() ? "" : ", " + fields)
                           + "}");
        System.out.flush();
    }

    static String partitions(Collection<TopicPartition> tps) {
        StringJoiner out = new StringJoiner(", ", "[", "]");
        tps.stream().map(TopicPartition::partition).sorted().forEach(p -> out.add(Integer.toString(p)));
        return out.toString();
    }

    static String quoted(String s) {
        return s == null ? "null" : "\"" + s.replace("\\", "\\\\").replace("\"", "\\\"") + "\"";
    }

    /** Commit what was reported on ``tps`` and not committed yet; synchronously, or not. */
    static void commit(Consumer<byte[], byte[]> c, Collection<TopicPartition> tps, boolean sync) {
        Map<TopicPartition, OffsetAndMetadata> due = new HashMap<>();
        for (TopicPartition tp : tps) {
            OffsetAndMetadata next = reported.get(tp);
            if (next != null && !next.equals(sent.get(tp))) due.put(tp, next);
        }
        if (due.isEmpty()) return;
        try {
            if (sync) {
                c.commitSync(due, Duration.ofSeconds(15));
            } else {
                c.commitAsync(due, (offsets, e) -> {
                    if (e != null) {
                        System.err.println("commit of " + offsets + " failed: " + e);
                        offsets.forEach((tp, o) -> { if (o.equals(sent.get(tp))) sent.remove(tp); });
                    }
                });
            }
            sent.putAll(due);
        } catch (KafkaException e) {  // not a member any more, or a stale epoch: the next owner starts lower
            System.err.println("commit of " + due + " failed: " + e);
        }
    }

    static void forget(Collection<TopicPartition> tps) {
        for (TopicPartition tp : tps) {
            reported.remove(tp);
            sent.remove(tp);
        }
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = args[1], group = args[2], topic = args[3], clientId = args[4], session = args[5];
        String strategy = args.length > 6 ? args[6] : null;
        Properties props = new Properties();
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        props.put(ConsumerConfig.CLIENT_ID_CONFIG, clientId);
        props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        props.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "500");
        String instance = System.getenv("GROUP_INSTANCE_ID");
        if (instance != null && !instance.isEmpty()) props.put(ConsumerConfig.GROUP_INSTANCE_ID_CONFIG, instance);
        if ("consumer".equals(strategy)) {
            props.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, "consumer");
        } else {
            props.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, "classic");
            props.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, session);
            props.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, "300");
            if ("cooperative-sticky".equals(strategy)) {
                props.put(ConsumerConfig.PARTITION_ASSIGNMENT_STRATEGY_CONFIG,
                          CooperativeStickyAssignor.class.getName());
            } else if (strategy != null) {
                props.put(ConsumerConfig.PARTITION_ASSIGNMENT_STRATEGY_CONFIG, strategy);
            }
        }
        Thread main = Thread.currentThread();
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {  // SIGTERM: end the loop, wait for the close
            stop.set(true);
            try {
                main.join(30000);
            } catch (InterruptedException ignored) {
            }
        }));
        KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(props);
        c.subscribe(List.of(topic), new ConsumerRebalanceListener() {
            @Override
            public void onPartitionsAssigned(Collection<TopicPartition> tps) {
                String member;
                try {
                    member = c.groupMetadata().memberId();
                } catch (RuntimeException e) {
                    member = null;
                }
                emit("assigned", "\"partitions\": " + partitions(tps) + ", \"member\": " + quoted(member));
            }

            @Override
            public void onPartitionsRevoked(Collection<TopicPartition> tps) {
                emit("revoked", "\"partitions\": " + partitions(tps));
                commit(c, tps, true);  // the next owner starts after what this process read
                forget(tps);
            }

            @Override
            public void onPartitionsLost(Collection<TopicPartition> tps) {
                emit("lost", "\"partitions\": " + partitions(tps));
                forget(tps);
            }
        });
        long lastRead = 0, lastCommit = 0;
        try {
            while (!stop.get()) {
                ConsumerRecords<byte[], byte[]> got = c.poll(Duration.ofMillis(200));
                if (!got.isEmpty()) {
                    StringJoiner offsets = new StringJoiner(", ", "{", "}");
                    List<TopicPartition> tps = new ArrayList<>(got.partitions());
                    tps.sort(Comparator.comparingInt(TopicPartition::partition));
                    for (TopicPartition tp : tps) {
                        StringJoiner these = new StringJoiner(", ", "[", "]");
                        long last = -1;
                        for (ConsumerRecord<byte[], byte[]> r : got.records(tp)) {
                            these.add(Long.toString(r.offset()));
                            last = r.offset();
                            read++;
                        }
                        offsets.add("\"" + tp.partition() + "\": " + these);
                        reported.put(tp, new OffsetAndMetadata(last + 1));
                    }
                    emit("records", "\"offsets\": " + offsets);
                }
                long now = System.nanoTime();
                if (now - lastRead > 500_000_000L) {
                    emit("read", "\"count\": " + read);
                    lastRead = now;
                }
                if (now - lastCommit > 200_000_000L) {
                    commit(c, c.assignment(), false);
                    lastCommit = now;
                }
            }
            emit("read", "\"count\": " + read);
            commit(c, c.assignment(), true);
        } finally {
            c.close(Duration.ofSeconds(15));
            emit("closed", "\"count\": " + read);
        }
    }
}
