"""Cluster mode in brokers of several worker processes: a follower's Fetch served by a worker
that does not own the partition moves the high watermark (through the partition's
shared-memory slot and the owner's wake-up pipe), and that releases an acks=all produce
parked on a third worker."""
from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from kafkafast.protocol import api
from kafkafast.protocol._generated.fetch import FetchRequest
from kafkafast.protocol._generated.list_offsets import ListOffsetsRequest
from kafkafast.protocol._generated.produce import ProduceRequest
from kafkafast.records.batch import encode_batch
from kafkafast.runtime.shm import owner_for
from tests.support.cluster import KafkaCluster
from tests.support.raw_client import RawClient

WORKERS = 3
TOPIC = "parked"


@pytest.fixture(scope="module")
def workers_cluster(tmp_path_factory):
    """Two brokers of three workers each; sessions and the ISR lag allow a follower to be
    stopped for the whole test without leaving the ISR."""
    c = KafkaCluster(tmp_path_factory.mktemp("cluster-workers"), size=2, workers=WORKERS,
                     settings={"zookeeper.session.timeout.ms": "30000", "replica.lag.time.max.ms": "60000"})
    try:
        yield c.start()
    finally:
        c.close()


def _children(pid: int) -> list[int]:
    out = []
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children") as fh:
            out += [int(x) for x in fh.read().split()]
    return out


def _socket_inodes(pid: int) -> set[int]:
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(int(target[8:-1]))
    return inodes


def _worker_pids(supervisor_pid: int) -> dict[int, int]:
    """worker index -> pid, from the forwarding socket `worker-<i>.sock` each worker keeps."""
    by_inode = {}
    with open("/proc/net/unix") as fh:
        for line in fh.readlines()[1:]:
            cols = line.split()
            if len(cols) >= 8 and Path(cols[7]).name.startswith("worker-") and cols[7].endswith(".sock"):
                by_inode[int(cols[6])] = int(Path(cols[7]).name[len("worker-"):-len(".sock")])
    out = {}
    for pid in _children(supervisor_pid):
        found = {by_inode[i] for i in _socket_inodes(pid) if i in by_inode}
        if len(found) == 1:
            out[found.pop()] = pid
    return out


def _serving_worker(rc: RawClient, broker_port: int, workers: dict[int, int]) -> int:
    """The index of the worker that accepted this client's connection."""
    client_port = rc.sock.getsockname()[1]
    inode = None
    with open("/proc/net/tcp") as fh:
        for line in fh.readlines()[1:]:
            cols = line.split()
            local, remote = cols[1], cols[2]
            if int(local.split(":")[1], 16) == broker_port and int(remote.split(":")[1], 16) == client_port:
                inode = int(cols[9])
    assert inode is not None
    for index, pid in workers.items():
        if inode in _socket_inodes(pid):
            return index
    return -1


def _connections_on(port: int, workers: dict[int, int], wanted: list[int]) -> dict[int, RawClient]:
    """One connection served by each worker in `wanted` (the kernel spreads connections over
    the workers' SO_REUSEPORT sockets by a hash: connect until each one has been hit)."""
    got: dict[int, RawClient] = {}
    spare = []
    for _ in range(200):
        rc = RawClient(port, timeout=30)
        rc.request(api_versions_request(), 0)  # accepted and served: the worker holds it now
        w = _serving_worker(rc, port, workers)
        if w in wanted and w not in got:
            got[w] = rc
            if len(got) == len(wanted):
                break
        else:
            spare.append(rc)
    for rc in spare:
        rc.close()
    assert len(got) == len(wanted), f"no connection reached workers {set(wanted) - set(got)}"
    return got


def api_versions_request():
    from kafkafast.protocol._generated.api_versions import ApiVersionsRequest

    return ApiVersionsRequest(client_software_name="t", client_software_version="1")


