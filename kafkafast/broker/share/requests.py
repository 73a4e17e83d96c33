"""What ShareFetch and ShareAcknowledge have in common: checking the group and the member,
resolving topic ids, READ on each topic, and applying acknowledgement batches."""
from __future__ import annotations

from typing import Any

from kafkafast.broker.share.manager import HeldWrites, PartitionAnswer
from kafkafast.protocol import errors as E
from kafkafast.security import acl
from kafkafast.security.context import denied

EC = E.ErrorCode


def request_error(broker: Any, ctx: Any, group_id: str | None, member_id: str | None) -> tuple[int, str | None]:
    """The top-level error of a ShareFetch / ShareAcknowledge, or (0, None)."""
    if not group_id:
        return EC.INVALID_REQUEST, "GroupId must be non-empty."
    if not member_id:
        return EC.INVALID_REQUEST, "MemberId must be non-empty."
    if denied(broker, ctx, acl.READ, acl.GROUP, group_id):
        return EC.GROUP_AUTHORIZATION_FAILED, None
    return 0, None


def resolve(broker: Any, ctx: Any, topic_id: bytes, partitions: list[int],
            answers: dict[tuple[str, int], PartitionAnswer]) -> str | None:
    """The topic's name, or None after answering each of `partitions` with the topic's error
    (UNKNOWN_TOPIC_ID, TOPIC_AUTHORIZATION_FAILED)."""
    meta = broker.topics.by_id.get(topic_id)
    if meta is None:
        broker.refresh_topics()
        meta = broker.topics.by_id.get(topic_id)
    if meta is None:
        err = EC.UNKNOWN_TOPIC_ID
    elif denied(broker, ctx, acl.READ, acl.TOPIC, meta.name):
        err = EC.TOPIC_AUTHORIZATION_FAILED
    else:
        return meta.name
    for p in partitions:
        answers[(topic_id.hex(), p)] = PartitionAnswer("", topic_id, p, error=err, ack_error=err)
    return None


async def apply_acks(broker: Any, group_id: str, member_id: str, topic: str, topic_id: bytes, partition: int,
               batches: list[Any], answers: dict[tuple[str, int], PartitionAnswer],
               held: HeldWrites | None = None) -> None:
    """Applies one partition's acknowledgement batches; the result goes into its answer (the
    state write goes to `held` when given: see `write_held`)."""
    answer = answers.setdefault((topic, partition), PartitionAnswer(topic, topic_id, partition))
    answer.acked = True
    part, answer.ack_error = await loaded_partition(broker, group_id, topic, topic_id, partition)
    if answer.ack_error:
        return
    answer.ack_error, answer.ack_message = broker.share.partitions.acknowledge(
        group_id, member_id, topic, topic_id, part,
        [(b.first_offset, b.last_offset, list(b.acknowledge_types)) for b in batches], held)


def local_partition(broker: Any, topic: str, partition: int) -> tuple[Any, int]:
    """(the partition, 0) when this broker serves its records (any worker reads any partition;
    in cluster mode only its leader), else (None or it, the error)."""
    part = broker.get_partition(topic, partition)
    if part is None:
        return None, EC.UNKNOWN_TOPIC_OR_PARTITION
    not_leader = broker.replicas.fetch_error(part, -1)
    if not_leader:
        return part, not_leader
    if part.state.offline:
        return part, EC.KAFKA_STORAGE_ERROR
    return part, 0


async def loaded_partition(broker: Any, group_id: str, topic: str, topic_id: bytes, partition: int,
                           verify: bool = False) -> tuple[Any, int]:
    """`local_partition`, with the group's share-partition of it loaded (its error if that failed;
    `verify`: see `SharePartitionManager.prepare`)."""
    part, err = local_partition(broker, topic, partition)
    if not err:
        try:
            await broker.share.partitions.prepare(group_id, topic, topic_id, part, verify=verify)
        except E.KafkaError as exc:
            err = exc.code
    return part, err


def current_leader(broker: Any, answer: PartitionAnswer, cls: Any) -> Any:
    """The partition's LeaderIdAndEpoch for an answer (-1, -1 when the topic is unknown)."""
    part = broker.get_partition(answer.topic, answer.partition) if answer.topic else None
    if part is None:
        return cls(leader_id=-1, leader_epoch=-1)
    return cls(leader_id=broker.node_id, leader_epoch=part.leader_epoch)


def write_held(broker: Any, held: HeldWrites, answers: dict[tuple[str, int], PartitionAnswer]) -> None:
    """Writes the state changes `held` holds (one write per share-partition); a partition whose
    write failed answers its error for its acknowledgements, and for its acquisition without
    the records (they stay acquired until their lock expires)."""
    for key, exc in broker.share.partitions.flush(held).items():
        a = answers.get(key)
        if a is None:
            continue
        if a.acked and not a.ack_error:
            a.ack_error, a.ack_message = exc.code, exc.message
        if a.acquired:
            a.error, a.message, a.records, a.acquired = exc.code, exc.message, b"", []


async def persisted(broker: Any, answers: dict[tuple[str, int], PartitionAnswer], group_id: str | None = None) -> None:
    """Waits for the state writes of this request (forwarded to another worker, sent to the
    share coordinator, or waiting for the ISR); their error (if any) becomes the acknowledgement
    error of the partitions acknowledged. With the request's `group_id`: the writes not done yet
    of the share-partitions it answers for (its own, and earlier ones of the same share-partitions,
    which its state follows), not those of other share-partitions or groups (the acknowledgements
    and acquisitions of other members and the state writes this broker coordinates for other
    brokers' share-partitions, which it has nothing to wait for); without: every write not done
    yet (a session's close releases records of partitions the request does not name)."""
    store = broker.share.store
    if group_id is None:
        err = await store.settled()
    else:
        keys = {(group_id, a.topic_id, a.partition) for a in answers.values()}
        err = await store.settled([(key, fut) for key, fut in store.pending if key in keys])
    if err:
        for a in answers.values():
            if a.acked and not a.ack_error:
                a.ack_error = err
