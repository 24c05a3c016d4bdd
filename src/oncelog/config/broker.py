"""Broker configuration: Kafka's own keys, from a server.properties file plus overrides.

`BrokerConfig.load(path, overrides)` reads the file the way kafka-server-start.sh does,
applies `--override key=value` on top, and checks every key against `SETTINGS`.
Keys Kafka knows but oncelog has no use for (thread counts, socket buffer sizes,
ZooKeeper settings) are accepted and listed as ignored; any other key is an
error naming it, so a typo never passes silently.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from oncelog.security.listeners import inter_broker_listener, parse_listeners

log = logging.getLogger("oncelog.config")

LONG_MAX = 2**63 - 1


class ConfigError(ValueError):
    """A configuration a user must fix; the message names the key."""


def _int(value: str) -> int:
    return int(value.strip())


def _bool(value: str) -> bool:
    lowered = value.strip().lower()
    if lowered not in ("true", "false"):
        raise ValueError(f"expected true or false, got {value!r}")
    return lowered == "true"


def _str(value: str) -> str:
    return value.strip()


def _float(value: str) -> float:
    return float(value.strip())


MAX_TRANSACTION_VERSION = 2


def _transaction_version(value: str) -> int:
    level = int(value.strip())
    if not 0 <= level <= MAX_TRANSACTION_VERSION:
        raise ValueError(f"expected a transaction.version level from 0 to {MAX_TRANSACTION_VERSION}, got {level}")
    return level


MAX_SHARE_VERSION = 1


def _share_version(value: str) -> int:
    level = int(value.strip())
    if not 0 <= level <= MAX_SHARE_VERSION:
        raise ValueError(f"expected a share.version level from 0 to {MAX_SHARE_VERSION}, got {level}")
    return level


@dataclass(frozen=True, slots=True)
class Setting:
    key: str
    parse: Callable[[str], Any]
    default: str
    doc: str
    sensitive: bool = False  # a password or key: never logged, DescribeConfigs answers null (as Kafka)
    per_listener: bool = False  # may be set for one listener as listener.name.<name>.<key>


def _secret(key: str, doc: str) -> Setting:
    return Setting(key, _str, "", doc, sensitive=True, per_listener=True)


def _tls(key: str, default: str, doc: str) -> Setting:
    return Setting(key, _str, default, doc, per_listener=True)


SETTINGS: Mapping[str, Setting] = {
    s.key: s
    for s in (
        Setting("node.id", _int, "1", "This broker's id."),
        Setting("broker.id", _int, "-1", "Older name of node.id; used when node.id is not set."),
        Setting("listeners", _str, "PLAINTEXT://127.0.0.1:9092",
                "Where to accept connections; port 0 picks a free port."),
        Setting("advertised.listeners", _str, "",
                "NAME://host:port per listener, the addresses clients are told to use; a listener not named here "
                "advertises the address it is bound to."),
        Setting("listener.security.protocol.map", _str, "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,"
                "SASL_SSL:SASL_SSL", "Each listener's security protocol, NAME:PROTOCOL,..."),
        Setting("inter.broker.listener.name", _str, "",
                "The listener other brokers connect to (cluster mode). Empty: the one named after "
                "security.inter.broker.protocol, else the first listener."),
        Setting("security.inter.broker.protocol", _str, "PLAINTEXT",
                "Names the inter-broker listener when inter.broker.listener.name is not set."),
        Setting("sasl.enabled.mechanisms", _str, "GSSAPI",
                "SASL mechanisms SASL listeners offer: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER "
                "(Kafka's default, GSSAPI, is Kerberos, which oncelog does not have).", per_listener=True),
        Setting("sasl.mechanism.inter.broker.protocol", _str, "GSSAPI",
                "The SASL mechanism brokers use with each other on a SASL inter-broker listener."),
        Setting("connections.max.reauth.ms", _int, "0",
                "KIP-368: a SASL session lasts at most this long (0: as long as the connection); the client must "
                "re-authenticate on the same connection before it ends.", per_listener=True),
        Setting("connection.failed.authentication.delay.ms", _int, "100",
                "How long the broker waits before closing a connection whose authentication failed (and, "
                "oncelog only, before the HTTP listener answers a failed sign-in)."),
        Setting("sasl.server.max.receive.size", _int, "524288",
                "The largest SASL token accepted before authentication.", per_listener=True),
        _tls("ssl.keystore.type", "JKS", "PEM or PKCS12 (JKS cannot be read here)."),
        _tls("ssl.keystore.location", "", "The keystore file: PKCS12, or PEM with the private key and chain."),
        _secret("ssl.keystore.password", "The PKCS12 keystore's password."),
        _secret("ssl.key.password", "The password of an encrypted PEM private key."),
        _secret("ssl.keystore.certificate.chain", "Inline PEM certificate chain (ssl.keystore.type=PEM)."),
        _secret("ssl.keystore.key", "Inline PEM private key (ssl.keystore.type=PEM)."),
        _tls("ssl.truststore.type", "JKS", "PEM or PKCS12 (a JKS-typed file in PEM is read as PEM)."),
        _tls("ssl.truststore.location", "", "CA certificates client certificates must chain to."),
        _secret("ssl.truststore.password", "The PKCS12 truststore's password."),
        _secret("ssl.truststore.certificates", "Inline PEM CA certificates (ssl.truststore.type=PEM)."),
        _tls("ssl.client.auth", "none", "none, requested or required: whether clients present certificates."),
        _tls("ssl.enabled.protocols", "TLSv1.2,TLSv1.3", "TLS versions accepted."),
        _tls("ssl.protocol", "TLSv1.3", "Kafka's SSLContext protocol; TLS versions come from ssl.enabled.protocols."),
        _tls("ssl.cipher.suites", "", "Cipher suites (OpenSSL names); empty: OpenSSL's defaults."),
        _tls("ssl.principal.mapping.rules", "DEFAULT",
             "How a client certificate's subject DN becomes the principal's name: RULE:pattern/replacement/[LU],"
             "...,DEFAULT."),
        _tls("ssl.endpoint.identification.algorithm", "https",
             "Host name checking of the brokers' certificates when this broker is the client (inter-broker)."),
        Setting("authorizer.class.name", _str, "",
                "Kafka's org.apache.kafka.metadata.authorizer.StandardAuthorizer (or kafka.security.authorizer."
                "AclAuthorizer) turns on ACLs; empty: every request is allowed."),
        Setting("super.users", _str, "", "Principals allowed everything, User:alice;User:bob."),
        Setting("allow.everyone.if.no.acl.found", _bool, "false",
                "With an authorizer: a resource no ACL names is open to everyone (true) or to super users only."),
        Setting("log.dirs", _str, "/tmp/oncelog-logs", "Comma-separated data directories."),
        Setting("log.dir", _str, "", "Single data directory, used when log.dirs is not set."),
        Setting("num.recovery.threads.per.data.dir", _int, "1",
                "Threads per data directory that open, create and close partition logs (at start-up, in "
                "CreateTopics and CreatePartitions, at shutdown). More overlap a slow disk's waits, but "
                "the threads share one interpreter lock: on a fast disk one is quickest."),
        Setting("num.partitions", _int, "1", "Partitions of an auto-created topic or a CreateTopics with -1."),
        Setting("default.replication.factor", _int, "1", "Replication factor of auto-created topics."),
        Setting("auto.create.topics.enable", _bool, "true", "Create a topic when Metadata asks for an unknown one."),
        Setting("delete.topic.enable", _bool, "true", "Allow DeleteTopics."),
        Setting("log.segment.bytes", _int, str(1 << 30), "Roll a segment at this size."),
        Setting("log.roll.ms", _int, "-1", "Roll a segment after this time (overrides log.roll.hours)."),
        Setting("log.roll.hours", _int, "168", "Roll a segment after this many hours."),
        Setting("log.retention.ms", _int, "-2", "Delete segments older than this (-1: keep forever)."),
        Setting("log.retention.minutes", _int, "-2", "Retention in minutes, if log.retention.ms is unset."),
        Setting("log.retention.hours", _int, "168", "Retention in hours, if neither of the above is set."),
        Setting("log.retention.bytes", _int, "-1", "Delete oldest segments while a partition is larger."),
        Setting("log.retention.check.interval.ms", _int, "300000", "How often retention runs."),
        Setting("log.flush.interval.messages", _int, str(LONG_MAX), "fsync after this many messages."),
        Setting("log.flush.interval.ms", _int, "-1",
                "fsync after this long (-1: use log.flush.scheduler.interval.ms policy off)."),
        Setting("log.flush.scheduler.interval.ms", _int, "1000", "How often the flush timer looks at partitions."),
        Setting("log.flush.offset.checkpoint.interval.ms", _int, "60000",
                "How often the recovery-point and log-start checkpoints are written (cluster mode: "
                "at least every replica.high.watermark.checkpoint.interval.ms)."),
        Setting("log.index.interval.bytes", _int, "4096", "Bytes of log between offset index entries."),
        Setting("log.cleanup.policy", _str, "delete", "Default cleanup.policy of topics."),
        Setting("log.cleaner.enable", _bool, "true",
                "Run the log cleaner (compaction of cleanup.policy=compact topics)."),
        Setting("log.cleaner.backoff.ms", _int, "15000", "How often the cleaner looks for a partition to clean."),
        Setting("log.cleaner.min.cleanable.ratio", _float, "0.5",
                "Default min.cleanable.dirty.ratio: clean when dirty bytes / all bytes is above it."),
        Setting("log.cleaner.delete.retention.ms", _int, "86400000",
                "Default delete.retention.ms: how long cleaned tombstones and markers stay."),
        Setting("log.cleaner.min.compaction.lag.ms", _int, "0", "Default min.compaction.lag.ms."),
        Setting("log.cleaner.max.compaction.lag.ms", _int, str(LONG_MAX), "Default max.compaction.lag.ms."),
        Setting("log.cleaner.dedupe.buffer.size", _int, "134217728",
                "Memory budget of the cleaner's key map (24 bytes per key, as in Kafka)."),
        Setting("log.cleaner.io.buffer.load.factor", _float, "0.9", "Fill factor of the cleaner's key map."),
        Setting("log.message.timestamp.type", _str, "CreateTime", "Default message.timestamp.type of topics."),
        Setting("message.max.bytes", _int, "1048588", "Largest record batch a topic accepts by default."),
        Setting("socket.request.max.bytes", _int, "104857600", "Largest request frame; larger closes the connection."),
        Setting("fetch.max.bytes", _int, "57671680",
                "Largest Fetch response: caps a request's max_bytes (one whole batch is still returned)."),
        Setting("max.incremental.fetch.session.cache.slots", _int, "1000",
                "Incremental fetch sessions (KIP-227) the broker keeps; past it, new ones evict or go sessionless."),
        Setting("max.connections", _int, "2147483647", "Connections accepted at once."),
        Setting("max.connections.per.ip", _int, "2147483647",
                "Connections accepted at once from one client address; a connection above it is closed as "
                "soon as it is accepted."),
        Setting("max.connections.per.ip.overrides", _str, "",
                "host:count,... : max.connections.per.ip for some addresses (an IP address or a host name, "
                "resolved when the setting is read)."),
        Setting("connections.max.idle.ms", _int, "600000",
                "A connection that sends nothing and has no request in progress for this long is closed "
                "(-1: never)."),
        Setting("connections.authentication.timeout.ms", _int, "10000",
                "oncelog only (Kafka has no bound): a connection must finish its TLS handshake and SASL "
                "authentication within this long after it is accepted, else it is closed.", per_listener=True),
        Setting("queued.max.request.bytes", _int, "-1",
                "Request bytes held in memory over all connections before the broker stops reading "
                "requests (-1 or 0: no bound; else at least socket.request.max.bytes)."),
        Setting("quota.window.num", _int, "11",
                "Windows a client quota's rate is measured over (the current one and those before it)."),
        Setting("quota.window.size.seconds", _int, "1", "Length of each window of a client quota's rate."),
        Setting("producer.id.expiration.ms", _int, "86400000", "Forget an idle producer's state after this long."),
        Setting("producer.id.expiration.check.interval.ms", _int, "600000", "How often idle producers are looked for."),
        Setting("producer.id.max.entries.per.partition", _int, "100000",
                "oncelog only (Kafka has no cap): most producer ids whose state a partition keeps; past it the "
                "least recently written one without an open transaction is forgotten, as if expired."),
        Setting("offsets.topic.num.partitions", _int, "50", "Partitions of __consumer_offsets."),
        Setting("transaction.state.log.num.partitions", _int, "50", "Partitions of __transaction_state."),
        Setting("transaction.state.log.segment.bytes", _int, "104857600", "Segment size of __transaction_state."),
        Setting("transaction.max.timeout.ms", _int, "900000", "Largest transaction.timeout.ms a producer may ask for."),
        Setting("transaction.abort.timed.out.transaction.cleanup.interval.ms", _int, "10000",
                "How often transactions past their timeout are looked for and aborted."),
        Setting("transaction.two.phase.commit.enable", _bool, "false",
                "Allow KIP-939 two-phase-commit transactions (InitProducerId v6 enable2Pc/keepPreparedTxn)."),
        Setting("transaction.version", _transaction_version, "2",
                "The finalized level of Kafka's transaction.version feature (Kafka sets it with kafka-features; "
                "oncelog reads it here). 2 enables KIP-890 part 2: an epoch bump at the end of every transaction, "
                "EndTxn v5, Produce v12 and TxnOffsetCommit v5; 0 and 1 keep the classic protocol."),
        Setting("transactional.id.expiration.ms", _int, "604800000", "Forget an idle transactional id after this."),
        Setting("transaction.remove.expired.transaction.cleanup.interval.ms", _int, "3600000",
                "How often expired transactional ids are removed."),
        Setting("cluster.id", _str, "", "Cluster id; generated and stored in meta.properties when empty."),
        Setting("offsets.topic.segment.bytes", _int, "104857600", "segment.bytes of __consumer_offsets."),
        Setting("offsets.retention.minutes", _int, "10080", "Keep an empty group's committed offsets this long."),
        Setting("offsets.retention.check.interval.ms", _int, "600000", "How often expired offsets are looked for."),
        Setting("offset.metadata.max.bytes", _int, "4096", "Largest metadata string of an offset commit."),
        Setting("group.initial.rebalance.delay.ms", _int, "3000",
                "How long the first rebalance of an empty group waits for more members."),
        Setting("group.min.session.timeout.ms", _int, "6000",
                "Smallest session.timeout.ms a group member may ask for."),
        Setting("group.max.session.timeout.ms", _int, "1800000",
                "Largest session.timeout.ms a group member may ask for."),
        Setting("group.max.size", _int, "2147483647", "Most members a consumer group may have."),
        Setting("group.consumer.session.timeout.ms", _int, "45000",
                "KIP-848 consumer groups: a member that sends no heartbeat for this long is removed."),
        Setting("group.consumer.min.session.timeout.ms", _int, "45000",
                "Smallest group.consumer.session.timeout.ms allowed."),
        Setting("group.consumer.max.session.timeout.ms", _int, "60000",
                "Largest group.consumer.session.timeout.ms allowed."),
        Setting("group.consumer.heartbeat.interval.ms", _int, "5000",
                "KIP-848 consumer groups: how often members are told to heartbeat."),
        Setting("group.consumer.min.heartbeat.interval.ms", _int, "5000",
                "Smallest group.consumer.heartbeat.interval.ms allowed."),
        Setting("group.consumer.max.heartbeat.interval.ms", _int, "15000",
                "Largest group.consumer.heartbeat.interval.ms allowed."),
        Setting("group.consumer.max.size", _int, "2147483647", "Most members a KIP-848 consumer group may have."),
        Setting("group.consumer.assignors", _str, "uniform,range",
                "Server-side assignors of consumer groups (uniform, range, or Kafka's class names); the first "
                "is the default."),
        Setting("group.consumer.migration.policy", _str, "bidirectional",
                "Online conversion between classic and consumer groups: disabled, upgrade, downgrade or "
                "bidirectional."),
        # Share groups (KIP-932): the group.share.* keys and __share_group_state, as Kafka 4.2 names them.
        Setting("share.version", _share_version, "1",
                "The finalized level of Kafka's share.version feature (Kafka sets it with kafka-features; oncelog "
                "reads it here). 1 enables share groups (KIP-932); at 0 the share APIs are not offered."),
        Setting("group.share.session.timeout.ms", _int, "45000",
                "Share groups: a member that sends no heartbeat for this long is removed."),
        Setting("group.share.min.session.timeout.ms", _int, "45000", "Smallest share.session.timeout.ms allowed."),
        Setting("group.share.max.session.timeout.ms", _int, "60000", "Largest share.session.timeout.ms allowed."),
        Setting("group.share.heartbeat.interval.ms", _int, "5000",
                "Share groups: how often members are told to heartbeat."),
        Setting("group.share.min.heartbeat.interval.ms", _int, "5000",
                "Smallest share.heartbeat.interval.ms allowed."),
        Setting("group.share.max.heartbeat.interval.ms", _int, "15000",
                "Largest share.heartbeat.interval.ms allowed."),
        Setting("group.share.record.lock.duration.ms", _int, "30000",
                "Share groups: how long a member holds the records it acquired before they are handed out again."),
        Setting("group.share.min.record.lock.duration.ms", _int, "15000",
                "Smallest share.record.lock.duration.ms allowed."),
        Setting("group.share.max.record.lock.duration.ms", _int, "60000",
                "Largest share.record.lock.duration.ms allowed."),
        Setting("group.share.delivery.count.limit", _int, "5",
                "Share groups: a record delivered this many times without being acknowledged is archived."),
        Setting("group.share.partition.max.record.locks", _int, "2000",
                "Share groups: most in-flight records of one share partition."),
        Setting("group.share.max.size", _int, "200", "Most members a share group may have."),
        Setting("group.share.max.share.sessions", _int, "2000", "Most share sessions a broker keeps."),
        Setting("share.coordinator.state.topic.num.partitions", _int, "50", "Partitions of __share_group_state."),
        Setting("share.coordinator.state.topic.segment.bytes", _int, "104857600",
                "Segment size of __share_group_state."),
        Setting("share.coordinator.write.timeout.ms", _int, "5000",
                "How long a share-partition state write waits to be replicated before it fails."),
        # Cluster mode (docs/cluster.md): set controller.quorum.voters or
        # controller.quorum.bootstrap.servers; without either the broker runs standalone.
        Setting("process.roles", _str, "",
                "broker, controller or broker,controller (Kafka's combined mode). A controller runs a member of "
                "the metadata quorum (an etcd member) next to itself. Empty: broker,controller when this node is "
                "one of controller.quorum.voters, else broker."),
        Setting("controller.quorum.voters", _str, "",
                "The controller quorum as id@host:port,...: each controller's metadata client endpoint (etcd's "
                "client URL). Setting it (or controller.quorum.bootstrap.servers) turns on cluster mode."),
        Setting("controller.quorum.bootstrap.servers", _str, "",
                "host:port,... of the controllers' metadata client endpoints, for broker-only nodes (KIP-853)."),
        Setting("http.listener", _str, "",
                "oncelog only: HOST:PORT where the broker serves /metrics in Prometheus text format "
                "(docs/metrics.md) and the console (docs/console.md); port 0 picks a free one. Empty: neither."),
        Setting("http.allowed.hosts", _str, "",
                "oncelog only: names,... a request's Host header may give besides the HTTP listener's own (the "
                "host it is bound to, the listeners' advertised hosts, this machine's host name, localhost and "
                "the address a connection came in on); * for any (behind a proxy that checks it). Any other "
                "name is answered 421: no DNS rebinding."),
        Setting("http.ssl.enabled", _bool, "false",
                "oncelog only: the HTTP listener speaks HTTPS, with the broker's ssl.* keys; http.ssl.<key> "
                "(e.g. http.ssl.keystore.location) overrides ssl.<key> for it alone."),
        Setting("http.metrics.require.auth", _bool, "false",
                "oncelog only: /metrics needs HTTP Basic credentials of a SASL user (SCRAM or a listener's "
                "PLAIN user) and, with an authorizer, Cluster DESCRIBE."),
        Setting("http.metrics.resource.names", _bool, "true",
                "oncelog only: false leaves out of /metrics every family labelled with topic or consumer group "
                "names (per partition, per topic, per group); broker-wide families remain."),
        Setting("http.max.connections", _int, "256",
                "oncelog only: connections the HTTP listener keeps open at once; past it, the one that has "
                "waited longest for a request is closed."),
        Setting("http.worker.threads", _int, "4", "oncelog only: threads that answer the HTTP listener's requests."),
        Setting("http.request.timeout.ms", _int, "10000",
                "oncelog only: the HTTP listener's TLS handshake and each request's head and body must arrive "
                "within this long (of the accept, or of the previous answer); else the connection is closed."),
        Setting("controller.quorum.peers", _str, "",
                "oncelog only: id@host:port,... where the controllers' quorum members talk to each other (etcd's "
                "peer URLs); read by controllers only. Default: each voter's port + 100."),
        Setting("controller.quorum.election.timeout.ms", _int, "1000",
                "How long a quorum member waits without a leader before starting an election (etcd's "
                "--election-timeout; its heartbeat is a tenth of it)."),
        Setting("controller.quorum.request.timeout.ms", _int, "3000",
                "How long one request to the metadata quorum may take before the next member is tried."),
        Setting("broker.session.timeout.ms", _int, "9000",
                "A broker whose registration lease is not renewed for this long is fenced: its leaderships move."),
        Setting("broker.heartbeat.interval.ms", _int, "2000", "How often a broker renews its registration lease."),
        Setting("auto.leader.rebalance.enable", _bool, "true",
                "The active controller moves leaderships back to preferred replicas (the first of each "
                "partition's replicas) when they are live and in the ISR."),
        Setting("leader.imbalance.check.interval.seconds", _int, "300",
                "How often the active controller checks whether leaderships are off their preferred replicas."),
        Setting("leader.imbalance.per.broker.percentage", _int, "10",
                "A broker's share of preferred leaderships it does not hold above which the controller moves "
                "them back."),
        Setting("replica.lag.time.max.ms", _int, "30000",
                "A follower that has not caught up with the leader for this long leaves the ISR."),
        Setting("replica.fetch.wait.max.ms", _int, "500", "How long a follower's fetch waits at the leader for data."),
        Setting("replica.fetch.max.bytes", _int, "1048576", "Bytes a follower asks for per partition and fetch."),
        Setting("replica.fetch.response.max.bytes", _int, "10485760", "Bytes a follower asks for per fetch."),
        Setting("replica.fetch.backoff.ms", _int, "1000", "How long a follower waits after a failed fetch."),
        Setting("replica.high.watermark.checkpoint.interval.ms", _int, "5000",
                "How often high watermarks are written to replication-offset-checkpoint."),
        Setting("min.insync.replicas", _int, "1",
                "Default min.insync.replicas of topics: acks=all writes need this many replicas in the ISR."),
        Setting("offsets.topic.replication.factor", _int, "3",
                "Replication factor of __consumer_offsets (cluster mode; created when enough brokers are up)."),
        Setting("transaction.state.log.replication.factor", _int, "3",
                "Replication factor of __transaction_state (cluster mode)."),
        Setting("transaction.state.log.min.isr", _int, "2", "min.insync.replicas of __transaction_state."),
        Setting("share.coordinator.state.topic.replication.factor", _int, "3",
                "Replication factor of __share_group_state (cluster mode)."),
        Setting("share.coordinator.state.topic.min.isr", _int, "2", "min.insync.replicas of __share_group_state."),
        Setting("offsets.commit.timeout.ms", _int, "5000",
                "How long an offset commit or group write waits to be replicated before it fails."),
        Setting("request.timeout.ms", _int, "30000",
                "How long the transaction coordinator waits for its writes and markers to be replicated."),
    )
}

# The HTTP listener's own TLS keys (http.ssl.enabled): http.ssl.<key>, unset by default, overrides
# the broker's ssl.<key> for that listener alone.
_HTTP_SSL_KEYS = ("ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.password", "ssl.key.password",
                  "ssl.keystore.certificate.chain", "ssl.keystore.key", "ssl.truststore.type",
                  "ssl.truststore.location", "ssl.truststore.password", "ssl.truststore.certificates",
                  "ssl.client.auth", "ssl.enabled.protocols", "ssl.cipher.suites")
SETTINGS = {**SETTINGS, **{
    f"http.{key}": Setting(f"http.{key}", _str, "", f"oncelog only: {key} of the HTTP listener (http.ssl.enabled); "
                           f"unset: the broker's {key}.", sensitive=SETTINGS[key].sensitive)
    for key in _HTTP_SSL_KEYS
}}

# Kafka settings that configure machinery oncelog does not have; accepted so a Kafka
# server.properties works unchanged, and reported once at start-up.
IGNORED_KAFKA_KEYS = frozenset(
    {
        "num.network.threads",
        "num.io.threads",
        "num.replica.fetchers",
        "replica.socket.timeout.ms",
        "background.threads",
        "socket.send.buffer.bytes",
        "socket.receive.buffer.bytes",
        "socket.listen.backlog.size",
        "queued.max.requests",
        "controller.listener.names",
        "zookeeper.connect",
        "zookeeper.connection.timeout.ms",
        "confluent.support.metrics.enable",
        "log.preallocate",
        "log.cleaner.threads",
        "log.cleaner.io.buffer.size",
        "log.cleaner.io.max.bytes.per.second",
        "unclean.leader.election.enable",
    }
)


_LISTENER_KEY = re.compile(r"^listener\.name\.([A-Za-z0-9_.-]+?)\.(.+)$")
# Per-listener, per-mechanism keys (listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config).
_MECHANISM_KEY = re.compile(r"^(plain|scram-sha-256|scram-sha-512|oauthbearer|gssapi)\."
                            r"(sasl\.jaas\.config|connections\.max\.reauth\.ms)$", re.IGNORECASE)


# Kafka's broker keys of type PASSWORD that oncelog has no Setting for (SaslConfigs,
# PasswordEncoderConfigs, DelegationTokenManagerConfigs, ZkConfigs); the ssl.* ones
# (SslConfigs, BrokerSecurityConfigs) are Settings marked sensitive.
KAFKA_PASSWORD_KEYS = frozenset({
    "sasl.jaas.config", "password.encoder.secret", "password.encoder.old.secret", "delegation.token.secret.key",
    "delegation.token.master.key", "zookeeper.ssl.keystore.password", "zookeeper.ssl.truststore.password",
})


def overridden_key(key: str) -> str | None:
    """The key a listener's override sets for its listener (listener.name.<l>.ssl.client.auth:
    ssl.client.auth; listener.name.<l>.<mechanism>.sasl.jaas.config: sasl.jaas.config, as
    Kafka's brokerConfigSynonyms), None for a key that is not a listener's."""
    match = _LISTENER_KEY.match(key)
    if match is None:
        return None
    mechanism_key = _MECHANISM_KEY.match(match.group(2))
    return match.group(2) if mechanism_key is None else mechanism_key.group(2).lower()


def is_sensitive(key: str) -> bool:
    """Whether a broker key's value is a secret (Kafka's KafkaConfig.maybeSensitive: of
    type PASSWORD, or of a type it cannot tell): never logged, and DescribeConfigs answers
    it with a null value. A listener's override (listener.name.<l>.ssl.keystore.password,
    listener.name.<l>.<mechanism>.sasl.jaas.config) is as sensitive as the key it
    overrides; a listener key oncelog does not know is sensitive."""
    base = overridden_key(key)
    if base is not None and base not in SETTINGS and base not in KAFKA_PASSWORD_KEYS:
        return True
    key = key if base is None else base
    setting = SETTINGS.get(key)
    return setting.sensitive if setting is not None else key in KAFKA_PASSWORD_KEYS


def _listener_overrides(supplied: Mapping[str, str]) -> dict[str, dict[str, str]]:
    """listener.name.<name>.<key> settings, by upper-case listener name."""
    overrides: dict[str, dict[str, str]] = {}
    for key, value in supplied.items():
        match = _LISTENER_KEY.match(key)
        if match is None:
            continue
        name, suffix = match.group(1).upper(), match.group(2)
        setting = SETTINGS.get(suffix)
        if not (setting is not None and setting.per_listener) and not _MECHANISM_KEY.match(suffix):
            raise ConfigError(f"{key}: {suffix} is not a setting a listener can override")
        if setting is not None:
            try:
                setting.parse(value)
            except ValueError as error:
                shown = "(hidden)" if setting.sensitive else repr(value)
                raise ConfigError(f"{key}: invalid value {shown} ({error})") from None
        overrides.setdefault(name, {})[suffix.lower() if _MECHANISM_KEY.match(suffix) else suffix] = value
    return overrides


def parse_http_listener(value: str) -> tuple[str, int] | None:
    """`http.listener`: (host, port) from HOST:PORT (port 0 picks a free one), None when
    empty (off)."""
    if not value:
        return None
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise ConfigError(f"http.listener: expected HOST:PORT, got {value!r}")
    return host.strip("[]") or "0.0.0.0", int(port)


def parse_ip_overrides(value: str) -> dict[str, int]:
    """`max.connections.per.ip.overrides`: host:count,... (an IPv6 address in brackets or
    bare: the count follows the last colon), by host as written."""
    overrides: dict[str, int] = {}
    for entry in filter(None, (part.strip() for part in value.split(","))):
        host, separator, count = entry.rpartition(":")
        host = host.strip().strip("[]")
        try:
            limit = int(count)
        except ValueError:
            limit = -1
        if not separator or not host or limit < 0:
            raise ConfigError(f"max.connections.per.ip.overrides: expected host:count (count >= 0), got {entry!r}")
        overrides[host] = limit
    return overrides


def read_properties(path: Path) -> dict[str, str]:
    """Java .properties, the subset Kafka's server.properties files use."""
    values: dict[str, str] = {}
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        line_number = path.read_bytes()[: error.start].count(b"\n") + 1
        raise ConfigError(f"{path}:{line_number}: not UTF-8 text (byte 0x{error.object[error.start]:02x}); "
                          "save the file as UTF-8") from None
    except OSError as error:
        raise ConfigError(f"cannot read {path}: {error.strerror or error}") from None
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        separator = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        if separator < 0:
            raise ConfigError(f"{path}:{number}: expected key=value, got {raw!r}")
        values[line[:separator].strip()] = line[separator + 1 :].strip()
    return values