def test_follower_fetch_on_one_worker_releases_acks_all_parked_on_another(workers_cluster):
    c = workers_cluster
    leader_id, follower_id = sorted(c.brokers)
    c.create_topic(TOPIC, 1, 2, {"min.insync.replicas": "2"}, [[leader_id, follower_id]])
    leader = c.brokers[leader_id]
    workers = c.wait_for(lambda: (w := _worker_pids(leader.proc.pid)) and len(w) == WORKERS and w, 30,
                         "the leader's worker processes")
    owner = owner_for(TOPIC, 0, WORKERS)
    produce_worker, fetch_worker = [w for w in range(WORKERS) if w != owner]
    conns = _connections_on(leader.port, workers, [produce_worker, fetch_worker])
    follower = c.brokers[follower_id]
    os.killpg(follower.proc.pid, signal.SIGSTOP)  # the follower's own fetches stop: ours are the only ones
    try:
        time.sleep(1.0)  # let a fetch the follower had in flight at the leader end
        now = int(time.time() * 1000)
        batch = encode_batch([(now, None, b"v%d" % i, []) for i in range(3)])
        produce = ProduceRequest(transactional_id=None, acks=-1, timeout_ms=30000, topic_data=[
            ProduceRequest.TopicProduceData(name=TOPIC, partition_data=[
                ProduceRequest.PartitionProduceData(index=0, records=batch)])])
        pc = conns[produce_worker]
        pc.send_raw(api.encode_request(produce, 8, 77, "parked-producer"))
        pc.sock.settimeout(2.0)
        with pytest.raises(TimeoutError):  # appended, but the follower has not fetched it: parked
            pc.recv_frame()
        assert _list_offset(leader.port, -1) == 0  # the high watermark did not move

        state = c.partition_state(TOPIC, 0)
        fetch = FetchRequest(replica_id=follower_id, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20,
                             isolation_level=0, session_id=0, session_epoch=-1, forgotten_topics_data=[],
                             rack_id="", topics=[FetchRequest.FetchTopic(topic=TOPIC, partitions=[
                                 FetchRequest.FetchPartition(partition=0, current_leader_epoch=state["leader_epoch"],
                                                             fetch_offset=3, last_fetched_epoch=-1,
                                                             log_start_offset=0, partition_max_bytes=1 << 20)])])
        fr = conns[fetch_worker].request(fetch, 12)
        assert fr.responses[0].partitions[0].error_code == 0

        pc.sock.settimeout(20.0)
        frame = pc.recv_frame()  # released by the high watermark the owner moved
        assert frame is not None
        corr, resp = api.decode_response(0, 8, frame)
        assert corr == 77
        pr = resp.responses[0].partition_responses[0]
        assert (pr.error_code, pr.base_offset) == (0, 0)
        assert _list_offset(leader.port, -1) == 3  # consumers now see the three records
    finally:
        os.killpg(follower.proc.pid, signal.SIGCONT)
        for rc in conns.values():
            rc.close()


