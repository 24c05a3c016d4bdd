"""The override sets AlterConfigs and IncrementalAlterConfigs ask for
(oncelog.config.changes): each operation, and what Kafka refuses."""

from __future__ import annotations

import pytest

from oncelog.config.changes import ConfigChangeError, changed, replaced
from oncelog.protocol.messages import ErrorCode

LISTS = frozenset({"cleanup.policy"})
DEFAULTS = {"cleanup.policy": "delete", "retention.ms": "604800000"}
SET, DELETE, APPEND, SUBTRACT = range(4)


def test_set_and_delete_change_single_keys_and_keep_the_others():
    current = {"retention.ms": "1000", "segment.bytes": "1024"}
    result = changed(current, DEFAULTS, [("retention.ms", SET, "2000"), ("segment.bytes", DELETE, None),
                                          ("segment.ms", DELETE, None)], LISTS)
    assert result == {"retention.ms": "2000"}
    assert current == {"retention.ms": "1000", "segment.bytes": "1024"}  # not changed in place


def test_append_starts_from_the_override_else_the_built_in_default_and_skips_items_already_there():
    assert changed({}, DEFAULTS, [("cleanup.policy", APPEND, "compact,delete,compact")], LISTS) == \
        {"cleanup.policy": "delete,compact"}
    assert changed({"cleanup.policy": "compact"}, DEFAULTS, [("cleanup.policy", APPEND, "delete")], LISTS) == \
        {"cleanup.policy": "compact,delete"}


def test_subtract_removes_every_copy_of_each_item():
    assert changed({"cleanup.policy": "delete,compact"}, DEFAULTS, [("cleanup.policy", SUBTRACT, "delete")],
                   LISTS) == {"cleanup.policy": "compact"}
    # an empty list is left for the owner's validation to refuse
    assert changed({}, DEFAULTS, [("cleanup.policy", SUBTRACT, "delete")], LISTS) == {"cleanup.policy": ""}


@pytest.mark.parametrize(("changes", "code", "message"), [
    ([("retention.ms", APPEND, "1")], ErrorCode.invalid_config,
     "Can't APPEND to key retention.ms because its type is not LIST."),
    ([("retention.ms", SUBTRACT, "1")], ErrorCode.invalid_config,
     "Can't SUBTRACT to key retention.ms because its type is not LIST."),
    ([("retention.ms", SET, None)], ErrorCode.invalid_request, "Null value not supported for : retention.ms"),
    ([("retention.ms", SET, "1"), ("retention.ms", DELETE, None)], ErrorCode.invalid_request,
     "Error due to duplicate config keys"),
    ([("retention.ms", 7, "1")], ErrorCode.invalid_request, "Unknown operation type 7 for retention.ms"),
])
def test_what_kafka_refuses_is_refused_with_its_code(changes, code, message):
    with pytest.raises(ConfigChangeError) as refused:
        changed({}, DEFAULTS, changes, LISTS)
    assert (refused.value.code, str(refused.value)) == (code, message)


def test_legacy_alter_configs_asks_for_exactly_the_keys_it_names():
    assert replaced([("retention.ms", "1"), ("segment.bytes", "2048")]) == \
        {"retention.ms": "1", "segment.bytes": "2048"}
    with pytest.raises(ConfigChangeError, match=r"Null value not supported for : retention\.ms"):
        replaced([("retention.ms", None)])
    with pytest.raises(ConfigChangeError, match="duplicate"):
        replaced([("retention.ms", "1"), ("retention.ms", "2")])


def test_the_overrides_keep_their_order_keys_new_ones_last_in_the_requests_order():
    current = {"retention.ms": "1000", "segment.bytes": "1024", "segment.ms": "1"}
    result = changed(current, DEFAULTS, [("flush.ms", SET, "5"), ("cleanup.policy", APPEND, "compact"),
                                         ("segment.bytes", DELETE, None), ("retention.ms", SET, "2000"),
                                         ("flush.messages", SET, "9")], LISTS)
    assert list(result.items()) == [("retention.ms", "2000"), ("segment.ms", "1"), ("flush.ms", "5"),
                                    ("cleanup.policy", "delete,compact"), ("flush.messages", "9")]


def test_the_first_refusal_in_the_requests_order_is_the_answer():
    with pytest.raises(ConfigChangeError, match="Unknown operation type 9 for b"):
        changed({}, DEFAULTS, [("a", SET, "1"), ("b", 9, "1"), ("c", SET, None)], LISTS)
    with pytest.raises(ConfigChangeError, match="duplicate"):  # a key named twice, wherever: first
        changed({}, DEFAULTS, [("a", SET, None), ("b", SET, "1"), ("b", SET, "2")], LISTS)
