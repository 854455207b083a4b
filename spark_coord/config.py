"""Properties files and their keys, each documented once, here.

Every key has a name (Kafka's own wherever Kafka has one), a type, a default and a
doc string, and may have aliases: the other name of the same setting where the Java
client and librdkafka name it differently (``sasl.mechanism`` / ``sasl.mechanisms``),
read wherever the key is read (files, ``--override``, ``-X``, Spark's ``kafka.`` options).
``conf/*.properties`` are rendered from these tables (a test keeps them in step),
``load()`` reads a file and applies ``--override key=value`` pairs, and an unknown key or
a bad value raises ``ConfigError`` naming the key.
"""

from __future__ import annotations

import re

from spark_coord.config_base import (
    Config,
    ConfigError,
    Key,
    KeySet,
    UnknownKey,
    load,
    parse_overrides,
    parse_properties,
    read_properties_file,
)

__all__ = ["Config", "ConfigError", "Key", "KeySet", "UnknownKey", "load", "parse_overrides", "parse_properties",
           "read_properties_file", "BROKER", "ZOOKEEPER", "CONSUMER", "CLIENT", "COORDINATOR", "KEYSETS",
           "METRICS_KEYS", "CLIENT_SECURITY_KEYS", "DATA_CLUSTER_KEYS", "DATA_CLUSTER_PREFIX", "LISTENER_KEYS"]


# -------------------------------------------------------------------------- metrics

#: The metrics endpoint's keys, the same for brokers and standalone coordinators (``spark_coord.metrics``).
METRICS_KEYS = [
    Key("metrics.port", "int", None,
        "Port of the metrics endpoint: Prometheus metrics at /metrics, a status page with every group's\n"
        "members, partitions, offsets and lag at /, its data at /status.json. Empty: no endpoint (the\n"
        "default; nothing is counted). 0: a free port, named in the log. A broker exports its requests,\n"
        "bytes, connections and logs; the elected coordinator (broker or standalone) exports every group's\n"
        "lag with kafka_exporter's names, so a sum over the cluster counts each group once.", minimum=0),
    Key("metrics.host", "str", "127.0.0.1",
        "Address the metrics endpoint listens on. The default serves this host only; 0.0.0.0 (or a\n"
        "host's address) lets a Prometheus elsewhere scrape it: then protect it with the metrics.ssl.*\n"
        "keys (HTTPS, client certificates) or a firewall. The endpoint shows group and topic names,\n"
        "member addresses and offsets, never record data or secrets."),
    Key("metrics.ssl.keystore.location", "str", None,
        "PEM file with the endpoint's private key and certificate chain: set, the endpoint serves HTTPS\n"
        "only (Prometheus: scheme: https and tls_config.ca_file)."),
    Key("metrics.ssl.key.password", "password", None, "Password of that private key, when it is encrypted."),
    Key("metrics.ssl.client.auth", "str", "none",
        "Client certificates on the HTTPS endpoint: none, requested or required. required: only scrapers\n"
        "presenting a certificate that chains to metrics.ssl.truststore.location get an answer\n"
        "(Prometheus: tls_config.cert_file and key_file)."),
    Key("metrics.ssl.truststore.location", "str", None,
        "PEM file of the CA certificates scrapers' client certificates must chain to."),
    Key("metrics.lag.sample.ms", "int", 5000,
        "How often the endpoint samples the coordinator's groups, their lag and the cluster's topics (in a\n"
        "thread of its own; the broker's event loop only hands over a copy of its groups). Scrapes and the\n"
        "status page show the latest sample, so what they show is at most this old; each sample is one\n"
        "point of the status page's lag plot.", minimum=100),
    Key("metrics.lag.history.ms", "int", 900000,
        "How far back the status page's lag plot reaches (kept in memory: one number per group per sample).",
        minimum=1000),
]

# --------------------------------------------------------------------------- broker

