"""DescribeLogDirs (key 35), versions 0-4.

Each of this broker's log dirs with the partitions it holds (all, or the requested ones),
their sizes on disk (the segment files' bytes), offset lag 0 and is_future_key false (no
replica moves between dirs); v4 adds the file system's total and usable bytes. A dir taken
offline answers KAFKA_STORAGE_ERROR. Needs DESCRIBE on the cluster: without it v3+ answer
CLUSTER_AUTHORIZATION_FAILED at the top, older versions an empty list, as Kafka does.
"""
import os

from kafkafast.broker.registry import handles
from kafkafast.protocol import errors as E
from kafkafast.protocol._generated.describe_log_dirs import DescribeLogDirsRequest, DescribeLogDirsResponse
from kafkafast.security import acl
from kafkafast.security.context import denied

R = DescribeLogDirsResponse


def _disk(path: str) -> tuple[int, int]:
    try:
        st = os.statvfs(path)
    except OSError:
        return -1, -1
    return st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize


@handles(DescribeLogDirsRequest, 0, 4)
async def handle(broker, ctx, req: DescribeLogDirsRequest, version: int) -> DescribeLogDirsResponse:
    if denied(broker, ctx, acl.DESCRIBE, acl.CLUSTER):
        return R(throttle_time_ms=0, error_code=E.ErrorCode.CLUSTER_AUTHORIZATION_FAILED if version >= 3 else 0,
                 results=[])
    manager = broker.log_manager
    wanted = None if req.topics is None else {(t.topic, p) for t in req.topics for p in t.partitions}
    by_dir: dict[str, dict[str, list]] = {os.path.abspath(d): {} for d in manager.log_dirs}
    for log in manager.all_logs():
        key = (log.topic, log.partition)
        if wanted is not None and key not in wanted:
            continue
        parent = os.path.dirname(os.path.abspath(log.dir))
        size = sum(seg.size for seg in log.segments)
        by_dir.setdefault(parent, {}).setdefault(log.topic, []).append(
            R.DescribeLogDirsPartition(partition_index=log.partition, partition_size=size, offset_lag=0,
                                       is_future_key=False))
    results = []
    for d, topics in sorted(by_dir.items()):
        total, usable = _disk(d)
        offline = d in manager.offline_dirs
        results.append(R.DescribeLogDirsResult(
            error_code=E.ErrorCode.KAFKA_STORAGE_ERROR if offline else 0, log_dir=d,
            topics=[] if offline else [R.DescribeLogDirsTopic(name=t, partitions=sorted(
                ps, key=lambda p: p.partition_index)) for t, ps in sorted(topics.items())],
            total_bytes=total, usable_bytes=usable))
    return R(throttle_time_ms=0, error_code=0, results=results)
