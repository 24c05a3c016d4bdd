"""Shared by the group handlers: the coordinator of the broker and the client's host."""

from __future__ import annotations

from oncelog.broker.dispatch import RequestContext

GROUP_KEY_TYPE = 0


def group_coordinator(ctx: RequestContext):
    """The broker's GroupCoordinator (registered as FindCoordinator key type 0)."""
    return ctx.broker.coordinator_for(GROUP_KEY_TYPE)


def client_host(ctx: RequestContext) -> str:
    """The member's host as Kafka reports it (InetAddress.toString: "/127.0.0.1")."""
    return f"/{ctx.client_host}"


def duration_ms(value, default_ms: int = -1) -> int:
    """kio gives *_ms fields as timedeltas; the coordinator works in milliseconds."""
    if value is None:
        return default_ms
    return round(value.total_seconds() * 1000)


def partition_exists(ctx: RequestContext, topic: str, partition: int) -> bool:
    info = ctx.broker.logs.topic(topic)
    return info is not None and 0 <= partition < info.num_partitions
