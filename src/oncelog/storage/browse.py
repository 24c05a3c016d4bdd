"""One partition's records as an operator browses them: each with its fate.

A consumer in `read_committed` skips what was aborted and stops at the last stable offset;
one in `read_uncommitted` sees everything. Neither says why. `browse` reads the records
from an offset and tells, for each, what became of it:

- `none`: written outside a transaction;
- `committed` / `aborted`: in a transaction whose COMMIT / ABORT marker is in the log
  (`marker_offset`, when the scan or the aborted-transaction index found it);
- `open`: in a transaction not decided yet (the producer's transaction that is still open
  here, at or past the last stable offset).

Markers (control batches) are records of their own, `control` naming COMMIT or ABORT. A
marker the log cleaner emptied (it keeps the header of a producer's last marker, once the
transaction's data is cleaned) has lost its kind: it is shown as `emptied`, and a batch it
decides is aborted when the aborted-transaction index says so, else committed (the
cleaner removes an aborted transaction's data before its marker).

The fate of a transactional batch comes from the first marker of its producer that
follows it in the log. Within what is read, that is the marker seen; past it, the
producer state (its open transaction's first offset) and the aborted-transaction index
(first and last offset of every aborted transaction) decide without reading further;
only a committed batch's marker offset needs a further scan of batch headers, bounded by
`MARKER_SCAN_BYTES` (left unknown past it).

Bounds, whatever is asked: at most `MAX_RECORDS` records, `MAX_ANSWER_BYTES` of keys,
values and headers, and `MAX_READ_BYTES` of batches per call (a first batch larger than
that is read whole, as a Fetch reads it); a search (a `match` on key or value) reads on up
to `SEARCH_BYTES` and gives the offset it stopped at. The work is paced (`pace`): the loop
serves its clients between batches. A compressed batch is decompressed whole, as the log
cleaner and a consumer decompress it. The log may change between two paces (appends,
retention): a read below the new log start ends the page there.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

from oncelog.pacing import Pace, unpaced
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
from oncelog.storage.errors import OffsetOutOfRangeError
from oncelog.storage.log import PartitionLog
from oncelog.storage.txn_index import AbortedTxn

MAX_RECORDS = 1000
MAX_READ_BYTES = 4 * 1024 * 1024
MAX_ANSWER_BYTES = 8 * 1024 * 1024  # of keys, values and header values picked
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
    control: ControlType | None  # a marker itself: COMMIT or ABORT (None for data, and for an emptied marker)
    emptied: bool = False  # a marker the cleaner emptied: its kind is gone


@dataclass(frozen=True, slots=True)
class Browsed:
    records: tuple[BrowsedRecord, ...]
    next_offset: int  # where the next page starts
    log_start_offset: int
    high_watermark: int
    last_stable_offset: int


Markers = dict[int, list[tuple[int, ControlType | None]]]  # producer id -> its markers read (None: emptied)


async def browse(log: PartitionLog, offset: int, limit: int, *, read_committed: bool = False,
                 match: Callable[[DecodedRecord], bool] | None = None, pace: Pace = unpaced) -> Browsed:
    """Up to `limit` records (and markers) of `log` from `offset` (the log start when
    below it), below the high watermark (`read_committed`: below the last stable offset,
    without the aborted records, as a read_committed consumer sees them). With `match` (a
    search) only the records it takes, and no markers, reading on up to `SEARCH_BYTES`."""
    limit = max(1, min(limit, MAX_RECORDS))
    start = max(offset, log.log_start_offset)
    bound = log.last_stable_offset if read_committed else log.high_watermark
    budget = MAX_READ_BYTES if match is None else SEARCH_BYTES
    picked: list[tuple[BatchHeader, DecodedRecord | None, ControlType | None]] = []  # (marker: no record)
    markers: Markers = {}
    position, next_offset, read, answer_bytes = start, start, 0, 0
    full = False  # a bound of the answer is reached: nothing more is picked
    while position < bound and read < budget and not full:
        await pace()
        data = _read(log, position, min(MAX_READ_BYTES, budget - read), bound)
        if not data:
            break
        read += len(data)
        for header in parse_batches(data):
            position = header.next_offset
            if header.is_control:
                marker = _marker_kind(data, header)
                markers.setdefault(header.producer_id, []).append((header.base_offset, marker))
                if match is None and not full and header.base_offset >= start:
                    picked.append((header, None, marker))
                    next_offset = header.next_offset
                    full = len(picked) >= limit
                continue
            if full:
                continue  # read on for the markers of what was picked
            await pace()
            for decoded in _records(data, header):
                if decoded.offset < start:
                    continue
                if full:
                    break
                if match is None or match(decoded):
                    picked.append((header, decoded, None))
                    answer_bytes += _size(decoded)
                    full = len(picked) >= limit or answer_bytes >= MAX_ANSWER_BYTES
                next_offset = decoded.offset + 1
    if not full:
        next_offset = max(next_offset, position)  # all that was read was looked at
    fates = _Fates(log, markers, position, pace)
    records = []
    for header, record, kind in picked:
        if record is None:  # a marker
            fate = Fate.NONE if kind is None else Fate.COMMITTED if kind is ControlType.COMMIT else Fate.ABORTED
            records.append(BrowsedRecord(header.base_offset, header.max_timestamp, None, None, (), header.producer_id,
                                         header.producer_epoch, fate, header.base_offset, kind, emptied=kind is None))
            continue
        fate, marker_offset = await fates.of(header) if header.is_transactional else (Fate.NONE, None)
        if read_committed and fate is Fate.ABORTED:
            continue
        timestamp = header.max_timestamp if header.timestamp_type is TimestampType.LOG_APPEND_TIME else record.timestamp
        records.append(BrowsedRecord(record.offset, timestamp, record.key, record.value, record.headers,
                                     header.producer_id, header.producer_epoch, fate, marker_offset, None))
    return Browsed(tuple(records), next_offset, log.log_start_offset, log.high_watermark, log.last_stable_offset)


def _read(log: PartitionLog, position: int, max_bytes: int, bound: int) -> bytes:
    """Whole batches from `position`; nothing once retention moved the log start past it."""
    try:
        return log.read(position, max_bytes, upper_bound=bound).records
    except OffsetOutOfRangeError:
        return b""


def _size(record: DecodedRecord) -> int:
    return (len(record.key or b"") + len(record.value or b"")
            + sum(len(name) + len(value or b"") for name, value in record.headers))


def _records(data: bytes, header: BatchHeader) -> list[DecodedRecord]:
    batch = memoryview(data)[header.position:header.position + header.size]
    if header.compression_id == Compression.NONE:
        return parse_records(batch, HEADER_SIZE, header)
    return parse_records(memoryview(compression.decompress(header.compression_id, batch[HEADER_SIZE:])), 0, header)


def _marker_kind(data: bytes, header: BatchHeader) -> ControlType | None:
    """A marker's COMMIT or ABORT, from its record; None when the cleaner emptied it."""
    if header.record_count == 0 or header.size <= HEADER_SIZE:
        return None
    records = memoryview(data)[header.position + HEADER_SIZE:header.position + header.size]
    kind, _coordinator_epoch = read_control_record(records)
    return kind


