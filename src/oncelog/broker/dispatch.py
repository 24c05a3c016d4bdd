"""The handler registry: which APIs and versions the broker implements, and who handles each.

A handler module declares itself with `@api(key, "Name", versions)`; ApiVersions is
answered from this registry, so what the broker advertises is exactly what it handles.
Versions that belong to KIP-890 part 2 (`first_transaction_v2_version`) are offered only
by a broker whose finalized `transaction.version` is 2 (`load_handlers(level)`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from oncelog.protocol.messages import ResponseBuilder

if TYPE_CHECKING:
    from oncelog.broker.broker import Broker

Handler = Callable[["RequestContext", Any], Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class ApiHandler:
    api_key: int
    name: str
    min_version: int
    max_version: int
    handle: Handler
    first_transaction_v2_version: int | None = None


REGISTRY: dict[int, ApiHandler] = {}
TRANSACTION_V2_LEVEL = 2


def api(api_key: int, name: str, versions: range, *,
        first_transaction_v2_version: int | None = None) -> Callable[[Handler], Handler]:
    """Register `handle` for `versions` (a range: `range(3, 12)` means v3 to v11).
    `first_transaction_v2_version`: the versions from it on are KIP-890 part 2's."""

    def register(handle: Handler) -> Handler:
        if api_key in REGISTRY:
            raise RuntimeError(f"API {api_key} ({name}) registered twice")
        REGISTRY[api_key] = ApiHandler(api_key, name, versions.start, versions.stop - 1, handle,
                                       first_transaction_v2_version)
        return handle

    return register


@dataclass(slots=True)
class RequestContext:
    """What a handler knows about the request it serves."""

    broker: Broker
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    client_host: str
    response: ResponseBuilder

    @property
    def version(self) -> int:
        return self.api_version


def load_handlers(transaction_version: int = TRANSACTION_V2_LEVEL) -> dict[int, ApiHandler]:
    """Import every handler module (each registers itself) and return the registry as a
    broker with `transaction.version` finalized at `transaction_version` offers it."""
    import oncelog.broker.handlers  # noqa: F401  (registration happens on import)

    if transaction_version >= TRANSACTION_V2_LEVEL:
        return REGISTRY
    return {
        key: replace(handler, max_version=handler.first_transaction_v2_version - 1)
        if handler.first_transaction_v2_version is not None else handler
        for key, handler in REGISTRY.items()
    }