def test_a_follower_session_on_a_worker_owning_none_of_its_partitions_gets_records_and_news(workers_cluster):
    """A follower's incremental fetch session served by a worker that owns none of its
    partitions: a partition with nothing new is passed over (quiet: it reads its state from the
    slot), one with records or a new high watermark is answered, and the high watermarks its
    fetches moved through the owners reach it and the consumers."""
    c = workers_cluster
    first, second = sorted(c.brokers)
    topic = "quietelse"
    c.create_topic(topic, 2, 2, {"min.insync.replicas": "1"}, [[first, second]] * 2)
    leader_id = c.leader(topic, 0)
    assert leader_id == c.leader(topic, 1)
    follower_id = second if leader_id == first else first
    leader, follower = c.brokers[leader_id], c.brokers[follower_id]
    workers = c.wait_for(lambda: (w := _worker_pids(leader.proc.pid)) and len(w) == WORKERS and w, 30,
                         "the leader's worker processes")
    fetch_worker = next(w for w in range(WORKERS) if all(owner_for(topic, p, WORKERS) != w for p in (0, 1)))
    epochs = {p: c.partition_state(topic, p)["leader_epoch"] for p in (0, 1)}
    conn = _connections_on(leader.port, workers, [fetch_worker])[fetch_worker]
    os.killpg(follower.proc.pid, signal.SIGSTOP)  # the follower's own fetches stop: ours are the only ones
    F = FetchRequest
    session = {"id": 0, "epoch": 0}

    def fetch(offsets: dict[int, int]) -> dict[int, tuple[int, int]]:
        """One fetch as the follower naming `offsets` (the session's other partitions unchanged):
        {partition: (high watermark, records' bytes)} of the partitions answered."""
        req = F(replica_id=follower_id, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0,
                session_id=session["id"], session_epoch=session["epoch"], forgotten_topics_data=[], rack_id="",
                topics=[F.FetchTopic(topic=topic, partitions=[
                    F.FetchPartition(partition=p, current_leader_epoch=epochs[p], fetch_offset=o, last_fetched_epoch=-1,
                                     log_start_offset=0, partition_max_bytes=1 << 20)
                    for p, o in offsets.items()])] if offsets else [])
        resp = conn.request(req, 12)
        assert resp.error_code == 0, resp.error_code
        session["id"], session["epoch"] = resp.session_id, session["epoch"] + 1
        out = {}
        for t in resp.responses:
            for pd in t.partitions:
                assert pd.error_code == 0, (pd.partition_index, pd.error_code)
                out[pd.partition_index] = (pd.high_watermark, len(pd.records or b""))
        return out

    def answered_until(first: dict[int, tuple[int, int]], want: dict[int, int]) -> None:
        """Steady fetches until every partition of `want` was answered that high watermark
        (`first`: the answer of the fetch that moved it, which may carry it already)."""
        seen = {p: hw for p, (hw, _) in first.items()}

        def done():
            for p, (hw, _) in fetch({}).items():
                seen[p] = hw
            return all(seen.get(p) == hw for p, hw in want.items())
        c.wait_for(done, 15, f"high watermarks {want} answered")

    try:
        time.sleep(1.0)  # let a fetch the follower had in flight at the leader end
        with RawClient(leader.port, timeout=30) as pc:
            for p, n in ((0, 3), (1, 1)):
                batch = encode_batch([(int(time.time() * 1000), None, b"r%d" % i, []) for i in range(n)])
                produce = ProduceRequest(transactional_id=None, acks=1, timeout_ms=10000, topic_data=[
                    ProduceRequest.TopicProduceData(name=topic, partition_data=[
                        ProduceRequest.PartitionProduceData(index=p, records=batch)])])
                assert pc.request(produce, 8).responses[0].partition_responses[0].error_code == 0
        start = fetch({0: 0, 1: 0})  # the full fetch: both partitions' records from 0
        assert session["id"] != 0 and start[0][1] > 0 and start[1][1] > 0
        answered_until(fetch({0: 3, 1: 1}), {0: 3, 1: 1})  # at the log ends: the owners move the high watermarks
        assert fetch({}) == {}  # both quiet now
        with RawClient(leader.port, timeout=30) as pc:
            batch = encode_batch([(int(time.time() * 1000), None, b"later", [])])
            produce = ProduceRequest(transactional_id=None, acks=1, timeout_ms=10000, topic_data=[
                ProduceRequest.TopicProduceData(name=topic, partition_data=[
                    ProduceRequest.PartitionProduceData(index=1, records=batch)])])
            assert pc.request(produce, 8).responses[0].partition_responses[0].error_code == 0
        got = fetch({})  # partition 1's fetch offset (1) is below its log end now: its record
        assert list(got) == [1] and got[1][1] > 0
        answered_until(fetch({1: 2}), {1: 2})
        assert fetch({}) == {}
    finally:
        os.killpg(follower.proc.pid, signal.SIGCONT)
        conn.close()
    consumer_hw = {p: _list_offset(leader.port, -1, topic, p) for p in (0, 1)}
    assert consumer_hw == {0: 3, 1: 2}


def _tcp_peers(port: int) -> dict[int, tuple[int, int]]:
    """Socket inode -> (local port, remote port) of the TCP connections from or to `port`."""
    out = {}
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(name) as fh:
            for line in fh.readlines()[1:]:
                cols = line.split()
                local, remote = int(cols[1].split(":")[-1], 16), int(cols[2].split(":")[-1], 16)
                if (local == port or remote == port) and cols[3] == "01":  # established
                    out[int(cols[9])] = (local, remote)
    return out