BROKER = KeySet("broker", "spark-coord broker settings (spark-coord broker --config conf/broker.properties)", [
    Key("broker.id", "int", 0,
        "Unique id of this broker in the cluster; it names /brokers/ids/<id> in ZooKeeper.", minimum=0),
    Key("listeners", "str", "PLAINTEXT://127.0.0.1:9092",
        "Where the broker listens: NAME://host:port entries, comma-separated, e.g.\n"
        "PLAINTEXT://0.0.0.0:9092,SASL_SSL://0.0.0.0:9093. A name is a security protocol (PLAINTEXT,\n"
        "SSL, SASL_PLAINTEXT, SASL_SSL) or any name listener.security.protocol.map maps to one.\n"
        "Port 0 picks a free port (the chosen port is what gets registered in ZooKeeper)."),
    Key("advertised.listeners", "str", None,
        "What clients are told to connect to (Metadata answers with the listener the client came\n"
        "in on, as Kafka does; /brokers/ids lists them all), NAME://host:port per listener.\n"
        "A listener missing here is advertised at its own host and port."),
    Key("listener.security.protocol.map", "str",
        "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
        "The security protocol of each listener name, NAME:PROTOCOL pairs (e.g. INTERNAL:SASL_SSL)."),
    Key("security.inter.broker.protocol", "str", None,
        "The security protocol of the listener brokers and coordinators reach each other on (its\n"
        "endpoint is the broker's host/port in /brokers/ids). Empty: the PLAINTEXT listener if\n"
        "there is one, else the first listener. Set this or inter.broker.listener.name, not both."),
    Key("inter.broker.listener.name", "str", None, "The listener brokers reach each other on, by name."),
    Key("log.dirs", "str", "data/broker-0",
        "Directory holding this broker's partition logs (one subdirectory per partition)."),
    Key("zookeeper.connect", "str", "127.0.0.1:2181",
        "ZooKeeper connection string, host:port[,host:port...][/chroot]."),
    Key("zookeeper.session.timeout.ms", "int", 18000,
        "ZooKeeper session timeout (Kafka's default since 2.5). A broker silent this long loses its\n"
        "session: its registration and, if it coordinates, the coordinator role go to other brokers.\n"
        "Shorter: a coordinator whose host dies (or is cut off) and does not come back is replaced\n"
        "sooner -- after about this long plus one ZooKeeper tick (18.6 s measured with the default,\n"
        "6.4 s with 6000). Longer: a VM pause, swapping or a network partition of that length does\n"
        "not cost a session, after which every group would rebalance under a new coordinator; and a\n"
        "client whose ZooKeeper server dies silently has 1/3 of this left to reach another server\n"
        "after noticing (it waits 2/3 of it), which gets tight below about 10000 in an ensemble.\n"
        "Two cases no longer depend on it: a connection loss shorter than the timeout costs nothing\n"
        "(the coordinator keeps serving and its ZooKeeper writes wait), and a broker restarted after\n"
        "a crash replaces its own stale registration and election node at once (0.7 s measured).", minimum=1000),
    Key("zookeeper.connection.timeout.ms", "int", 18000,
        "How long to wait for the first ZooKeeper connection at start-up.", minimum=100),
    Key("num.partitions", "int", 1,
        "Partitions of a topic created without an explicit count (auto-created or -1 in CreateTopics).", minimum=1),
    Key("auto.create.topics.enable", "bool", False,
        "Create a topic when a client asks Metadata or Produce for one that does not exist."),
    Key("delete.topic.enable", "bool", True, "Allow DeleteTopics."),
    Key("message.max.bytes", "int", 1048588,
        "Largest record batch the broker accepts (after compression); larger ones get MESSAGE_TOO_LARGE.", minimum=64),
    Key("socket.request.max.bytes", "int", 104857600,
        "Largest request frame; a size prefix above this is refused before anything is allocated\n"
        "and the connection is closed.", minimum=1024),
    Key("connections.max.idle.ms", "int", 600000,
        "Close a connection that has sent nothing for this long (also bounds a client that\n"
        "connects and never sends a request).", minimum=100),
    Key("log.segment.bytes", "int", 1073741824,
        "Roll to a new segment file when the active one reaches this size.", minimum=1024),
    Key("log.index.interval.bytes", "int", 4096,
        "Bytes of log between two entries of the sparse offset index.", minimum=1),
    Key("log.retention.bytes", "int", -1,
        "Delete oldest segments while a partition is larger than this; -1 keeps everything."),
    Key("log.retention.ms", "int", 604800000,
        "Delete segments whose newest record is older than this; -1 keeps everything."),
    Key("log.retention.check.interval.ms", "int", 300000, "How often retention is applied.", minimum=10),
    Key("log.flush.interval.messages", "int", 9223372036854775807,
        "fsync a partition after this many appended records. The default leaves flushing to the OS\n"
        "(as Kafka does); 1 fsyncs every produce request before it is acknowledged.", minimum=1),
    Key("log.flush.interval.ms", "int", -1,
        "fsync partitions with unflushed data at least this often; -1 leaves it to the OS."),
    Key("log.flush.scheduler.interval.ms", "int", 1000,
        "How often the time-based flush policy is checked.", minimum=10),
    Key("log.roll.ms", "int", 604800000,
        "Roll to a new segment when the active one is older than this (its first append), even if it\n"
        "is not full: retention and compaction only ever remove closed segments. A topic's segment.ms.", minimum=1),
    Key("log.cleanup.policy", "list", ["delete"],
        "What happens to old segments of a topic without its own cleanup.policy: delete (retention by\n"
        "time and size), compact (the log cleaner keeps the last record of each key), or compact,delete.",
        ),
    Key("log.message.timestamp.type", "str", "CreateTime",
        "Timestamps of appended records: CreateTime (the producer's) or LogAppendTime (the broker\n"
        "stamps each batch with its append time). A topic's message.timestamp.type."),
    Key("log.cleaner.enable", "bool", True,
        "Run the log cleaner (a thread of the broker that compacts topics whose cleanup.policy has compact)."),
    Key("log.cleaner.backoff.ms", "int", 15000,
        "How long the log cleaner sleeps when no log needs cleaning (a topic config change wakes it).", minimum=10),
    Key("log.cleaner.dedupe.buffer.size", "int", 134217728,
        "Memory of the log cleaner's offset map (16 bytes per key: a 64-bit key hash and an offset, at\n"
        "most 3/4 full). A pass that meets more distinct keys than fit cleans up to where the map filled\n"
        "and the next pass goes on from there; the map is allocated per pass for the keys it can meet.",
        minimum=1048576),
    Key("log.cleaner.io.max.bytes.per.second", "int", 9223372036854775807,
        "Throttle of the log cleaner: bytes read plus written per second (the default: unthrottled).",
        minimum=1024),
    Key("log.cleaner.min.cleanable.ratio", "double", 0.5,
        "Clean a compacted log when its dirty (not yet cleaned) bytes are at least this fraction of\n"
        "its closed segments (0-1). A topic's min.cleanable.dirty.ratio."),
    Key("log.cleaner.min.compaction.lag.ms", "int", 0,
        "Records younger than this are never compacted away. A topic's min.compaction.lag.ms.", minimum=0),
    Key("log.cleaner.max.compaction.lag.ms", "int", 9223372036854775807,
        "A compacted log with dirty records older than this is cleaned whatever its dirty ratio (and\n"
        "its active segment rolls at this age). A topic's max.compaction.lag.ms.", minimum=1),
    Key("log.cleaner.delete.retention.ms", "int", 86400000,
        "How long a tombstone (a record with a null value) stays in a compacted log, counted from its\n"
        "timestamp, so consumers reading behind can see the delete. A topic's delete.retention.ms.", minimum=0),
    # TLS (PEM files); each key may also be set for one listener as listener.name.<listener>.<key>
    Key("ssl.keystore.type", "str", "PEM",
        "Format of the key store: PEM (JKS and PKCS12 are Java formats: convert them)."),
    Key("ssl.keystore.location", "str", None,
        "PEM file with the broker's private key and its certificate chain (leaf first), for TLS listeners."),
    Key("ssl.key.password", "password", None, "Password of the private key, when it is encrypted."),
    Key("ssl.keystore.key", "password", None,
        "The private key as PEM text (instead of ssl.keystore.location; with ssl.keystore.certificate.chain)."),
    Key("ssl.keystore.certificate.chain", "str", None, "The certificate chain as PEM text (with ssl.keystore.key)."),
    Key("ssl.truststore.type", "str", "PEM", "Format of the trust store: PEM."),
    Key("ssl.truststore.location", "str", None, "PEM file of the CA certificates client certificates must chain to."),
    Key("ssl.truststore.certificates", "str", None, "The trusted CA certificates as PEM text."),
    Key("ssl.client.auth", "str", "none",
        "Client certificates on TLS listeners: none, requested or required. A client that presents one\n"
        "is the principal User:<its subject DN> (e.g. User:CN=app,O=example) unless it also does SASL."),
    Key("ssl.enabled.protocols", "list", ["TLSv1.2", "TLSv1.3"], "TLS versions served."),
    # SASL
    Key("sasl.enabled.mechanisms", "list", ["SCRAM-SHA-256", "SCRAM-SHA-512"],
        "SASL mechanisms of SASL listeners: SCRAM-SHA-256, SCRAM-SHA-512, PLAIN. SCRAM credentials live\n"
        "in ZooKeeper (/config/users/<user>, written by spark-coord users add). PLAIN checks the password\n"
        "against listener.name.<listener>.plain.sasl.jaas.config when that is set (Kafka's user_<name>=\"...\"\n"
        "options), else against the same SCRAM credentials. PLAIN sends the password itself: use it on\n"
        "SASL_SSL only."),
    Key("sasl.mechanism.inter.broker.protocol", "str", None, "Brokers' SASL mechanism (unset: the listener's first)."),
    Key("sasl.server.max.receive.size", "int", 524288,
        "Largest frame a client may send before it has authenticated (SaslHandshake, SaslAuthenticate,\n"
        "ApiVersions); a larger size prefix closes the connection.", minimum=64),
    # authorization
    Key("authorizer.class.name", "str", None,
        "Set to enable ACLs: kafka.security.authorizer.AclAuthorizer (Kafka's name) or\n"
        "spark_coord.security.authorizer.AclAuthorizer. ACLs live in ZooKeeper in Kafka's layout\n"
        "(/kafka-acl, /kafka-acl-extended) and every broker picks up changes through Kafka's\n"
        "change notifications. Empty: no authorization (everyone may do everything)."),
    Key("super.users", "str", None,
        "Principals allowed everything, semicolon-separated, e.g. User:admin;User:CN=ops,O=example."),
    Key("allow.everyone.if.no.acl.found", "bool", False,
        "With an authorizer: whether a resource no ACL matches is open to everyone (Kafka's default: no)."),
    # ZooKeeper security
    Key("zookeeper.set.acl", "bool", False,
        "Put ACLs on every znode this broker creates: everything to the creating identity (the\n"
        "credentials below, shared by all brokers), world read-only, except /config/users and the ACL\n"
        "znodes (/kafka-acl*), which only that identity may read. Needs zookeeper.auth.digest."),
    Key("zookeeper.auth.digest", "password", None,
        "ZooKeeper digest credentials, user:password, sent on every ZooKeeper connection (also without\n"
        "zookeeper.set.acl, e.g. when ZooKeeper requires authentication: enforce.auth.enabled)."),
    # coordinator (used only while this broker is the elected coordinator)
    Key("coordinator.enable", "bool", True,
        "Run a coordinator in this broker: it takes its share of the coordinator shards (see coordinator.shards)."),
    Key("coordinator.shards", "int", 50,
        "Coordinator shards: a group belongs to shard (hashCode(group) & 0x7fffffff) % shards, Kafka's\n"
        "rule for a group's __consumer_offsets partition (50 is Kafka's offsets.topic.num.partitions, so\n"
        "a group's shard is the partition Kafka would give it). Each shard is elected and fenced on its own\n"
        "in ZooKeeper (/coordinators/shards/<n>) and the shards are spread evenly over the live\n"
        "coordinators. Fixed per cluster: the first coordinator writes it to /coordinators/shards; one\n"
        "configured differently warns and uses the stored count. A shard held costs its holder one\n"
        "election, one fenced two-check ZooKeeper multi every zookeeper.session.timeout.ms / 4 and one\n"
        "restore on failover; 50 rather than 16 because groups named alike (orders-1, orders-2...) hash\n"
        "close together, and more shards spread them more evenly over the coordinators.",
        minimum=1),
    Key("transaction.max.timeout.ms", "int", 900000,
        "The longest transaction.timeout.ms a transactional producer may ask for (KIP-98): InitProducerId\n"
        "with a longer one is refused INVALID_TRANSACTION_TIMEOUT. Kafka's default (15 minutes). The\n"
        "transaction coordinator is the holder of the transactional id's coordinator shard (see\n"
        "coordinator.shards).", minimum=1),
    Key("transaction.abort.timed.out.transaction.cleanup.interval.ms", "int", 10000,
        "How often a transaction coordinator looks for transactions open past their timeout and aborts\n"
        "them with the producer's epoch bumped (its next request is fenced). Kafka's default.", minimum=1),
    Key("transaction.partition.verification.enable", "bool", True, "Leaders ask the transaction coordinator "
        "before a producer's first batch of a\ntransaction (KIP-890): a partition not in it is INVALID_TXN_STATE."),
    Key("transactional.id.expiration.ms", "int", 604800000, "A transactional id with no transaction open and "
        "no change for this long\nis removed by its coordinator (checked with timeouts). Kafka's default.", minimum=1),
    Key("coordinator.rebalance.threads", "int", 3,
        "Rebalance workers; a group is only ever rebalanced by one worker at a time.", minimum=1),
    Key("coordinator.min.session.timeout.ms", "int", 1000,
        "Members registering with a smaller session.timeout.ms are refused (SESSION_TIMEOUT_TOO_SMALL).", minimum=1),
    Key("coordinator.max.ping.retries", "int", 1,
        "A member whose pings go unanswered more than this many times in a row is failed and its group rebalanced.\n"
        "Each ping waits 2/3 of the member's session timeout; pings go out every 1/3.", minimum=0),
    Key("coordinator.offsets.commit.interval.ms", "int", 1000,
        "How often consumed offsets reported in ping answers are written to ZooKeeper\n"
        "(/consumers/<group>/offsets/<topic>/<partition>). They are also written before every StartFetcher.",
        minimum=10),
    Key("gc.freeze.interval.ms", "int", 10000,
        "How often objects that survived Python's garbage collector are frozen out of its sight (gc.freeze),\n"
        "so its automatic collections visit only what is new, instead of every object of the process\n"
        "(with 5,000 members such a full collection held the event loop, and so pings, for 300-430 ms every\n"
        "10 s). A full collection then runs only when the heap has doubled since the last one.\n"
        "0: Python's own collection schedule.", minimum=0),
    Key("coordinator.rebalance.backoff.ms", "int", 500,
        "Wait before retrying a rebalance that timed out or failed.", minimum=0),
    Key("coordinator.rebalance.max.retries", "int", 10,
        "Attempts before a rebalance is given up and ConsumerRebalanceFailed is logged "
        "(the next group change retries).",
        minimum=1),
    Key("coordinator.partition.assignment.strategy", "str", "sticky",
        "How the coordinator assigns partitions to consumer threads. sticky: balanced (shares differ by at\n"
        "most one partition when members subscribe alike) with the fewest moves: a partition stays with its\n"
        "holder unless balance needs it elsewhere, so a rebalance stops only the partitions that move.\n"
        "range (Kafka 0.7/0.8's rule: contiguous ranges per topic over sorted consumer threads) and\n"
        "roundrobin recompute from scratch, so more partitions move at each rebalance.\n"
        "A group whose Kafka 4 consumers (group.protocol=consumer) name a server-side assignor\n"
        "(group.remote.assignor: uniform or range, both sticky) uses that one instead."),
    Key("group.initial.rebalance.delay.ms", "int", 3000,
        "How long the first rebalance of an empty group of Kafka's classic protocol (JoinGroup/SyncGroup:\n"
        "librdkafka, kafka-python, kafkajs, Java's group.protocol=classic) waits for more members, as\n"
        "Kafka's does: consumers started together get their shares in one generation, instead of the first\n"
        "taking every partition and handing them on. A member joining during the wait extends it by this\n"
        "much once more, within the group's rebalance timeout (its members' max.poll.interval.ms). Later\n"
        "rebalances, Spark queries, spark-coord consume and Kafka 4's consumer protocol never wait.\n"
        "0: no wait (what Kafka's own test configurations set).", minimum=0),
    # Kafka 4's consumer group protocol (KIP-848): the coordinator sets these for its members
    Key("group.consumer.session.timeout.ms", "int", 45000,
        "Session timeout of members of Kafka's consumer group protocol (group.protocol=consumer, KIP-848):\n"
        "a member that sends no ConsumerGroupHeartbeat for this long is failed and its partitions move.\n"
        "Set by the coordinator, as Kafka does (the clients' session.timeout.ms does not apply).", minimum=1),
    Key("group.consumer.heartbeat.interval.ms", "int", 5000,
        "How often members of Kafka's consumer group protocol heartbeat (told in every heartbeat answer):\n"
        "the longest a member waits to hear of a new assignment.", minimum=1),
    Key("group.consumer.min.session.timeout.ms", "int", 45000,
        "The smallest consumer.session.timeout.ms a consumer group may set for itself (a group config,\n"
        "IncrementalAlterConfigs on the group).", minimum=1),
    Key("group.consumer.max.session.timeout.ms", "int", 60000,
        "The largest consumer.session.timeout.ms a consumer group may set for itself.", minimum=1),
    Key("group.consumer.min.heartbeat.interval.ms", "int", 5000,
        "The smallest consumer.heartbeat.interval.ms a consumer group may set for itself.", minimum=1),
    Key("group.consumer.max.heartbeat.interval.ms", "int", 15000,
        "The largest consumer.heartbeat.interval.ms a consumer group may set for itself.", minimum=1),
    # Share groups (KIP-932, "Queues for Kafka"): Kafka's names, defaults and bounds
    Key("group.share.session.timeout.ms", "int", 45000,
        "Session timeout of share group members (confluent-kafka's ShareConsumer, Kafka's KafkaShareConsumer):\n"
        "a member that sends no ShareGroupHeartbeat for this long is removed and the group's partitions are\n"
        "assigned again. A group may set its own (group config share.session.timeout.ms) within the bounds below.",
        minimum=1),
    Key("group.share.min.session.timeout.ms", "int", 45000,
        "The smallest share.session.timeout.ms a share group may set for itself.", minimum=1),
    Key("group.share.max.session.timeout.ms", "int", 60000,
        "The largest share.session.timeout.ms a share group may set for itself.", minimum=1),
    Key("group.share.heartbeat.interval.ms", "int", 5000,
        "How often share group members heartbeat (told in every ShareGroupHeartbeat answer): the longest a\n"
        "member waits to hear of a new assignment. A group may set its own (share.heartbeat.interval.ms).",
        minimum=1),
    Key("group.share.min.heartbeat.interval.ms", "int", 5000,
        "The smallest share.heartbeat.interval.ms a share group may set for itself.", minimum=1),
    Key("group.share.max.heartbeat.interval.ms", "int", 15000,
        "The largest share.heartbeat.interval.ms a share group may set for itself.", minimum=1),
    Key("group.share.record.lock.duration.ms", "int", 30000,
        "How long a share group member holds the records a ShareFetch acquired for it: records neither\n"
        "acknowledged nor renewed by then are released to the group again (their delivery count kept).\n"
        "A group may set its own (share.record.lock.duration.ms) within the bounds below.", minimum=1),
    Key("group.share.min.record.lock.duration.ms", "int", 15000,
        "The smallest share.record.lock.duration.ms a share group may set for itself.", minimum=1),
    Key("group.share.max.record.lock.duration.ms", "int", 60000,
        "The largest share.record.lock.duration.ms a share group may set for itself.", minimum=1),
    Key("group.share.delivery.count.limit", "int", 5,
        "How many times a record of a share group is delivered at most: a record released (or whose lock\n"
        "ran out) this many times is archived -- set aside for good -- and the others keep flowing.\n"
        "Kafka's range: 2 to 10.", minimum=2),
    Key("group.share.partition.max.record.locks", "int", 2000,
        "The most records of one partition a share group has in flight (acquired, or delivered and waiting\n"
        "for the records before them to be acknowledged): a ShareFetch acquires nothing beyond it until the\n"
        "oldest in-flight records are acknowledged. Kafka's range: 100 to 10000 (its maximum bounds a\n"
        "partition's state written to ZooKeeper at about 200 KB).", minimum=100, maximum=10000),
    Key("group.share.max.share.sessions", "int", 2000,
        "The most share sessions this broker keeps (one per share-group member fetching from it): a member\n"
        "opening a new one beyond it is refused SHARE_SESSION_LIMIT_REACHED until one closes or idles out.",
        minimum=1),
    Key("group.share.state.journal.enable", "bool", True,
        "Make a share group's acknowledgements durable by an append to a journal beside the partition logs\n"
        "(<log.dirs>/__share_state; fsynced only with log.flush.interval.messages=1, as the logs are) and\n"
        "write the share partitions' state to ZooKeeper behind it, as a checkpoint. Off: every acknowledgement\n"
        "is answered once a ZooKeeper write holding it landed."),
    Key("group.share.state.journal.segment.bytes", "int", 8 * 1024 * 1024,
        "The size past which the share-state journal starts a new segment (holding the states ZooKeeper does\n"
        "not hold yet) and deletes the old one.", minimum=1024),
    Key("group.share.state.checkpoint.interval.ms", "int", 100,
        "How long a share partition's changes (acquisitions, lock expiries, journaled acknowledgements) wait\n"
        "at most before they are written to ZooKeeper, batched with every other share partition's.",
        minimum=1),
    Key("group.share.max.size", "int", 200,
        "The most members a share group may have: a member joining a full group is refused\n"
        "GROUP_MAX_SIZE_REACHED.", minimum=1),
    *METRICS_KEYS,
], footer="""
Per-listener settings, as Kafka takes them (the listener name in lower case):
  listener.name.<listener>.<key> for any ssl.* key above and sasl.enabled.mechanisms, e.g.
    listener.name.external.ssl.keystore.location=/etc/spark-coord/external.pem
  listener.name.<listener>.<mechanism>.sasl.jaas.config (plain, scram-sha-256, scram-sha-512): username and
    password the broker sends on its inter-broker listener; plain's also lists the PLAIN users, e.g.
    listener.name.sasl_ssl.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule \\
      required username="admin" password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";
""", dynamic=lambda name: _listener_key(name))

