"""The group coordinator in process (a real `Broker` on a temp dir, no sockets): Kafka's error
codes and state transitions for the cases real clients rarely hit."""
from __future__ import annotations

import asyncio
import time

import pytest

from kafkafast.broker.broker import Broker
from kafkafast.broker.group_coordinator import OffsetCommitEntry, java_string_hash
from kafkafast.broker.handlers import find_coordinator
from kafkafast.config import BrokerConfig
from kafkafast.protocol._generated.find_coordinator import FindCoordinatorRequest
from kafkafast.protocol.errors import ErrorCode as EC

PROTOCOLS = [("range", b"\x00\x00\x00\x00\x00\x01\x00\x01t\x00\x00\x00\x00")]


def run(tmp_path, body, **settings):
    props = {"log.dirs": str(tmp_path / "data"), "group.initial.rebalance.delay.ms": "0",
             "offsets.topic.num.partitions": "3", "group.min.session.timeout.ms": "100",
             "listeners": "PLAINTEXT://127.0.0.1:9092"}
    props.update(settings)

    async def main():
        broker = Broker(BrokerConfig.load(overrides=props))
        await broker.start()
        try:
            if broker.topics.get("t") is None:
                broker.create_topic("t", 2)
            return await body(broker, broker.group_coordinator)
        finally:
            await broker.stop()

    return asyncio.run(main())


async def join(gc, group="g", member="", instance=None, protocols=PROTOCOLS, session=1000, known=True):
    return await gc.join_group(group, member, instance, "client", "/127.0.0.1", session, session, "consumer",
                               protocols, require_known_member_id=known)


def test_partition_for_is_kafkas_placement():
    # Java: "".hashCode() == 0, "abc".hashCode() == 96354, "polygenelubricants".hashCode() == MIN_VALUE,
    # and hashCode counts UTF-16 units ("\U0001F600" is two surrogates: 55357 * 31 + 56832).
    assert java_string_hash("") == 0
    assert java_string_hash("abc") == 96354
    assert java_string_hash("polygenelubricants") == -2147483648
    assert java_string_hash("\U0001F600") == 55357 * 31 + 56832


def test_member_id_required_then_join_completes_as_leader(tmp_path):
    async def body(broker, gc):
        first = await join(gc)
        assert first.error == EC.MEMBER_ID_REQUIRED and first.member_id.startswith("client-")
        res = await join(gc, member=first.member_id)
        assert (res.error, res.generation, res.protocol_name, res.leader) == (0, 1, "range", first.member_id)
        assert [m[0] for m in res.members] == [first.member_id]
        assert gc.groups["g"].state.value == "CompletingRebalance"
        sync = await gc.sync_group("g", 1, first.member_id, None, "consumer", "range", [(first.member_id, b"A")])
        assert (sync.error, sync.assignment) == (0, b"A")
        assert gc.groups["g"].state.value == "Stable"
        assert gc.heartbeat("g", first.member_id, None, 1) == 0
        assert gc.heartbeat("g", first.member_id, None, 0) == EC.ILLEGAL_GENERATION
        assert gc.heartbeat("g", "nobody", None, 1) == EC.UNKNOWN_MEMBER_ID
        assert gc.heartbeat("unknown-group", "x", None, 1) == EC.UNKNOWN_MEMBER_ID
    run(tmp_path, body)


def test_join_errors(tmp_path):
    async def body(broker, gc):
        assert (await join(gc, group="")).error == EC.INVALID_GROUP_ID
        assert (await join(gc, session=10)).error == EC.INVALID_SESSION_TIMEOUT
        assert (await join(gc, member="stranger")).error == EC.UNKNOWN_MEMBER_ID
        a = await join(gc, known=False)
        assert a.error == 0
        other = await join(gc, protocols=[("other", b"")], known=False)
        assert other.error == EC.INCONSISTENT_GROUP_PROTOCOL
    run(tmp_path, body)


def test_protocol_is_chosen_among_common_ones_by_votes(tmp_path):
    async def body(broker, gc):
        joins = [
            join(gc, protocols=[("roundrobin", b""), ("range", b"")], known=False),
            join(gc, protocols=[("range", b""), ("roundrobin", b"")], known=False),
            join(gc, protocols=[("sticky", b""), ("roundrobin", b""), ("range", b"")], known=False),
        ]
        results = await asyncio.gather(*joins)
        assert {r.protocol_name for r in results} == {"roundrobin"}
        assert len({r.generation for r in results}) == 1
        assert sum(1 for r in results if r.members) == 1  # only the leader sees the members
    run(tmp_path, body, **{"group.initial.rebalance.delay.ms": "50"})


