"""Transactions end to end with real clients (KIP-98/360/447): consume-transform-produce
loops with a SIGKILLed producer process, zombie fencing, coordinator timeouts, offsets
committed in transactions, a broker killed between EndTxn and its markers."""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from kafkafast.testing import KafkaTestBroker
from tests.integration.test_kafkajs import needs_kafkajs, run_kafkajs
from tests.support.raw_client import RawClient
from tests.support.txn_loop import CHUNK, GROUP, IN, OUT, should_abort

ROOT = Path(__file__).resolve().parents[2]
ATTEMPTS, CRASH = 20, 7


@pytest.fixture
def txn_broker(tmp_path, request):
    workers = getattr(request, "param", 0)
    b = KafkaTestBroker(tmp_path / "b", workers=workers, settings={
        "num.partitions": "1", "transaction.state.log.num.partitions": "4", "offsets.topic.num.partitions": "4",
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": "200"})
    b.start()
    yield b
    b.kill()


def read_to_end(c, partitions: int, expect: int, timeout: float) -> list:
    """The records `c` (assigned `partitions` partitions, `enable.partition.eof` on) gets until it
    has at least `expect` and has reached the end of every partition since its last record there
    (the end a consumer of its isolation level sees: records beyond `expect` show up too)."""
    from confluent_kafka import KafkaError

    out, at_end = [], set()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not (len(out) >= expect and len(at_end) == partitions):
        for m in c.consume(5000, 0.5):
            if m.error() is not None:  # the end of a partition; else an error librdkafka retries
                if m.error().code() == KafkaError._PARTITION_EOF:
                    at_end.add(m.partition())
            else:
                at_end.discard(m.partition())
                out.append(m)
    return out


def read_all(bootstrap: str, topic: str, isolation: str, expect: int, timeout: float = 60.0, partition: int = 0) -> list:
    """Every record of one partition a consumer with that isolation level gets, as (offset, value)."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{isolation}", "isolation.level": isolation,
                  "enable.auto.commit": False, "auto.offset.reset": "earliest", "enable.partition.eof": True})
    c.assign([TopicPartition(topic, partition, 0)])
    try:
        return [(m.offset(), m.value()) for m in read_to_end(c, 1, expect, timeout)]
    finally:
        c.close()


def fill_input(bootstrap: str, n: int) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    for i in range(n):
        p.produce(IN, value=b"%05d" % i, partition=0)
        if i % 5000 == 0:
            p.poll(0)
    assert p.flush(60) == 0


def describe_txn(port: int, tid: str):
    from kafkafast.protocol._generated.describe_transactions import DescribeTransactionsRequest

    with RawClient(port) as rc:
        return rc.request(DescribeTransactionsRequest(transactional_ids=[tid]), 0).transaction_states[0]


def run_loop(client: str, bootstrap: str, first: int, last: int, crash: int = -1) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tests.support.txn_loop", client, bootstrap, str(first), str(last),
                           str(crash)], cwd=ROOT, capture_output=True, text=True, timeout=240)


def check_loop(client: str, b: KafkaTestBroker) -> None:
    committed = sum(1 for a in range(1, ATTEMPTS + 1) if not should_abort(a))
    fill_input(b.bootstrap_servers, (committed + 1) * CHUNK)  # the last attempt (20) aborts a 17th chunk
    first = run_loop(client, b.bootstrap_servers, 1, ATTEMPTS, CRASH)
    assert first.returncode == -9, first.stdout + first.stderr
    assert f"attempt {CRASH - 1} committed" in first.stdout
    before = describe_txn(b.port, "txn-loop")
    second = run_loop(client, b.bootstrap_servers, CRASH, ATTEMPTS)
    assert second.returncode == 0, second.stdout + second.stderr
    after = describe_txn(b.port, "txn-loop")
    assert after.producer_id == before.producer_id and after.producer_epoch > before.producer_epoch  # fenced
    assert after.transaction_state == ("CompleteAbort" if should_abort(ATTEMPTS) else "CompleteCommit")

    expected = [b"out-%05d" % i for i in range(committed * CHUNK)]
    got = read_all(b.bootstrap_servers, OUT, "read_committed", len(expected))
    assert [v for _, v in got] == expected  # each committed record once, in order, no markers
    aborted = sum(1 for a in range(1, ATTEMPTS + 1) if should_abort(a)) * CHUNK + CHUNK // 2 + 1
    everything = read_all(b.bootstrap_servers, OUT, "read_uncommitted", len(expected) + aborted)
    assert len(everything) == len(expected) + aborted
    assert [o for o, _ in everything] != list(range(len(everything)))  # control batches take offsets
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": b.bootstrap_servers, "group.id": GROUP})
    assert c.committed([TopicPartition(IN, 0)], 30)[0].offset == committed * CHUNK
    c.close()


@pytest.mark.parametrize("txn_broker", [0, 2], indirect=True, ids=["one-process", "workers-2"])
def test_confluent_kafka_consume_transform_produce(txn_broker):
    check_loop("ck", txn_broker)


def test_kafka_python_consume_transform_produce(txn_broker):
    check_loop("kp", txn_broker)


def test_kafkafast_client_consume_transform_produce(txn_broker):
    check_loop("kf", txn_broker)
    from kafkafast.client import KafkaConsumer, TopicPartition

    for isolation, count in (("read_committed", 16 * CHUNK), ("read_uncommitted", 20 * CHUNK + CHUNK // 2 + 1)):
        c = KafkaConsumer(bootstrap_servers=txn_broker.bootstrap_servers, isolation_level=isolation,
                          group_id=f"kf-{isolation}", enable_auto_commit=False)
        c.assign([TopicPartition(OUT, 0)])
        c.seek(TopicPartition(OUT, 0), 0)
        got: list = []
        deadline = time.monotonic() + 30
        while len(got) < count and time.monotonic() < deadline:
            for records in c.poll(500).values():
                got.extend(r.value for r in records)
        c.close()
        assert len(got) == count, (isolation, len(got))
        if isolation == "read_committed":  # kafkafast's consumer drops aborted batches and markers
            assert got == [b"out-%05d" % i for i in range(count)]


@pytest.mark.parametrize("txn_broker", [0, 2], indirect=True, ids=["one-process", "workers-2"])
def test_zombie_is_fenced_and_its_writes_never_visible(txn_broker):
    from confluent_kafka import KafkaException, Producer

    bs = txn_broker.bootstrap_servers
    old = Producer({"bootstrap.servers": bs, "transactional.id": "zombie"})
    old.init_transactions(30)
    old.begin_transaction()
    old.produce("zombie-out", value=b"old-1", partition=0)
    old.flush(30)
    new = Producer({"bootstrap.servers": bs, "transactional.id": "zombie"})
    new.init_transactions(30)  # aborts the old instance's transaction and bumps the epoch
    old.produce("zombie-out", value=b"old-2", partition=0)
    with pytest.raises(KafkaException) as failed:
        old.commit_transaction(30)
    err = failed.value.args[0]
    assert err.fatal() or err.txn_requires_abort(), err
    assert "fenced" in err.str().lower() or err.name() in ("_FENCED", "PRODUCER_FENCED", "INVALID_PRODUCER_EPOCH")
    new.begin_transaction()
    new.produce("zombie-out", value=b"new-1", partition=0)
    new.commit_transaction(30)
    assert [v for _, v in read_all(bs, "zombie-out", "read_committed", 1)] == [b"new-1"]
    assert b"old-2" not in [v for _, v in read_all(bs, "zombie-out", "read_uncommitted", 2)]
    from kafkafast.protocol._generated.list_transactions import ListTransactionsRequest

    for _ in range(4):  # with workers, whichever worker a connection lands on asks them all
        with RawClient(txn_broker.port) as rc:
            listed = rc.request(ListTransactionsRequest(state_filters=[], producer_id_filters=[]), 0)
        assert [(t.transactional_id, t.transaction_state) for t in listed.transaction_states] == [
            ("zombie", "CompleteCommit")]


def test_timed_out_transaction_is_aborted_and_the_lso_moves_on(kafka):
    """The coordinator aborts a transaction open past its transaction.timeout.ms: ABORT markers
    reach every partition's leader (in the cluster, on other brokers than the coordinator's), the
    last stable offset moves on, read_committed sees the committed records only, and the producer
    is fenced."""
    from confluent_kafka import KafkaException, Producer

    bs = kafka.bootstrap
    kafka.create_topic("timeout-out", 3)
    stuck = Producer({"bootstrap.servers": bs, "transactional.id": "slow", "transaction.timeout.ms": 2000,
                      "linger.ms": 5, "message.timeout.ms": 2000})
    stuck.init_transactions(30)
    stuck.begin_transaction()
    committed = [b"ok-%02d" % i for i in range(30)]
    for i, v in enumerate(committed):
        stuck.produce("timeout-out", value=v, partition=i % 3)
    stuck.commit_transaction(30)
    stuck.begin_transaction()
    for i in range(30):
        stuck.produce("timeout-out", value=b"never-%02d" % i, partition=i % 3)
    stuck.flush(30)
    coordinator = kafka.coordinator_port("slow", 1)
    deadline = time.monotonic() + 30
    while describe_txn(coordinator, "slow").transaction_state != "CompleteAbort":
        assert time.monotonic() < deadline, describe_txn(coordinator, "slow")
        time.sleep(0.2)
    deadline = time.monotonic() + 30
    while not all(lso == hw for hw, lso in stable_offsets(kafka, "timeout-out", 3)):
        assert time.monotonic() < deadline, stable_offsets(kafka, "timeout-out", 3)
        time.sleep(0.2)
    got = sum((read_all(bs, "timeout-out", "read_committed", 10, partition=p) for p in range(3)), [])
    assert sorted(v for _, v in got) == sorted(committed)
    with pytest.raises(KafkaException):
        stuck.commit_transaction(10)


def stable_offsets(kafka, topic: str, partitions: int) -> list[tuple[int, int]]:
    """(high watermark, last stable offset) of each partition, asked of its leader."""
    from kafkafast.protocol._generated.list_offsets import ListOffsetsRequest

    out = []
    for p in range(partitions):
        ends = []
        for isolation in (0, 1):
            T = ListOffsetsRequest.ListOffsetsTopic
            req = ListOffsetsRequest(replica_id=-1, isolation_level=isolation, topics=[T(name=topic, partitions=[
                ListOffsetsRequest.ListOffsetsPartition(partition_index=p, current_leader_epoch=-1, timestamp=-1)])])
            with RawClient(kafka.leader_port(topic, p)) as rc:
                ends.append(rc.request(req, 4).topics[0].partitions[0].offset)
        out.append((ends[0], ends[1]))
    return out


def test_offsets_in_a_transaction_are_visible_only_on_commit(txn_broker):
    from confluent_kafka import Consumer, Producer, TopicPartition

    bs = txn_broker.bootstrap_servers
    first = Producer({"bootstrap.servers": bs})
    first.produce("offs-in", value=b"x", partition=0)
    assert first.flush(30) == 0
    c = Consumer({"bootstrap.servers": bs, "group.id": "offs-group"})
    meta = c.consumer_group_metadata()

    def committed() -> int:
        return c.committed([TopicPartition("offs-in", 0)], 30)[0].offset

    p = Producer({"bootstrap.servers": bs, "transactional.id": "offs"})
    p.init_transactions(30)
    p.begin_transaction()
    p.send_offsets_to_transaction([TopicPartition("offs-in", 0, 42)], meta, 30)
    assert committed() < 0
    p.commit_transaction(30)
    assert committed() == 42
    p.begin_transaction()
    p.send_offsets_to_transaction([TopicPartition("offs-in", 0, 99)], meta, 30)
    p.abort_transaction(30)
    assert committed() == 42
    txn_broker.restart(clean=False)  # the offsets are read back from __consumer_offsets with their markers
    assert committed() == 42
    c.close()


def test_broker_killed_between_end_txn_and_markers_completes_after_restart(txn_broker):
    from confluent_kafka import Producer

    bs = txn_broker.bootstrap_servers
    p = Producer({"bootstrap.servers": bs, "transactional.id": "crashy"})
    p.init_transactions(30)
    p.begin_transaction()
    for i in range(10):
        p.produce("crash-out", value=b"v%d" % i, partition=0)
    p.flush(30)
    txn_broker.faults.disk_error("crash-out", 0, count=-1)  # the COMMIT marker cannot be written
    p.commit_transaction(30)  # the decision is in __transaction_state
    assert describe_txn(txn_broker.port, "crashy").transaction_state == "PrepareCommit"
    assert read_all(bs, "crash-out", "read_committed", 0, timeout=2) == []
    txn_broker.faults.clear()
    txn_broker.restart(clean=False)
    deadline = time.monotonic() + 30
    while describe_txn(txn_broker.port, "crashy").transaction_state != "CompleteCommit":
        assert time.monotonic() < deadline
        time.sleep(0.2)
    assert [v for _, v in read_all(bs, "crash-out", "read_committed", 10)] == [b"v%d" % i for i in range(10)]


@pytest.mark.timeout(300)
def test_spark_source_reads_committed_records_only(txn_broker):
    from confluent_kafka import Producer

    from tests.integration.spark_fixtures import shared_spark_session

    bs = txn_broker.bootstrap_servers
    p = Producer({"bootstrap.servers": bs, "transactional.id": "spark-txn", "transaction.timeout.ms": 600000})
    p.init_transactions(30)
    for i in range(3):
        p.begin_transaction()
        for j in range(5):
            p.produce("spark-txn", value=b"%d-%d" % (i, j), partition=0)
        p.flush(30)
        (p.abort_transaction if i == 1 else p.commit_transaction)(30)
    p.begin_transaction()  # open: beyond the last stable offset
    p.produce("spark-txn", value=b"open", partition=0)
    p.flush(30)
    session = shared_spark_session()  # (the open transaction is left to the broker, killed at the end)

    def values(**options) -> list[bytes]:
        r = session.read.format("kafkafast").option("kafka.bootstrap.servers", bs).option("subscribe", "spark-txn")
        for k, v in options.items():
            r = r.option(k, v)
        return [bytes(row.value) for row in r.load().orderBy("offset").collect()]

    assert values(**{"kafka.isolation.level": "read_committed"}) == (
        [b"0-%d" % j for j in range(5)] + [b"2-%d" % j for j in range(5)])
    assert len(values()) == 16  # read_uncommitted: the aborted and the open ones too


def test_coordinator_apis_at_the_protocol_level(txn_broker):
    """InitProducerId limits and KIP-360 bumps, ListTransactions, DescribeProducers, EndTxn
    state errors, and a client's control batch refused -- with raw requests."""
    from kafkafast.protocol._generated.add_partitions_to_txn import AddPartitionsToTxnRequest
    from kafkafast.protocol._generated.describe_producers import DescribeProducersRequest
    from kafkafast.protocol._generated.end_txn import EndTxnRequest
    from kafkafast.protocol._generated.init_producer_id import InitProducerIdRequest
    from kafkafast.protocol._generated.list_transactions import ListTransactionsRequest
    from kafkafast.protocol._generated.produce import ProduceRequest
    from kafkafast.protocol.errors import ErrorCode as EC
    from kafkafast.records import encode_batch
    from kafkafast.storage.txn_index import COMMIT, control_batch

    txn_broker.create_topic("raw-txn", 1)
    with RawClient(txn_broker.port) as rc:
        def init(timeout=60000, pid=-1, epoch=-1):
            return rc.request(InitProducerIdRequest(transactional_id="raw", transaction_timeout_ms=timeout,
                                                    producer_id=pid, producer_epoch=epoch), 4)

        assert init(timeout=900001).error_code == EC.INVALID_TRANSACTION_TIMEOUT  # > transaction.max.timeout.ms
        deadline = time.monotonic() + 20
        while (first := init()).error_code == EC.COORDINATOR_LOAD_IN_PROGRESS and time.monotonic() < deadline:
            time.sleep(0.1)
        assert first.error_code == 0 and first.producer_epoch == 0
        bumped = init(pid=first.producer_id, epoch=0)  # KIP-360: the current id and epoch get epoch + 1
        assert (bumped.error_code, bumped.producer_id, bumped.producer_epoch) == (0, first.producer_id, 1)
        assert init(pid=first.producer_id, epoch=0).error_code == 0  # a retry of that bump: answered again
        assert init(pid=first.producer_id + 1000, epoch=1).error_code == EC.PRODUCER_FENCED
        pid, epoch = bumped.producer_id, bumped.producer_epoch
        end = rc.request(EndTxnRequest(transactional_id="raw", producer_id=pid, producer_epoch=epoch,
                                       committed=True), 3)
        assert end.error_code == EC.INVALID_TXN_STATE  # nothing ongoing
        T = AddPartitionsToTxnRequest.AddPartitionsToTxnTopic
        added = rc.request(AddPartitionsToTxnRequest(
            v3_and_below_transactional_id="raw", v3_and_below_producer_id=pid, v3_and_below_producer_epoch=epoch,
            v3_and_below_topics=[T(name="raw-txn", partitions=[0]), T(name="no-such-topic", partitions=[0])]), 3)
        codes = {(t.name, p.partition_index): p.partition_error_code
                 for t in added.results_by_topic_v3_and_below for p in t.results_by_partition}
        assert codes == {("raw-txn", 0): EC.OPERATION_NOT_ATTEMPTED, ("no-such-topic", 0): EC.UNKNOWN_TOPIC_OR_PARTITION}
        added = rc.request(AddPartitionsToTxnRequest(
            v3_and_below_transactional_id="raw", v3_and_below_producer_id=pid, v3_and_below_producer_epoch=epoch - 1,
            v3_and_below_topics=[T(name="raw-txn", partitions=[0])]), 1)
        assert added.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == \
            EC.INVALID_PRODUCER_EPOCH  # v1 predates PRODUCER_FENCED
        added = rc.request(AddPartitionsToTxnRequest(
            v3_and_below_transactional_id="raw", v3_and_below_producer_id=pid, v3_and_below_producer_epoch=epoch,
            v3_and_below_topics=[T(name="raw-txn", partitions=[0])]), 3)
        assert added.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == 0

        PD = ProduceRequest.TopicProduceData.PartitionProduceData

        def produce(records):
            resp = rc.request(ProduceRequest(transactional_id="raw", acks=-1, timeout_ms=5000, topic_data=[
                ProduceRequest.TopicProduceData(name="raw-txn", partition_data=[PD(index=0, records=records)])]), 8)
            return resp.responses[0].partition_responses[0].error_code

        assert produce(encode_batch([(1, b"k", b"v", ())], producer_id=pid, producer_epoch=epoch, base_sequence=0,
                                    is_transactional=True)) == 0
        assert produce(bytes(control_batch(pid, epoch, COMMIT, 0, 1))) == EC.INVALID_RECORD
        listed = rc.request(ListTransactionsRequest(state_filters=["Ongoing", "Bogus"], producer_id_filters=[]), 0)
        assert [(t.transactional_id, t.transaction_state) for t in listed.transaction_states] == [("raw", "Ongoing")]
        assert listed.unknown_state_filters == ["Bogus"]
        producers = rc.request(DescribeProducersRequest(topics=[
            DescribeProducersRequest.TopicRequest(name="raw-txn", partition_indexes=[0])]), 0)
        state = producers.topics[0].partitions[0].active_producers
        assert [(s.producer_id, s.producer_epoch, s.last_sequence, s.current_txn_start_offset) for s in state] == [
            (pid, epoch, 0, 0)]
        # KIP-447: offsets from a member the group does not know, or of another generation, are refused.
        from kafkafast.protocol._generated.offset_commit import OffsetCommitRequest
        from kafkafast.protocol._generated.txn_offset_commit import TxnOffsetCommitRequest

        OT = OffsetCommitRequest.OffsetCommitRequestTopic
        rc.request(OffsetCommitRequest(group_id="raw-group", generation_id_or_member_epoch=-1, member_id="",
                                       topics=[OT(name="raw-txn", partitions=[
                                           OT.OffsetCommitRequestPartition(partition_index=0, committed_offset=1)])]),
                   8)
        TT = TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic

        def txn_commit(member: str, generation: int) -> int:
            resp = rc.request(TxnOffsetCommitRequest(
                transactional_id="raw", group_id="raw-group", producer_id=pid, producer_epoch=epoch,
                generation_id=generation, member_id=member, topics=[TT(name="raw-txn", partitions=[
                    TT.TxnOffsetCommitRequestPartition(partition_index=0, committed_offset=5)])]), 3)
            return resp.topics[0].partitions[0].error_code

        assert txn_commit("stranger", -1) == EC.UNKNOWN_MEMBER_ID
        assert txn_commit("", 7) == EC.ILLEGAL_GENERATION
        end = rc.request(EndTxnRequest(transactional_id="raw", producer_id=pid, producer_epoch=epoch,
                                       committed=True), 3)
        assert end.error_code == 0
        assert describe_txn(txn_broker.port, "raw").transaction_state == "CompleteCommit"


def test_timeout_and_id_expiry_on_the_manual_clock(tmp_path):
    """transaction.timeout.ms and transactional.id.expiration.ms read kafkafast/clock.py: on a
    manual clock nothing expires until the test moves the time."""
    from confluent_kafka import Producer

    b = KafkaTestBroker(tmp_path / "b", manual_clock=True, settings={
        "num.partitions": "1", "transaction.state.log.num.partitions": "2", "offsets.topic.num.partitions": "2",
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
        "transaction.remove.expired.transaction.cleanup.interval.ms": "1000",
        "transactional.id.expiration.ms": "600000"})
    b.start()
    try:
        p = Producer({"bootstrap.servers": b.bootstrap_servers, "transactional.id": "clocked",
                      "transaction.timeout.ms": 60000})
        p.init_transactions(30)
        p.begin_transaction()
        p.produce("clocked-out", value=b"v", partition=0)
        p.flush(30)
        time.sleep(1.5)  # real time passes, the broker's does not
        assert describe_txn(b.port, "clocked").transaction_state == "Ongoing"
        b.clock.advance(seconds=62)
        deadline = time.monotonic() + 20
        while describe_txn(b.port, "clocked").transaction_state != "CompleteAbort":
            assert time.monotonic() < deadline
            time.sleep(0.05)
        b.clock.advance(minutes=11)  # idle past transactional.id.expiration.ms: the id is removed
        while describe_txn(b.port, "clocked").error_code != 105:  # TRANSACTIONAL_ID_NOT_FOUND
            assert time.monotonic() < deadline + 20
            time.sleep(0.05)
    finally:
        b.kill()


def read_partitions(bootstrap: str, topic: str, isolation: str, expect: int, partitions: int = 3,
                    timeout: float = 60.0) -> list[bytes]:
    """The values of every partition a consumer with that isolation level gets (more than
    `expect` show up too: it reads to the end of every partition)."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{isolation}-{time.monotonic()}",
                  "isolation.level": isolation, "enable.auto.commit": False, "auto.offset.reset": "earliest",
                  "enable.partition.eof": True})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    try:
        return [m.value() for m in read_to_end(c, partitions, expect, timeout)]
    finally:
        c.close()


def test_confluent_kafka_transactions_commit_abort_and_fence_a_zombie(kafka):
    """librdkafka's transactional producer over three partitions (in the cluster, led by the three
    brokers): committed and aborted transactions with offsets sent to them, then a second instance
    fences the first; read_committed sees each committed record once, no aborted one and nothing
    of the zombie's; no transaction is left open."""
    from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

    c = kafka
    c.create_topic("tx-out", 3)
    c.create_topic("tx-in", 3)

    def producer() -> Producer:
        p = Producer({"bootstrap.servers": c.bootstrap, "transactional.id": "ck-tx", "linger.ms": 5,
                      "transaction.timeout.ms": 60000, "message.timeout.ms": 60000})
        p.init_transactions(60)
        return p

    def send(p: Producer, values: list[bytes]) -> None:
        for i, v in enumerate(values):
            p.produce("tx-out", value=v, partition=i % 3)
        assert p.flush(60) == 0

    cons = Consumer({"bootstrap.servers": c.bootstrap, "group.id": "ck-tx-group", "enable.auto.commit": False})
    p = producer()
    committed, aborted = [], []
    for t in range(6):
        values = [b"t%d-%02d" % (t, i) for i in range(30)]
        p.begin_transaction()
        send(p, values)
        p.send_offsets_to_transaction([TopicPartition("tx-in", 0, 100 + t)], cons.consumer_group_metadata(), 30)
        if t % 3 == 1:
            p.abort_transaction(60)
            aborted += values
        else:
            p.commit_transaction(60)
            committed += values
    # the zombie: a second instance fences the first; nothing the first writes later becomes visible
    p2 = producer()
    p.begin_transaction()
    with pytest.raises(KafkaException) as fenced:
        p.produce("tx-out", value=b"zombie", partition=0)
        p.flush(10)
        p.commit_transaction(30)
    assert fenced.value.args[0].fatal() and "fenced" in str(fenced.value).lower()
    p2.begin_transaction()
    send(p2, [b"p2-%02d" % i for i in range(9)])
    p2.commit_transaction(60)
    committed += [b"p2-%02d" % i for i in range(9)]

    seen = read_partitions(c.bootstrap, "tx-out", "read_committed", len(committed))
    assert sorted(seen) == sorted(committed)  # each committed record once, no aborted one, no zombie
    everything = read_partitions(c.bootstrap, "tx-out", "read_uncommitted", len(committed) + len(aborted))
    assert set(aborted) <= set(everything) and set(committed) <= set(everything)
    # offsets committed in the transactions: the last committed one (t=5: 105), not the aborted t=4
    assert cons.committed([TopicPartition("tx-in", 0)], 30)[0].offset == 105
    cons.close()
    for hw, lso in stable_offsets(c, "tx-out", 3):
        assert lso == hw  # no transaction left open (the zombie's was aborted by the fencing)