#: Broker keys that may be set per listener (``listener.name.<listener>.<key>``).
LISTENER_KEYS = ("ssl.keystore.type", "ssl.keystore.location", "ssl.key.password", "ssl.keystore.key",
                 "ssl.keystore.certificate.chain", "ssl.truststore.type", "ssl.truststore.location",
                 "ssl.truststore.certificates", "ssl.client.auth", "ssl.enabled.protocols", "sasl.enabled.mechanisms")
_LISTENER_KEY = re.compile(r"^listener\.name\.([a-z0-9_]+)\.(.+)$")


def _listener_key(name: str) -> Key | None:
    """The Key of a per-listener broker setting, None for any other name."""
    m = _LISTENER_KEY.match(name)
    if not m:
        return None
    rest = m.group(2)
    if rest in LISTENER_KEYS:
        base = BROKER.keys[rest]
        return Key(name, base.type, None, base.doc, base.minimum)
    if rest in ("plain.sasl.jaas.config", "scram-sha-256.sasl.jaas.config", "scram-sha-512.sasl.jaas.config"):
        return Key(name, "password", None, "The listener's JAAS line: PLAIN users, the broker's own credentials.")
    return None


# ------------------------------------------------------------------------ zookeeper

ZOOKEEPER = KeySet("zookeeper", "Embedded Apache ZooKeeper settings "
                   "(spark-coord zookeeper --config conf/zookeeper.properties).\n"
                   "# This file is handed to ZooKeeper itself, so any zoo.cfg setting may be added", [
    Key("clientPort", "int", 2181, "Port ZooKeeper listens on for clients. 0 picks a free port.", minimum=0),
    Key("clientPortAddress", "str", "127.0.0.1", "Address ZooKeeper listens on."),
    Key("dataDir", "str", "data/zookeeper", "Where ZooKeeper keeps its snapshots and transaction log."),
    Key("tickTime", "int", 2000,
        "ZooKeeper's basic time unit in ms; sessions may last 2 to 20 ticks by default.", minimum=1),
    Key("minSessionTimeout", "int", 1000,
        "Shortest session timeout (ms) ZooKeeper grants; short ones make tests of failures fast.", minimum=1),
    Key("maxSessionTimeout", "int", 60000, "Longest session timeout (ms) ZooKeeper grants.", minimum=1),
    Key("maxClientCnxns", "int", 0, "Connections allowed per client address; 0 means unlimited.", minimum=0),
    Key("admin.enableServer", "bool", False, "ZooKeeper's HTTP admin server (it would take port 8080)."),
    Key("4lw.commands.whitelist", "str", "*", "Four-letter-word commands allowed (srvr, stat, mntr, ...)."),
    Key("initLimit", "int", 10, "Ensemble only: ticks a follower may take to connect to the leader and sync with it.",
        minimum=1),
    Key("syncLimit", "int", 5, "Ensemble only: ticks a follower may fall behind the leader before it is dropped.",
        minimum=1),
    Key("myid", "str", None,
        "Ensemble only: this server's id, the N of its own server.N line; written to dataDir/myid.\n"
        "Empty: read dataDir/myid, as ZooKeeper itself does."),
], passthrough=True, footer="""
An ensemble (3 or 5 servers; a majority must be up): give every server the same server.N
lines, host:peerPort:electionPort, and its own myid and dataDir, for example
  server.1=zk1.example.com:2888:3888
  server.2=zk2.example.com:2888:3888
  server.3=zk3.example.com:2888:3888
  myid=1
and point zookeeper.connect at all of them: zk1.example.com:2181,zk2.example.com:2181,zk3.example.com:2181

Authentication (ZooKeeper 3.9's own settings): to refuse every client that has not authenticated
with digest credentials (brokers send zookeeper.auth.digest from broker.properties), add
  enforce.auth.enabled=true
  enforce.auth.schemes=digest
and, for an administrator that may read and repair every znode whatever its ACL,
  DigestAuthenticationProvider.superDigest=super:<base64 SHA-1 of "super:<password>">
(spark-coord zk-digest super prints that value).
""")

