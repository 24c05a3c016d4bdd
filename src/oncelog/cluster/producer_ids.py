"""Producer ids in cluster mode: blocks reserved in the metadata store, so no two brokers
(nor two incarnations of one) ever hand out the same id (Kafka's RPCProducerIdManager
over the controller's ProducerIdControlManager).

A broker holds its current block and reserves the next one in the background once 90 %
of the current one is used. When no id is at hand, `next_producer_id` raises
`kernel.node.ProducerIdsUnavailable`, which InitProducerId answers with COORDINATOR_LOAD_IN_PROGRESS
(retriable), as Kafka's broker does while its block request is outstanding.
"""

from __future__ import annotations

import asyncio
import logging

from oncelog.cluster.metadata_store import PRODUCER_ID_BLOCK_SIZE, MetadataStore
from oncelog.kernel.node import ProducerIdsUnavailable

log = logging.getLogger("oncelog.cluster.producer_ids")

PREFETCH_AT = 0.9


class ClusterProducerIds:
    def __init__(self, store: MetadataStore, block_size: int = PRODUCER_ID_BLOCK_SIZE) -> None:
        self._store = store
        self.block_size = block_size
        self._next_id = 0
        self._block_end = 0
        self._next_block: int | None = None
        self._reserving: asyncio.Task | None = None

    async def start(self) -> None:
        start = await self._store.allocate_producer_id_block(self.block_size)
        self._next_id, self._block_end = start, start + self.block_size

    def next_producer_id(self) -> int:
        if self._next_id >= self._block_end:
            if self._next_block is None:
                self._reserve_next()
                raise ProducerIdsUnavailable("the next producer id block is being reserved")
            self._next_id, self._block_end = self._next_block, self._next_block + self.block_size
            self._next_block = None
        producer_id = self._next_id
        self._next_id += 1
        if self._next_block is None and self._block_end - self._next_id <= self.block_size * (1 - PREFETCH_AT):
            self._reserve_next()
        return producer_id

    def _reserve_next(self) -> None:
        if self._reserving is not None and not self._reserving.done():
            return
        self._reserving = asyncio.get_running_loop().create_task(self._reserve())

    async def _reserve(self) -> None:
        try:
            self._next_block = await self._store.allocate_producer_id_block(self.block_size)
        except Exception as error:  # noqa: BLE001 (a background task: logged, and the next allocation retries)
            log.warning("reserving a producer id block failed: %s", error)
