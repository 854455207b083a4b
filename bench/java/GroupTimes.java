// Kafka's Java consumers in one group: how long until every member has its partitions, and
// how long from one member leaving until its partitions are fetched again by the others.
// Run by bench/bench_vs_kafka_groups.py with Apache Kafka's jars on the class path:
//
//   java -cp '<kafka jars>/*' bench/java/GroupTimes.java BOOTSTRAP TOPIC GROUP MEMBERS PROTOCOL
//
// PROTOCOL is the consumer's group.protocol (consumer: KIP-848; classic).  Every member polls
// in a thread of its own.  Prints one JSON object per line on stdout: {"event": "joined",
// "seconds": ...} once every partition of TOPIC is assigned to exactly one member and every
// member holds its even share (seconds from the first subscribe), then, after one member closes, {"event": "moved", "seconds": ...,
// "partitions": N} once each of its partitions was fetched (a record read, or its position
// known) by another member (seconds from the close).  The topic must hold records in every
// partition for the "fetched" part: the caller fills it first.
import java.time.Duration;
import java.util.*;
import java.util.concurrent.*;
import java.util.concurrent.atomic.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public class GroupTimes {
    static final Map<Integer, Set<TopicPartition>> owned = new ConcurrentHashMap<>();
    static final Map<TopicPartition, Integer> fetchedBy = new ConcurrentHashMap<>();

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], topic = args[1], group = args[2], protocol = args[4];
        int members = Integer.parseInt(args[3]);
        List<Thread> threads = new ArrayList<>();
        List<AtomicBoolean> stops = new ArrayList<>();
        int partitions;
        Properties props = new Properties();
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        props.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "10");
        props.put("group.protocol", protocol);
        if (protocol.equals("classic")) {
            props.put(ConsumerConfig.PARTITION_ASSIGNMENT_STRATEGY_CONFIG,
                      CooperativeStickyAssignor.class.getName());
            props.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, "45000");
        }
        try (Consumer<byte[], byte[]> probe = new KafkaConsumer<>(props)) {
            partitions = probe.partitionsFor(topic).size();
        }
        long start = System.nanoTime();
        for (int i = 0; i < members; i++) {
            final int id = i;
            AtomicBoolean stop = new AtomicBoolean();
            stops.add(stop);
            Properties mine = (Properties) props.clone();
            mine.put(ConsumerConfig.CLIENT_ID_CONFIG, "member-" + id);
            Thread t = new Thread(() -> run(id, mine, topic, stop), "member-" + id);
            t.start();
            threads.add(t);
        }
        while (!everyPartitionOnce(partitions, members)) Thread.sleep(20);
        System.out.printf("{\"event\": \"joined\", \"seconds\": %.3f, \"members\": %d, \"partitions\": %d}%n",
                          (System.nanoTime() - start) / 1e9, members, partitions);
        System.out.flush();
        // settle: let every member fetch once, then one member leaves
        Thread.sleep(3000);
        int leaver = 0;
        Set<TopicPartition> moving = new HashSet<>(owned.getOrDefault(leaver, Set.of()));
        for (TopicPartition tp : moving) fetchedBy.remove(tp);
        long left = System.nanoTime();
        stops.get(leaver).set(true);
        threads.get(leaver).join();
        long deadline = System.nanoTime() + 300_000_000_000L;
        while (System.nanoTime() < deadline) {
            boolean all = true;
            for (TopicPartition tp : moving) {
                Integer by = fetchedBy.get(tp);
                if (by == null || by == leaver) { all = false; break; }
            }
            if (all) break;
            Thread.sleep(10);
        }
        System.out.printf("{\"event\": \"moved\", \"seconds\": %.3f, \"partitions\": %d}%n",
                          (System.nanoTime() - left) / 1e9, moving.size());
        System.out.flush();
        for (AtomicBoolean s : stops) s.set(true);
        for (Thread t : threads) t.join(60_000);
        System.exit(0);
    }

    // every partition assigned to exactly one member, and every member holding as many as an even
    // spread gives it (partitions / members, rounded down or up)
    static boolean everyPartitionOnce(int partitions, int members) {
        Map<TopicPartition, Integer> count = new HashMap<>();
        int low = partitions / members, high = (partitions + members - 1) / members;
        if (owned.size() != members) return false;
        for (Set<TopicPartition> tps : owned.values()) {
            if (tps.size() < low || tps.size() > high) return false;
            for (TopicPartition tp : tps) count.merge(tp, 1, Integer::sum);
        }
        if (count.size() != partitions) return false;
        for (int c : count.values()) if (c != 1) return false;
        return true;
    }

    static void run(int id, Properties props, String topic, AtomicBoolean stop) {
        try (Consumer<byte[], byte[]> c = new KafkaConsumer<>(props)) {
            c.subscribe(List.of(topic), new ConsumerRebalanceListener() {
                public void onPartitionsRevoked(Collection<TopicPartition> tps) {
                    owned.computeIfPresent(id, (k, v) -> { Set<TopicPartition> n = new HashSet<>(v); n.removeAll(tps); return n; });
                }
                public void onPartitionsAssigned(Collection<TopicPartition> tps) {
                    owned.merge(id, new HashSet<>(tps), (a, b) -> { Set<TopicPartition> n = new HashSet<>(a); n.addAll(b); return n; });
                }
                public void onPartitionsLost(Collection<TopicPartition> tps) { onPartitionsRevoked(tps); }
            });
            while (!stop.get()) {
                ConsumerRecords<byte[], byte[]> records = c.poll(Duration.ofMillis(50));
                for (TopicPartition tp : records.partitions()) fetchedBy.put(tp, id);
            }
            owned.remove(id);
        } catch (Exception e) {
            System.err.println("member " + id + ": " + e);
        }
    }
}
