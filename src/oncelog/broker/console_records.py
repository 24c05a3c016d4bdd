"""The console's message browser: `GET /api/topics/{topic}/records`, read on the loop.

What is asked (`RecordsQuery`, parsed from the query string on the HTTP thread, every
number bounded) picks a partition, where to start (`offset`, `timestamp`, or `offset=-1`:
the last `limit` records below the end), what a consumer of which isolation sees, and
maybe a search: `key` (records with that key) and `contains` (records whose value holds
that text), over at most `storage.browse.SEARCH_BYTES` of the log per call.
`records_json` reads it (oncelog.storage.browse) and gives the JSON: per record `offset`,
`timestamp`, `key` and `value` (`{"base64": ..., "text": ...}`, text when the bytes are
UTF-8, cut at `MAX_FIELD_BYTES` with `truncated` and the whole `size`), `headers`,
`producer_id`, `producer_epoch`, `status` (`committed`, `aborted`, `open`, `none`),
`marker_offset` (the transaction's marker, null when unknown or none), and for a marker
`control: true` with `marker` (`commit`, `abort`, or `emptied`: its kind cleaned away).
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

from oncelog.pacing import time_sliced
from oncelog.protocol.record_batch import ControlType, DecodedRecord
from oncelog.storage.browse import MAX_RECORDS, Browsed, BrowsedRecord, browse
from oncelog.storage.log import PartitionLog

DEFAULT_LIMIT = 100
MAX_FIELD_BYTES = 64 * 1024  # of a key, value or header value in the answer
MAX_QUERY_BYTES = 1024
_ISOLATIONS = {"read_uncommitted": False, "read_committed": True}


class QueryError(ValueError):
    """A query the browser cannot answer: 400 with this text."""


@dataclass(frozen=True, slots=True)
class RecordsQuery:
    topic: str
    partition: int
    offset: int | None  # None: by `timestamp`; -1: the last `limit` records
    timestamp: int | None
    limit: int
    read_committed: bool
    key: bytes | None = None  # search: records with this key
    contains: bytes | None = None  # search: records whose value holds these bytes

    @classmethod
    def parse(cls, topic: str, query: str) -> RecordsQuery:
        if len(query) > MAX_QUERY_BYTES:
            raise QueryError("the query is too long")
        try:
            values = parse_qs(query, strict_parsing=bool(query), max_num_fields=8)
        except ValueError:
            raise QueryError("a malformed query string") from None
        unknown = sorted(set(values) - {"partition", "offset", "timestamp", "limit", "isolation", "key", "contains"})
        if unknown:
            raise QueryError(f"unknown parameter {unknown[0]!r}")
        if "offset" in values and "timestamp" in values:
            raise QueryError("offset and timestamp exclude each other")
        isolation = _one(values, "isolation", "read_uncommitted")
        if isolation not in _ISOLATIONS:
            raise QueryError("isolation is read_uncommitted or read_committed")
        timestamp = _number(values, "timestamp", None, 0, 2**63 - 1)
        key, contains = _one(values, "key", ""), _one(values, "contains", "")
        return cls(topic, _number(values, "partition", 0, 0, 2**31 - 1) or 0,
                   None if timestamp is not None else _number(values, "offset", 0, -1, 2**63 - 1),
                   timestamp, _number(values, "limit", DEFAULT_LIMIT, 1, MAX_RECORDS) or DEFAULT_LIMIT,
                   _ISOLATIONS[isolation], key.encode() if key else None, contains.encode() if contains else None)

    def matches(self, record: DecodedRecord) -> bool:
        """Whether a search takes `record` (both, when both are given)."""
        return ((self.key is None or record.key == self.key)
                and (self.contains is None or (record.value is not None and self.contains in record.value)))


def _one(values: dict[str, list[str]], name: str, default: str) -> str:
    given = values.get(name)
    if not given:
        return default
    if len(given) > 1:
        raise QueryError(f"{name} is given twice")
    return given[0]


def _number(values: dict[str, list[str]], name: str, default: int | None, low: int, high: int) -> int | None:
    text = _one(values, name, "")
    if not text:
        return default
    try:
        number = int(text)
    except ValueError:
        raise QueryError(f"{name} must be a number") from None
    if not low <= number <= high:
        raise QueryError(f"{name} must be between {low} and {high}")
    return number


async def records_json(log: PartitionLog, query: RecordsQuery) -> dict[str, Any]:
    """The records `query` asks of `log` (on the loop, which serves its clients meanwhile)."""
    offset = query.offset
    if query.timestamp is not None:
        found = log.offset_for_timestamp(query.timestamp)
        offset = found[0] if found is not None else log.high_watermark
    elif offset == -1:
        end = log.last_stable_offset if query.read_committed else log.high_watermark
        offset = max(end - query.limit, log.log_start_offset)
    assert offset is not None
    searching = query.key is not None or query.contains is not None
    browsed = await browse(log, offset, query.limit, read_committed=query.read_committed,
                           match=query.matches if searching else None, pace=time_sliced())
    return _as_json(query, browsed)


def _as_json(query: RecordsQuery, browsed: Browsed) -> dict[str, Any]:
    return {
        "topic": query.topic, "partition": query.partition,
        "isolation": "read_committed" if query.read_committed else "read_uncommitted",
        "log_start_offset": browsed.log_start_offset, "high_watermark": browsed.high_watermark,
        "last_stable_offset": browsed.last_stable_offset, "next_offset": browsed.next_offset,
        "records": [_record(record) for record in browsed.records],
    }


def _record(record: BrowsedRecord) -> dict[str, Any]:
    answer: dict[str, Any] = {
        "offset": record.offset, "timestamp": record.timestamp,
        "key": _bytes(record.key), "value": _bytes(record.value),
        "headers": [{"key": key, "value": _bytes(value)} for key, value in record.headers],
        "producer_id": record.producer_id, "producer_epoch": record.producer_epoch,
        "status": record.fate.value, "marker_offset": record.marker_offset,
    }
    if record.control is not None or record.emptied:
        answer["control"] = True
        answer["marker"] = ("emptied" if record.control is None else
                            "commit" if record.control is ControlType.COMMIT else "abort")
    return answer


def _bytes(data: bytes | None) -> dict[str, Any] | None:
    if data is None:
        return None
    shown = data[:MAX_FIELD_BYTES]
    answer: dict[str, Any] = {"base64": base64.b64encode(shown).decode()}
    text = _text(shown, cut=len(shown) < len(data))
    if text is not None:
        answer["text"] = text
    if len(shown) < len(data):
        answer["truncated"] = True
        answer["size"] = len(data)
    return answer


def _text(data: bytes, *, cut: bool) -> str | None:
    """`data` as UTF-8 text, None when it is not; a cut may split the last character."""
    for end in range(len(data), max(len(data) - 3, 0) - 1, -1) if cut else (len(data),):
        try:
            return data[:end].decode()
        except UnicodeDecodeError:
            continue
    return None
