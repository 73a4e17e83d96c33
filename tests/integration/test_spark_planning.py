"""The pure logic of the `kafkafast` Spark source: option parsing, offset resolution, task
planning (minPartitions), rate limiting and checkpoint JSON -- no Spark, no broker."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "spark"))

from pyspark_kafkafast.options import (  # noqa: E402
    Assign,
    EarliestOffsets,
    GlobalTimestamp,
    KafkaFastOptionError,
    LatestOffsets,
    SpecificOffsets,
    SpecificTimestamps,
    Subscribe,
    SubscribePattern,
    parse_sink_options,
    parse_source_options,
)
from pyspark_kafkafast.planning import (  # noqa: E402
    DataLossError,
    OffsetRange,
    offsets_from_json,
    offsets_to_json,
    plan_batch,
    plan_micro_batch,
    rate_limit,
    resolve_offsets,
    split_ranges,
)

BOOT = {"kafka.bootstrap.servers": "127.0.0.1:9092"}


class FakeLookup:
    """A broker with fixed log start / end offsets and a timestamp -> offset table."""

    def __init__(self, earliest: dict, latest: dict, by_ts: dict | None = None) -> None:
        self._earliest, self._latest, self._by_ts = earliest, latest, by_ts or {}

    def partitions(self, subscription):
        return sorted(self._latest)

    def earliest(self, tps):
        return {tp: self._earliest[tp] for tp in tps if tp in self._earliest}

    def latest(self, tps):
        return {tp: self._latest[tp] for tp in tps if tp in self._latest}

    def for_timestamps(self, timestamps):
        return {tp: self._by_ts.get((tp, ts)) for tp, ts in timestamps.items()}


# ------------------------------------------------------------------ options
def test_subscription_kinds_are_parsed_and_exactly_one_is_required():
    assert parse_source_options({**BOOT, "subscribe": "a, b"}, streaming=False).subscription == Subscribe(("a", "b"))
    assert parse_source_options({**BOOT, "subscribePattern": "ev.*"}, streaming=False).subscription \
        == SubscribePattern("ev.*")
    assert parse_source_options({**BOOT, "assign": '{"a":[0,2]}'}, streaming=False).subscription \
        == Assign((("a", 0), ("a", 2)))
    with pytest.raises(KafkaFastOptionError, match="exactly one"):
        parse_source_options({**BOOT, "subscribe": "a", "assign": '{"a":[0]}'}, streaming=False)
    with pytest.raises(KafkaFastOptionError, match="exactly one"):
        parse_source_options(BOOT, streaming=False)
    with pytest.raises(KafkaFastOptionError, match="bootstrap"):
        parse_source_options({"subscribe": "a"}, streaming=False)


def test_subscribe_pattern_matches_whole_topic_names():
    p = SubscribePattern("ev.*")
    assert p.matches("events") and not p.matches("my-events")


def test_option_names_are_case_insensitive():
    o = parse_source_options({"KAFKA.BOOTSTRAP.SERVERS": "h:1", "Subscribe": "a", "STARTINGOFFSETS": "latest",
                              "maxoffsetspertrigger": "10"}, streaming=True)
    assert o.bootstrap == "h:1" and isinstance(o.starting, LatestOffsets) and o.max_offsets_per_trigger == 10


def test_default_starting_offsets_are_earliest_for_batch_and_latest_for_streaming():
    assert isinstance(parse_source_options({**BOOT, "subscribe": "a"}, streaming=False).starting, EarliestOffsets)
    assert isinstance(parse_source_options({**BOOT, "subscribe": "a"}, streaming=True).starting, LatestOffsets)


def test_timestamp_options_take_precedence_like_spark():
    o = parse_source_options({**BOOT, "subscribe": "a", "startingOffsets": "earliest",
                              "startingOffsetsByTimestamp": '{"a":{"0":5}}', "startingTimestamp": "7"},
                             streaming=False)
    assert o.starting == GlobalTimestamp(7, False)
    o = parse_source_options({**BOOT, "subscribe": "a", "startingOffsets": "earliest",
                              "startingOffsetsByTimestamp": '{"a":{"0":5}}',
                              "startingOffsetsByTimestampStrategy": "latest"}, streaming=False)
    assert o.starting == SpecificTimestamps({("a", 0): 5}, True)


@pytest.mark.parametrize("opts, message", [
    ({"startingOffsets": "latest"}, "can't be latest"),
    ({"startingOffsets": '{"a":{"0":-1}}'}, "can't be latest"),
    ({"endingOffsets": "earliest"}, "can't be earliest"),
    ({"endingOffsets": '{"a":{"0":-2}}'}, "can't be earliest"),
    ({"minPartitions": "0"}, "positive"),
    ({"kafka.auto.offset.reset": "earliest"}, "not supported"),
    ({"startingOffsets": "{nope"}, "expected JSON"),
    ({"failOnDataLoss": "maybe"}, "true or false"),
])
def test_batch_queries_reject_what_spark_rejects(opts, message):
    with pytest.raises(KafkaFastOptionError, match=message):
        parse_source_options({**BOOT, "subscribe": "a", **opts}, streaming=False)


def test_streaming_queries_reject_ending_offsets():
    with pytest.raises(KafkaFastOptionError, match="not valid in streaming"):
        parse_source_options({**BOOT, "subscribe": "a", "endingOffsets": "latest"}, streaming=True)


def test_sink_options_map_kafka_producer_settings():
    o = parse_sink_options({**BOOT, "topic": "out", "kafka.acks": "1", "kafka.compression.type": "lz4",
                            "kafka.linger.ms": "20"})
    assert (o.topic, o.acks, o.compression, o.linger_ms) == ("out", "1", "lz4", 20)
    with pytest.raises(KafkaFastOptionError, match="compression"):
        parse_sink_options({**BOOT, "kafka.compression.type": "brotli"})


def test_sink_exactly_once_options():
    assert not parse_sink_options({**BOOT, "topic": "out"}).exactly_once
    o = parse_sink_options({**BOOT, "topic": "out", "exactlyOnce": "TRUE", "transactionalIdPrefix": "etl",
                            "kafka.transaction.timeout.ms": "60000"})
    assert (o.exactly_once, o.transactional_id_prefix, o.transaction_timeout_ms) == (True, "etl", 60000)
    assert parse_sink_options({**BOOT, "exactlyOnce": "true"}).transaction_timeout_ms == 900000
    with pytest.raises(KafkaFastOptionError, match="exactlyOnce must be"):
        parse_sink_options({**BOOT, "exactlyOnce": "yes"})
    with pytest.raises(KafkaFastOptionError, match="acks=all"):
        parse_sink_options({**BOOT, "exactlyOnce": "true", "kafka.acks": "1"})
    with pytest.raises(KafkaFastOptionError, match="transactional.id"):
        parse_sink_options({**BOOT, "exactlyOnce": "true", "kafka.transactional.id": "x"})


# ------------------------------------------------------------------ resolving offsets
LOOKUP = FakeLookup(earliest={("a", 0): 10, ("a", 1): 0}, latest={("a", 0): 100, ("a", 1): 50},
                    by_ts={(("a", 0), 1000): 40, (("a", 1), 1000): None})
TPS = [("a", 0), ("a", 1)]


def test_specific_offsets_resolve_minus_two_and_minus_one():
    spec = SpecificOffsets({("a", 0): -2, ("a", 1): -1})
    assert resolve_offsets(spec, TPS, LOOKUP, starting=True) == {("a", 0): 10, ("a", 1): 50}


def test_specific_offsets_must_name_every_partition():
    with pytest.raises(KafkaFastOptionError, match="must specify all TopicPartitions"):
        resolve_offsets(SpecificOffsets({("a", 0): 5}), TPS, LOOKUP, starting=True)


def test_timestamp_without_match_fails_a_start_by_default_and_means_latest_otherwise():
    with pytest.raises(KafkaFastOptionError, match="No offset matched"):
        resolve_offsets(GlobalTimestamp(1000), TPS, LOOKUP, starting=True)
    assert resolve_offsets(GlobalTimestamp(1000, True), TPS, LOOKUP, starting=True) == {("a", 0): 40, ("a", 1): 50}
    assert resolve_offsets(GlobalTimestamp(1000, True), TPS, LOOKUP, starting=False) == {("a", 0): 40, ("a", 1): 50}


def test_batch_plan_is_one_range_per_partition_and_rejects_inverted_ranges():
    ranges = plan_batch(Subscribe(("a",)), EarliestOffsets(), LatestOffsets(), LOOKUP, None)
    assert ranges == [OffsetRange("a", 0, 10, 100), OffsetRange("a", 1, 0, 50)]
    with pytest.raises(KafkaFastOptionError, match="after the ending offset"):
        plan_batch(Subscribe(("a",)), SpecificOffsets({("a", 0): 60, ("a", 1): 0}),
                   SpecificOffsets({("a", 0): 50, ("a", 1): -1}), LOOKUP, None)


# ------------------------------------------------------------------ minPartitions
def test_min_partitions_splits_large_ranges_in_proportion_and_keeps_every_offset():
    ranges = [OffsetRange("t", 0, 0, 10_000), OffsetRange("t", 1, 0, 10_000), OffsetRange("t", 2, 0, 100)]
    out = split_ranges(ranges, 10)
    by_tp: dict[int, list[OffsetRange]] = {}
    for r in out:
        by_tp.setdefault(r.partition, []).append(r)
    # the 100-offset range stays whole; the others share 9 tasks: round(4.5) = 5 each, as Scala rounds
    assert [len(by_tp[p]) for p in (0, 1, 2)] == [5, 5, 1]
    for p, size in ((0, 10_000), (1, 10_000), (2, 100)):
        pieces = sorted(by_tp[p], key=lambda r: r.start)
        assert pieces[0].start == 0 and pieces[-1].until == size
        assert all(a.until == b.start for a, b in zip(pieces, pieces[1:]))


def test_min_partitions_below_partition_count_changes_nothing_and_empty_ranges_are_dropped():
    ranges = [OffsetRange("t", 0, 0, 10), OffsetRange("t", 1, 5, 5), OffsetRange("t", 2, 0, 7)]
    assert split_ranges(ranges, 2) == [ranges[0], ranges[2]]
    assert split_ranges(ranges, None) == [ranges[0], ranges[2]]


def test_min_partitions_six_ranges_into_twelve_tasks():
    ranges = [OffsetRange("t", p, 0, 10_000) for p in range(6)]
    out = split_ranges(ranges, 12)
    assert len(out) == 12 and sum(r.size for r in out) == 60_000


# ------------------------------------------------------------------ streaming
def test_rate_limit_spreads_the_limit_in_proportion_to_backlog():
    start = {("t", 0): 0, ("t", 1): 0, ("t", 2): 100}
    latest = {("t", 0): 300, ("t", 1): 100, ("t", 2): 100}
    assert rate_limit(100, start, latest, {}) == {("t", 0): 75, ("t", 1): 25, ("t", 2): 100}


def test_rate_limit_does_not_starve_small_partitions_and_counts_new_ones_from_their_start():
    start = {("t", 0): 0}
    latest = {("t", 0): 10_000, ("t", 1): 3}
    out = rate_limit(10, start, latest, {("t", 1): 0})
    assert out[("t", 1)] == 1 and out[("t", 0)] == 9


def test_checkpoint_json_is_sparks_layout_and_round_trips():
    offsets = {("b", 1): 7, ("a", 10): 3, ("a", 2): 5}
    doc = offsets_to_json(offsets)
    assert doc == {"a": {"2": 5, "10": 3}, "b": {"1": 7}}
    assert offsets_from_json(doc) == offsets
    assert offsets_from_json('{"a": {"0": 1}}') == {("a", 0): 1}


def test_micro_batch_reads_new_partitions_from_earliest():
    lookup = FakeLookup(earliest={("t", 0): 0, ("t", 1): 0}, latest={})
    ranges = plan_micro_batch({("t", 0): 5}, {("t", 0): 9, ("t", 1): 4}, lookup, True, None)
    assert ranges == [OffsetRange("t", 0, 5, 9), OffsetRange("t", 1, 0, 4)]


def test_micro_batch_data_loss_fails_or_is_skipped_per_fail_on_data_loss():
    lookup = FakeLookup(earliest={("t", 1): 3}, latest={})
    with pytest.raises(DataLossError, match="starts from 3"):
        plan_micro_batch({("t", 0): 5}, {("t", 0): 9, ("t", 1): 4}, lookup, True, None)
    with pytest.raises(DataLossError, match="are gone"):
        plan_micro_batch({("t", 0): 5, ("t", 2): 1}, {("t", 0): 9}, lookup, True, None)
    ranges = plan_micro_batch({("t", 0): 5, ("t", 2): 1}, {("t", 0): 9, ("t", 1): 4}, lookup, False, None)
    assert ranges == [OffsetRange("t", 0, 5, 9), OffsetRange("t", 1, 3, 4)]


def test_share_group_is_for_streaming_subscribe_reads_without_offset_options():
    o = parse_source_options({**BOOT, "subscribe": "a,b", "shareGroup": " g "}, streaming=True)
    assert (o.share_group, o.subscription) == ("g", Subscribe(("a", "b")))
    assert parse_source_options({**BOOT, "subscribe": "a"}, streaming=True).share_group is None
    with pytest.raises(KafkaFastOptionError, match="shareGroup is for streaming reads only"):
        parse_source_options({**BOOT, "subscribe": "a", "shareGroup": "g"}, streaming=False)
    with pytest.raises(KafkaFastOptionError, match="must name a share group"):
        parse_source_options({**BOOT, "subscribe": "a", "shareGroup": " "}, streaming=True)
    for name, value in [("startingOffsets", "earliest"), ("startingTimestamp", "1"), ("maxTriggerDelay", "1m"),
                        ("minOffsetsPerTrigger", "5"), ("kafka.isolation.level", "read_committed")]:
        with pytest.raises(KafkaFastOptionError, match=f"option {name.lower()} cannot be used with shareGroup"):
            parse_source_options({**BOOT, "subscribe": "a", "shareGroup": "g", name: value}, streaming=True)
    with pytest.raises(KafkaFastOptionError, match="option assign cannot be used with shareGroup: .* use subscribe"):
        parse_source_options({**BOOT, "assign": '{"a":[0]}', "shareGroup": "g"}, streaming=True)


def test_share_group_batches_keep_acquired_ranges_merged_and_split_by_min_partitions():
    from kafkafast.client.share_consumer import AcquiredRange
    from pyspark_kafkafast.share_group_reader import ranges_from_json, ranges_to_json

    acquired = [AcquiredRange("t", 1, 10, 19, 1), AcquiredRange("t", 0, 0, 4, 2), AcquiredRange("t", 0, 5, 9, 1),
                AcquiredRange("t", 0, 20, 39, 1)]
    doc = ranges_to_json(acquired)
    assert doc == {"t": {"0": [[0, 9], [20, 39]], "1": [[10, 19]]}}
    ranges = ranges_from_json(doc)
    assert ranges == [OffsetRange("t", 0, 0, 10), OffsetRange("t", 0, 20, 40), OffsetRange("t", 1, 10, 20)]
    # the 20-offset range of partition 0 gets two of four tasks although its other range stays whole
    assert split_ranges(ranges, 4) == [OffsetRange("t", 0, 0, 10), OffsetRange("t", 0, 20, 30),
                                       OffsetRange("t", 0, 30, 40), OffsetRange("t", 1, 10, 20)]
    with pytest.raises(KafkaFastOptionError, match="must keep its shareGroup option"):
        offsets_from_json({"shareGroup": "g", "batch": 1, "acquired": doc})