# ------------------------------------------------------------------------- consumer

#: Kafka client security keys (librdkafka's names, as confluent-kafka and kcat take them), shared
#: by every client settings file: ``spark_coord.security.client.ClientSecurity`` reads them.
CLIENT_SECURITY_KEYS = [
    Key("security.protocol", "str", "PLAINTEXT",
        "How to talk to brokers: PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL (as the listener connected to)."),
    Key("sasl.mechanism", "str", "SCRAM-SHA-512",
        "SASL mechanism: SCRAM-SHA-512, SCRAM-SHA-256 or PLAIN (the Java client's name; librdkafka's,\n"
        "as kcat and confluent-kafka take it, is sasl.mechanisms).", aliases=("sasl.mechanisms",)),
    Key("sasl.username", "str", None, "SASL user name."),
    Key("sasl.password", "password", None, "SASL password."),
    Key("sasl.jaas.config", "password", None,
        "Instead of sasl.username/sasl.password, a JAAS line as Kafka's Java clients take it:\n"
        "org.apache.kafka.common.security.scram.ScramLoginModule required username=\"alice\" password=\"...\";"),
    Key("ssl.ca.location", "str", None,
        "PEM file of the CA certificates the brokers' certificates chain to (default: the system's).\n"
        "The Java client's ssl.truststore.location names the same file when ssl.truststore.type is PEM.",
        aliases=("ssl.truststore.location",)),
    Key("ssl.truststore.type", "str", "PEM",
        "The Java client's format of ssl.truststore.location: only PEM is read (convert a JKS or PKCS12\n"
        "trust store to PEM, e.g. with keytool -exportcert -rfc)."),
    Key("ssl.certificate.location", "str", None,
        "PEM client certificate, for brokers that want one (ssl.client.auth)."),
    Key("ssl.key.location", "str", None, "PEM private key of the client certificate."),
    Key("ssl.key.password", "password", None, "Password of the client's private key, when it is encrypted."),
    Key("ssl.endpoint.identification.algorithm", "str", "https",
        "https: the broker's certificate must name the host connected to; none: only its chain is checked."),
]

