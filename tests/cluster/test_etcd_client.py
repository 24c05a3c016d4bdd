"""The in-tree etcd client (oncelog.cluster.etcd) against a real 3-member etcd cluster.

One cluster for the module (each member preallocates ~123 MB of WAL); tests use their
own key prefixes. Members killed by a test are restarted by it.
"""

from __future__ import annotations

import asyncio
import re
import shutil
import sys
import time
import uuid
from typing import Self

import pytest

from oncelog.cluster import etcd_member
from oncelog.cluster.etcd import (
    Compare,
    EtcdClient,
    EtcdUnavailable,
    LeaseNotFound,
    Op,
    WatchCompacted,
)
from oncelog.cluster.etcd_member import find_etcd
from oncelog.cluster.image import Keys, PartitionRecord, TopicRecord
from oncelog.cluster.kv import EventType
from oncelog.cluster.metadata_store import MetadataStore
from oncelog.cluster.placement import elect_leader
from oncelog.local.etcd import EtcdCluster


@pytest.fixture(scope="module")
def etcd(tmp_path_factory):
    base = tmp_path_factory.mktemp("etcd")
    cluster = EtcdCluster(base, members=3)
    with cluster:
        yield cluster
    for member in cluster.members:
        shutil.rmtree(member.data_dir, ignore_errors=True)  # keep the logs, free the WALs


def run(coroutine):
    return asyncio.run(asyncio.wait_for(coroutine, 60))


async def wait_for_value(client: EtcdClient, key: str, present: bool, timeout: float) -> float:
    """Seconds until `key` is present (or absent)."""
    started = time.monotonic()
    while (await client.get(key) is not None) != present:
        if time.monotonic() - started > timeout:
            raise AssertionError(f"{key} still {'absent' if present else 'present'} after {timeout}s")
        await asyncio.sleep(0.05)
    return time.monotonic() - started


def test_cas_succeeds_once_and_a_stale_revision_is_refused(etcd):
    async def scenario():
        async with EtcdClient(etcd.endpoints) as client:
            revision = await client.put("/cas/key", b"v1")

            first = await client.txn([Compare.mod_revision("/cas/key", "=", revision)],
                                     [Op.put("/cas/key", b"v2")], [Op.range("/cas/key")])
            assert first.succeeded and first.revision > revision and first.responses == [None]

            stale = await client.txn([Compare.mod_revision("/cas/key", "=", revision)],
                                     [Op.put("/cas/key", b"v3")], [Op.range("/cas/key")])
            assert not stale.succeeded  # the gateway omits "succeeded": false
            [current] = stale.responses[0]
            assert (current.value, current.mod_revision, current.version) == (b"v2", first.revision, 2)

            # Ten writers race on one revision: exactly one wins.
            results = await asyncio.gather(*[
                client.txn([Compare.mod_revision("/cas/key", "=", first.revision)],
                           [Op.put("/cas/key", f"racer-{i}".encode())])
                for i in range(10)
            ])
            assert sum(result.succeeded for result in results) == 1
            winner = next(i for i, result in enumerate(results) if result.succeeded)
            assert (await client.get("/cas/key")).value == f"racer-{winner}".encode()

            # Create-if-absent is a compare on create revision 0.
            absent = Compare.create_revision("/cas/new", "=", 0)
            assert (await client.txn([absent], [Op.put("/cas/new", b"a")])).succeeded
            assert not (await client.txn([absent], [Op.put("/cas/new", b"b")])).succeeded
            assert (await client.get("/cas/new")).value == b"a"

    run(scenario())


def test_a_lease_that_is_not_kept_alive_removes_its_key(etcd):
    async def scenario():
        async with EtcdClient(etcd.endpoints) as client:
            lease = await client.lease_grant(1)
            await client.put("/lease/expiring", b"alive", lease=lease)
            assert (await client.get("/lease/expiring")).lease == lease
            gone_after = await wait_for_value(client, "/lease/expiring", present=False, timeout=5)
            assert gone_after > 0.5  # it was the lease, not something else, that removed it
            with pytest.raises(LeaseNotFound):
                await client.lease_keepalive(lease)
            with pytest.raises(LeaseNotFound):
                await client.put("/lease/expiring", b"again", lease=lease)

    run(scenario())


