"""DescribeLogDirs (key 35), v1-v5.

- One result per configured log dir (its absolute path), each listing the partitions it
  holds: all of them when `topics` is null, else those asked for (an asked-for
  partition that does not exist is left out, as in Kafka). Partition size is the bytes
  of its segments; offset lag is max(0, high watermark - log end offset), 0 on a single
  node as on any leader; no future (AlterReplicaLogDirs) logs exist.
- v4+: the volume's total and usable bytes (`shutil.disk_usage`); v5: no dir is
  cordoned. A dir that is offline (an I/O error took it offline: cluster mode) or whose
  volume cannot be read answers KAFKA_STORAGE_ERROR, with no partitions, as in Kafka.
- Needs Cluster DESCRIBE: else the answer is CLUSTER_AUTHORIZATION_FAILED with no log
  dirs, as Kafka's.
"""

from __future__ import annotations

import shutil
from collections import defaultdict
from pathlib import Path

from oncelog.broker.dispatch import RequestContext, api
from oncelog.protocol.messages import NO_THROTTLE, ErrorCode
from oncelog.security.acl import AclOperation


@api(35, "DescribeLogDirs", range(1, 6))
async def handle(ctx: RequestContext, request) -> object:
    make = ctx.response.make
    if not ctx.authorize_cluster(AclOperation.DESCRIBE):
        return make("DescribeLogDirsResponse", throttle_time=NO_THROTTLE,
                    error_code=ErrorCode.cluster_authorization_failed, results=())
    logs = ctx.broker.logs
    if request.topics is None:
        wanted = None
    else:
        wanted = {(topic.topic, index) async for topic in ctx.paced(request.topics)
                  async for index in ctx.paced(topic.partitions)}
    by_dir: dict[Path, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    for log_ in logs.partitions():
        if wanted is not None and (log_.topic, log_.partition) not in wanted:
            continue
        directory = logs.log_dir_of(log_.topic, log_.partition)
        if directory is None:
            continue  # in no log dir: no result below would list it
        by_dir[directory][log_.topic].append(make(
            "DescribeLogDirsPartition",
            partition_index=log_.partition,
            partition_size=log_.size_in_bytes,
            offset_lag=max(0, log_.high_watermark - log_.log_end_offset),
            is_future_key=False,
        ))
    results = []
    for directory in logs.log_dirs:
        if directory in logs.offline_dirs:
            results.append(make("DescribeLogDirsResult", error_code=ErrorCode.kafka_storage_error,
                                log_dir=str(directory.absolute()), topics=()))
            continue
        try:
            usage = shutil.disk_usage(directory)
        except OSError:
            results.append(make("DescribeLogDirsResult", error_code=ErrorCode.kafka_storage_error,
                                log_dir=str(directory.absolute()), topics=()))
            continue
        topics = tuple(
            make("DescribeLogDirsTopic", name=name,
                 partitions=tuple(sorted(partitions, key=lambda p: p.partition_index)))
            for name, partitions in sorted(by_dir[directory].items())
        )
        results.append(make(
            "DescribeLogDirsResult", error_code=ErrorCode.none, log_dir=str(directory.absolute()), topics=topics,
            total_bytes=usage.total, usable_bytes=usage.free, is_cordoned=False,
        ))
    return make("DescribeLogDirsResponse", throttle_time=NO_THROTTLE, error_code=ErrorCode.none,
                results=tuple(results))
