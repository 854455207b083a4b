// Kafka's Java transactional KafkaProducer as a test process: it writes to TOPIC (PARTITIONS
// partitions) the pattern tests/apache_kafka/test_read_committed_on_kafka.py's Topic writes with
// confluent-kafka, in the same order and with the same keys and values (key "k<n>", value
// "<kind>-<n>", n counting every record from 1), run from source with Apache Kafka's jars:
//
//   java -cp '<kafka jars>/*' TxnProducer.java BOOTSTRAP TOPIC PARTITIONS
//
// 1. plain records (a non-transactional producer, the Java default: idempotent); producer a commits
//    a transaction, aborts one, commits one, each followed by a plain record per partition; then
//    a and b interleaved (a aborts, b commits) with a plain record in between;
// 2. it prints {"event": "written"} and waits for a line "open" on stdin (the test checks the
//    last stable offsets meanwhile);
// 3. a third transactional producer (transaction.timeout.ms 900000, Kafka's
//    transaction.max.timeout.ms: the test reads while it is open) begins a transaction, writes to
//    every partition, then plain records follow; it prints {"event": "open"};
// 4. a line "commit" commits the open transaction ({"event": "committed"}), "abort" or the end of
//    stdin aborts it ({"event": "aborted"}), and the process ends.
//
// Every record is printed once its send is acknowledged, in the order sent (the order of offsets
// in its partition): {"event": "record", "partition": P, "offset": O, "key": K, "value": V,
// "kind": plain|committed|aborted|open}.  Transactional sends are acknowledged before their
// transaction ends (each send's future is awaited after a flush).
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.*;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.serialization.StringSerializer;

public class TxnProducer {
    static String topic;
    static int partitions;
    static int n = 0;

    static void emit(String event, String fields) {
        System.out.println("{\"event\": \"" + event + "\"" + (fields.isEmpty() ? "" : ", " + fields) + "}");
        System.out.flush();
    }

    static Properties config(String bootstrap) {
        Properties props = new Properties();
        props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        props.put(ProducerConfig.LINGER_MS_CONFIG, "0");
        return props;
    }

    static KafkaProducer<String, String> transactional(String bootstrap, String name, int timeoutMs) {
        Properties props = config(bootstrap);
        props.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, name + "-" + UUID.randomUUID().toString().substring(0, 6));
        props.put(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, Integer.toString(timeoutMs));
        KafkaProducer<String, String> producer = new KafkaProducer<>(props);
        producer.initTransactions();
        return producer;
    }

    /** ``perPartition`` records of ``kind`` to every partition, acknowledged, then printed. */
    static void send(Producer<String, String> producer, String kind, int perPartition) throws Exception {
        List<Future<RecordMetadata>> sent = new ArrayList<>();
        List<String[]> records = new ArrayList<>();
        for (int p = 0; p < partitions; p++) {
            for (int i = 0; i < perPartition; i++) {
                n++;
                String key = "k" + n, value = kind + "-" + n;
                sent.add(producer.send(new ProducerRecord<>(topic, p, key, value)));
                records.add(new String[] {key, value});
            }
        }
        producer.flush();
        for (int i = 0; i < sent.size(); i++) {
            RecordMetadata m = sent.get(i).get(60, TimeUnit.SECONDS);
            emit("record", "\"partition\": " + m.partition() + ", \"offset\": " + m.offset() + ", \"key\": \""
                 + records.get(i)[0] + "\", \"value\": \"" + records.get(i)[1] + "\", \"kind\": \"" + kind + "\"");
        }
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        topic = args[1];
        partitions = Integer.parseInt(args[2]);
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        try (KafkaProducer<String, String> plain = new KafkaProducer<>(config(bootstrap));
             KafkaProducer<String, String> a = transactional(bootstrap, "a", 60000);
             KafkaProducer<String, String> b = transactional(bootstrap, "b", 60000)) {
            send(plain, "plain", 2);
            for (String kind : List.of("committed", "aborted", "committed")) {
                a.beginTransaction();
                send(a, kind, 2);
                send(plain, "plain", 1);
                if (kind.equals("committed")) a.commitTransaction(); else a.abortTransaction();
            }
            // two producers interleaved: a aborts, b commits
            a.beginTransaction();
            b.beginTransaction();
            send(a, "aborted", 1);
            send(b, "committed", 1);
            send(a, "aborted", 1);
            send(plain, "plain", 1);
            send(b, "committed", 1);
            a.abortTransaction();
            b.commitTransaction();
            emit("written", "");
            if (!"open".equals(in.readLine())) return;
            // left open, with plain records after it
            try (KafkaProducer<String, String> open = transactional(bootstrap, "open", 900000)) {
                open.beginTransaction();
                send(open, "open", 2);
                send(plain, "plain", 2);
                emit("open", "");
                if ("commit".equals(in.readLine())) {
                    open.commitTransaction();
                    emit("committed", "");
                } else {
                    open.abortTransaction();
                    emit("aborted", "");
                }
            }
        }
    }
}