CONSUMER = KeySet("consumer",
                  "spark-coord thin consumer settings (spark-coord consume --config conf/consumer.properties)", [
    Key("bootstrap.brokers", "list", ["127.0.0.1:9092"],
        "Brokers tried round-robin to discover the cluster and its coordinator, host:port[,host:port...].",
        aliases=("bootstrap.servers", "metadata.broker.list")),
    Key("coordinator.bootstrap", "list", None,
        "Standalone coordinators (spark-coord coordinator) to find the group's coordinator through, when the\n"
        "data cluster (bootstrap.brokers) runs none; empty: ask bootstrap.brokers."),
    Key("group.id", "str", None, "Consumer group to join (required)."),
    Key("consumer.id", "str", None, "Member id within the group; empty generates <host>-<pid>-<random>."),
    Key("group.protocol", "str", "coordkafka",
        "How the member joins its group: coordkafka, the coordinator's own channel; or consumer, Kafka 4's\n"
        "consumer group protocol (KIP-848) with the group coordinator of our brokers or of any Kafka 4\n"
        "cluster (Java's group.protocol=consumer)."),
    Key("group.instance.id", "str", None,
        "group.protocol=consumer: the id of a static member (KIP-345). It leaves with epoch -2, and its\n"
        "partitions wait for it for the group's session timeout: a member started again with the same id\n"
        "within it gets them back and nothing else moves. Empty: a dynamic member."),
    Key("group.remote.assignor", "str", None,
        "group.protocol=consumer: the server-side assignor the group uses, uniform or range (Kafka's names;\n"
        "a name the coordinator does not know ends the member with UNSUPPORTED_ASSIGNOR). Empty: the\n"
        "coordinator's default (uniform)."),
    Key("session.timeout.ms", "int", 30000,
        "The member's lease. The coordinator pings every third of it; a member whose pings go unanswered\n"
        "is failed, and its partitions move to others once this long has passed since the last ping sent\n"
        "to it (at once when it leaves cleanly). A member that loses its coordinator keeps consuming while\n"
        "it finds the next one, for at most this long since a coordinator last spoke to it. The default\n"
        "outlasts a coordinator failover (the brokers' zookeeper.session.timeout.ms, 18 s by default, plus\n"
        "an election), so consumption does not stop when the coordinator's broker dies; shorter values\n"
        "detect dead members sooner but stop consumption during a slow failover.", minimum=100),
    Key("auto.commit.enable", "bool", True, "Report consumed offsets in ping answers so the coordinator commits them.",
        aliases=("enable.auto.commit",)),
    Key("auto.offset.reset", "str", "largest",
        "Where to start when the group has no committed offset or it is out of range: smallest or largest."),
    Key("isolation.level", "str", "read_uncommitted",
        "How to read records written in transactions: read_uncommitted, every record (aborted transactions'\n"
        "too), up to the high watermark; read_committed, only records below the last stable offset (the first\n"
        "offset of a transaction still open), without those of aborted transactions. Kafka's Java consumer's\n"
        "default (librdkafka's is read_committed). Transaction markers are never returned. Our brokers do not\n"
        "serve transactions yet: there both read the same records."),
    Key("fetch.min.bytes", "int", 1, "Fetch requests wait until at least this many bytes are available...", minimum=0),
    Key("fetch.wait.max.ms", "int", 500, "...or this long, whichever comes first.", minimum=0,
        aliases=("fetch.max.wait.ms",)),
    Key("fetch.max.bytes", "int", 52428800, "Most bytes one Fetch response may carry.", minimum=1),
    Key("max.partition.fetch.bytes", "int", 1048576, "Most bytes per partition in one Fetch response.", minimum=1),
    Key("socket.timeout.ms", "int", 30000, "Give up on a broker request after this long (the Java client's\n"
        "request.timeout.ms).", minimum=100, aliases=("request.timeout.ms",)),
    Key("client.id", "str", "spark-coord", "Client id sent in every request header (shows up in broker logs)."),
    *CLIENT_SECURITY_KEYS,
])