def test_kafkafast_client_transactions(kafka):
    """kafkafast's own transactional producer: the coordinator found through FindCoordinator key
    type 1, records on three partitions (in the cluster, three leaders), offsets sent to the transaction."""
    from confluent_kafka import Consumer, TopicPartition
    from kafkafast.client import TopicPartition as KfTopicPartition
    from kafkafast.client.sync import KafkaProducer

    c = kafka
    c.create_topic("tx-kf", 3)
    p = KafkaProducer(c.bootstrap, transactional_id="kf-tx")
    try:
        p.init_transactions()
        committed = []
        for t, commit in enumerate((True, False, True)):
            values = [b"kf%d-%02d" % (t, i) for i in range(30)]
            p.begin_transaction()
            for i, v in enumerate(values):
                p.send("tx-kf", v, partition=i % 3)
            p.send_offsets_to_transaction({KfTopicPartition("tx-kf", 0): 50 + t}, "kf-tx-group")
            if commit:
                p.commit_transaction()
                committed += values
            else:
                p.abort_transaction()
    finally:
        p.close()
    assert sorted(read_partitions(c.bootstrap, "tx-kf", "read_committed", 60)) == sorted(committed)
    assert len(read_partitions(c.bootstrap, "tx-kf", "read_uncommitted", 90)) == 90
    cons = Consumer({"bootstrap.servers": c.bootstrap, "group.id": "kf-tx-group"})
    assert cons.committed([TopicPartition("tx-kf", 0)], 30)[0].offset == 52
    cons.close()