def test_session_timeout_evicts_member_and_rebalances(tmp_path):
    async def body(broker, gc):
        a, b = await asyncio.gather(join(gc, known=False, session=300), join(gc, known=False, session=5000))
        for r in (a, b):
            await gc.sync_group("g", r.generation, r.member_id, None, None, None,
                                [(a.member_id, b"1"), (b.member_id, b"2")] if r.leader == r.member_id else [])
        for _ in range(8):  # b heartbeats, a does not
            await asyncio.sleep(0.1)
            gc.heartbeat("g", b.member_id, None, b.generation)
        assert gc.heartbeat("g", b.member_id, None, b.generation) == EC.REBALANCE_IN_PROGRESS
        assert a.member_id not in gc.groups["g"].members
        again = await join(gc, member=b.member_id, session=5000)
        assert (again.error, again.generation, again.leader) == (0, b.generation + 1, b.member_id)
    run(tmp_path, body, **{"group.initial.rebalance.delay.ms": "50"})


def test_static_member_rejoin_fences_the_old_member_id(tmp_path):
    async def body(broker, gc):
        one, two = await asyncio.gather(join(gc, instance="inst-1", known=False),
                                        join(gc, instance="inst-2", known=False))
        assert one.generation == two.generation == 1
        leader, follower = (one, two) if one.leader == one.member_id else (two, one)
        await asyncio.gather(
            gc.sync_group("g", 1, leader.member_id, None, None, None,
                          [(one.member_id, b"A"), (two.member_id, b"B")]),
            gc.sync_group("g", 1, follower.member_id, None, None, None, []))
        assert gc.groups["g"].state.value == "Stable"
        # The follower restarts: same instance id, no member id. It takes over its old
        # assignment at once (no rebalance), and its old member id is fenced.
        instance = "inst-1" if follower is one else "inst-2"
        again = await join(gc, instance=instance, known=False)
        assert again.error == 0 and again.member_id != follower.member_id and again.generation == 1
        assert gc.groups["g"].state.value == "Stable"
        assert gc.heartbeat("g", follower.member_id, instance, 1) == EC.FENCED_INSTANCE_ID
        assert gc.heartbeat("g", again.member_id, instance, 1) == 0
        sync = await gc.sync_group("g", 1, again.member_id, instance, None, None, [])
        assert sync.assignment == (b"A" if follower is one else b"B")
        top, errors = gc.leave_group("g", [("", instance), ("", "inst-9"), (follower.member_id, "inst-1" if
                                                                             instance == "inst-2" else "inst-2")])
        assert (top, errors) == (0, [0, EC.UNKNOWN_MEMBER_ID, EC.FENCED_INSTANCE_ID])
        assert gc.groups["g"].state.value == "PreparingRebalance"
    run(tmp_path, body, **{"group.initial.rebalance.delay.ms": "50"})


OWNED = [("range", b"\x00\x01\x00\x00\x00\x01\x00\x01t\x00\x00\x00\x00\x00\x00\x00\x01\x00\x01t\x00\x00\x00\x01"
                    b"\x00\x00\x00\x00")]  # v1 metadata naming an owned partition: not what the member sent before