def test_a_followers_fetchers_are_served_by_the_leaders_worker_owning_their_partitions(workers_cluster):
    """Worker i of a follower broker fetches the partitions it owns, which worker i of the
    leader (as many workers, the same hash) owns: its fetcher's connection ends up served there
    (it makes it again when its new session's id names another worker)."""
    c = workers_cluster
    first, second = sorted(c.brokers)
    topic = "homed"
    c.create_topic(topic, 6, 2, {}, [[first, second]] * 6)
    owners = {owner_for(topic, p, WORKERS) for p in range(6)} - {0}  # (worker 0 also makes the control connections)
    assert owners
    leader, follower = c.brokers[first], c.brokers[second]

    def served():
        lead_w, follow_w = _worker_pids(leader.proc.pid), _worker_pids(follower.proc.pid)
        if len(lead_w) != WORKERS or len(follow_w) != WORKERS:
            return None
        peers = _tcp_peers(leader.port)
        server_side = {rem: inode for inode, (loc, rem) in peers.items() if loc == leader.port}  # by client port
        out = {}
        for w in owners:
            for inode in _socket_inodes(follow_w[w]):
                if inode in peers and peers[inode][1] == leader.port:
                    server_inode = server_side.get(peers[inode][0])
                    out.setdefault(w, set()).update(
                        i for i, pid in lead_w.items() if server_inode in _socket_inodes(pid))
        return out if set(out) == owners and all(out[w] == {w} for w in owners) else None
    c.wait_for(served, 30, "each fetcher's connection served by the leader's worker of its index")


def _list_offset(port: int, timestamp: int, topic: str = TOPIC, partition: int = 0) -> int:
    """The offset for `timestamp` (-1: the latest, the high watermark for a consumer) of the partition."""
    req = ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=[ListOffsetsRequest.ListOffsetsTopic(
        name=topic, partitions=[ListOffsetsRequest.ListOffsetsPartition(partition_index=partition,
                                                                        current_leader_epoch=-1,
                                                                        timestamp=timestamp)])])
    with RawClient(port) as rc:
        p = rc.request(req, 5).topics[0].partitions[0]
    assert p.error_code == 0
    return p.offset


def _produce_all(port: int, topic: str, partition: int, value: bytes) -> tuple[int, int]:
    with RawClient(port, timeout=30) as rc:
        pr = rc.request(_acks_all_produce(topic, partition, value), 8).responses[0].partition_responses[0]
    return pr.error_code, pr.base_offset


def _acks_all_produce(topic: str, partition: int, value: bytes) -> ProduceRequest:
    batch = encode_batch([(int(time.time() * 1000), None, value, [])])
    return ProduceRequest(transactional_id=None, acks=-1, timeout_ms=10000, topic_data=[
        ProduceRequest.TopicProduceData(name=topic, partition_data=[
            ProduceRequest.PartitionProduceData(index=partition, records=batch)])])


RETRIABLE_UNSTORED = (3, 5, 6, 19)  # UNKNOWN_TOPIC_OR_PARTITION, LEADER_NOT_AVAILABLE, NOT_LEADER, NOT_ENOUGH_REPLICAS


def _produce_stored(c: KafkaCluster, topic: str, partition: int, value: bytes) -> tuple[int, int]:
    """An acks=all produce of one record to the partition's leader, looked up for every attempt
    (the state znode is written before the brokers hear of it, and the controller's auto leader
    rebalance may move a leader back to its preferred replica at any moment), as a client
    retries. Only answers of a produce that stored nothing are retried: anything else is
    returned, and a timed-out acks=all, whose record stays in the log, shows in the offset of
    the next one."""
    answers: list = []

    def attempt():
        leader = c.brokers.get(c.leader(topic, partition))
        if leader is None:  # between leaders
            return None
        answers.append(_produce_all(leader.port, topic, partition, value))
        return answers[-1] if answers[-1][0] not in RETRIABLE_UNSTORED else None

    try:
        return c.wait_for(attempt, 60, f"acks=all on {topic}-{partition}")
    except TimeoutError as exc:
        raise AssertionError(f"{exc}; (error, offset) answered: {answers}") from None