def test_kafka_python_transactions(kafka):
    """kafka-python's transactional producer: committed and aborted transactions over three
    partitions (in the cluster, led by the three brokers), offsets sent to the transactions;
    read_committed consumers (librdkafka's and kafka-python's) see the committed records only."""
    from confluent_kafka import Consumer, TopicPartition
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KpTopicPartition
    from kafka.structs import OffsetAndMetadata

    c = kafka
    c.create_topic("tx-kp", 3)
    p = KafkaProducer(bootstrap_servers=c.bootstrap, transactional_id="kp-tx", linger_ms=5)
    committed: list[list[bytes]] = [[], [], []]
    try:
        p.init_transactions()
        for t, commit in enumerate((True, False, True, False)):
            values = [b"kp%d-%02d" % (t, i) for i in range(30)]
            p.begin_transaction()
            for i, v in enumerate(values):
                p.send("tx-kp", value=v, partition=i % 3)
            p.send_offsets_to_transaction({KpTopicPartition("tx-kp", 0): OffsetAndMetadata(70 + t, "", -1)},
                                          "kp-tx-group")
            p.flush(60)  # the aborted records reach the log too
            if commit:
                p.commit_transaction()
                for i, v in enumerate(values):
                    committed[i % 3].append(v)
            else:
                p.abort_transaction()
    finally:
        p.close()
    everything = sum(committed, [])
    assert sorted(read_partitions(c.bootstrap, "tx-kp", "read_committed", len(everything))) == sorted(everything)
    assert len(read_partitions(c.bootstrap, "tx-kp", "read_uncommitted", 120)) == 120
    kc = KafkaConsumer(bootstrap_servers=c.bootstrap, isolation_level="read_committed", enable_auto_commit=False)
    parts = [KpTopicPartition("tx-kp", q) for q in range(3)]
    kc.assign(parts)
    kc.seek_to_beginning(*parts)
    ends = [hw for hw, _ in stable_offsets(c, "tx-kp", 3)]
    seen: list[list[bytes]] = [[], [], []]
    deadline = time.monotonic() + 60
    while [kc.position(tp) for tp in parts] != ends and time.monotonic() < deadline:
        for tp, records in kc.poll(500).items():
            seen[tp.partition] += [r.value for r in records]
    assert [kc.position(tp) for tp in parts] == ends  # past the last (aborted) transaction and its markers
    kc.close()
    assert seen == committed  # each partition's committed records once, in order
    cons = Consumer({"bootstrap.servers": c.bootstrap, "group.id": "kp-tx-group"})
    assert cons.committed([TopicPartition("tx-kp", 0)], 30)[0].offset == 72  # t2 committed, t3 aborted
    cons.close()
    for hw, lso in stable_offsets(c, "tx-kp", 3):
        assert lso == hw