@pytest.mark.parametrize("restarting", ["leader", "follower"])
def test_a_static_member_rejoining_a_stable_group_takes_its_place_without_a_rebalance(tmp_path, restarting):
    """Kafka's updateStaticMemberAndRebalance: in Stable, with the group's protocol unchanged, no
    rebalance whatever the new subscription metadata or whether the member led; the answer
    carries the old leader id and no member list (before JoinGroup v9 a leader must not
    compute an assignment the stable group would not send)."""
    async def body(broker, gc):
        one, two = await asyncio.gather(join(gc, instance="inst-1", known=False),
                                        join(gc, instance="inst-2", known=False))
        leader, follower = (one, two) if one.leader == one.member_id else (two, one)
        await asyncio.gather(
            gc.sync_group("g", 1, leader.member_id, None, None, None, [(one.member_id, b"A"), (two.member_id, b"B")]),
            gc.sync_group("g", 1, follower.member_id, None, None, None, []))
        gone = leader if restarting == "leader" else follower
        stays = follower if gone is leader else leader
        instance = "inst-1" if gone is one else "inst-2"
        again = await join(gc, instance=instance, known=False, protocols=OWNED)
        assert (again.error, again.generation, again.leader, again.members) == (0, 1, leader.member_id, [])
        assert gc.groups["g"].state.value == "Stable"
        assert gc.heartbeat("g", stays.member_id, None, 1) == 0  # no REBALANCE_IN_PROGRESS for the other
        sync = await gc.sync_group("g", 1, again.member_id, instance, None, None, [])
        assert (sync.error, sync.assignment) == (0, b"A" if gone is one else b"B")
        assert gc.heartbeat("g", gone.member_id, instance, 1) == EC.FENCED_INSTANCE_ID
    run(tmp_path, body, **{"group.initial.rebalance.delay.ms": "50"})


def test_a_static_member_rejoining_with_a_protocol_that_changes_the_groups_choice_rebalances(tmp_path):
    both = [("range", b""), ("roundrobin", b"")]
    async def body(broker, gc):
        first = await join(gc, instance="inst-1", known=False, protocols=both)
        await gc.sync_group("g", 1, first.member_id, None, None, None, [(first.member_id, b"A")])
        assert (gc.groups["g"].state.value, gc.groups["g"].protocol_name) == ("Stable", "range")
        again = await join(gc, instance="inst-1", known=False, protocols=[("roundrobin", b"")])
        assert (again.error, again.generation, again.protocol_name) == (0, 2, "roundrobin")
    run(tmp_path, body)


def test_a_static_member_that_does_not_rejoin_in_time_stays_in_the_next_generation(tmp_path):
    """Kafka's onCompleteJoin removes only the dynamic members that did not rejoin: a static one
    (KIP-345) stays, its old subscription in the leader's member list, and a member that did
    rejoin leads when the leader did not; it is removed only when its session ends."""
    async def body(broker, gc):
        def static(instance: str, member: str = ""):  # a 10 s session, a 1 s rebalance timeout
            return gc.join_group("g", member, instance, "client", "/127.0.0.1", 10_000, 1000, "consumer",
                                 PROTOCOLS, require_known_member_id=False)

        one, two = await asyncio.gather(static("inst-1"), static("inst-2"))
        leader, follower = (one, two) if one.leader == one.member_id else (two, one)
        await asyncio.gather(
            gc.sync_group("g", 1, leader.member_id, None, None, None, [(one.member_id, b"A"), (two.member_id, b"B")]),
            gc.sync_group("g", 1, follower.member_id, None, None, None, []))
        # a new dynamic member: a rebalance the follower rejoins and the (silent) leader does not
        joining = asyncio.ensure_future(join(gc, known=False, session=1000))
        await asyncio.sleep(0.1)
        rejoined = await static("inst-1" if follower is one else "inst-2", follower.member_id)
        third = await joining
        assert rejoined.error == third.error == 0 and rejoined.generation == third.generation == 2
        assert rejoined.leader in (rejoined.member_id, third.member_id)  # one that rejoined leads
        lead = rejoined if rejoined.leader == rejoined.member_id else third
        assert sorted(m[0] for m in lead.members) == sorted([one.member_id, two.member_id, third.member_id])
        assert leader.member_id in gc.groups["g"].members
        assert gc.describe_group("g").state == "CompletingRebalance"
    run(tmp_path, body, **{"group.initial.rebalance.delay.ms": "50"})


