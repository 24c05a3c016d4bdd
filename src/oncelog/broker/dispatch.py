"""What a request handler is and sees: `ApiHandler` (an API's key, name, versions and
handling function), `RequestContext` (the request's header and the broker it reaches)
and `BrokerServices` (the broker as handlers use it).

A handler module declares its API with `@api(key, "Name", versions)`, which makes its
`handle` function an `ApiHandler`; `oncelog.broker.handlers.HANDLERS` lists them all, in
one table, and ApiVersions is answered from it, so what the broker advertises is
exactly what it handles. Versions that belong to KIP-890 part 2
(`first_transaction_v2_version`) are offered only by a broker whose finalized
`transaction.version` is 2 (`handlers.handler_table(level)`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from oncelog.kernel.node import Node
from oncelog.pacing import Pace
from oncelog.protocol.messages import ResponseBuilder
from oncelog.security.acl import (
    CLUSTER_NAME,
    NO_AUTHORIZER_OPERATIONS_BITS,
    AclOperation,
    ResourceType,
    authorized_operations_bits,
)
from oncelog.security.session import ConnectionSession

if TYPE_CHECKING:
    from oncelog.broker.topic_stats import TopicStats
    from oncelog.config.dynamic_store import DynamicConfigStore
    from oncelog.config.group_store import GroupConfigStore
    from oncelog.coordinator.group.coordinator import GroupCoordinator
    from oncelog.coordinator.share.groups import ShareGroups
    from oncelog.coordinator.share.manager import SharePartitions
    from oncelog.coordinator.share.state_topic import ShareStateTopic
    from oncelog.coordinator.txn.coordinator import TransactionCoordinator
    from oncelog.kernel.authorization import Acls
    from oncelog.kernel.fetch_sessions import FetchSessionCache
    from oncelog.kernel.quota_store import ClientQuotaStore
    from oncelog.names import TopicPartition
    from oncelog.security.scram_credentials import ScramCredentialStore

Handle = Callable[["RequestContext", Any], Awaitable[Any]]
T = TypeVar("T")
TRANSACTION_V2_LEVEL = 2
# How long a handler may hold the event loop before `RequestContext.pace` gives it to the
# other clients for one turn.
PACE_SLICE_SECONDS = 0.005


class CloseConnection(Exception):
    """The request is one Kafka answers by closing the connection."""


@dataclass(frozen=True, slots=True)
class ApiHandler:
    api_key: int
    name: str
    min_version: int
    max_version: int
    handle: Handle
    first_transaction_v2_version: int | None = None


def api(api_key: int, name: str, versions: range, *,
        first_transaction_v2_version: int | None = None) -> Callable[[Handle], ApiHandler]:
    """Declare `handle` as the handler of `versions` (a range: `range(3, 12)` means v3 to
    v11). `first_transaction_v2_version`: the versions from it on are KIP-890 part 2's."""

    def declare(handle: Handle) -> ApiHandler:
        return ApiHandler(api_key, name, versions.start, versions.stop - 1, handle, first_transaction_v2_version)

    return declare


class BrokerServices(Node, Protocol):
    """The broker as request handlers use it: the domain's `Node`, with the concrete
    coordinators and what only the protocol layer needs."""

    @property
    def cluster_id(self) -> str: ...
    @property
    def txn_coordinator(self) -> TransactionCoordinator: ...
    @property
    def group_coordinator(self) -> GroupCoordinator: ...
    @property
    def share_groups(self) -> ShareGroups: ...  # share group membership (KIP-932)
    @property
    def share_partitions(self) -> SharePartitions: ...  # the share partitions led here, their sessions
    @property
    def share_state(self) -> ShareStateTopic: ...  # the share coordinator's __share_group_state partitions
    @property
    def dynamic_configs(self) -> DynamicConfigStore: ...
    @property
    def group_configs(self) -> GroupConfigStore: ...  # KIP-848 group configs
    @property
    def topic_stats(self) -> TopicStats: ...
    @property
    def fetch_sessions(self) -> FetchSessionCache: ...
    @property
    def scram_credentials(self) -> ScramCredentialStore: ...
    @property
    def client_quotas(self) -> ClientQuotaStore: ...  # AlterClientQuotas: stored, then enforced by the server
    @property
    def acls(self) -> Acls | None: ...  # None: no authorizer, everything is allowed
    async def wait_for_append(self, partitions: list[TopicPartition], timeout_s: float, *, pace: Pace = ...,
                              appended: Callable[[], Awaitable[bool]] | None = None) -> None: ...


@dataclass(slots=True)
class RequestContext:
    """What a handler knows about the request it serves."""

    broker: BrokerServices
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    client_host: str
    response: ResponseBuilder
    handlers: Mapping[int, ApiHandler]  # what this broker dispatches to (ApiVersions lists it)
    finalized_features_epoch: int
    session: ConnectionSession  # the connection's listener and principal
    slice_started: float = field(default_factory=time.perf_counter)  # see pace()

    @property
    def principal(self) -> str:
        return self.session.principal

    async def pace(self) -> None:
        """Called between the items of a request (its topics, partitions, groups, ...):
        once the request has held the event loop for PACE_SLICE_SECONDS, the loop serves
        every other client once before it goes on. A request naming a million topics then
        costs the others a few milliseconds at a time, not seconds."""
        if time.perf_counter() - self.slice_started >= PACE_SLICE_SECONDS:
            await asyncio.sleep(0)
            self.slice_started = time.perf_counter()

    async def paced(self, items: Iterable[T]) -> AsyncIterator[T]:
        """`items`, paced (`pace` before each): for the comprehensions and loops of a
        handler over what the request lists, `[... async for item in ctx.paced(items)]`.
        `items` must not change meanwhile (the request's own, or a copy)."""
        for item in items:
            if time.perf_counter() - self.slice_started >= PACE_SLICE_SECONDS:
                await asyncio.sleep(0)
                self.slice_started = time.perf_counter()
            yield item

    @property
    def listener(self) -> str:
        """The name of the listener the request came in on (Metadata answers its addresses)."""
        return self.session.listener.name

    def authorize(self, operation: AclOperation, resource_type: ResourceType, name: str) -> bool:
        """Whether the request's principal, from its host, may do `operation` on the
        resource (always, without an authorizer)."""
        acls = self.broker.acls
        return acls is None or acls.authorizer.authorize(self.session.principal, self.client_host, operation,
                                                         resource_type, name)

    def authorize_cluster(self, operation: AclOperation) -> bool:
        return self.authorize(operation, ResourceType.CLUSTER, CLUSTER_NAME)

    def authorized_operations(self, resource_type: ResourceType, name: str) -> int:
        """Kafka's authorized-operations bit field of the resource for this principal;
        without an authorizer, every operation the resource type supports (as Kafka)."""
        acls = self.broker.acls
        if acls is None:
            return NO_AUTHORIZER_OPERATIONS_BITS[resource_type]
        return authorized_operations_bits(acls.authorizer.authorized_operations(
            self.session.principal, self.client_host, resource_type, name))

    @property
    def version(self) -> int:
        return self.api_version