def test_a_controller_that_lost_track_of_its_win_finds_its_own_key_on_the_next_campaign(etcd):
    # Seen in make soak-cluster: the winner's image did not yet show its controller key,
    # so its loop dropped the won revision; every later campaign failed against its own
    # key and no leader was elected for three minutes, until its lease was revoked.
    async def scenario():
        async with EtcdClient(etcd.endpoints) as client:
            store = MetadataStore(client, Keys("campaign-test"))
            mine, other = await client.lease_grant(30), await client.lease_grant(30)
            won = await store.campaign(1, mine)
            assert won is not None
            assert await store.campaign(1, mine) == won  # its own key: still the controller
            assert await store.campaign(2, other) is None  # another node's campaign loses
            assert await store.campaign(1, other) is None  # and so does a new incarnation's lease
            await client.lease_revoke(mine)
            assert await store.campaign(2, other) is not None

    run(scenario())


def test_a_fencing_is_one_write_and_a_partition_changed_meanwhile_leaves_every_partition_as_it_was(etcd):
    # The controller writes every partition a fenced broker leaves in one transaction;
    # one partition changed since it was read refuses the whole write, and the
    # controller goes partition by partition instead.
    async def scenario():
        async with EtcdClient(etcd.endpoints) as client:
            keys = Keys("fencing-test")
            store = MetadataStore(client, keys)
            won = await store.campaign(1, await client.lease_grant(30))
            assert won is not None
            await store.create_topic(TopicRecord("t", uuid.uuid4(), 3, {}), [[3, 1, 2], [3, 2, 1], [1, 3, 2]])
            kvs = (await client.range(keys.partitions_prefix("t"), prefix=True)).kvs
            read = sorted((PartitionRecord.decode(kv) for kv in kvs), key=lambda r: r.partition)
            live = {1, 2}
            changes = [(r, elect_leader(r, live)) for r in read]
            assert all(changed is not None for _, changed in changes)

            await store.change_partition(read[0], lambda r: elect_leader(r, live), controller_revision=won)
            assert await store.change_partitions(changes, controller_revision=won) == []  # partition 0 is stale
            after = {PartitionRecord.decode(kv).partition: PartitionRecord.decode(kv)
                     for kv in (await client.range(keys.partitions_prefix("t"), prefix=True)).kvs}
            assert after[1].leader == 3 and 3 in after[2].isr  # nothing of the refused write landed

            fresh = [(after[p], elect_leader(after[p], live)) for p in (1, 2)]
            assert await store.change_partitions(fresh, controller_revision=won + 1) == []  # a deposed controller
            written = await store.change_partitions(fresh, controller_revision=won)
            assert [(w.leader, w.isr) for w in written] == [(2, (2, 1)), (1, (1, 2))]
            assert len({w.mod_revision for w in written}) == 1  # one revision: each watch sees one batch

    run(scenario())


def test_keepalive_keeps_a_leased_key_and_revoke_removes_it(etcd):
    async def scenario():
        async with EtcdClient(etcd.endpoints) as client:
            lease = await client.lease_grant(2)
            await client.put("/lease/kept", b"alive", lease=lease)
            for _ in range(6):  # 3 s: longer than the TTL
                assert await client.lease_keepalive(lease) == 2
                await asyncio.sleep(0.5)
            assert (await client.get("/lease/kept")).value == b"alive"
            await client.lease_revoke(lease)
            assert await client.get("/lease/kept") is None
            with pytest.raises(LeaseNotFound):
                await client.lease_keepalive(lease)

    run(scenario())