def check_kafkajs_transactions(bootstrap: str, coordinator_port) -> None:
    """KafkaJS's transactional producer (its own InitProducerId, AddPartitionsToTxn,
    AddOffsetsToTxn, TxnOffsetCommit and EndTxn; tests/js/kafkajs_transactions.js): committed
    records visible once each in order to read_committed, aborted ones only to read_uncommitted,
    a zombie fenced, the committed transaction's offsets the group's and the aborted one's not."""
    from confluent_kafka import Consumer, TopicPartition

    out = run_kafkajs("kafkajs_transactions.js", "produce", bootstrap)
    assert len(out["committed"]) == 82 and len(out["aborted"]) == 40
    assert out["fenced"] == "INVALID_PRODUCER_EPOCH"  # EndTxn v0/v1 predate PRODUCER_FENCED (KIP-588)
    for p in (0, 1):
        committed = [v.encode() for q, v in out["committed"] if q == p]
        aborted = [v.encode() for q, v in out["aborted"] + out["zombie"] if q == p]
        assert committed[-1] == b"after-%d" % p
        assert [v for _, v in read_all(bootstrap, "kjs-tx", "read_committed", len(committed), partition=p)] == committed
        everything = [v for _, v in read_all(bootstrap, "kjs-tx", "read_uncommitted", 62, partition=p)]
        assert sorted(everything) == sorted(committed + aborted)  # the zombie's aborted by the fencing
    assert out["offsets"] == {"2": "102", "4": "104"}
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "kjs-tx-group"})
    assert c.committed([TopicPartition("kjs-tx-in", 0)], 30)[0].offset == 102  # t2 committed, t4 aborted
    c.close()
    assert describe_txn(coordinator_port(), "kjs-txn").transaction_state == "CompleteCommit"


