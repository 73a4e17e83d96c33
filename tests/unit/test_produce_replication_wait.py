"""acks=all: a produce's partitions wait for their high watermarks one after the other within
one deadline (handlers/produce.py `_waited_in_turn`, and `ParkedProduce`, the parked answer a
client connection takes: answered within the call that moves the high watermark), over real
logs and Partition objects."""
from __future__ import annotations

import asyncio
from types import SimpleNamespace

from kafkafast.broker.follower_state import FollowerState
from kafkafast.broker.handlers.produce import ParkedProduce, PartResp, TopicResp, _waited_in_turn
from kafkafast.broker.replica_manager import ReplicaManager
from kafkafast.protocol import api
from kafkafast.protocol._generated.produce import ProduceResponse
from kafkafast.broker.partition import Partition
from kafkafast.protocol import errors as E
from kafkafast.protocol._generated.leader_and_isr import LeaderAndIsrRequest
from kafkafast.records import encode_batch
from kafkafast.storage import LogConfig
from kafkafast.storage.log import Log

LEADER, FOLLOWER = 1, 2


def state(leader: int, epoch: int, index: int = 0):
    return LeaderAndIsrRequest.LeaderAndIsrPartitionState(
        topic_name="t", partition_index=index, controller_epoch=1, leader=leader, leader_epoch=epoch,
        isr=[LEADER, FOLLOWER], partition_epoch=epoch, replicas=[LEADER, FOLLOWER])


def led_partition(tmp_path, index: int) -> Partition:
    log = Log.open(str(tmp_path / f"t-{index}"), "t", index, LogConfig.from_props({}), needs_recovery=False,
                   recovery_point=0)
    part = Partition("t", index, log)
    part.apply_state(state(LEADER, 1, index), is_leader=True)
    part.followers = {FOLLOWER: FollowerState(0)}
    return part


def appended(part: Partition, n: int = 3) -> tuple[int, int]:
    """A leader's append of `n` records: (the offset the high watermark must reach, leading_since)."""
    res = part.log.append(bytearray(encode_batch([(1, None, b"v", ()) for _ in range(n)])), part.leader_epoch,
                          now_ms=1)
    return res.last_offset + 1, part.leading_since


def follower_reports(parts: list[Partition]) -> None:
    """The follower's Fetch reporting every partition at the log end (what `on_replica_fetch` does)."""
    for part in parts:
        part.followers[FOLLOWER].on_fetch(part.log.state.log_end_offset, part.log.state.log_end_offset, 1)
        part.maybe_increment_hw(LEADER)


def test_one_follower_fetch_answers_every_partition_with_one_parked_wait(tmp_path):
    parts = [led_partition(tmp_path, i) for i in range(3)]
    waits = [(None, i, p, *appended(p)) for i, p in enumerate(parts)]

    async def run():
        task = asyncio.ensure_future(_waited_in_turn(waits, 30.0))
        await asyncio.sleep(0)
        parked = [len(p.hw_waiters) for p in parts]  # only the first partition's wait is parked
        follower_reports(parts)
        return parked, await task

    parked, codes = asyncio.run(run())
    assert parked == [1, 0, 0]
    assert codes == [0, 0, 0]


def test_a_partition_whose_leadership_broke_meanwhile_is_not_acknowledged(tmp_path):
    first, second = led_partition(tmp_path, 0), led_partition(tmp_path, 1)
    waits = [(None, 0, first, *appended(first)), (None, 1, second, *appended(second))]

    async def run():
        task = asyncio.ensure_future(_waited_in_turn(waits, 30.0))
        await asyncio.sleep(0)
        # while the first waits: the second is led by another broker, then here again at a new
        # epoch, and its high watermark passes the offset (records that may not be the ones appended)
        second.apply_state(state(FOLLOWER, 2, 1), is_leader=False)
        second.apply_state(state(LEADER, 3, 1), is_leader=True)
        follower_reports([first, second])
        assert second.state.high_watermark >= waits[1][3]
        return await task

    assert asyncio.run(run()) == [0, E.ErrorCode.NOT_LEADER_OR_FOLLOWER]


