"""`kafkafast produce`, `consume` and `groups` against a running broker: records in and
out through pipes, a group's lag, offset resets (dry run, then --execute), delete."""
from __future__ import annotations

import json

from tests.support.cli import kafkafast


def _b(broker) -> list[str]:
    return ["--bootstrap-server", broker.bootstrap]


def test_produce_and_consume_keys_headers_and_formats(module_broker):
    b = _b(module_broker)
    kafkafast("topics", *b, "--create", "--topic", "lines", "--partitions", "1")
    lines = "".join(f"h1:a{i},h2:b\tk{i}|v{i}\n" for i in range(5))
    kafkafast("produce", *b, "--topic", "lines", "--property", "parse.key=true", "--property", "key.separator=|",
              "--property", "parse.headers=true", "--compression-codec", "lz4", "--acks", "all", stdin=lines)
    out = kafkafast("consume", *b, "--topic", "lines", "--from-beginning", "--max-messages", "5",
                    "--property", "print.key=true", "--property", "print.headers=true",
                    "--property", "print.offset=true")
    assert out.stdout.splitlines() == [f"Offset:{i}\th1:a{i},h2:b\tk{i}\tv{i}" for i in range(5)]
    assert "Processed a total of 5 messages" in out.stderr

    fmt = kafkafast("consume", *b, "--topic", "lines", "--partition", "0", "--offset", "3", "--max-messages", "2",
                    "--format", "%t/%p@%o %k=%v %K/%V\\n")
    assert fmt.stdout.splitlines() == ["lines/0@3 k3=v3 2/2", "lines/0@4 k4=v4 2/2"]

    stamped = kafkafast("consume", *b, "--topic", "lines", "--from-beginning", "--max-messages", "1",
                        "--property", "print.timestamp=true", "--property", "print.value=false")
    kind, _, ts = stamped.stdout.strip().partition(":")
    assert kind == "CreateTime" and int(ts) > 1_600_000_000_000

    since = kafkafast("consume", *b, "--topic", "lines", "--from-datetime", "2001-01-01T00:00:00Z",
                      "--max-messages", "5", "--format", "%o ")
    assert since.stdout.split() == ["0", "1", "2", "3", "4"]
    future = kafkafast("consume", *b, "--topic", "lines", "--from-datetime", "2999-01-01T00:00:00Z",
                       "--timeout-ms", "1000")
    assert future.stdout == "" and "Processed a total of 0 messages" in future.stderr

    # Waits for nothing: --timeout-ms ends a read of an exhausted topic.
    rest = kafkafast("consume", *b, "--topic", "lines", "--partition", "0", "--offset", "4", "--timeout-ms", "1500")
    assert rest.stdout.splitlines() == ["v4"]

    bad = kafkafast("produce", *b, "--topic", "lines", "--property", "parse.key=true", stdin="no separator\n",
                    check=False)
    assert bad.returncode == 1 and "no key separator" in bad.stderr


def test_group_describe_lag_reset_and_delete(module_broker):
    b = _b(module_broker)
    kafkafast("topics", *b, "--create", "--topic", "work", "--partitions", "2")
    kafkafast("produce", *b, "--topic", "work", "--partition", "0", stdin="".join(f"a{i}\n" for i in range(10)))
    kafkafast("produce", *b, "--topic", "work", "--partition", "1", stdin="".join(f"b{i}\n" for i in range(6)))
    got = kafkafast("consume", *b, "--topic", "work", "--group", "billing", "--from-beginning", "--max-messages", "16")
    assert sorted(got.stdout.split()) == sorted([f"a{i}" for i in range(10)] + [f"b{i}" for i in range(6)])

    assert "billing" in kafkafast("groups", *b, "--list").stdout.split()
    kafkafast("produce", *b, "--topic", "work", "--partition", "0", stdin="late1\nlate2\nlate3\n")
    doc = json.loads(kafkafast("groups", *b, "--describe", "--group", "billing", "--output", "json").stdout)[0]
    rows = {r["partition"]: r for r in doc["partitions"]}
    assert doc["state"] == "Empty" and doc["members"] == []
    assert (rows[0]["current_offset"], rows[0]["log_end_offset"], rows[0]["lag"]) == (10, 13, 3)
    assert (rows[1]["current_offset"], rows[1]["log_end_offset"], rows[1]["lag"]) == (6, 6, 0)
    assert doc["total_lag"] == 3
    table = kafkafast("groups", *b, "--describe", "--group", "billing").stdout
    assert any(line.split()[:6] == ["billing", "work", "0", "10", "13", "3"] for line in table.splitlines())

    dry = kafkafast("groups", *b, "--reset-offsets", "--group", "billing", "--topic", "work", "--to-earliest")
    assert "dry run" in dry.stdout
    assert any(line.split() == ["billing", "work", "0", "0"] for line in dry.stdout.splitlines())
    after_dry = json.loads(kafkafast("groups", *b, "--describe", "--group", "billing", "--output", "json").stdout)[0]
    assert {r["partition"]: r["current_offset"] for r in after_dry["partitions"]} == {0: 10, 1: 6}

    kafkafast("groups", *b, "--reset-offsets", "--group", "billing", "--topic", "work:0", "--shift-by", "-4",
              "--execute")
    kafkafast("groups", *b, "--reset-offsets", "--group", "billing", "--topic", "work:1", "--to-offset", "99",
              "--execute")
    now = json.loads(kafkafast("groups", *b, "--describe", "--group", "billing", "--output", "json").stdout)[0]
    assert {r["partition"]: r["current_offset"] for r in now["partitions"]} == {0: 6, 1: 6}  # 99 clamps to the end

    future = kafkafast("groups", *b, "--reset-offsets", "--group", "billing", "--all-topics", "--to-datetime",
                       "2999-01-01T00:00:00", "--output", "json")
    assert {o["partition"]: o["new_offset"] for o in json.loads(future.stdout)[0]["offsets"]} == {0: 13, 1: 6}
    recent = kafkafast("groups", *b, "--reset-offsets", "--group", "billing", "--all-topics", "--by-duration",
                       "P1D", "--output", "json")  # everything was written within the last day
    assert {o["partition"]: o["new_offset"] for o in json.loads(recent.stdout)[0]["offsets"]} == {0: 0, 1: 0}
    past = kafkafast("groups", *b, "--reset-offsets", "--group", "billing", "--all-topics", "--to-datetime",
                     "2001-01-01T00:00:00Z", "--execute", "--output", "json")
    assert {o["partition"]: o["new_offset"] for o in json.loads(past.stdout)[0]["offsets"]} == {0: 0, 1: 0}
    again = kafkafast("consume", *b, "--topic", "work", "--group", "billing", "--max-messages", "19")
    assert len(again.stdout.split()) == 19

    deleted = kafkafast("groups", *b, "--delete", "--group", "billing")
    assert "('billing') was successful" in deleted.stdout
    assert "billing" not in kafkafast("groups", *b, "--list").stdout.split()


