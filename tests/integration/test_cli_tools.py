"""Kafka's admin tools that kafkafast's command line carries under their names: log-dirs,
broker-api-versions, get-offsets, delete-records, features, transactions, and --version,
with Kafka's flags and output text, against a running broker."""
from __future__ import annotations

import json
import re

from confluent_kafka import Producer

from kafkafast.protocol import _generated as gen
from tests.support.broker_process import free_port
from tests.support.cli import kafkafast
from tests.support.logins import login_refused


def _produce(bootstrap: str, topic: str, partition: int, timestamps: list[int]) -> None:
    p = Producer({"bootstrap.servers": bootstrap})
    for ts in timestamps:
        p.produce(topic, b"v" * 10, partition=partition, timestamp=ts)
    assert p.flush(30) == 0


def test_log_dirs_describe_prints_kafkas_json(module_broker):
    b = ["--bootstrap-server", module_broker.bootstrap]
    kafkafast("topics", *b, "--create", "--topic", "sized", "--partitions", "2")
    _produce(module_broker.bootstrap, "sized", 1, [1000, 2000, 3000])
    out = kafkafast("log-dirs", *b, "--describe", "--topic-list", "sized").stdout.splitlines()
    assert out[:2] == ["Querying brokers for log directories information",
                       "Received log directory information from brokers 0"]
    doc = json.loads(out[2])
    assert doc["version"] == 1 and [x["broker"] for x in doc["brokers"]] == [0]
    [log_dir] = doc["brokers"][0]["logDirs"]
    assert log_dir["logDir"] == str(module_broker.data_dir) and log_dir["error"] is None
    parts = {p["partition"]: p for p in log_dir["partitions"]}
    assert set(parts) == {"sized-0", "sized-1"}
    assert parts["sized-0"]["size"] == 0 and parts["sized-1"]["size"] > 3 * 10
    assert parts["sized-1"]["offsetLag"] == 0 and parts["sized-1"]["isFuture"] is False
    bad = kafkafast("log-dirs", *b, "--describe", "--broker-list", "0,7", check=False)
    assert bad.returncode == 1
    assert "The given brokers do not exist from --broker-list: 7. Current existent brokers: 0" in bad.stderr


def test_broker_api_versions_lists_every_api_with_the_usable_version(module_broker):
    out = kafkafast("broker-api-versions", "--bootstrap-server", module_broker.bootstrap).stdout
    assert out.startswith(f"{module_broker.bootstrap} (id: 0 rack: null) -> (\n\t")
    assert out.endswith("\n)\n")
    lines = out.splitlines()[1:-1]
    produce_max = gen.REQUESTS[0].MAX_VERSION
    assert re.fullmatch(rf"\tProduce\(0\): \d+ to \d+ \[usable: {produce_max}\],", lines[0])
    assert any(re.fullmatch(r"\tApiVersions\(18\): 0 to \d \[usable: \d\],?", line) for line in lines)
    keys = [int(re.match(r"\t\w+\((\d+)\)", line).group(1)) for line in lines]
    assert keys == sorted(keys) and len(keys) > 40


def test_get_offsets_by_time(module_broker):
    b = ["--bootstrap-server", module_broker.bootstrap]
    kafkafast("topics", *b, "--create", "--topic", "timed", "--partitions", "2")
    _produce(module_broker.bootstrap, "timed", 0, [1000, 2000, 3000])
    _produce(module_broker.bootstrap, "timed", 1, [5000])
    assert kafkafast("get-offsets", *b, "--topic", "timed", "--time", "-1").stdout == "timed:0:3\ntimed:1:1\n"
    assert kafkafast("get-offsets", *b, "--topic", "timed", "--time", "earliest").stdout == "timed:0:0\ntimed:1:0\n"
    # the first offset at or after 2000 ms; partition 1 has one (5000), a later time finds none: left out
    assert kafkafast("get-offsets", *b, "--topic", "timed", "--time", "2000").stdout == "timed:0:1\ntimed:1:0\n"
    assert kafkafast("get-offsets", *b, "--topic", "timed", "--time", "4000").stdout == "timed:1:0\n"
    assert kafkafast("get-offsets", *b, "--topic-partitions", "timed:1", "--time", "-1").stdout == "timed:1:1\n"
    none = kafkafast("get-offsets", *b, "--topic", "no-such-topic", check=False)
    assert none.returncode == 1 and "Could not match any topic-partitions with the specified filters" in none.stderr