def test_a_replaced_worker_gets_its_replicas_back_through_a_new_registration(workers_cluster):
    c = workers_cluster
    first, second = sorted(c.brokers)
    topic = "respawn"
    c.create_topic(topic, WORKERS, 2, {"min.insync.replicas": "2"}, [[first, second]] * WORKERS)
    lead = c.brokers[first]
    for p in range(WORKERS):
        assert _produce_stored(c, topic, p, b"before") == (0, 0)
    zk = c.zk()
    epoch_before = zk.exists(f"/brokers/ids/{first}").czxid
    workers = _worker_pids(lead.proc.pid)
    victim = 1  # not worker 0, which holds the broker's registration
    os.kill(workers[victim], signal.SIGKILL)
    c.wait_for(lambda: (w := _worker_pids(lead.proc.pid)).get(victim, workers[victim]) != workers[victim]
               and len(w) == WORKERS, 30, "the replacement worker")
    # worker 0 registered the broker again: a new broker epoch, and leadership moved to the other replica
    c.wait_for(lambda: (s := zk.exists(f"/brokers/ids/{first}")) is not None and s.czxid != epoch_before, 30,
               "a new registration")
    c.wait_for(lambda: all(sorted(c.partition_state(topic, p)["isr"]) == [first, second] for p in range(WORKERS)),
               30, "the replaced worker's broker back in every ISR")
    for p in range(WORKERS):  # every partition takes acks=all again, appended after the record from before
        assert _produce_stored(c, topic, p, b"after") == (0, 1)