def test_watch_sees_puts_in_revision_order_and_resumes_after_reconnect(etcd):
    watched = next(i for i in range(3) if i != etcd.leader_index())  # writes go on meanwhile
    others = [endpoint for i, endpoint in enumerate(etcd.endpoints) if i != watched]

    async def collect(watch, events, count):
        while len(events) < count:
            revision, batch = await watch.__anext__()
            assert all(event.kv.mod_revision <= revision for event in batch)
            events += batch

    async def scenario():
        # The watcher's first endpoint is the member about to be killed.
        async with EtcdClient([etcd.endpoints[watched], *others]) as watcher, EtcdClient(others) as writer:
            start = (await writer.range("/watch/")).revision + 1
            watch = watcher.watch("/watch/", prefix=True, start_revision=start)
            events = []
            for i in range(3):
                await writer.put(f"/watch/{i}", str(i).encode())
            await collect(watch, events, 3)

            etcd.kill(watched)  # the watch's connection breaks; nothing reads it meanwhile
            for i in range(3, 6):
                await writer.put(f"/watch/{i}", str(i).encode())
            await writer.delete("/watch/0")
            await collect(watch, events, 7)
            await watch.aclose()

        revisions = [event.kv.mod_revision for event in events]
        assert revisions == sorted(set(revisions)) and len(revisions) == 7  # in order, none repeated
        assert revisions[0] == start
        assert [(e.type, e.kv.key, e.kv.value) for e in events] == [
            *[(EventType.PUT, f"/watch/{i}", str(i).encode()) for i in range(6)],
            (EventType.DELETE, "/watch/0", b""),
        ]

    try:
        run(scenario())
    finally:
        etcd.restart(watched)


def test_watch_of_a_compacted_revision_resyncs(etcd):
    async def scenario():
        async with EtcdClient(etcd.endpoints) as client:
            first = await client.put("/compact/key", b"v1")
            await client.put("/compact/key", b"v2")
            latest = await client.put("/compact/key", b"v3")
            await client.compact(latest)

            with pytest.raises(WatchCompacted) as compacted:
                async for _ in client.watch("/compact/key", start_revision=first):
                    pytest.fail("a compacted watch delivered events")
            assert compacted.value.compact_revision == latest

            # Resync: read the state at a revision, then watch from the next one.
            snapshot = await client.range("/compact/", prefix=True)
            assert [kv.value for kv in snapshot.kvs] == [b"v3"]
            watch = client.watch("/compact/", prefix=True, start_revision=snapshot.revision + 1)
            written = await client.put("/compact/key", b"v4")
            revision, events = await watch.__anext__()
            await watch.aclose()
            assert revision == written
            assert [(e.kv.value, e.kv.mod_revision) for e in events] == [(b"v4", written)]

    run(scenario())


def test_writes_continue_after_killing_one_member_of_three(etcd):
    leader = etcd.leader_index()

    async def scenario():
        async with EtcdClient(etcd.endpoints) as client:
            await client.put("/failover/key", b"before")
            etcd.kill(leader)
            killed_at = time.monotonic()
            while True:  # the first write may time out while the followers elect a leader
                try:
                    await client.put("/failover/key", b"0")
                    break
                except EtcdUnavailable:
                    assert time.monotonic() - killed_at < 10, "no write succeeded within 10 s"
            recovered_s = time.monotonic() - killed_at
            for i in range(1, 20):
                await client.put("/failover/key", str(i).encode())
            assert (await client.get("/failover/key")).value == b"19"
            return recovered_s

    try:
        recovered_s = run(scenario())
    finally:
        etcd.restart(leader)
    print(f"first write {recovered_s:.2f}s after the leader was killed")

    async def read_from_restarted():
        async with EtcdClient([etcd.endpoints[leader]]) as client:
            return (await client.get("/failover/key")).value

    assert run(read_from_restarted()) == b"19"  # it caught up with what it missed


