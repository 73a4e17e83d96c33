"""The share groups' `simple` assignor (kafkafast/broker/share/groups.py): balanced, then sticky."""
from kafkafast.broker.share.groups import simple_assign

T, U = b"t" * 16, b"u" * 16


def readers(assignment: dict, partitions: list) -> dict:
    return {tp: sorted(m for m, a in assignment.items() if tp[1] in a.get(tp[0], [])) for tp in partitions}


def test_a_growing_group_stays_balanced_and_members_keep_what_they_had():
    """Members join one at a time (16 over 4 partitions, then 3 over 7 of two topics): after
    every join each partition has ceil(members / partitions) readers, the members' counts
    differ by at most one, and every member keeps as many of its partitions as its count allows
    (a member learns its new assignment only at its next heartbeat, and still fetches the old one)."""
    for partitions, joining in (([(T, p) for p in range(4)], 16), ([(T, p) for p in range(4)] + [(U, p) for p in range(3)], 3)):
        current: dict = {}
        members: list[str] = []
        for i in range(joining):
            members.append(f"m{(i * 7) % joining:02d}")  # ids not in join order
            new = simple_assign(members, partitions, current)
            sharing = -(-len(members) // len(partitions))
            assert all(len(r) == sharing for r in readers(new, partitions).values()), new
            counts = [sum(len(ps) for ps in a.values()) for a in new.values()]
            assert max(counts) - min(counts) <= 1, new
            for m, old in current.items():
                had = {(tid, p) for tid, ps in old.items() for p in ps}
                has = {(tid, p) for tid, ps in new[m].items() for p in ps}
                assert len(had & has) == min(len(had), len(has)), (m, old, new[m])
            current = new


def test_partitions_dropped_from_the_subscription_go_and_the_rest_is_kept():
    before = {"a": {T: [0, 1]}, "b": {T: [2, 3]}}
    after = simple_assign(["a", "b"], [(T, 0), (T, 1), (T, 2)], before)
    assert after == {"a": {T: [0, 1]}, "b": {T: [2]}}