# --------------------------------------------------------------------------- client

CLIENT = KeySet("client", "spark-coord client settings: spark-coord topics|produce|tail|groups|acls --command-config "
                "conf/client.properties", [
    Key("client.id", "str", "spark-coord", "Client id sent in every request header (shows up in broker logs)."),
    Key("socket.timeout.ms", "int", 30000, "Give up on a broker request after this long (the Java client's\n"
        "request.timeout.ms).", minimum=100, aliases=("request.timeout.ms",)),
    *CLIENT_SECURITY_KEYS,
])

# ---------------------------------------------------------------------- coordinator

#: Broker keys a standalone coordinator takes as they are: its own listeners and their security,
#: its ZooKeeper, authorization, and every coordinator.* key.
_COORDINATOR_SHARED = ("listener.security.protocol.map", "inter.broker.listener.name", "security.inter.broker.protocol",
                       "socket.request.max.bytes", "connections.max.idle.ms", "authorizer.class.name", "super.users",
                       "allow.everyone.if.no.acl.found", "gc.freeze.interval.ms",
                       "group.initial.rebalance.delay.ms")
_COORDINATOR_PREFIXES = ("ssl.", "sasl.", "zookeeper.", "coordinator.", "metrics.")

#: How a standalone coordinator's client settings for the data cluster are named in its properties
#: file: every client security key under this prefix (as the Spark source takes them), since its own
#: ssl.* keys are its listeners'.  ``spark-coord coordinator -X key=value`` takes them unprefixed.
DATA_CLUSTER_PREFIX = "kafka."