def test_delete_records_from_an_offset_json_file(module_broker, tmp_path):
    b = ["--bootstrap-server", module_broker.bootstrap]
    kafkafast("topics", *b, "--create", "--topic", "trimmed", "--partitions", "1")
    _produce(module_broker.bootstrap, "trimmed", 0, [1000, 2000, 3000, 4000])
    plan = tmp_path / "delete.json"
    plan.write_text(json.dumps({"partitions": [{"topic": "trimmed", "partition": 0, "offset": 3}], "version": 1}))
    out = kafkafast("delete-records", *b, "--offset-json-file", str(plan)).stdout
    assert out == ("Executing records delete operation\nRecords delete operation completed:\n"
                   "partition: trimmed-0\tlow_watermark: 3\n")
    assert kafkafast("get-offsets", *b, "--topic", "trimmed", "--time", "-2").stdout == "trimmed:0:3\n"
    plan.write_text(json.dumps({"partitions": [{"topic": "trimmed", "partition": 0, "offset": 99}], "version": 1}))
    beyond = kafkafast("delete-records", *b, "--offset-json-file", str(plan), check=False)
    assert beyond.returncode == 1
    assert "partition: trimmed-0\terror: org.apache.kafka.common.errors.OffsetOutOfRangeException" in beyond.stdout


def test_features_describe_and_version(module_broker):
    out = kafkafast("features", "--bootstrap-server", module_broker.bootstrap, "--describe")
    assert out.returncode == 0
    for line in out.stdout.splitlines():  # a broker without feature flags has none to print
        assert re.fullmatch(r"Feature: \S+\tSupportedMinVersion: \d+\tSupportedMaxVersion: \d+\t"
                            r"FinalizedVersionLevel: \d+\tEpoch: (\d+|-)", line)
    assert re.fullmatch(r"kafkafast \S+\n", kafkafast("--version").stdout)


def _table(text: str) -> list[list[str]]:
    """Rows of a Kafka tool table (every column followed by a tab)."""
    return [[c.strip() for c in line.split("\t")[:-1]] for line in text.splitlines()]


def test_transactions_list_describe_producers_abort_and_find_hanging(module_broker):
    b = ["--bootstrap-server", module_broker.bootstrap]
    kafkafast("topics", *b, "--create", "--topic", "txn-tool", "--partitions", "1")
    p = Producer({"bootstrap.servers": module_broker.bootstrap, "transactional.id": "tool-txn-1"})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce("txn-tool", b"open", partition=0)
    assert p.flush(30) == 0

    listed = _table(kafkafast("transactions", *b, "list").stdout)
    assert listed[0] == ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]
    [row] = [r for r in listed[1:] if r[0] == "tool-txn-1"]
    assert row[1] == "0" and row[3] == "Ongoing"
    pid = row[2]

    described = _table(kafkafast("transactions", *b, "describe", "--transactional-id", "tool-txn-1").stdout)
    assert described[0][:5] == ["CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState"]
    assert described[1][:5] == ["0", "tool-txn-1", pid, "0", "Ongoing"] and described[1][8] == "txn-tool-0"

    producers = _table(kafkafast("transactions", *b, "describe-producers", "--topic", "txn-tool",
                                 "--partition", "0").stdout)
    assert producers[0] == ["ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence", "LastTimestamp",
                            "CurrentTransactionStartOffset"]
    assert producers[1][0] == pid and producers[1][5] == "0"

    # the coordinator still has the partition in the transaction: not hanging
    hanging = _table(kafkafast("transactions", *b, "find-hanging", "--topic", "txn-tool",
                               "--max-transaction-timeout", "0").stdout)
    assert hanging == [["Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch", "StartOffset",
                        "LastTimestamp", "Duration(min)"]]
    scope = kafkafast("transactions", *b, "find-hanging", check=False)
    assert scope.returncode == 1 and "requires either --topic or --broker-id" in scope.stderr

    kafkafast("transactions", *b, "abort", "--topic", "txn-tool", "--partition", "0", "--start-offset", "0")
    after = _table(kafkafast("transactions", *b, "describe-producers", "--topic", "txn-tool",
                             "--partition", "0").stdout)
    assert after[1][0] == pid and after[1][5] == "None"
    again = kafkafast("transactions", *b, "abort", "--topic", "txn-tool", "--partition", "0", "--start-offset", "0",
                      check=False)
    assert again.returncode == 1
    assert "Could not find any open transactions starting at offset 0 on partition txn-tool-0" in again.stderr