@needs_kafkajs
def test_kafkajs_transactional_producer(kafka):
    kafka.create_topic("kjs-tx", 2)  # (in the cluster: partitions led by two brokers)
    kafka.create_topic("kjs-tx-in", 1)
    check_kafkajs_transactions(kafka.bootstrap, lambda: kafka.coordinator_port("kjs-txn", 1))


@needs_kafkajs
@pytest.mark.parametrize("txn_broker", [2], indirect=True, ids=["workers-2"])
def test_kafkajs_transactional_producer_on_worker_processes(txn_broker):
    check_kafkajs_transactions(txn_broker.bootstrap_servers, lambda: txn_broker.port)


def check_kafkajs_read_committed(bs: str) -> None:
    """KafkaJS's read_committed consumer skips the aborted transactions (the fetch response's
    aborted_transactions) and the markers of records a confluent-kafka transactional producer
    wrote (topic "ck-tx", two partitions), also where an aborted and a committed transaction of
    two producers interleave."""
    from confluent_kafka import Producer

    a, b = (Producer({"bootstrap.servers": bs, "transactional.id": tid, "linger.ms": 0}) for tid in ("ck-a", "ck-b"))
    a.init_transactions(30)
    b.init_transactions(30)
    expected: list[list[str]] = [[], []]
    for t in range(5):  # a commits 0 and 4, aborts 1-3; b commits one transaction interleaved with a's 2
        commit, interleave = t in (0, 4), t == 2
        a.begin_transaction()
        if interleave:
            b.begin_transaction()
        for i in range(20):
            a.produce("ck-tx", value=f"a{t}-{i:02d}", partition=i % 2)
            if commit:
                expected[i % 2].append(f"a{t}-{i:02d}")
            if interleave:  # b's committed records in between a's aborted ones, in both partitions
                a.flush(30)
                b.produce("ck-tx", value=f"b{t}-{i:02d}", partition=i % 2)
                b.flush(30)
                expected[i % 2].append(f"b{t}-{i:02d}")
        a.flush(30)
        (a.commit_transaction if commit else a.abort_transaction)(30)
        if interleave:
            b.commit_transaction(30)
    a.begin_transaction()
    for p in (0, 1):
        a.produce("ck-tx", value="end", partition=p)
        expected[p].append("end")
    a.commit_transaction(30)
    assert len(read_all(bs, "ck-tx", "read_uncommitted", 61, partition=0)) == 61  # 50 of a, 10 of b, end
    assert run_kafkajs("kafkajs_transactions.js", "consume", bs, "ck-tx", "2")["values"] == expected


