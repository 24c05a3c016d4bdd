"""What every part of a chaos run shares: its fixed choices and its settings.

The topics, partitions and ids the workers use; the Kafka APIs the fault proxies act on
and the names of their counters; the broker, cluster and client configurations; the
bounds and timeouts of every loop; and the run's knobs (`ChaosSettings`) and the error
that means no verdict (`ChaosError`). The run itself is `oncelog.chaos.run`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

TOPIC = "chaos"
INPUT_TOPIC = "chaos-in"
OUTPUT_TOPIC = "chaos-out"
TOPICS = (TOPIC, INPUT_TOPIC, OUTPUT_TOPIC)
PARTITIONS = 3
CTP_GROUP = "chaos-ctp"
CTP_TRANSACTIONAL_ID = "chaos-ctp"
WRITER_TRANSACTIONAL_IDS = ("chaos-tx-1", "chaos-tx-2")

# Kafka API keys whose requests and responses the proxy may drop, cut or delay. Only
# Produce is duplicated: its sequence numbers make a copy harmless. A late copy of an
# EndTxn, AddPartitionsToTxn or TxnOffsetCommit, or a Produce held back past an abort,
# acts on the producer's next transaction (same epoch), in oncelog as in Kafka without
# KIP-890 part 2 (docs/reliability.md, "Known limitations"): not a fault to inject here.
PRODUCE, ADD_PARTITIONS_TO_TXN, END_TXN, TXN_OFFSET_COMMIT = 0, 24, 26, 28
FAULTED_APIS = frozenset({PRODUCE, ADD_PARTITIONS_TO_TXN, END_TXN, TXN_OFFSET_COMMIT})
DUPLICATED_APIS = frozenset({PRODUCE})
# The proxy's counters of injected faults (see oncelog.chaos.proxy), in report order.
FAULT_KINDS = ("drop", "drop_and_close", "truncate_response", "delay", "drop_request_and_close",
               "duplicate_request")
RESPONSE_OUTCOMES = ("drop", "drop_and_close", "truncate_response", "delay", "forward")

TRANSACTION_TIMEOUT_MS = 10_000
BROKER_CONFIG = {
    # Abandoned transactions are aborted soon after their timeout, so the end of the run
    # does not wait for Kafka's 10 s cleanup period.
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500",
    "group.initial.rebalance.delay.ms": "0",
    "num.partitions": str(PARTITIONS),
    # Few internal partitions: less to load after each kill, so restarts stay short.
    "offsets.topic.num.partitions": "5",
    "transaction.state.log.num.partitions": "5",
}
# Cluster mode: the topics get a replica on every node and need 2 in sync for acks=all
# (the internal topics keep Kafka's defaults: 3 replicas, 2 in sync for
# __transaction_state); fewer internal partitions, as every node replicates them all.
CLUSTER_CONFIG = {
    **BROKER_CONFIG,
    "offsets.topic.num.partitions": "3",
    "transaction.state.log.num.partitions": "3",
}
CLUSTER_TOPIC_CONFIG = {"min.insync.replicas": "2"}
# A secured cluster (--secure): SASL_SSL for clients (CLIENT, through the proxies) and
# between the brokers (INTERNAL), Kafka's authorizer, nothing allowed without an ACL. The
# certificates and PLAIN users are made by oncelog.local.cluster_security; the workers
# log in as SECURE_WORKER, whose ACLs cover the chaos topics, groups and transactional ids.
SECURE_CLUSTER_CONFIG = {
    "listener.security.protocol.map": "CLIENT:SASL_SSL,INTERNAL:SASL_SSL",
    "inter.broker.listener.name": "INTERNAL",
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "allow.everyone.if.no.acl.found": "false",
}
SECURE_WORKER = "chaos"

# Client settings for a broker that vanishes every few seconds: reconnect quickly, give
# up on a dropped response after a few seconds instead of a minute.
CLIENT_BASE: dict[str, str | int | float] = {
    "reconnect.backoff.ms": 20,
    "reconnect.backoff.max.ms": 250,
    "retry.backoff.ms": 50,
    "retry.backoff.max.ms": 250,
    "socket.timeout.ms": 5000,
    "socket.connection.setup.timeout.ms": 3000,
    "topic.metadata.refresh.interval.ms": 5000,
    # librdkafka re-bootstraps when its only broker goes away, decommissioning the broker
    # it had cached as group coordinator; send_offsets_to_transaction then waits for a
    # state change of that dead broker and hangs past its timeout until the coordinator
    # fences the producer (librdkafka issues 5511 and 5456). One broker on one address
    # gains nothing from re-bootstrapping.
    "metadata.recovery.strategy": "none",
    "log_level": 2,  # librdkafka logs every refused connection at level 3
}
# ONCELOG_CHAOS_DEBUG=eos,broker,... turns on those librdkafka debug contexts in every
# client of the run (to stderr): the way to see why a client call hangs.
if os.environ.get("ONCELOG_CHAOS_DEBUG"):
    CLIENT_BASE = {**CLIENT_BASE, "debug": os.environ["ONCELOG_CHAOS_DEBUG"], "log_level": 7}
PRODUCER_BASE = {
    **CLIENT_BASE,
    "linger.ms": 5,
    "request.timeout.ms": 3000,
    "acks": "all",
}

# Bounds: no loop runs past its deadline or its count.
MAX_TRANSACTIONS_PER_WRITER = 200_000
MAX_IDEMPOTENT_BURSTS = 1_000_000
MAX_CONSUMER_POLLS = 10_000_000
MAX_END_ATTEMPTS = 8
# commit/abort_transaction calls that ran out of time ("retry call to resume") before the
# producer is given up: librdkafka may never finish an EndTxn whose transaction
# coordinator was killed while it was in flight (cf. confluentinc/librdkafka#3779), and every
# further call only waits again. A new producer's init_transactions completes or aborts it.
MAX_END_TIMEOUTS = 2
CALL_TIMEOUT_S = 10.0
HANG_GRACE_S = 10.0  # past a client call's own timeout, before it is taken as hung (RunState.bounded)
WIND_DOWN_S = 60.0
TRANSACTIONS_END_TIMEOUT_S = TRANSACTION_TIMEOUT_MS / 1000 + 50.0
IN_SYNC_TIMEOUT_S = 60.0  # cluster mode: every replica back in the ISR at the end


class ChaosError(Exception):
    """The run could not be carried out (the broker did not come back, a worker crashed):
    no verdict on the broker's consistency is possible."""