def test_without_a_quorum_calls_fail_fast_as_refused_and_watches_give_up(etcd):
    survivor = 0

    async def scenario():
        # The survivor's refusal must come within the request timeout: 3 s leaves a slow
        # machine room (with 1 s a put once timed out there, indeterminate, instead).
        async with EtcdClient(etcd.endpoints, request_timeout_s=3.0, watch_reconnect_timeout_s=1.0) as client:
            start = await client.put("/quorum/key", b"before")
            watch = client.watch("/quorum/key", start_revision=start)
            assert (await watch.__anext__())[1][0].kv.value == b"before"
            etcd.kill(1)
            etcd.kill(2)
            deadline = time.monotonic() + 10
            while (leader := int(etcd.status(survivor).get("leader", 0))) and time.monotonic() < deadline:
                await asyncio.sleep(0.05)  # until the survivor knows it has no leader
            assert not leader, f"10 s after losing its peers the survivor still follows leader {leader:#x}"

            # It refuses at once ("no leader", asked for by the hasleader header) rather
            # than letting the write hang: nothing was proposed, so nothing is indeterminate.
            # (On a failure, the survivor's status, read after the put, says what it believed.)
            with pytest.raises(EtcdUnavailable) as unavailable:
                await client.put("/quorum/key", b"during")
            assert not unavailable.value.indeterminate, (str(unavailable.value), status_or_error(etcd, survivor))
            assert "no leader" in str(unavailable.value)
            # The survivor cancels the watch stream (perhaps after a progress notification
            # or two: no event); no other member takes it.
            with pytest.raises(EtcdUnavailable):
                async for _revision, events in watch:
                    assert events == []

    try:
        run(scenario())
    finally:
        etcd.restart(1)
        etcd.restart(2)

    async def after():
        async with EtcdClient(etcd.endpoints) as client:
            return (await client.get("/quorum/key")).value

    assert run(after()) == b"before"


def status_or_error(etcd: EtcdCluster, member: int) -> dict | str:
    """The member's status for a failure's message, or why it could not be read (so that
    reading it cannot replace the failure)."""
    try:
        return etcd.status(member)
    except OSError as error:
        return repr(error)


async def wait_for_value_equal(client: EtcdClient, key: str, value: bytes, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while (current := await client.get(key)) is None or current.value != value:
        assert time.monotonic() < deadline, f"{key} never became {value!r}"
        await asyncio.sleep(0.02)


class BlackHole:
    """A TCP proxy to one etcd member that loses what `drop` says, silently, keeping
    every connection open: "responses" forwards requests and drops etcd's answers;
    "requests" drops requests before etcd sees them; "both" is a network partition as a
    client sees it; None forwards everything (`drop` can change while connections run).
    `forwarded` counts the bytes etcd sent back that went through."""

    def __init__(self, upstream: str, drop: str | None) -> None:
        host, port = upstream.removeprefix("http://").split(":")
        self.upstream = (host, int(port))
        self.drop = drop
        self.forwarded = 0
        self.server: asyncio.Server  # set by __aenter__
        self.tasks: set[asyncio.Task] = set()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def __aenter__(self) -> Self:
        self.server = await asyncio.start_server(self.accept, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc_info) -> None:
        self.server.close()
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)

    async def accept(self, client_reader, client_writer) -> None:
        upstream_reader, upstream_writer = await asyncio.open_connection(*self.upstream)

        async def pump(reader, writer, direction: str) -> None:
            while data := await reader.read(65536):
                if self.drop not in (direction, "both"):
                    self.forwarded += len(data) if direction == "responses" else 0
                    writer.write(data)
                    await writer.drain()

        for task in (pump(client_reader, upstream_writer, "requests"),
                     pump(upstream_reader, client_writer, "responses")):
            self.tasks.add(asyncio.ensure_future(task))


