"""Another broker's configs, for the console of a cluster: each broker knows its own
static configs (its server.properties and `--override`s) and no other's, so the console
asks that broker, as `kafka-configs.sh --describe --entity-type brokers --entity-name N`
does: DescribeConfigs of its broker resource, sent over the inter-broker listener (on a
connection of the console's own, beside the marker and verification ones).

The console checks the signed-in principal's Cluster DESCRIBE_CONFIGS before it asks:
the ACLs are the cluster's, and the other broker sees this broker's principal.
"""

from __future__ import annotations

from kio.schema.describe_configs.v4 import request as describe_v4
from kio.static.primitive import i8

from oncelog.broker.config_sources import Entry
from oncelog.kernel.peer import PeerHost, PeerPool
from oncelog.protocol.messages import ErrorCode

BROKER_RESOURCE = 4  # Kafka's ConfigResource.Type.BROKER
DESCRIBE_TIMEOUT_S = 10.0  # one request; the console bounds the whole call, the lock wait included


class PeerConfigError(Exception):
    """The other broker did not describe its configs: (HTTP status, the reason)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class PeerConfigs:
    """Asks other brokers for their configs; its connections open on first use."""

    def __init__(self, broker: PeerHost) -> None:
        self._broker = broker
        self._peers: PeerPool | None = None
        self._closed = False

    async def describe(self, node_id: int) -> list[Entry]:
        """Broker `node_id`'s configs as its DescribeConfigs answers them (PeerConfigError:
        not registered, not reachable, or refused)."""
        if self._closed:
            raise PeerConfigError(503, "the broker is stopping")
        if self._peers is None:
            self._peers = PeerPool(self._broker, "console")
        peer = self._peers.get(node_id)
        if peer is None:
            raise PeerConfigError(404, f"broker {node_id} is not registered in this cluster")
        request = describe_v4.DescribeConfigsRequest(resources=(describe_v4.DescribeConfigsResource(
            resource_type=i8(BROKER_RESOURCE), resource_name=str(node_id), configuration_keys=None),),
            include_synonyms=False, include_documentation=False)
        try:
            response = await peer.request(request, DESCRIBE_TIMEOUT_S)
        except (ConnectionError, TimeoutError) as error:
            raise PeerConfigError(502, f"broker {node_id} did not answer: {error}") from None
        if len(response.results) != 1:
            raise PeerConfigError(502, f"broker {node_id} answered {len(response.results)} resources for one")
        [result] = response.results
        if result.error_code != ErrorCode.none:
            raise PeerConfigError(502, f"broker {node_id} answered {result.error_code.name.upper()}: "
                                       f"{result.error_message or 'no message'}")
        return [(entry.name, entry.value, int(entry.config_source), []) for entry in result.configs]

    def close(self) -> None:
        self._closed = True
        if self._peers is not None:
            self._peers.close()