@dataclass(frozen=True, slots=True)
class ChaosSettings:
    duration: float  # seconds of chaos (kills and faults)
    seed: int = 1
    faults_per_minute: float = 10.0  # planned; in a cluster fewer when nodes take long to settle
    drop_rate: float = 0.05
    data_dir: Path | None = None
    history_path: Path | None = None
    abort_fraction: float = 0.2  # transactions aborted on purpose
    progress_interval: float = 10.0
    brokers: int = 1  # 1: a standalone broker; more: a cluster of that many combined nodes
    # Fault kinds (oncelog.chaos.nemesis.FAULT_KINDS), taken in turn; a standalone broker only knows kill.
    faults: tuple[str, ...] = ("kill",)
    fault_seconds: tuple[float, float] = (1.0, 10.0)  # how long a pause, partition or full disk lasts
    session_timeout_ms: int = 3000  # cluster: broker.session.timeout.ms (Kafka's default is 9000)
    secure: bool = False  # cluster: SASL_SSL listeners, an authorizer, workers under ACLs (opaque proxies)
    inputs: int | None = None  # records seeded for the transform loop; None: 60 a second, at least 2000

    def __post_init__(self) -> None:
        if self.inputs is not None and self.inputs < 3:  # the starvation check needs some in every partition
            raise ValueError(f"inputs must be at least 3 (one for each input partition), not {self.inputs}")

    @property
    def seeded_inputs(self) -> int:
        return self.inputs if self.inputs is not None else max(2000, int(self.duration * 60))