def test_the_partitions_share_the_request_timeout(tmp_path):
    first, second = led_partition(tmp_path, 0), led_partition(tmp_path, 1)
    waits = [(None, 0, first, *appended(first)), (None, 1, second, *appended(second))]

    async def run():
        loop = asyncio.get_running_loop()
        start = loop.time()
        codes = await _waited_in_turn(waits, 0.5)
        return codes, loop.time() - start

    codes, waited = asyncio.run(run())
    assert codes == [E.ErrorCode.REQUEST_TIMED_OUT, E.ErrorCode.REQUEST_TIMED_OUT]
    assert waited < 2 * 0.5 - 0.05  # one deadline, not one per partition (the second waits ~0)


def parked_produce(parts: list[Partition], timeout_s: float = 30.0):
    """A ParkedProduce of one batch appended to each partition, and its answers as delivered:
    [(partition codes, remote seconds)]. Its broker: the replica manager's ISR check (which
    reads only the partition)."""
    tr = TopicResp(name="t", partition_responses=[])
    waits = []
    for i, p in enumerate(parts):
        offset, since = appended(p)
        tr.partition_responses.append(PartResp(index=i, error_code=0, base_offset=offset - 3, log_append_time_ms=-1,
                                               log_start_offset=0, record_errors=[], error_message=None))
        waits.append((tr, i, p, offset, since))
    broker = SimpleNamespace(replicas=object.__new__(ReplicaManager))
    ctx = SimpleNamespace(api_version=8, header=SimpleNamespace(correlation_id=7))
    response = ProduceResponse(responses=[tr], throttle_time_ms=0, node_endpoints=[])
    delivered = []

    def deliver(frame_parts, remote_s):
        correlation_id, body = api.decode_response(0, 8, b"".join(frame_parts)[4:])
        assert correlation_id == 7
        delivered.append(([r.error_code for r in body.responses[0].partition_responses], remote_s))
    return ParkedProduce(broker, ctx, response, waits, timeout_s), delivered, deliver


def test_a_parked_produce_is_answered_within_the_follower_fetch_that_moves_the_high_watermark(tmp_path):
    parts = [led_partition(tmp_path, i) for i in range(3)]

    async def run():
        parked, delivered, deliver = parked_produce(parts)
        parked.answer_later(deliver)
        registered = [len(p.hw_waiters) for p in parts]  # only the first partition's wait is registered
        follower_reports(parts[:1])
        waiting = list(delivered)  # the others' high watermarks have not moved yet
        follower_reports(parts[1:])
        return registered, waiting, list(delivered)  # no loop pass in between: the very call answered

    registered, waiting, delivered = asyncio.run(run())
    assert registered == [1, 0, 0]
    assert waiting == []
    assert [codes for codes, _ in delivered] == [[0, 0, 0]]


def test_a_parked_produce_whose_partition_leadership_broke_is_not_acknowledged(tmp_path):
    first, second = led_partition(tmp_path, 0), led_partition(tmp_path, 1)

    async def run():
        parked, delivered, deliver = parked_produce([first, second])
        parked.answer_later(deliver)
        second.apply_state(state(FOLLOWER, 2, 1), is_leader=False)
        second.apply_state(state(LEADER, 3, 1), is_leader=True)
        follower_reports([second, first])
        return delivered

    assert [codes for codes, _ in asyncio.run(run())] == [[0, E.ErrorCode.NOT_LEADER_OR_FOLLOWER]]


def test_a_parked_produce_times_out_once_for_all_its_partitions(tmp_path):
    first, second = led_partition(tmp_path, 0), led_partition(tmp_path, 1)

    async def run():
        parked, delivered, deliver = parked_produce([first, second], timeout_s=0.3)
        parked.answer_later(deliver)
        while not delivered:
            await asyncio.sleep(0.05)
        follower_reports([first, second])  # a late high-watermark move answers nothing more
        return delivered

    delivered = asyncio.run(run())
    assert [codes for codes, _ in delivered] == [[E.ErrorCode.REQUEST_TIMED_OUT] * 2]