def test_indeterminate_write_is_safe_to_retry_as_cas(etcd):
    async def cas_write(key: str, drop: str) -> None:
        async with EtcdClient(etcd.endpoints) as client:
            before = await client.get(key)
            assert before is not None  # written by the test
            compare = [Compare.mod_revision(key, "=", before.mod_revision)]
            async with BlackHole(etcd.endpoints[0], drop) as lossy, \
                    EtcdClient([lossy.endpoint], request_timeout_s=0.5) as lossy_client:
                with pytest.raises(EtcdUnavailable) as unavailable:
                    await lossy_client.txn(compare, [Op.put(key, b"new")])
                assert unavailable.value.indeterminate  # the client cannot know which case this is

            if drop == "responses":
                await wait_for_value_equal(client, key, b"new")  # the write whose answer was lost landed
            # The retry: the same CAS, with a read of the key when it fails.
            retry = await client.txn(compare, [Op.put(key, b"new")], [Op.range(key)])
            if drop == "responses":
                assert not retry.succeeded  # so the retry must not apply it again
                assert retry.responses[0][0].value == b"new"
            else:
                assert retry.succeeded  # the lost write never reached etcd: the retry applies it
            after = await client.get(key)
            assert after is not None
            assert (after.value, after.version) == (b"new", before.version + 1)  # applied exactly once

    async def scenario():
        async with EtcdClient(etcd.endpoints) as client:
            await client.put("/indeterminate/answer-lost", b"old")
            await client.put("/indeterminate/request-lost", b"old")
        await cas_write("/indeterminate/answer-lost", drop="responses")
        await cas_write("/indeterminate/request-lost", drop="requests")

    run(scenario())


def test_a_watch_on_a_member_cut_off_by_the_network_moves_to_another_member(etcd):
    """Nothing comes from a member across a partition, not even an error: a quiet watch
    hears progress notifications every second, so silence means cut, and the watch is
    made again on the next member from the revision after the last event."""
    async def scenario():
        async with EtcdClient(etcd.endpoints) as writer, BlackHole(etcd.endpoints[0], drop=None) as proxy:
            start = await writer.put("/cut/key", b"0")
            async with EtcdClient([proxy.endpoint, *etcd.endpoints[1:]]) as watcher:
                seen: asyncio.Queue = asyncio.Queue()

                async def follow() -> None:
                    async for _revision, events in watcher.watch("/cut/", prefix=True, start_revision=start + 1):
                        for event in events:
                            seen.put_nowait(event.kv.value)

                following = asyncio.ensure_future(follow())
                try:
                    await writer.put("/cut/key", b"1")
                    assert await asyncio.wait_for(seen.get(), 5) == b"1"
                    # No event now: progress notifications keep the quiet stream alive (the
                    # first comes within two intervals), so it is not taken as cut.
                    quiet_from = proxy.forwarded
                    deadline = time.monotonic() + watcher.watch_silence_timeout_s
                    while proxy.forwarded == quiet_from and time.monotonic() < deadline:
                        await asyncio.sleep(0.1)
                    assert proxy.forwarded > quiet_from
                    await writer.put("/cut/key", b"2")
                    assert await asyncio.wait_for(seen.get(), 5) == b"2"

                    proxy.drop = "both"
                    cut_at = time.monotonic()
                    await writer.put("/cut/key", b"3")
                    await writer.put("/cut/key", b"4")
                    assert await asyncio.wait_for(seen.get(), 10) == b"3"  # from another member, nothing lost
                    assert time.monotonic() - cut_at < watcher.watch_silence_timeout_s + 2
                    assert await asyncio.wait_for(seen.get(), 5) == b"4"
                    assert seen.empty()
                finally:
                    following.cancel()
                    await asyncio.gather(following, return_exceptions=True)

    run(scenario())


def test_missing_binary_gives_the_install_hint(monkeypatch, tmp_path):
    monkeypatch.setenv("ONCELOG_ETCD", str(tmp_path / "no-such-etcd"))
    with pytest.raises(FileNotFoundError, match=re.escape("ensure-etcd.sh")):
        find_etcd()

    # Nothing configured, nothing in the venv, nothing on PATH.
    monkeypatch.delenv("ONCELOG_ETCD")
    monkeypatch.setattr(sys, "prefix", str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(FileNotFoundError, match="make setup") as missing:
        find_etcd()
    assert "ensure-etcd.sh" in str(missing.value)
    with pytest.raises(FileNotFoundError):
        etcd_member.EtcdMember("n", tmp_path / "d", "http://127.0.0.1:1", "http://127.0.0.1:2",
                               "n=http://127.0.0.1:2").start()

    # The extracted package in the venv is found when nothing else is.
    binary = tmp_path / "etcd/usr/bin/etcd"
    binary.parent.mkdir(parents=True)
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    assert find_etcd() == str(binary)
