"""The aborted-transaction index: lookups for read_committed fetches, truncation, retention, reload."""

from oncelog.storage.txn_index import FILE_NAME, AbortedTxn, TransactionIndex


def index_with(tmp_path, *entries):
    index = TransactionIndex(tmp_path)
    for entry in entries:
        index.append(entry)
    return index


def test_collect_returns_aborts_overlapping_the_range(tmp_path):
    index = index_with(tmp_path, AbortedTxn(1, 0, 5, 6), AbortedTxn(2, 10, 20, 21), AbortedTxn(3, 30, 31, 32))
    assert index.collect(0, 100) == [(1, 0), (2, 10), (3, 30)]
    assert index.collect(6, 25) == [(2, 10)]
    assert index.collect(21, 30) == []


def test_entries_survive_reopen_and_a_torn_tail_is_ignored(tmp_path):
    index_with(tmp_path, AbortedTxn(1, 0, 5, 6), AbortedTxn(2, 10, 20, 21))
    path = tmp_path / FILE_NAME
    path.write_bytes(path.read_bytes() + b"\x00\x00\x01")
    reopened = TransactionIndex(tmp_path)
    assert [e.producer_id for e in reopened.entries] == [1, 2]
    assert len(path.read_bytes()) == 2 * 34


def test_truncation_and_retention_drop_entries(tmp_path):
    index = index_with(tmp_path, AbortedTxn(1, 0, 5, 6), AbortedTxn(2, 10, 20, 21), AbortedTxn(3, 30, 31, 32))
    index.truncate_to(20)
    assert [e.producer_id for e in index.entries] == [1]
    index.append(AbortedTxn(4, 25, 26, 27))
    index.drop_below(6)
    assert [e.producer_id for e in TransactionIndex(tmp_path).entries] == [4]


def test_re_adding_an_existing_entry_is_a_no_op(tmp_path):
    index = index_with(tmp_path, AbortedTxn(1, 0, 5, 6), AbortedTxn(2, 10, 20, 21))
    index.append(AbortedTxn(1, 0, 5, 6))
    assert len(index.entries) == 2
