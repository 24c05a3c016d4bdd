"""One partition's records as an operator browses them: each with its fate.

A consumer in `read_committed` skips what was aborted and stops at the last stable offset;
one in `read_uncommitted` sees everything. Neither says why. `browse` reads the records
from an offset and tells, for each, what became of it:

- `none`: written outside a transaction;
- `committed` / `aborted`: in a transaction whose COMMIT / ABORT marker is in the log
  (`marker_offset`, when the scan or the aborted-transaction index found it);
- `open`: in a transaction not decided yet (the producer's transaction that is still open
  here, at or past the last stable offset).

Markers (control batches) are records of their own, `control` naming COMMIT or ABORT.

The fate of a transactional batch comes from the first marker of its producer that
follows it in the log. Within what is read, that is the marker seen; past it, the
producer state (its open transaction's first offset) and the aborted-transaction index
(first and last offset of every aborted transaction) decide without reading further;
only a committed batch's marker offset needs a further scan of batch headers, bounded by
`MARKER_SCAN_BYTES` (left unknown past it).

Bounds, whatever is asked: at most `MAX_RECORDS` records and `MAX_READ_BYTES` of batches
per call (a first batch larger than that is read whole, as a Fetch reads it); a search (a
`match` on key or value) reads on up to `SEARCH_BYTES` and gives the offset it stopped at.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

from oncelog.protocol import compression
from oncelog.protocol.record_batch import (
    HEADER_SIZE,
    BatchHeader,
    Compression,
    ControlType,
    DecodedRecord,
    TimestampType,
    parse_batches,
    parse_records,
    read_control_record,
)
from oncelog.storage.log import PartitionLog

MAX_RECORDS = 1000
MAX_READ_BYTES = 4 * 1024 * 1024
MARKER_SCAN_BYTES = 16 * 1024 * 1024
SEARCH_BYTES = 64 * 1024 * 1024  # a search reads this much at most per call, then says where it stopped


class Fate(Enum):
    NONE = "none"
    COMMITTED = "committed"
    ABORTED = "aborted"
    OPEN = "open"


@dataclass(frozen=True, slots=True)
class BrowsedRecord:
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    producer_id: int
    producer_epoch: int
    fate: Fate
    marker_offset: int | None  # the transaction's marker, when known
    control: ControlType | None  # a marker itself: COMMIT or ABORT


@dataclass(frozen=True, slots=True)
class Browsed:
    records: tuple[BrowsedRecord, ...]
    next_offset: int  # where the next page starts
    log_start_offset: int
    high_watermark: int
    last_stable_offset: int


def browse(log: PartitionLog, offset: int, limit: int, *, read_committed: bool = False,
           match: Callable[[DecodedRecord], bool] | None = None) -> Browsed:
    """Up to `limit` records (and markers) of `log` from `offset` (the log start when
    below it), below the high watermark (`read_committed`: below the last stable offset,
    without the aborted records, as a read_committed consumer sees them). With `match` (a
    search) only the records it takes, and no markers, reading on up to `SEARCH_BYTES`."""
    limit = max(1, min(limit, MAX_RECORDS))
    start = max(offset, log.log_start_offset)
    bound = log.last_stable_offset if read_committed else log.high_watermark
    budget = MAX_READ_BYTES if match is None else SEARCH_BYTES
    picked: list[tuple[BatchHeader, DecodedRecord | None, ControlType | None]] = []
    markers: dict[int, list[tuple[int, ControlType]]] = {}  # producer id -> its markers read, in order
    position, next_offset, read = start, start, 0
    while position < bound and read < budget and len(picked) < limit:
        data = log.read(position, min(MAX_READ_BYTES, budget - read), upper_bound=bound).records
        if not data:
            break
        read += len(data)
        for header in parse_batches(data):
            position = header.next_offset
            if header.is_control:
                marker = _marker_kind(data, header)
                markers.setdefault(header.producer_id, []).append((header.base_offset, marker))
                if match is None and len(picked) < limit and header.base_offset >= start:
                    picked.append((header, None, marker))
                    next_offset = header.next_offset
                continue
            if len(picked) >= limit:
                continue  # read on for the markers of what was picked
            for decoded in _records(data, header):
                if decoded.offset >= start and len(picked) < limit:
                    if match is None or match(decoded):
                        picked.append((header, decoded, None))
                    next_offset = decoded.offset + 1
    if len(picked) < limit:
        next_offset = max(next_offset, position)  # all that was read was looked at
    read_end = position
    fates = _Fates(log, markers, read_end)
    records = []
    for header, record, kind in picked:
        if kind is not None:
            fate = Fate.COMMITTED if kind is ControlType.COMMIT else Fate.ABORTED
            records.append(BrowsedRecord(header.base_offset, header.max_timestamp, None, None, (), header.producer_id,
                                         header.producer_epoch, fate, header.base_offset, kind))
            continue
        assert record is not None
        fate, marker_offset = fates.of(header) if header.is_transactional else (Fate.NONE, None)
        if read_committed and fate is Fate.ABORTED:
            continue
        timestamp = header.max_timestamp if header.timestamp_type is TimestampType.LOG_APPEND_TIME else record.timestamp
        records.append(BrowsedRecord(record.offset, timestamp, record.key, record.value, record.headers,
                                     header.producer_id, header.producer_epoch, fate, marker_offset, None))
    return Browsed(tuple(records), next_offset, log.log_start_offset, log.high_watermark, log.last_stable_offset)


def _records(data: bytes, header: BatchHeader) -> list[DecodedRecord]:
    batch = memoryview(data)[header.position:header.position + header.size]
    if header.compression_id == Compression.NONE:
        return parse_records(batch, HEADER_SIZE, header)
    return parse_records(memoryview(compression.decompress(header.compression_id, batch[HEADER_SIZE:])), 0, header)


def _marker_kind(data: bytes, header: BatchHeader) -> ControlType:
    kind, _coordinator_epoch = read_control_record(memoryview(data)[header.position + HEADER_SIZE:])
    return kind


class _Fates:
    """The fate of transactional batches, by the first marker of their producer after them."""

    def __init__(self, log: PartitionLog, markers: dict[int, list[tuple[int, ControlType]]], read_end: int) -> None:
        self._log = log
        self._markers = markers  # read with the records
        self._read_end = read_end
        self._scanned = False

    def of(self, header: BatchHeader) -> tuple[Fate, int | None]:
        marker = self._marker_after(header.producer_id, header.base_offset)
        if marker is not None:
            offset, kind = marker
            return (Fate.COMMITTED if kind is ControlType.COMMIT else Fate.ABORTED), offset
        producer = self._log.producer_state.producers.get(header.producer_id)
        if (producer is not None and producer.current_txn_first_offset is not None
                and producer.current_txn_first_offset <= header.base_offset):
            return Fate.OPEN, None
        for entry in self._log.txn_index.overlapping(header.base_offset, header.base_offset + 1):
            if entry.producer_id == header.producer_id and entry.first_offset <= header.base_offset:
                return Fate.ABORTED, entry.last_offset
        if not self._scanned:
            self._scan_on()
            return self.of(header)
        return Fate.COMMITTED, None  # decided, and not aborted: its marker lies past the scan

    def _marker_after(self, producer_id: int, offset: int) -> tuple[int, ControlType] | None:
        return next((marker for marker in self._markers.get(producer_id, ()) if marker[0] > offset), None)

    def _scan_on(self) -> None:
        """Read on past the records, batch headers only, for markers (up to MARKER_SCAN_BYTES)."""
        self._scanned = True
        position, scanned = self._read_end, 0
        log = self._log
        while scanned < MARKER_SCAN_BYTES and position < log.high_watermark:
            data = log.read(position, min(MAX_READ_BYTES, MARKER_SCAN_BYTES - scanned)).records
            if not data:
                return
            for header in parse_batches(data, verify_crc=False):
                if header.is_control:
                    self._markers.setdefault(header.producer_id, []).append((header.base_offset,
                                                                             _marker_kind(data, header)))
                position = header.next_offset
            scanned += len(data)