class _Fates:
    """The fate of transactional batches, by the first marker of their producer after them."""

    def __init__(self, log: PartitionLog, markers: Markers, read_end: int, pace: Pace) -> None:
        self._log = log
        self._markers = markers  # read with the records
        self._read_end = read_end
        self._pace = pace
        self._scanned = False
        self._aborted: dict[int, list[AbortedTxn]] | None = None  # by producer id, looked up once

    async def of(self, header: BatchHeader) -> tuple[Fate, int | None]:
        marker = self._marker_after(header.producer_id, header.base_offset)
        if marker is not None:
            offset, kind = marker
            if kind is None:  # emptied by the cleaner: the index keeps what was aborted
                aborted = any(entry.first_offset <= header.base_offset <= entry.last_offset
                              for entry in self._aborted_of(header.producer_id))
                return (Fate.ABORTED if aborted else Fate.COMMITTED), offset
            return (Fate.COMMITTED if kind is ControlType.COMMIT else Fate.ABORTED), offset
        producer = self._log.producer_state.producers.get(header.producer_id)
        if (producer is not None and producer.current_txn_first_offset is not None
                and producer.current_txn_first_offset <= header.base_offset):
            return Fate.OPEN, None
        for entry in self._aborted_of(header.producer_id):
            if entry.first_offset <= header.base_offset <= entry.last_offset:
                return Fate.ABORTED, entry.last_offset
        if not self._scanned:
            await self._scan_on()
            return await self.of(header)
        return Fate.COMMITTED, None  # decided, and not aborted: its marker lies past the scan

    def _aborted_of(self, producer_id: int) -> list[AbortedTxn]:
        if self._aborted is None:
            self._aborted = {}
            for entry in self._log.txn_index.overlapping(self._log.log_start_offset, self._log.log_end_offset + 1):
                self._aborted.setdefault(entry.producer_id, []).append(entry)
        return self._aborted.get(producer_id, [])

    def _marker_after(self, producer_id: int, offset: int) -> tuple[int, ControlType | None] | None:
        return next((marker for marker in self._markers.get(producer_id, ()) if marker[0] > offset), None)

    async def _scan_on(self) -> None:
        """Read on past the records, batch headers only, for markers (up to MARKER_SCAN_BYTES)."""
        self._scanned = True
        position, scanned = self._read_end, 0
        log = self._log
        while scanned < MARKER_SCAN_BYTES and position < log.high_watermark:
            await self._pace()
            data = _read(log, position, min(MAX_READ_BYTES, MARKER_SCAN_BYTES - scanned), log.high_watermark)
            if not data:
                return
            for header in parse_batches(data, verify_crc=False):
                if header.is_control:
                    self._markers.setdefault(header.producer_id, []).append((header.base_offset,
                                                                             _marker_kind(data, header)))
                position = header.next_offset
            scanned += len(data)
