"""Topic set-up for the Spark tests, done with confluent-kafka (a client other than the
one under test), and the record layout the tests check against.

Record i of a topic filled by `fill` goes to partition i % partitions with key b"k<i>",
value b"v<i>", CreateTime timestamp T0 + i and header ("seq", b"<i>"); so partition p,
offset o holds record i = o * partitions + p.
"""
from __future__ import annotations

T0 = 1_700_000_000_000


def check_query(view: str, topic: str, partitions: int, *, headers: bool = False) -> str:
    """SQL over a DataFrame of a topic filled by `fill` (registered as `view`): row count,
    distinct (partition, offset) count, rows whose key, value, timestamp, topic, type (and
    headers) are those of record offset * partitions + partition, and min/max offset."""
    i = f"offset * {partitions} + partition"
    header_check = (f" AND size(headers) = 1 AND headers[0].key = 'seq'"
                    f" AND cast(headers[0].value AS string) = cast({i} AS string)") if headers else ""
    return f"""
        SELECT count(*) AS n,
               count(DISTINCT partition, offset) AS distinct_positions,
               sum(CASE WHEN cast(value AS string) = concat('v', {i})
                         AND cast(key AS string) = concat('k', {i})
                         AND unix_millis(timestamp) = {T0} + {i}
                         AND topic = '{topic}' AND timestampType = 0{header_check}
                        THEN 1 ELSE 0 END) AS correct,
               min(offset) AS lo, max(offset) AS hi
        FROM {view}"""


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)


def share_group_from_earliest(bootstrap: str, group: str) -> None:
    """Sets the share group's share.auto.offset.reset to earliest (a new group starts at the log end otherwise)."""
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    admin = AdminClient({"bootstrap.servers": bootstrap})
    res = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
    for f in admin.incremental_alter_configs([res]).values():
        f.result(30)


def add_partitions(bootstrap: str, topic: str, total: int) -> None:
    from confluent_kafka.admin import AdminClient, NewPartitions

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_partitions([NewPartitions(topic, total)])[topic].result(30)


def fill(bootstrap: str, topic: str, partitions: int, first: int, count: int, *, only_partitions=None) -> None:
    """Produces records first .. first+count-1 (see module docstring)."""
    from confluent_kafka import Producer

    errors: list = []
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 10, "batch.num.messages": 10000,
                  "enable.idempotence": True})
    for i in range(first, first + count):
        part = i % partitions
        if only_partitions is not None and part not in only_partitions:
            continue
        while True:
            try:
                p.produce(topic, value=b"v%d" % i, key=b"k%d" % i, partition=part, timestamp=T0 + i,
                          headers=[("seq", b"%d" % i)],
                          on_delivery=lambda err, msg: errors.append(err) if err else None)
                break
            except BufferError:
                p.poll(0.05)
    assert p.flush(60) == 0
    assert not errors, errors[:3]


def consume_all(bootstrap: str, topic: str, partitions: int, timeout: float = 30.0) -> list:
    """Every record of the topic as (partition, offset, key, value, headers), read with assign()."""
    import time

    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "spark-test-check", "enable.auto.commit": False,
                  "enable.partition.eof": True})
    try:
        ends = {}
        for p in range(partitions):
            _, hi = c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            ends[p] = hi
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        out = []
        done = {p for p, hi in ends.items() if hi == 0}
        deadline = time.monotonic() + timeout
        while len(done) < partitions and time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == -191:  # partition EOF
                    if msg.offset() >= ends[msg.partition()]:
                        done.add(msg.partition())
                    continue
                raise RuntimeError(msg.error())
            out.append((msg.partition(), msg.offset(), msg.key(), msg.value(), msg.headers() or []))
            if msg.offset() + 1 >= ends[msg.partition()]:
                done.add(msg.partition())
        return out
    finally:
        c.close()