def parse_overrides(items: list[str]) -> dict[str, str]:
    values = {}
    for item in items:
        key, separator, value = item.partition("=")
        if not separator or not key.strip():
            raise ConfigError(f"--override expects key=value, got {item!r}")
        values[key.strip()] = value.strip()
    return values


class BrokerConfig:
    """Parsed, validated broker settings. Read values with `config["log.segment.bytes"]`."""

    def __init__(self, values: Mapping[str, str] | None = None) -> None:
        supplied = dict(values or {})
        self.listener_overrides = _listener_overrides(supplied)
        unknown = sorted(k for k in supplied if k not in SETTINGS and k not in IGNORED_KAFKA_KEYS
                         and not _LISTENER_KEY.match(k))
        if unknown:
            raise ConfigError(
                f"unknown configuration key{'s' if len(unknown) > 1 else ''}: {', '.join(unknown)}"
            )
        self.ignored = sorted(k for k in supplied if k in IGNORED_KAFKA_KEYS)
        self.explicit = {k: v for k, v in supplied.items() if k in SETTINGS}
        self._values: dict[str, Any] = {}
        for key, setting in SETTINGS.items():
            raw = supplied.get(key, setting.default)
            try:
                self._values[key] = setting.parse(raw)
            except ValueError as error:
                shown = "(hidden)" if setting.sensitive else repr(raw)
                raise ConfigError(f"{key}: invalid value {shown} ({error})") from None
        try:
            self.listeners = parse_listeners(self["listeners"], self["advertised.listeners"],
                                             self["listener.security.protocol.map"])
            self.inter_broker_listener = inter_broker_listener(
                self.listeners, self["inter.broker.listener.name"], self["security.inter.broker.protocol"])
        except ValueError as error:
            raise ConfigError(str(error)) from None
        names = {listener.name for listener in self.listeners}
        for name in self.listener_overrides:
            if name not in names:
                raise ConfigError(f"listener.name.{name.lower()}.*: there is no listener {name} "
                                  f"(listeners: {', '.join(sorted(names))})")
        self.http_listener = parse_http_listener(self["http.listener"])
        for key in ("http.max.connections", "http.worker.threads", "http.request.timeout.ms",
                    "num.recovery.threads.per.data.dir"):
            if self[key] < 1:
                raise ConfigError(f"{key}: must be at least 1, got {self[key]}")
        for key in ("message.max.bytes", "socket.request.max.bytes", "log.segment.bytes", "num.partitions",
                    "producer.id.max.entries.per.partition"):
            if self[key] <= 0:
                raise ConfigError(f"{key}: must be positive, got {self[key]}")
        if self["fetch.max.bytes"] < 1024:  # Kafka's lower bound
            raise ConfigError(f"fetch.max.bytes: must be at least 1024, got {self['fetch.max.bytes']}")
        if self["max.incremental.fetch.session.cache.slots"] < 0:  # Kafka's atLeast(0)
            raise ConfigError("max.incremental.fetch.session.cache.slots: must be at least 0, got "
                              f"{self['max.incremental.fetch.session.cache.slots']}")
        for key in ("max.connections", "max.connections.per.ip", "log.cleaner.backoff.ms"):  # Kafka's atLeast(0)
            if self[key] < 0:
                raise ConfigError(f"{key}: must be at least 0, got {self[key]}")
        self.check_connection_limits(self._values)
        for key in ("quota.window.num", "quota.window.size.seconds"):  # Kafka's atLeast(1)
            if self[key] < 1:
                raise ConfigError(f"{key}: must be at least 1, got {self[key]}")
        queued = self["queued.max.request.bytes"]
        if 0 < queued < self["socket.request.max.bytes"]:
            # Kafka's rule too: its memory pool refuses a bound below the largest single request.
            raise ConfigError(f"queued.max.request.bytes: must be at least socket.request.max.bytes="
                              f"{self['socket.request.max.bytes']} (or <= 0 for no bound), got {queued}")

    @staticmethod
    def check_connection_limits(values: Mapping[str, Any]) -> None:
        """Kafka's rules for the per-IP limits (also checked for a dynamic change)."""
        overrides = parse_ip_overrides(values["max.connections.per.ip.overrides"])
        if values["max.connections.per.ip"] == 0 and not overrides:
            raise ConfigError("max.connections.per.ip: can be 0 only if max.connections.per.ip.overrides is set")
        if values["connections.authentication.timeout.ms"] <= 0:
            raise ConfigError("connections.authentication.timeout.ms: must be positive, got "
                              f"{values['connections.authentication.timeout.ms']}")

    @classmethod
    def load(cls, path: Path | None = None, overrides: Mapping[str, str] | None = None) -> BrokerConfig:
        values: dict[str, str] = {}
        if path is not None:
            if not path.is_file():
                raise ConfigError(f"config file {path} does not exist")
            values.update(read_properties(path))
        values.update(overrides or {})
        return cls(values)

    def __getitem__(self, key: str) -> Any:
        return self._values[key]

    def apply_dynamic(self, layered: Mapping[str, str], keys: frozenset[str]) -> None:
        """Give `keys` the values of `layered` (static, then the dynamic broker configs),
        their built-in default where unset: every holder of this config reads the new
        value at its next use. Only the broker calls it, with values already checked."""
        for key in keys:
            setting = SETTINGS[key]
            self._values[key] = setting.parse(layered.get(key, setting.default))

    def for_listener(self, listener: str, key: str) -> Any:
        """`key` as one listener sees it: listener.name.<listener>.<key> when set, else `key`."""
        raw = self.listener_overrides.get(listener.upper(), {}).get(key)
        return self[key] if raw is None else SETTINGS[key].parse(raw)

    def listener_strings(self, listener: str, prefix: str) -> dict[str, str]:
        """Every key starting with `prefix` (e.g. "ssl.") as one listener sees it, as given."""
        values = {key: self.explicit.get(key, setting.default) for key, setting in SETTINGS.items()
                  if key.startswith(prefix)}
        values.update({key: value for key, value in self.listener_overrides.get(listener.upper(), {}).items()
                       if key.startswith(prefix)})
        return values

    def http_ssl_settings(self) -> dict[str, str]:
        """The HTTP listener's ssl.* keys (http.ssl.enabled): http.ssl.<key> where set, else
        the broker's ssl.<key>, as given."""
        values = {key: self.explicit.get(key, setting.default) for key, setting in SETTINGS.items()
                  if key.startswith("ssl.")}
        values.update({key.removeprefix("http."): value for key, value in self.explicit.items()
                       if key.startswith("http.ssl.") and key != "http.ssl.enabled"})
        return values

    def jaas_config(self, listener: str, mechanism: str) -> str | None:
        """listener.name.<listener>.<mechanism>.sasl.jaas.config (Kafka's broker-side JAAS), or None."""
        return self.listener_overrides.get(listener.upper(), {}).get(f"{mechanism.lower()}.sasl.jaas.config")

    @property
    def node_id(self) -> int:
        if "node.id" not in self.explicit and self["broker.id"] >= 0:
            return self["broker.id"]
        return self["node.id"]

    @property
    def log_dirs(self) -> list[Path]:
        raw = self["log.dirs"] if "log.dirs" in self.explicit or not self["log.dir"] else self["log.dir"]
        dirs = [Path(part.strip()) for part in raw.split(",") if part.strip()]
        if not dirs:
            raise ConfigError("log.dirs: no directory given")
        return dirs

    @property
    def retention_ms(self) -> int:
        """Kafka's precedence: log.retention.ms, then .minutes, then .hours."""
        if self["log.retention.ms"] != -2:
            return self["log.retention.ms"]
        if self["log.retention.minutes"] != -2:
            return self["log.retention.minutes"] * 60_000
        return self["log.retention.hours"] * 3_600_000

    @property
    def roll_ms(self) -> int:
        if self["log.roll.ms"] >= 0:
            return self["log.roll.ms"]
        return self["log.roll.hours"] * 3_600_000

    def log_defaults(self) -> dict[str, str]:
        """Topic-level defaults derived from broker keys, as topic config key -> value."""
        flush_ms = self["log.flush.interval.ms"]
        return {
            "segment.bytes": str(self["log.segment.bytes"]),
            "segment.ms": str(self.roll_ms),
            "retention.ms": str(self.retention_ms),
            "retention.bytes": str(self["log.retention.bytes"]),
            "flush.messages": str(self["log.flush.interval.messages"]),
            "flush.ms": str(flush_ms if flush_ms >= 0 else LONG_MAX),
            "index.interval.bytes": str(self["log.index.interval.bytes"]),
            "max.message.bytes": str(self["message.max.bytes"]),
            "cleanup.policy": self["log.cleanup.policy"],
            "delete.retention.ms": str(self["log.cleaner.delete.retention.ms"]),
            "min.cleanable.dirty.ratio": str(self["log.cleaner.min.cleanable.ratio"]),
            "min.compaction.lag.ms": str(self["log.cleaner.min.compaction.lag.ms"]),
            "max.compaction.lag.ms": str(self["log.cleaner.max.compaction.lag.ms"]),
            "message.timestamp.type": self["log.message.timestamp.type"],
            "min.insync.replicas": str(self["min.insync.replicas"]),
        }
