"""The console tools' text formats, which follow Kafka's LineMessageReader and
DefaultMessageFormatter, and the client properties file reader."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME, Message

from oncelog.admin.clients import read_properties_file
from oncelog.admin.console import LineReader, MessageFormatter, ProducerRecord
from oncelog.errors import CommandError


def message(**fields) -> Message:
    defaults: dict[str, Any] = {"topic": "t", "partition": 0, "offset": 0, "key": None, "value": b"v", "headers": None,
                "timestamp": (TIMESTAMP_CREATE_TIME, 1700000000000)}
    defaults.update(fields)
    return Message(**defaults)


def test_plain_line_is_the_value_with_no_key_and_no_headers():
    assert LineReader().parse(b"a\tb", 1) == ProducerRecord(key=None, value=b"a\tb", headers=[])


def test_parse_key_splits_at_the_first_separator_only():
    reader = LineReader.from_properties({"parse.key": "true", "key.separator": ":"})
    assert reader.parse(b"k:v:w", 1) == ProducerRecord(key=b"k", value=b"v:w", headers=[])


def test_parse_key_defaults_to_tab_separator():
    reader = LineReader.from_properties({"parse.key": "true"})
    assert reader.parse(b"k\tv", 1).key == b"k"


def test_missing_key_separator_is_an_error_naming_the_line_unless_ignore_error():
    strict = LineReader.from_properties({"parse.key": "true"})
    with pytest.raises(CommandError, match="line 7"):
        strict.parse(b"no-tab", 7)
    lenient = LineReader.from_properties({"parse.key": "true", "ignore.error": "true"})
    assert lenient.parse(b"no-tab", 7) == ProducerRecord(key=None, value=b"no-tab", headers=[])


def test_parse_headers_reads_the_header_block_before_key_and_value():
    reader = LineReader.from_properties({"parse.headers": "true", "parse.key": "true",
                                         "key.separator": ":"})
    record = reader.parse(b"h1:v1,h2:v2\tk:v", 1)
    assert record == ProducerRecord(key=b"k", value=b"v", headers=[("h1", b"v1"), ("h2", b"v2")])


def test_null_marker_turns_key_value_and_header_values_into_null():
    reader = LineReader.from_properties({"parse.headers": "true", "parse.key": "true",
                                         "null.marker": "<null>"})
    record = reader.parse(b"h:<null>\t<null>\t<null>", 1)
    assert record == ProducerRecord(key=None, value=None, headers=[("h", None)])


def test_formatter_prints_only_the_value_by_default():
    assert MessageFormatter().format(message(key=b"k", value=b"hello")) == b"hello\n"


def test_formatter_columns_follow_kafka_order_and_separators():
    formatter = MessageFormatter.from_properties({
        "print.timestamp": "true", "print.partition": "true", "print.offset": "true",
        "print.headers": "true", "print.key": "true", "key.separator": " | ",
    })
    line = formatter.format(message(partition=2, offset=9, key=b"k", value=b"v",
                                     headers=[("a", b"1"), ("b", None)]))
    assert line == b"CreateTime:1700000000000 | Partition:2 | Offset:9 | a:1,b:null | k | v\n"


def test_formatter_names_log_append_time_and_missing_headers():
    formatter = MessageFormatter.from_properties({"print.timestamp": "true",
                                                  "print.headers": "true"})
    line = formatter.format(message(timestamp=(TIMESTAMP_LOG_APPEND_TIME, 5)))
    assert line == b"LogAppendTime:5\tNO_HEADERS\tv\n"


def test_formatter_prints_null_literal_for_null_key_and_value():
    formatter = MessageFormatter.from_properties({"print.key": "true", "null.literal": "NULL"})
    assert formatter.format(message(key=None, value=None)) == b"NULL\tNULL\n"


def test_properties_file_reads_java_syntax(tmp_path):
    path = tmp_path / "client.properties"
    path.write_text(
        "# comment\n! also a comment\n\n"
        "bootstrap.servers = host:9092\n"
        "client.id: cli\n"
        "sasl.jaas.config=a \\\n   b\n"
    )
    assert read_properties_file(path) == {
        "bootstrap.servers": "host:9092", "client.id": "cli", "sasl.jaas.config": "a b",
    }


def test_missing_properties_file_is_a_one_line_error(tmp_path):
    with pytest.raises(CommandError, match="cannot read properties file"):
        read_properties_file(tmp_path / "absent.properties")