@needs_kafkajs
def test_kafkajs_read_committed_consumer(kafka):
    """On a single node and a 3-broker cluster (the `kafka` fixture): in the cluster the two
    partitions have leaders on two brokers, each with its own aborted transactions."""
    kafka.create_topic("ck-tx", 2)
    check_kafkajs_read_committed(kafka.bootstrap)


@needs_kafkajs
@pytest.mark.parametrize("txn_broker", [2], indirect=True, ids=["workers-2"])
def test_kafkajs_read_committed_consumer_on_worker_processes(txn_broker):
    txn_broker.create_topic("ck-tx", 2)
    check_kafkajs_read_committed(txn_broker.bootstrap_servers)


@pytest.mark.parametrize("txn_broker", [0, 2], indirect=True, ids=["one-process", "workers-2"])
def test_marker_from_an_older_coordinator_epoch_is_fenced(txn_broker):
    """A WriteTxnMarkers marker whose coordinator epoch is older than the one of the producer's
    last marker in the partition is TRANSACTION_COORDINATOR_FENCED and not appended; the epoch
    survives a clean restart (snapshot) and a SIGKILL (recovery from the markers)."""
    from kafkafast.protocol._generated.describe_producers import DescribeProducersRequest
    from kafkafast.protocol._generated.list_offsets import ListOffsetsRequest
    from kafkafast.protocol._generated.produce import ProduceRequest
    from kafkafast.protocol._generated.write_txn_markers import WriteTxnMarkersRequest
    from kafkafast.protocol.errors import ErrorCode as EC
    from kafkafast.records import encode_batch

    topic, pid = "fence", 770001
    txn_broker.create_topic(topic, 1)
    W = WriteTxnMarkersRequest
    PD = ProduceRequest.TopicProduceData.PartitionProduceData
    seq = 0

    def marker(commit: bool, coordinator_epoch: int) -> int:
        deadline = time.monotonic() + 20
        while True:  # after a restart with workers, one may not have applied the leadership yet: retriable
            with RawClient(txn_broker.port) as rc:
                resp = rc.request(W(markers=[W.WritableTxnMarker(
                    producer_id=pid, producer_epoch=0, transaction_result=commit, coordinator_epoch=coordinator_epoch,
                    topics=[W.WritableTxnMarkerTopic(name=topic, partition_indexes=[0])])]), 1)
            code = resp.markers[0].topics[0].partitions[0].error_code
            if code != EC.NOT_LEADER_OR_FOLLOWER or time.monotonic() > deadline:
                return code
            time.sleep(0.05)

    def produce(transactional: bool) -> None:
        nonlocal seq
        batch = (encode_batch([(1, b"k", b"t%d" % seq, ())], producer_id=pid, producer_epoch=0, base_sequence=seq,
                              is_transactional=True) if transactional
                 else encode_batch([(1, b"k", b"plain", ())]))
        seq += transactional
        for _ in range(3):  # with workers: connections land on the owner and on the other (shared append)
            with RawClient(txn_broker.port) as rc:
                resp = rc.request(ProduceRequest(transactional_id="fence-tid" if transactional else None, acks=-1,
                                                 timeout_ms=5000, topic_data=[ProduceRequest.TopicProduceData(
                                                     name=topic, partition_data=[PD(index=0, records=batch)])]), 8)
            assert resp.responses[0].partition_responses[0].error_code == 0
            if transactional:
                return

    def ends() -> tuple[int, int]:
        """(log end, last stable offset)"""
        out = []
        for isolation in (0, 1):
            T = ListOffsetsRequest.ListOffsetsTopic
            with RawClient(txn_broker.port) as rc:
                resp = rc.request(ListOffsetsRequest(replica_id=-1, isolation_level=isolation, topics=[T(
                    name=topic, partitions=[T.ListOffsetsPartition(partition_index=0, timestamp=-1)])]), 5)
            out.append(resp.topics[0].partitions[0].offset)
        return out[0], out[1]

    def coordinator_epoch() -> int:
        deadline = time.monotonic() + 20
        while True:  # with workers, the owner answers (the others: NOT_LEADER_OR_FOLLOWER)
            with RawClient(txn_broker.port) as rc:
                part = rc.request(DescribeProducersRequest(topics=[
                    DescribeProducersRequest.TopicRequest(name=topic, partition_indexes=[0])]), 0).topics[0].partitions[0]
            if part.error_code == 0:
                return {s.producer_id: s.coordinator_epoch for s in part.active_producers}[pid]
            assert part.error_code == EC.NOT_LEADER_OR_FOLLOWER and time.monotonic() < deadline
            time.sleep(0.05)

    produce(True)                                           # 0
    assert marker(True, 5) == 0                             # 1: COMMIT from coordinator epoch 5
    produce(False)                                          # 2-4
    produce(True)                                           # 5: a new transaction
    assert ends() == (6, 5)
    assert marker(False, 4) == EC.TRANSACTION_COORDINATOR_FENCED  # a deposed coordinator's ABORT
    assert ends() == (6, 5)                                 # not appended, the transaction still open
    assert coordinator_epoch() == 5
    txn_broker.restart(clean=True)                          # from the producer snapshot
    assert coordinator_epoch() == 5
    assert marker(False, 4) == EC.TRANSACTION_COORDINATOR_FENCED
    assert ends() == (6, 5)
    assert marker(False, 7) == 0                            # 6: a newer coordinator's ABORT ends it
    produce(False)                                          # 7-9
    assert ends() == (10, 10)
    txn_broker.restart(clean=False)                         # SIGKILL: the epoch-7 marker comes from recovery
    assert coordinator_epoch() == 7
    produce(True)                                           # 10
    assert marker(True, 6) == EC.TRANSACTION_COORDINATOR_FENCED
    assert ends() == (11, 10)
    assert marker(True, 7) == 0                             # 11: the same epoch again is fine
    assert ends() == (12, 12)
    values = [r.value for r in txn_broker.records(topic)]
    assert values == [b"t0"] + [b"plain"] * 3 + [b"t1"] + [b"plain"] * 3 + [b"t2"]
