"""Client quotas in cluster mode: one key of the metadata quorum, `client-quotas` (every
entity's quotas, oncelog.kernel.quotas.configs_to_json), shared by every broker, as
Kafka keeps them as ClientQuotaRecords of its metadata log. Standalone brokers keep
them in a file (oncelog.kernel.quota_store).

Kept as the ACLs and SCRAM credentials are (oncelog.cluster.security): AlterClientQuotas
plans its change on the key as the quorum has it and puts the result under a
compare-and-swap (`SharedDocument`), planning again when another broker wrote first;
the broker that wrote answers once its own image has the write. Every broker applies the
key from its metadata watch (`MetadataImage.client_quotas`, `client_quotas_changed`) to
what its server enforces, and reads it once before its listeners open.

A quorum that does not answer gives REQUEST_TIMED_OUT for each entity that would have
changed; retrying is safe.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from oncelog.cluster.image import MetadataDelta, MetadataImage, decode_client_quotas, encode_client_quotas
from oncelog.cluster.kv import KeyValue
from oncelog.cluster.security import NotStored, SharedDocument
from oncelog.kernel.quota_store import Listener
from oncelog.kernel.quotas import (
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

if TYPE_CHECKING:
    from oncelog.cluster.runtime import ClusterRuntime

log = logging.getLogger("oncelog.quotas")


def _configs_of(document: Mapping[str, Any]) -> dict:
    """The quotas of `MetadataImage.client_quotas` (or decode_client_quotas). Raises ValueError."""
    return configs_from_json({"entities": list(document.get("entities", ()))})


class ClusterClientQuotaStore:
    def __init__(self, runtime: ClusterRuntime, on_change: Listener) -> None:
        self._on_change = on_change
        self._configs: QuotaConfigs = {}
        self._document = SharedDocument(runtime, runtime.keys.client_quotas, "the client quotas")
        runtime.add_listener(self._metadata_changed)

    async def load(self) -> None:
        """Take the quotas as the quorum has them now (before the listeners open). Raises
        MetadataFormatError or ValueError when they cannot be read."""
        stored = await self._document.read()
        if stored is not None:
            self._configs = _configs_of(decode_client_quotas(stored))
        self._on_change(self._configs)

    def current(self) -> QuotaConfigs:
        return self._configs

    async def alter(self, alterations: Sequence[Alteration], *, validate_only: bool,
                    pace: Pace = unpaced) -> list[AlterationResult]:
        if validate_only:  # validation does not depend on what is stored
            return (await plan_alteration_paced(self._configs, alterations, pace))[1]
        results: list[AlterationResult] = []

        async def plan(stored: KeyValue | None) -> bytes | None:
            nonlocal results
            current = {} if stored is None else _configs_of(decode_client_quotas(stored))
            changed, results = await plan_alteration_paced(current, alterations, pace)
            return None if changed == current else encode_client_quotas(configs_to_json(changed))

        try:
            await self._document.change(plan)
        except NotStored as error:
            log.warning("AlterClientQuotas not stored: %s", error)
            code = ErrorCode.request_timed_out if error.retriable else ErrorCode.unknown_server_error
            return failed(results or (await plan_alteration_paced(self._configs, alterations, pace))[1], code,
                          str(error))
        return results

    def _metadata_changed(self, image: MetadataImage, delta: MetadataDelta) -> None:
        if not delta.client_quotas_changed:
            return
        try:
            configs = _configs_of(image.client_quotas)
        except ValueError as error:
            log.error("the client quotas in the metadata quorum (revision %d) cannot be read, the previous ones "
                      "stay: %s", image.revision, error)
            return
        self._configs = configs
        self._on_change(configs)
        log.info("client quotas from the metadata quorum: %d entities (revision %d)", len(configs), image.revision)


async def shared_client_quotas(runtime: ClusterRuntime, on_change: Listener, unused_file: Path,
                               ) -> ClusterClientQuotaStore:
    """The cluster's client quotas, loaded. `unused_file`: where a standalone broker keeps
    them (warned about when it exists)."""
    store = ClusterClientQuotaStore(runtime, on_change)
    await store.load()
    _warn_unused(unused_file)
    return store


def _warn_unused(path: Path) -> None:
    if path.exists():
        log.warning("%s is not read in cluster mode: the cluster keeps its client quotas in the metadata quorum "
                    "(set them again through any broker to keep them)", path)
