"""`kafkafast dump-log` on the files of a stopped broker: batch headers, records, index
checks, and a flipped byte caught by the CRC check."""
from __future__ import annotations

import json
import re

from tests.support.cli import kafkafast


def test_dump_log_of_a_stopped_broker(broker_factory):
    broker = broker_factory(settings={"log.index.interval.bytes": "64"})
    b = ["--bootstrap-server", broker.bootstrap]
    kafkafast("topics", *b, "--create", "--topic", "dump", "--partitions", "1")
    for n in range(3):  # three produce requests: three batches
        kafkafast("produce", *b, "--topic", "dump", "--property", "parse.key=true",
                  stdin="".join(f"k{n}{i}\tvalue-{n}-{i}\n" for i in range(4)))
    assert broker.stop() == 0
    seg = broker.data_dir / "dump-0" / "00000000000000000000.log"

    out = kafkafast("dump-log", "--files", str(seg), "--print-data-log").stdout.splitlines()
    assert out[0] == f"Dumping {seg}"
    batches = [line for line in out if line.startswith("baseOffset:")]
    assert [line.split()[1:6:2] for line in batches] == [["0", "3", "4"], ["4", "7", "4"], ["8", "11", "4"]]
    assert all("isvalid: true" in line and "magic: 2" in line for line in batches)
    records = [line for line in out if line.startswith("| offset:")]
    assert len(records) == 12
    assert records[5].startswith("| offset: 5 ") and records[5].endswith("key: k11 payload: value-1-1")

    index = seg.with_suffix(".index")
    listed = kafkafast("dump-log", "--files", str(index)).stdout
    assert "offset: 4 position:" in listed or "offset: 8 position:" in listed
    ok = kafkafast("dump-log", "--files", f"{index},{seg.with_suffix('.timeindex')}", "--verify-index-only")
    assert f"{index} passed the index check" in ok.stdout

    doc = json.loads(kafkafast("dump-log", "--files", str(seg), "--output", "json").stdout)
    positions = [bt["position"] for bt in doc["files"][0]["batches"]]
    assert doc["problems"] == 0 and positions[0] == 0

    data = bytearray(seg.read_bytes())
    data[positions[1] + 70] ^= 0xFF  # a byte inside the second batch's records
    seg.write_bytes(bytes(data))
    bad = kafkafast("dump-log", "--files", str(seg), check=False)
    assert bad.returncode == 1
    lines = [line for line in bad.stdout.splitlines() if line.startswith("baseOffset:")]
    assert ["isvalid: false" in line for line in lines] == [False, True, False]

    raw = bytearray(index.read_bytes())
    raw[4:8] = (positions[2] + 1).to_bytes(4, "big")  # first entry points into the middle of a batch
    index.write_bytes(bytes(raw))
    broken = kafkafast("dump-log", "--files", str(index), "--verify-index-only", check=False)
    assert broken.returncode == 1 and "Index mismatch" in broken.stdout and "failed the index check" in broken.stdout


def test_dump_log_decodes_consumer_offsets_and_transaction_state(broker_factory):
    from confluent_kafka import Producer

    broker = broker_factory(settings={"offsets.topic.num.partitions": "1",
                                      "transaction.state.log.num.partitions": "1"})
    b = ["--bootstrap-server", broker.bootstrap]
    kafkafast("topics", *b, "--create", "--topic", "decoded", "--partitions", "1")
    kafkafast("produce", *b, "--topic", "decoded", stdin="a\nb\n")
    kafkafast("consume", *b, "--topic", "decoded", "--group", "dumped", "--from-beginning", "--max-messages", "2",
              "--timeout-ms", "10000")
    p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "dump-txn"})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce("decoded", b"in-txn", partition=0)
    p.commit_transaction(30)
    assert broker.stop() == 0

    offsets = broker.data_dir / "__consumer_offsets-0" / "00000000000000000000.log"
    lines = [line for line in kafkafast("dump-log", "--files", str(offsets), "--offsets-decoder").stdout.splitlines()
             if line.startswith("| offset:")]
    commit = re.compile(r'.* key: \{"type":"1","data":\{"group":"dumped","topic":"decoded","partition":0\}\} '
                        r'payload: \{"version":"(\d)","data":\{"offset":2,("leaderEpoch":-?\d+,)?"metadata":"",'
                        r'"commitTimestamp":\d+(,"expireTimestamp":-?\d+)?\}\}$')
    assert any(commit.match(line) for line in lines), lines
    group = [line for line in lines if ' key: {"type":"2","data":{"group":"dumped"}} payload: ' in line]
    assert group and any('"protocolType":"consumer"' in line and '"members":[' in line for line in group), lines
    # a member's subscription and assignment decoded (the consumer protocol), not left as bytes
    assert any('"subscription":{"topics":["decoded"]' in line
               and '"assignment":{"assignedPartitions":[{"topic":"decoded","partitions":[0]}]' in line
               for line in group), group

    state = broker.data_dir / "__transaction_state-0" / "00000000000000000000.log"
    txn = kafkafast("dump-log", "--files", str(state), "--transaction-log-decoder").stdout
    entries = re.findall(r" key: transaction_metadata::transactionalId=dump-txn payload: producerId:(\d+),"
                         r"producerEpoch:0,state=(\w+),partitions=\[([^\]]*)\],txnLastUpdateTimestamp=\d+,"
                         r"txnTimeoutMs=(\d+)", txn)
    states = [(s, parts) for _, s, parts, _ in entries]
    assert ("Ongoing", "decoded-0") in states and ("PrepareCommit", "decoded-0") in states
    assert states[-1] == ("CompleteCommit", "")
