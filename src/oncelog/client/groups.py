"""A group's committed offset, as a transactional consume-transform-produce reader asks for
it: OffsetFetch (v7+) with `require_stable`, so an offset still pending in an open
transaction is waited for (UNSTABLE_OFFSET_COMMIT, retried) and never read as absent."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from oncelog.client.cluster import GROUP_COORDINATOR, Cluster
from oncelog.protocol.messages import RequestBuilder

OFFSET_FETCH_KEY = 9
NO_OFFSET = -1


def committed_offset(cluster: Cluster, group_id: str, topic: str, partition: int, *, deadline: float) -> int:
    """The offset `group_id` committed for topic-partition, NO_OFFSET when none; retries a
    moving coordinator and unstable offsets until `deadline` (time.monotonic())."""

    def call() -> int:
        connection = cluster.coordinator(group_id, GROUP_COORDINATOR)
        version = connection.version(OFFSET_FETCH_KEY, 7, 7)
        build = RequestBuilder(OFFSET_FETCH_KEY, version)
        request = build.make(
            "OffsetFetchRequest", group_id=group_id, require_stable=True,
            topics=(build.make("OffsetFetchRequestTopic", name=topic, partition_indexes=(partition,)),),
        )
        response = connection.request(request)
        what = f"OffsetFetch of {group_id!r}"
        cluster.check_coordinator_answer(response.error_code, group_id, GROUP_COORDINATOR, what)
        for answer in response.topics:
            for data in answer.partitions:
                if answer.name == topic and data.partition_index == partition:
                    cluster.check_coordinator_answer(data.error_code, group_id, GROUP_COORDINATOR, what)
                    return int(data.committed_offset)
        return NO_OFFSET

    return cluster.retrying(f"OffsetFetch of {group_id!r} for {topic}-{partition}", deadline, call)


__all__ = ["NO_OFFSET", "ErrorCode", "committed_offset"]
