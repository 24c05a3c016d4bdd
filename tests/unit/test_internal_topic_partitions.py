"""Which internal-topic partition a group id or transactional id lives in: Kafka's
Utils.abs(key.hashCode()) % partitions, so that oncelog and Kafka put a key in the same
`__consumer_offsets` / `__transaction_state` partition.

The expected values were computed with Java 17 (String.hashCode, Utils.abs semantics:
Math.abs with Integer.MIN_VALUE mapped to 0); the test itself needs no Java.
"""

import pytest

from oncelog.kernel.internal_topics import java_string_hash, partition_for

# key, String.hashCode(), Utils.abs(hashCode) % 50
KAFKA_VALUES = [
    ("", 0, 0),
    ("a", 97, 47),
    ("test-group", 627841412, 12),
    ("console-consumer-12345", 158455506, 6),
    ("connect-cluster", 1440343063, 13),
    # Negative hash codes: Math.abs; the sign-bit mask would put the first two in 36.
    ("my-group", -1906497762, 12),
    ("grüppe", -1233264812, 12),  # non-ASCII: one UTF-16 unit
    ("spark-kafka-source-0f1e", -1257996699, 49),
    # hashCode == Integer.MIN_VALUE: Utils.abs gives 0.
    ("polygenelubricants", -(2**31), 0),
    ("g\N{GRINNING FACE}", 1871882, 32),  # outside the BMP: a surrogate pair, two units
]


@pytest.mark.parametrize(("key", "hash_code", "partition"), KAFKA_VALUES,
                         ids=[key or "empty" for key, _, _ in KAFKA_VALUES])
def test_partition_for_matches_kafka_with_50_partitions(key, hash_code, partition):
    assert java_string_hash(key) == hash_code
    assert partition_for(key, 50) == partition


def test_partition_for_negative_hash_with_3_partitions():
    # Math.abs(-1906497762) % 3 == 0; the sign-bit mask would give 2.
    assert partition_for("my-group", 3) == 0