def test_configs_users_scram_credentials_log_in_and_client_quotas(broker_factory):
    from confluent_kafka.admin import AdminClient

    plain, sasl = free_port(), free_port()
    broker = broker_factory(port=plain, settings={
        "listeners": f"PLAINTEXT://127.0.0.1:{plain},SASL_PLAINTEXT://127.0.0.1:{sasl}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512"})
    b = ["--bootstrap-server", broker.bootstrap]
    out = kafkafast("configs", *b, "--entity-type", "users", "--entity-name", "erin", "--alter", "--add-config",
                    "SCRAM-SHA-256=[iterations=8192,password=erin-secret],SCRAM-SHA-512=[password=erin-512]")
    assert out.stdout == "Completed updating config for user erin.\n"

    def erin(mechanism: str, password: str) -> dict:
        return {"bootstrap.servers": f"127.0.0.1:{sasl}", "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": mechanism, "sasl.username": "erin", "sasl.password": password}

    def login(mechanism: str, password: str) -> bool:
        admin = AdminClient(erin(mechanism, password))
        try:
            admin.list_topics(timeout=5)
            return True
        except Exception:  # noqa: BLE001 - KafkaException: authentication failed / timed out
            return False

    assert login("SCRAM-SHA-256", "erin-secret") and login("SCRAM-SHA-512", "erin-512")
    assert login_refused(erin("SCRAM-SHA-256", "wrong"))

    kafkafast("configs", *b, "--entity-type", "users", "--entity-name", "erin", "--alter",
              "--add-config", "consumer_byte_rate=1024,producer_byte_rate=20000000")
    mixed = kafkafast("configs", *b, "--entity-type", "users", "--entity-name", "erin", "--alter",
                      "--add-config", "consumer_byte_rate=1,SCRAM-SHA-256=[password=x]", check=False)
    assert mixed.returncode == 1 and "Cannot alter both quota and SCRAM credential configs" in mixed.stderr
    described = kafkafast("configs", *b, "--entity-type", "users", "--entity-name", "erin", "--describe").stdout
    assert described == (
        "Quota configs for user-principal 'erin' are consumer_byte_rate=1024.0, producer_byte_rate=2.0E7\n"
        "SCRAM credential configs for user-principal 'erin' are SCRAM-SHA-256=iterations=8192, "
        "SCRAM-SHA-512=iterations=4096\n")
    kafkafast("configs", *b, "--entity-type", "users", "--entity-name", "erin", "--alter",
              "--delete-config", "SCRAM-SHA-512")
    assert login_refused(erin("SCRAM-SHA-512", "erin-512"))

    assert kafkafast("configs", *b, "--entity-type", "clients", "--entity-name", "etl", "--alter",
                     "--add-config", "request_percentage=50").stdout == "Completed updating config for client etl.\n"
    assert kafkafast("configs", *b, "--entity-type", "clients", "--describe").stdout == (
        "Quota configs for client-id 'etl' are request_percentage=50.0\n")
    kafkafast("configs", *b, "--entity-type", "clients", "--entity-default", "--alter",
              "--add-config", "consumer_byte_rate=5")
    assert kafkafast("configs", *b, "--entity-type", "clients", "--entity-default", "--describe").stdout == (
        "Quota configs for the default client-id are consumer_byte_rate=5.0\n")