def test_group_with_a_live_member_shows_its_assignment_and_refuses_a_reset(module_broker):
    from kafkafast.client.sync import KafkaConsumer

    b = _b(module_broker)
    kafkafast("topics", *b, "--create", "--topic", "live", "--partitions", "3")
    c = KafkaConsumer("live", bootstrap_servers=module_broker.bootstrap, group_id="live-group", client_id="ops-test",
                      auto_offset_reset="earliest")
    try:
        deadline = 0
        while len(c.assignment()) < 3 and deadline < 100:
            c.poll(200)
            deadline += 1
        members = json.loads(kafkafast("groups", *b, "--describe", "--group", "live-group", "--members",
                                       "--output", "json").stdout)[0]
        assert members["state"] == "Stable"
        (m,) = members["members"]
        assert m["client_id"] == "ops-test" and m["assignment"] == ["live-0", "live-1", "live-2"]
        table = kafkafast("groups", *b, "--describe", "--group", "live-group", "--members").stdout
        assert any(line.split()[3:6] == ["ops-test", "3", "live-0,live-1,live-2"] for line in table.splitlines()[1:])
        refused = kafkafast("groups", *b, "--reset-offsets", "--group", "live-group", "--topic", "live",
                            "--to-earliest", "--execute", check=False)
        assert refused.returncode == 1 and "can only be reset if the group 'live-group' is inactive" in refused.stderr
    finally:
        c.close()


def test_delete_offsets_of_a_group_and_of_an_unknown_one(module_broker):
    b = _b(module_broker)
    kafkafast("topics", *b, "--create", "--topic", "forget-me", "--partitions", "2")
    kafkafast("produce", *b, "--topic", "forget-me", "--partition", "1", stdin="a\nb\n")
    kafkafast("consume", *b, "--topic", "forget-me", "--group", "forgetful", "--from-beginning",
              "--max-messages", "2", "--timeout-ms", "10000")
    before = json.loads(kafkafast("groups", *b, "--describe", "--group", "forgetful", "--output", "json").stdout)
    assert [(r["partition"], r["current_offset"]) for r in before[0]["partitions"]] == [(0, 0), (1, 2)]

    out = kafkafast("groups", *b, "--delete-offsets", "--group", "forgetful", "--topic", "forget-me:1").stdout
    assert out == ("Request succeed for deleting offsets with topic forget-me:1 group forgetful\n"
                   "\nTOPIC                          PARTITION       STATUS         "
                   "\nforget-me                      1               Successful     \n")
    after = json.loads(kafkafast("groups", *b, "--describe", "--group", "forgetful", "--output", "json").stdout)
    assert [(r["partition"], r["current_offset"]) for r in after[0]["partitions"]] == [(0, 0)]
    kafkafast("groups", *b, "--delete-offsets", "--group", "forgetful", "--topic", "forget-me")
    gone = json.loads(kafkafast("groups", *b, "--describe", "--group", "forgetful", "--output", "json").stdout)
    assert gone[0]["partitions"] == []

    unknown = kafkafast("groups", *b, "--delete-offsets", "--group", "never-was", "--topic", "forget-me", check=False)
    assert unknown.returncode == 1 and "Error: 'never-was' does not exist." in unknown.stderr
