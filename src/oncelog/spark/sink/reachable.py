"""Driver: is the cluster there? A metadata round trip before any task runs, so an
unreachable cluster fails the query with one message naming the option instead of failing
every task attempt after its timeout (partition mode and `df.write`; batch mode's 2PC check
asks the cluster anyway)."""

from __future__ import annotations

import time

from oncelog.client.cluster import shared_cluster
from oncelog.client.config import ClientConfig
from oncelog.client.errors import AuthenticationFailed, ClientError
from oncelog.spark.errors import ClusterUnreachable
from oncelog.spark.sink.options import SinkOptions

# How long a successful reachability check holds for this process (the driver's Python
# workers are reused from one micro-batch to the next).
REACHABLE_FOR_S = 60.0

_reachable_at: dict[ClientConfig, float] = {}


def check_reachable(options: SinkOptions) -> None:
    """Driver: a metadata round trip, so an unreachable cluster fails the query with a
    message naming the option instead of failing every task attempt after its timeout.
    Once it answered, this process does not ask again for REACHABLE_FOR_S."""
    checked = _reachable_at.get(options.client)
    if checked is not None and time.monotonic() - checked < REACHABLE_FOR_S:
        return
    cluster = shared_cluster(options.client)
    timeout_ms = min(options.cluster_timeout_ms, 30_000)
    try:
        cluster.retrying("Metadata", time.monotonic() + timeout_ms / 1000, lambda: cluster.refresh_metadata(()))
    except AuthenticationFailed as error:  # it answered: the credentials (kafka.sasl.*) are wrong
        raise ClusterUnreachable(f"kafka.bootstrap.servers={options.bootstrap_servers} refused the kafka.sasl.* "
                                 f"credentials: {error}") from None
    except ClientError as error:
        raise ClusterUnreachable(
            f"no answer from kafka.bootstrap.servers={options.bootstrap_servers} "
            f"(waited up to clusterTimeoutMs={timeout_ms}): {error}"
        ) from None
    _reachable_at[options.client] = time.monotonic()