def test_acks_all_at_full_rate_over_workers_acknowledges_every_record_once(workers_cluster):
    """Many acks=all produces at once on workers that do not own their partitions, while
    followers' fetches land on every worker: each is released by the high watermark (none
    waits for its timeout), and each record is stored once."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    c = workers_cluster
    topic, count = "full-rate", 20000
    c.create_topic(topic, 6, 2)
    p = Producer({"bootstrap.servers": c.bootstrap, "acks": "all", "enable.idempotence": True,
                  "linger.ms": 5, "request.timeout.ms": 5000, "message.timeout.ms": 25000})
    failed = []
    for i in range(count):
        while True:
            try:
                p.produce(topic, b"%08d" % i, partition=i % 6,
                          on_delivery=lambda err, msg: err is not None and failed.append(err))
                break
            except BufferError:
                p.poll(0.05)
    assert p.flush(60) == 0
    assert failed == []
    consumer = Consumer({"bootstrap.servers": c.bootstrap, "group.id": "full-rate-check"})
    try:
        ends = [consumer.get_watermark_offsets(TopicPartition(topic, q), timeout=30)[1] for q in range(6)]
    finally:
        consumer.close()
    assert ends == [count // 6 + (1 if q < count % 6 else 0) for q in range(6)]


def test_dynamic_broker_configs_apply_on_every_worker(workers_cluster):
    """A dynamic broker config written in ZooKeeper through broker 1 reaches every worker of
    broker 2, each on its own kazoo session: the connection quota caps connections whichever
    worker accepts them, and the leader's topic default (message.max.bytes) refuses a large
    record whichever worker takes the produce."""
    import confluent_kafka as ck

    from tests.cluster.test_controller import _alter_broker_on, _topic_config_on
    from tests.security.test_dynamic_connection_limits import close_all, eventually_open_until_refused

    c = workers_cluster
    b1, b2 = c.brokers[1], c.brokers[2]
    c.create_topic("dyn-workers", 1, 2, assignment=[[2, 1]])
    try:
        assert _alter_broker_on(b1.port, "", {"max.connections.per.ip": "3",
                                              "max.connections.per.ip.overrides": "127.0.0.1:100"}).error_code == 0
        assert _alter_broker_on(b1.port, "2", {"message.max.bytes": "5000"}).error_code == 0
        capped = eventually_open_until_refused(b2.port, 8, 3)
        assert capped[-1] is None
        close_all(capped)
        # the two changes are two notifications, each taken by every worker on its own: six new
        # connections in a row (spread over the workers) see broker 2's entry, within a bound
        c.wait_for(lambda: [_topic_config_on(b2.port, "dyn-workers", "max.message.bytes") for _ in range(6)]
                   == [("5000", 2)] * 6, 15, "message.max.bytes of broker 2 on every worker")
        producer = ck.Producer({"bootstrap.servers": b2.bootstrap, "acks": "all"})
        results: list = []
        for size in (1000, 10000, 1000, 10000):
            producer.produce("dyn-workers", b"x" * size, on_delivery=lambda err, msg: results.append(err))
            producer.flush(30)
        assert [r is None or r.code() for r in results] == [True, ck.KafkaError.MSG_SIZE_TOO_LARGE] * 2
    finally:
        assert _alter_broker_on(b1.port, "", {"max.connections.per.ip": None,
                                              "max.connections.per.ip.overrides": None}).error_code == 0
        assert _alter_broker_on(b1.port, "2", {"message.max.bytes": None}).error_code == 0
    close_all(eventually_open_until_refused(b2.port, 8, 8))


def test_a_topic_deleted_and_created_again_starts_empty_on_every_worker(workers_cluster):
    """StopReplica(delete) reaches every worker of a broker: the owner deletes the partition's
    files and frees its slot, the other workers close their reader and shared-append writer of
    it (no worker keeps a deleted file open). The topic created again under the same name
    starts at offset 0, whichever worker appends (the owner, or another one in shared append)."""
    from confluent_kafka.admin import AdminClient

    c = workers_cluster
    first, second = sorted(c.brokers)
    topic = "recreated"
    lead = c.brokers[first]
    workers = c.wait_for(lambda: (w := _worker_pids(lead.proc.pid)) and len(w) == WORKERS and w, 30,
                         "the leader's worker processes")
    conns = _connections_on(lead.port, workers, list(range(WORKERS)))
    zk = c.zk()
    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    try:
        for created in range(2):
            c.create_topic(topic, WORKERS, 2, assignment=[[first, second]] * WORKERS)
            for p in range(WORKERS):  # one record through each worker, in the order of the workers
                assert [_produce_on(c, conns[w], topic, p) for w in range(WORKERS)] == [(0, 0), (0, 1), (0, 2)]
            if created == 0:
                admin.delete_topics([topic], request_timeout=20)[topic].result(30)
                c.wait_for(lambda: zk.exists(f"/brokers/topics/{topic}") is None
                           and zk.get_children("/admin/delete_topics") == [], 15, "the topic's znodes removed")
                c.wait_for(lambda: not any(any((c.root / f"broker-{i}").glob(f"{topic}-*"))
                                           for i in (first, second)), 15, "the partition directories removed")
                pids = [pid for b in c.brokers.values() for pid in _worker_pids(b.proc.pid).values()]
                c.wait_for(lambda: _files_open_under(pids, f"/{topic}-") == [], 15,
                           "no worker holding a file of the deleted partitions open")
    finally:
        for rc in conns.values():
            rc.close()


def _produce_on(c: KafkaCluster, rc: RawClient, topic: str, partition: int) -> tuple[int, int]:
    """An acks=all produce of one record on this connection (to its worker), again while the
    broker has not yet heard that it leads the new partition."""
    req = _acks_all_produce(topic, partition, b"r")

    def attempt():
        pr = rc.request(req, 8).responses[0].partition_responses[0]
        return None if pr.error_code in RETRIABLE_UNSTORED else (pr.error_code, pr.base_offset)

    return c.wait_for(attempt, 30, f"acks=all on {topic}-{partition}")


def _files_open_under(pids: list[int], needle: str) -> list[str]:
    """The files these processes hold open whose path contains `needle`."""
    out = []
    for pid in pids:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if needle in target:
                out.append(f"{pid}: {target}")
    return out