def test_offsets_commit_fetch_delete_and_group_deletion(tmp_path):
    async def body(broker, gc):
        entries = [OffsetCommitEntry("t", 0, 10, 3, "meta"), OffsetCommitEntry("t", 1, 20, -1, None)]
        assert gc.commit_offsets("simple", "", None, -1, entries) == {("t", 0): 0, ("t", 1): 0}
        assert gc.commit_offsets("simple", "", None, 5, entries)[("t", 0)] == EC.UNKNOWN_MEMBER_ID
        assert gc.commit_offsets("nogroup", "m", None, 5, entries)[("t", 0)] == EC.ILLEGAL_GENERATION
        big = [OffsetCommitEntry("t", 0, 1, -1, "x" * 5000)]
        assert gc.commit_offsets("simple", "", None, -1, big) == {("t", 0): EC.OFFSET_METADATA_TOO_LARGE}
        err, found = gc.fetch_offsets("simple", None)
        assert err == 0 and [(t, p, c.offset, c.leader_epoch, c.metadata) for t, p, c in found] == [
            ("t", 0, 10, 3, "meta"), ("t", 1, 20, -1, "")]
        assert gc.fetch_offsets("simple", [("t", 5)]) == (0, [("t", 5, None)])
        top, res = gc.delete_offsets("simple", [("t", 1)])
        assert (top, res) == (0, {("t", 1): 0})
        assert [(t, p) for t, p, _ in gc.fetch_offsets("simple", None)[1]] == [("t", 0)]
        m = await join(gc, group="busy", known=False)
        assert gc.delete_groups(["simple", "busy", "none"]) == {
            "simple": 0, "busy": EC.NON_EMPTY_GROUP, "none": EC.GROUP_ID_NOT_FOUND}
        assert gc.fetch_offsets("simple", None) == (0, [])
        assert gc.describe_group("busy").state == "CompletingRebalance"
        assert gc.describe_group("ghost").state == "Dead"
        assert [g for g, _, _, _ in gc.list_groups(["completingrebalance"])] == ["busy"]
        assert gc.list_groups(["Stable"]) == []
        assert m.error == 0
    run(tmp_path, body)


def test_offsets_of_an_empty_group_expire_and_the_group_goes(tmp_path):
    async def body(broker, gc):
        gc.commit_offsets("old", "", None, -1, [OffsetCommitEntry("t", 0, 5, -1, "")])
        gc.offsets_retention_ms = 50
        await asyncio.sleep(0.1)
        assert gc.expire_offsets(int(time.time() * 1000)) == 1
        assert "old" not in gc.groups
    run(tmp_path, body)


def test_committed_offsets_and_groups_load_back_after_restart(tmp_path):
    async def first(broker, gc):
        r = await join(gc, group="kept", known=False)
        await gc.sync_group("kept", r.generation, r.member_id, None, None, None, [(r.member_id, b"assign")])
        gc.commit_offsets("kept", r.member_id, None, r.generation, [OffsetCommitEntry("t", 1, 77, 2, "x")])
        return r

    r = run(tmp_path, first)

    async def second(broker, gc):
        while gc.loading:
            assert gc.status("kept", "offset_fetch") in (0, EC.COORDINATOR_LOAD_IN_PROGRESS)
            await asyncio.sleep(0.01)
        group = gc.groups["kept"]
        assert (group.state.value, group.generation, group.leader_id) == ("Stable", r.generation, r.member_id)
        assert group.members[r.member_id].assignment == b"assign"
        assert gc.fetch_offsets("kept", [("t", 1)])[1][0][2].offset == 77
        assert gc.heartbeat("kept", r.member_id, None, r.generation) == 0

    run(tmp_path, second)


@pytest.mark.parametrize("version", [1, 3])
def test_find_coordinator_for_transactions(tmp_path, version):
    async def body(broker, gc):
        res = await find_coordinator.handle(broker, None, FindCoordinatorRequest(key="tx", key_type=1), version)
        assert (res.error_code, res.node_id, res.port) == (0, broker.node_id, 9092)
        assert broker.topics.get("__transaction_state").partitions == 50  # created on first use
        assert broker.txn_coordinator.partition_for("tx") == (java_string_hash("tx") & 0x7FFFFFFF) % 50
        batched = await find_coordinator.handle(
            broker, None, FindCoordinatorRequest(key_type=1, coordinator_keys=["a", "b"]), 4)
        assert [(c.key, c.error_code, c.node_id) for c in batched.coordinators] == [("a", 0, 0), ("b", 0, 0)]
        # Where no transaction coordinator runs the answer is a clear, fatal error.
        coordinator, broker.txn_coordinator = broker.txn_coordinator, None
        res = await find_coordinator.handle(broker, None, FindCoordinatorRequest(key="tx", key_type=1), version)
        assert res.error_code == EC.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        assert "no transaction coordinator" in res.error_message
        broker.txn_coordinator = coordinator
    run(tmp_path, body)
