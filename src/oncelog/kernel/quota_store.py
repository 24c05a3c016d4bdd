"""Where a broker keeps the client quotas (AlterClientQuotas, oncelog.kernel.quotas), and
how a change reaches what the server enforces: one store per broker, chosen at start-up.

- `FileClientQuotaStore` (standalone): a framed JSON file in the first log dir,
  `__client_quotas.meta`, replaced crash-safely (temporary file, fsync, rename) before
  the request is answered.
- In cluster mode the metadata quorum keeps them, shared by every broker
  (oncelog.cluster.client_quotas.ClusterClientQuotaStore).

Both call `on_change(configs)` with every quota whenever they change (at load too); the
broker passes the server's `ClientQuotas.replace`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

from oncelog.kernel.quotas import (
    FORMAT_VERSION,
    Alteration,
    AlterationResult,
    QuotaConfigs,
    configs_from_json,
    configs_to_json,
    failed,
    plan_alteration_paced,
)
from oncelog.pacing import Pace, unpaced
from oncelog.protocol.messages import ErrorCode
from oncelog.storage.errors import CorruptLogError, StorageError
from oncelog.storage.framed_file import read_json_file, write_json_file

log = logging.getLogger("oncelog.quotas")

FILE_NAME = "__client_quotas.meta"
_MAGIC = b"OLCQ"

Listener = Callable[[QuotaConfigs], None]


class ClientQuotaStore(Protocol):
    def current(self) -> QuotaConfigs: ...

    async def alter(self, alterations: Sequence[Alteration], *, validate_only: bool,
                    pace: Pace = unpaced) -> list[AlterationResult]:
        """Apply `alterations` (stored before this returns), each entry's result in order;
        planned at `pace`."""


class FileClientQuotaStore:
    def __init__(self, directory: Path, on_change: Listener) -> None:
        self.path = directory / FILE_NAME
        self._on_change = on_change
        self._configs: QuotaConfigs = {}
        self._altering = asyncio.Lock()  # one alteration at a time: each is planned at its pace

    def load(self) -> None:
        if self.path.exists():
            _version, document = read_json_file(self.path, _MAGIC, (FORMAT_VERSION,))
            try:
                self._configs = configs_from_json(document)
            except ValueError as error:
                raise CorruptLogError(str(self.path), str(error)) from None
        self._on_change(self._configs)

    def current(self) -> QuotaConfigs:
        return self._configs

    async def alter(self, alterations: Sequence[Alteration], *, validate_only: bool,
                    pace: Pace = unpaced) -> list[AlterationResult]:
        async with self._altering:
            return await self._alter(alterations, validate_only, pace)

    async def _alter(self, alterations: Sequence[Alteration], validate_only: bool,
                     pace: Pace) -> list[AlterationResult]:
        changed, results = await plan_alteration_paced(self._configs, alterations, pace)
        if validate_only or changed == self._configs:
            return results
        try:
            write_json_file(self.path, _MAGIC, FORMAT_VERSION, configs_to_json(changed))
        except StorageError as error:
            log.error("client quotas not stored: %s", error)
            return failed(results, ErrorCode.kafka_storage_error, "the client quotas could not be stored")
        self._configs = changed
        self._on_change(changed)
        return results
