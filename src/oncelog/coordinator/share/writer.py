"""The writes of one share partition's state, in order, one at a time.

Every change of a held share partition bumps its version (`changed`); a writer task per
partition sends the latest snapshot whenever the last write is done, so writes reach the
share coordinator in the order of the changes, and several changes made while one write
is out go together in the next. A caller that must answer a client only once its change
is persisted awaits `written(version)`. A failed write (the share coordinator moved, a
newer leader fenced this one, an admin reset the state) fails every change not yet
written, and `on_failure` drops the partition: its next use reloads what is persisted.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from oncelog.protocol.messages import ErrorCode

if TYPE_CHECKING:
    from oncelog.coordinator.share.partition import SharePartition, ShareState
    from oncelog.coordinator.share.records import StateKey

log = logging.getLogger("oncelog.share")


class Persister(Protocol):
    async def write(self, key: StateKey, state: ShareState, leader_epoch: int) -> ErrorCode: ...


@dataclass(slots=True)
class HeldPartition:
    """A share partition this broker leads, as loaded at `leader_epoch`."""

    key: StateKey
    topic: str
    partition: SharePartition
    leader_epoch: int
    version: int = 0  # changes made
    written: int = 0  # changes persisted
    failed: ErrorCode | None = None
    waiters: list[tuple[int, asyncio.Future]] = field(default_factory=list)
    task: asyncio.Task | None = None


class StateWriter:
    def __init__(self, persister: Persister, on_failure: Callable[[HeldPartition, ErrorCode], None]) -> None:
        self._persister = persister
        self._on_failure = on_failure
        self._tasks: set[asyncio.Task] = set()

    def changed(self, held: HeldPartition) -> int:
        """Record a change of `held`: the version to wait for."""
        held.version += 1
        if held.failed is None and (held.task is None or held.task.done()):
            held.task = asyncio.get_running_loop().create_task(self._write(held))
            self._tasks.add(held.task)
            held.task.add_done_callback(self._tasks.discard)
        return held.version

    async def written(self, held: HeldPartition, version: int) -> ErrorCode:
        """NONE once change `version` is persisted, else the write's error."""
        if held.failed is not None:
            return held.failed
        if held.written >= version:
            return ErrorCode.none
        waiter = asyncio.get_running_loop().create_future()
        held.waiters.append((version, waiter))
        return await waiter

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _write(self, held: HeldPartition) -> None:
        while held.written < held.version and held.failed is None:
            version = held.version
            try:
                code = await self._persister.write(held.key, held.partition.snapshot(), held.leader_epoch)
            except asyncio.CancelledError:
                self._fail(held, ErrorCode.coordinator_not_available)
                raise
            except Exception:
                log.exception("writing the state of %s failed", held.key)
                code = ErrorCode.unknown_server_error
            if code is not ErrorCode.none:
                self._fail(held, code)
                return
            held.written = version
            still = []
            for wanted, waiter in held.waiters:
                if wanted <= version:
                    if not waiter.done():
                        waiter.set_result(ErrorCode.none)
                else:
                    still.append((wanted, waiter))
            held.waiters = still

    def _fail(self, held: HeldPartition, code: ErrorCode) -> None:
        if held.failed is not None:
            return
        held.failed = code
        log.info("the state of %s could not be written (%s): it is reloaded on next use", held.key, code.name)
        for _version, waiter in held.waiters:
            if not waiter.done():
                waiter.set_result(code)
        held.waiters = []
        self._on_failure(held, code)
