"""A compacted topic takes only keyed records: a record set with keyless records is refused
whole with INVALID_RECORD and record_errors naming each keyless record (Produce v8+), as
Kafka's log validator does; compressed batches are looked into; keyed records, and keyless
ones in a delete-policy topic, are appended as usual. A corrupt batch and a client's keyless record
meet the same checks on a single node and a 3-broker cluster's leader (the `kafka` fixture)."""
from __future__ import annotations

import pytest

from kafkafast.protocol.errors import ErrorCode
from kafkafast.records import encode_batch
from kafkafast.records.model import CODEC_GZIP, CODEC_NONE, CODEC_ZSTD
from tests.integration.test_bad_input import create_topic, latest_offset, produce
from tests.support import hostile_batches as hb

T0 = 1_700_000_000_000
COMPACT = {"cleanup.policy": "compact"}


def batch(keys, codec=CODEC_NONE):
    return encode_batch([(T0 + i, k, b"v%d" % i, []) for i, k in enumerate(keys)], codec)


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("codec", [CODEC_NONE, CODEC_GZIP, CODEC_ZSTD])
@pytest.mark.parametrize("version", [8, 9])
def test_keyless_records_in_a_compacted_topic_are_rejected_with_record_errors(broker_factory, workers, codec,
                                                                              version):
    b = broker_factory(workers=workers)
    assert create_topic(b.port, "compacted", partitions=4, configs=COMPACT).error_code == 0
    for partition in range(4):  # with 2 workers some partitions are forwarded to their owner
        res = produce(b.port, "compacted", batch([b"a", None, b"c", None, b"e"], codec), partition=partition,
                      version=version)
        assert res.error_code == ErrorCode.INVALID_RECORD
        assert [e.batch_index for e in res.record_errors] == [1, 3]
        assert all(f"compacted topic partition compacted-{partition}" in e.batch_index_error_message
                   and "without a key" in e.batch_index_error_message for e in res.record_errors)
        assert res.error_message.startswith("2 record(s) rejected")
        assert res.base_offset == -1
        assert latest_offset(b.port, "compacted", partition).offset == 0  # nothing written

        ok = produce(b.port, "compacted", batch([b"a", b"b"], codec), partition=partition, version=version)
        assert (ok.error_code, ok.base_offset, ok.record_errors) == (0, 0, [])
        assert latest_offset(b.port, "compacted", partition).offset == 2


def test_keyless_records_in_a_delete_policy_topic_are_accepted(broker):
    assert create_topic(broker.port, "plain").error_code == 0
    res = produce(broker.port, "plain", batch([None, None], CODEC_GZIP))
    assert (res.error_code, res.base_offset) == (0, 0)


def test_corrupt_batch_in_a_compacted_topic_is_corrupt_message(kafka):
    kafka.create_topic("compacted", 1, COMPACT)
    port = kafka.leader_port("compacted", 0)
    bad = bytearray(batch([None, b"k"]))
    bad[-1] ^= 0xFF  # breaks the CRC
    assert produce(port, "compacted", bytes(bad)).error_code == ErrorCode.CORRUPT_MESSAGE
    # a correct CRC over a gzip payload that does not decompress
    assert produce(port, "compacted", hb.garbage(CODEC_GZIP)).error_code == ErrorCode.CORRUPT_MESSAGE
    assert latest_offset(port, "compacted").offset == 0


def test_confluent_kafka_fails_the_keyless_records_only(kafka):
    from confluent_kafka import Producer

    kafka.create_topic("ck-compacted", 1, COMPACT)
    reports: list = []
    p = Producer({"bootstrap.servers": kafka.bootstrap, "linger.ms": 0, "retries": 0})

    def report(err, msg):
        reports.append((msg.key(), err.name() if err else None, msg.offset()))

    p.produce("ck-compacted", key=None, value=b"no key", on_delivery=report)
    p.flush(30)
    p.produce("ck-compacted", key=b"k", value=b"keyed", on_delivery=report)
    assert p.flush(30) == 0
    assert reports == [(None, "INVALID_RECORD", None), (b"k", None, 0)]
