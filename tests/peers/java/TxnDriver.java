// Kafka's Java transactional KafkaProducer and KafkaConsumer driven line by line from stdin, so a
// test can interleave them with what it does to the brokers (SIGKILL a coordinator, wait for a
// timeout) and assert what each client saw.  Run from source with Apache Kafka's jars:
//
//   java -cp '<kafka jars>/*' TxnDriver.java BOOTSTRAP
//
// Commands, one a line, words separated by spaces (names, topics and values have none):
//
//   producer NAME TRANSACTIONAL_ID TIMEOUT_MS   a transactional producer (transaction.timeout.ms
//                                               TIMEOUT_MS), then initTransactions()
//   plain NAME                                  a non-transactional producer (the Java default:
//                                               idempotent)
//   begin NAME | commit NAME | abort NAME | close NAME
//   send NAME TOPIC PARTITION VALUE...          one record a value (key = value), flushed; each
//                                               send's future awaited, in order
//   read TOPIC PARTITIONS ISOLATION             a KafkaConsumer with isolation.level ISOLATION
//                                               (read_committed / read_uncommitted), the partitions
//                                               assigned from the beginning, polled until its
//                                               position reaches endOffsets() (the last stable
//                                               offset for read_committed, the high watermark
//                                               otherwise) on every partition
//
// Every command is answered by one JSON line on stdout: {"cmd": C, "ok": true, ...} or, when the
// client threw, {"cmd": C, "ok": false, "error": simple class name, "chain": [the class names of
// the cause chain, outermost first], "message": ...}.  send answers "offsets" (one per value, -1
// where the send failed) and, if any failed, the first failure as error and chain; read answers
// "records" ([partition, offset, key, value] in the order polled) and "ends" (partition -> the
// end offset it read to).  commit first prints {"event": "committing"}, so the test can act while
// commitTransaction() runs.  The end of stdin closes every client and ends the process.
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.*;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public class TxnDriver {
    static String bootstrap;
    static final Map<String, KafkaProducer<String, String>> producers = new HashMap<>();

    static synchronized void emit(String json) {
        System.out.println(json);
        System.out.flush();
    }

    static String quoted(String s) {
        if (s == null) return "null";
        StringBuilder out = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            if (c == '"' || c == '\\') out.append('\\').append(c);
            else if (c < 0x20) out.append(String.format("\\u%04x", (int) c));
            else out.append(c);
        }
        return out.append('"').toString();
    }

    /** The error fields of a failure: the exception unwrapped from ExecutionException, its chain. */
    static String failure(Throwable e) {
        if (e instanceof ExecutionException && e.getCause() != null) e = e.getCause();
        StringJoiner chain = new StringJoiner(", ", "[", "]");
        for (Throwable t = e; t != null; t = t.getCause()) chain.add(quoted(t.getClass().getSimpleName()));
        return "\"error\": " + quoted(e.getClass().getSimpleName()) + ", \"chain\": " + chain + ", \"message\": "
               + quoted(String.valueOf(e.getMessage()));
    }

    static Properties producerConfig() {
        Properties props = new Properties();
        props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        props.put(ProducerConfig.LINGER_MS_CONFIG, "0");
        return props;
    }

    static String send(KafkaProducer<String, String> producer, String topic, int partition, List<String> values)
            throws InterruptedException {
        List<Future<RecordMetadata>> sent = new ArrayList<>();
        for (String v : values) sent.add(producer.send(new ProducerRecord<>(topic, partition, v, v)));
        producer.flush();
        StringJoiner offsets = new StringJoiner(", ", "[", "]");
        String firstError = null;
        for (Future<RecordMetadata> f : sent) {
            try {
                offsets.add(Long.toString(f.get(60, TimeUnit.SECONDS).offset()));
            } catch (ExecutionException | java.util.concurrent.TimeoutException e) {
                offsets.add("-1");
                if (firstError == null) firstError = failure(e);
            }
        }
        return "\"ok\": " + (firstError == null) + ", \"offsets\": " + offsets + (firstError == null ? "" : ", " + firstError);
    }

    static String read(String topic, int partitions, String isolation) {
        Properties props = new Properties();
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        props.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, isolation);
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(props)) {
            List<TopicPartition> tps = new ArrayList<>();
            for (int p = 0; p < partitions; p++) tps.add(new TopicPartition(topic, p));
            consumer.assign(tps);
            consumer.seekToBeginning(tps);
            Map<TopicPartition, Long> ends = consumer.endOffsets(tps, Duration.ofSeconds(30));
            StringJoiner records = new StringJoiner(", ", "[", "]");
            long deadline = System.currentTimeMillis() + 60_000;
            while (tps.stream().anyMatch(tp -> consumer.position(tp) < ends.get(tp))) {
                if (System.currentTimeMillis() > deadline) throw new IllegalStateException("not at " + ends + " in 60 s");
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(200))) {
                    records.add("[" + r.partition() + ", " + r.offset() + ", " + quoted(r.key()) + ", "
                                + quoted(r.value()) + "]");
                }
            }
            StringJoiner at = new StringJoiner(", ", "{", "}");
            for (TopicPartition tp : tps) at.add(quoted(Integer.toString(tp.partition())) + ": " + ends.get(tp));
            return "\"ok\": true, \"records\": " + records + ", \"ends\": " + at;
        }
    }

    static String run(String[] w) throws Exception {
        switch (w[0]) {
            case "producer": {
                Properties props = producerConfig();
                props.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, w[2]);
                props.put(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, w[3]);
                KafkaProducer<String, String> producer = new KafkaProducer<>(props);
                producers.put(w[1], producer);
                producer.initTransactions();
                return "\"ok\": true";
            }
            case "plain":
                producers.put(w[1], new KafkaProducer<>(producerConfig()));
                return "\"ok\": true";
            case "begin":
                producers.get(w[1]).beginTransaction();
                return "\"ok\": true";
            case "commit":
                emit("{\"event\": \"committing\"}");
                producers.get(w[1]).commitTransaction();
                return "\"ok\": true";
            case "abort":
                producers.get(w[1]).abortTransaction();
                return "\"ok\": true";
            case "close":
                producers.remove(w[1]).close(Duration.ofSeconds(5));
                return "\"ok\": true";
            case "send":
                return send(producers.get(w[1]), w[2], Integer.parseInt(w[3]), Arrays.asList(w).subList(4, w.length));
            case "read":
                return read(w[1], Integer.parseInt(w[2]), w[3]);
            default:
                throw new IllegalArgumentException("unknown command " + w[0]);
        }
    }

    public static void main(String[] args) throws Exception {
        bootstrap = args[0];
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        emit("{\"event\": \"ready\"}");
        try {
            for (String line = in.readLine(); line != null; line = in.readLine()) {
                if (line.isBlank()) continue;
                String[] w = line.trim().split(" ");
                String result;
                try {
                    result = run(w);
                } catch (Exception e) {
                    result = "\"ok\": false, " + failure(e);
                }
                emit("{\"cmd\": " + quoted(w[0]) + ", " + result + "}");
            }
        } finally {
            for (KafkaProducer<String, String> p : producers.values()) p.close(Duration.ofSeconds(5));
        }
    }
}