_DATA_CLUSTER_DOC = {
    "security.protocol":
        "The data cluster's client settings: every connection this coordinator opens to bootstrap.servers\n"
        "(Metadata, the offset mirror's OffsetCommit, the lag reader's ListOffsets) uses the kafka.* keys,\n"
        "which are the client keys of conf/client.properties under the prefix kafka. (as the Spark source\n"
        "takes them; the unprefixed ssl.* keys are this coordinator's own listeners'). On the command line,\n"
        "-X key=value and --command-config FILE take them unprefixed, as every client command does.\n"
        "Members reach the data cluster with their own settings.\n"
        "How to talk to the data cluster: PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL.",
}


def _data_cluster_key(k: Key) -> Key:
    doc = _DATA_CLUSTER_DOC.get(k.name, k.doc).replace("brokers' certificates", "data brokers' certificates")
    return Key(DATA_CLUSTER_PREFIX + k.name, k.type, k.default, doc, k.minimum,
               tuple(DATA_CLUSTER_PREFIX + a for a in k.aliases))


#: The data cluster's client security keys in conf/coordinator.properties (``kafka.security.protocol``...).
DATA_CLUSTER_KEYS = [_data_cluster_key(k) for k in CLIENT_SECURITY_KEYS]

COORDINATOR = KeySet("coordinator", "spark-coord standalone coordinator settings (spark-coord coordinator --config "
                     "conf/coordinator.properties):\n# the coordinator beside an existing Kafka-protocol cluster", [
    Key("coordinator.id", "int", 1000,
        "Unique id of this coordinator process; it names /coordinators/ids/<id> in ZooKeeper, where\n"
        "brokers with coordinator.enable=true register too: an id a live coordinator holds is refused.",
        minimum=0),
    Key("bootstrap.servers", "list", ["127.0.0.1:9092"],
        "The data cluster (any Kafka-protocol cluster: Apache Kafka, a compatible broker, or our brokers with\n"
        "coordinator.enable=false): its brokers and topics come from its Metadata API."),
    Key("listeners", "str", "PLAINTEXT://127.0.0.1:9099",
        "Where members reach this coordinator: NAME://host:port entries, comma-separated (as a broker's)."),
    Key("advertised.listeners", "str", None,
        "Addresses members are told, if not the listeners' (same format)."),
    Key("coordinator.metadata.refresh.ms", "int", 2000,
        "How often the data cluster's brokers, topics and partitions are read again (Metadata); new topics\n"
        "and partitions rebalance the groups interested in them. Errors retry sooner.", minimum=100),
    Key("coordinator.offsets.mirror", "bool", False,
        "Also write every committed offset to the data cluster's own offset store (OffsetCommit, as a\n"
        "standalone commit of the group), so its own tools show the lag; a failed mirror write is logged and\n"
        "retried, and never holds up the ZooKeeper commit."),
    *DATA_CLUSTER_KEYS,
    *(k for k in BROKER.keys.values()
      if (k.name in _COORDINATOR_SHARED or k.name.startswith(_COORDINATOR_PREFIXES))
      and k.name != "coordinator.enable"),
], footer=BROKER.footer, dynamic=lambda name: _listener_key(name))

KEYSETS = {ks.name: ks for ks in (BROKER, ZOOKEEPER, CONSUMER, CLIENT, COORDINATOR)}
