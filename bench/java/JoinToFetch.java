// Kafka's Java consumers with group.protocol=consumer (KIP-848): how long from one member joining a
// settled group until every partition that moved was fetched by its new owner.  Run by
// bench/bench_kip848_members.py with Apache Kafka's jars on the class path:
//
//   java -cp '<kafka jars>/*' bench/java/JoinToFetch.java BOOTSTRAP TOPIC GROUP MEMBERS
//
// MEMBERS consumers start in one JVM, one thread each, and settle: every partition of TOPIC
// assigned to exactly one member, each holding its even share, every partition fetched.  Then
// one more consumer is built (not timed) and the clock starts right before its subscribe();
// the round ends once the MEMBERS + 1 members hold an even spread of the partitions, each
// exactly once, and every partition whose owner changed was fetched (a record read) by its new
// owner.  Offsets are not committed, so a new owner reads from the earliest offset and a record
// arrives as soon as it fetches; the caller fills every partition first.
//
// Prints one JSON object per line on stdout: {"event": "settled", ...} once the first MEMBERS
// are settled, then {"event": "joined", "seconds": S, "assigned_seconds": A, "moved": N,
// "joiner_first_fetch_seconds": F}: S from the joiner's subscribe to the last first fetch of a
// moved partition by its new owner, A to the moment the members' assignments (read after each
// poll) were the target, F to the joiner's first record.
import java.time.Duration;
import java.util.*;
import java.util.concurrent.*;
import java.util.concurrent.atomic.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public class JoinToFetch {
    static final Map<Integer, Set<TopicPartition>> owned = new ConcurrentHashMap<>();
    // partition -> {member, nanoTime of its first record delivered to that member since the last reset}
    static final Map<TopicPartition, long[]> fetched = new ConcurrentHashMap<>();
    static final AtomicLong joinStart = new AtomicLong();

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], topic = args[1], group = args[2];
        int members = Integer.parseInt(args[3]);
        Properties props = new Properties();
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        props.put("group.protocol", "consumer");
        int partitions;
        try (Consumer<byte[], byte[]> probe = new KafkaConsumer<>(props)) {
            partitions = probe.partitionsFor(topic).size();
        }
        List<Thread> threads = new ArrayList<>();
        AtomicBoolean stop = new AtomicBoolean();
        long start = System.nanoTime();
        for (int i = 0; i < members; i++) threads.add(member(i, props, topic, stop, false));
        long deadline = System.nanoTime() + 120_000_000_000L;
        while (!(even(partitions, members) && fetched.size() == partitions)) {
            if (System.nanoTime() > deadline) throw new IllegalStateException("the first members never settled");
            Thread.sleep(10);
        }
        System.out.printf("{\"event\": \"settled\", \"seconds\": %.3f, \"members\": %d, \"partitions\": %d}%n",
                          (System.nanoTime() - start) / 1e9, members, partitions);
        System.out.flush();
        Thread.sleep(1000);  // every member read what it holds (a few records per partition)
        Map<TopicPartition, Integer> before = owners();
        fetched.clear();
        threads.add(member(members, props, topic, stop, true));
        while (joinStart.get() == 0) Thread.sleep(1);
        long t0 = joinStart.get();
        long assigned = 0;
        deadline = System.nanoTime() + 300_000_000_000L;
        while (true) {
            if (System.nanoTime() > deadline) throw new IllegalStateException("the join never completed: " + owned);
            if (even(partitions, members + 1)) {
                if (assigned == 0) assigned = System.nanoTime();
                Map<TopicPartition, Integer> now = owners();
                long last = 0;
                boolean all = true;
                int moved = 0;
                for (Map.Entry<TopicPartition, Integer> e : now.entrySet()) {
                    if (e.getValue().equals(before.get(e.getKey()))) continue;
                    moved++;
                    long[] f = fetched.get(e.getKey());
                    if (f == null || f[0] != e.getValue()) { all = false; break; }
                    last = Math.max(last, f[1]);
                }
                if (all) {
                    long[] first = null;
                    for (long[] f : fetched.values()) if (f[0] == members && (first == null || f[1] < first[1])) first = f;
                    System.out.printf("{\"event\": \"joined\", \"seconds\": %.3f, \"assigned_seconds\": %.3f, "
                                      + "\"moved\": %d, \"joiner_first_fetch_seconds\": %.3f}%n",
                                      (last - t0) / 1e9, (assigned - t0) / 1e9, moved,
                                      first == null ? -1.0 : (first[1] - t0) / 1e9);
                    System.out.flush();
                    break;
                }
            } else {
                assigned = 0;
            }
            Thread.sleep(5);
        }
        stop.set(true);
        for (Thread t : threads) t.join(60_000);
        System.exit(0);
    }

    static Map<TopicPartition, Integer> owners() {
        Map<TopicPartition, Integer> out = new HashMap<>();
        for (Map.Entry<Integer, Set<TopicPartition>> e : owned.entrySet())
            for (TopicPartition tp : e.getValue()) out.put(tp, e.getKey());
        return out;
    }

    // every partition assigned to exactly one of `members` members, each holding its even share
    static boolean even(int partitions, int members) {
        int low = partitions / members, high = (partitions + members - 1) / members;
        if (owned.size() != members) return false;
        Map<TopicPartition, Integer> count = new HashMap<>();
        for (Set<TopicPartition> tps : owned.values()) {
            if (tps.size() < low || tps.size() > high) return false;
            for (TopicPartition tp : tps) count.merge(tp, 1, Integer::sum);
        }
        if (count.size() != partitions) return false;
        for (int c : count.values()) if (c != 1) return false;
        return true;
    }

    static Thread member(int id, Properties props, String topic, AtomicBoolean stop, boolean joiner) {
        Properties mine = (Properties) props.clone();
        mine.put(ConsumerConfig.CLIENT_ID_CONFIG, "member-" + id);
        Thread t = new Thread(() -> {
            try (Consumer<byte[], byte[]> c = new KafkaConsumer<>(mine)) {
                if (joiner) joinStart.set(System.nanoTime());
                c.subscribe(List.of(topic));
                while (!stop.get()) {
                    ConsumerRecords<byte[], byte[]> records = c.poll(Duration.ofMillis(20));
                    long now = System.nanoTime();
                    for (TopicPartition tp : records.partitions()) {
                        long[] f = fetched.get(tp);
                        if (f == null || f[0] != id) fetched.put(tp, new long[] {id, now});
                    }
                    owned.put(id, new HashSet<>(c.assignment()));
                }
                owned.remove(id);
            } catch (Exception e) {
                System.err.println("member " + id + ": " + e);
            }
        }, "member-" + id);
        t.start();
        return t;
    }
}
