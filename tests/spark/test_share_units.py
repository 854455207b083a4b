"""The pure parts of Spark's share-group reading: offsets, cutting ranges into tasks, the marks that
foreachBatch helpers leave, and the options a share group refuses (no Spark, no broker)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spark_coord.spark.options import parse_source_options
from spark_coord.spark.share import count, cut, from_json, merged, to_json
from spark_coord.spark.share_acks import foreach_record, reject, release, split_ranges, take_marks


def _ranges(draw_parts):
    out = {}
    for (t, p), spans in draw_parts.items():
        pos, rs = 0, []
        for gap, length, dc in spans:
            pos += gap
            rs.append((pos, pos + length - 1, dc))
            pos += length
        if rs:
            out[(t, p)] = rs
    return out


span = st.tuples(st.integers(0, 5), st.integers(1, 40), st.integers(1, 5))
ranges_st = st.dictionaries(st.tuples(st.sampled_from(["a", "b"]), st.integers(0, 3)),
                            st.lists(span, max_size=4), max_size=5).map(_ranges)


@given(ranges_st, st.integers(1, 20))
def test_cut_covers_every_offset_once_in_balanced_pieces(ranges, pieces):
    groups = cut(ranges, pieces)
    covered = [(tp, o, dc) for g in groups for tp, a, u, dc in g for o in range(a, u)]
    expected = [(tp, o, dc) for tp, rs in sorted(ranges.items()) for a, b, dc in rs for o in range(a, b + 1)]
    assert sorted(covered) == sorted(expected)
    assert len(covered) == len(set(covered))
    total = count(ranges)
    assert len(groups) == (min(pieces, total) if total else 0)
    sizes = [sum(u - a for _, a, u, _ in g) for g in groups]
    assert not sizes or max(sizes) - min(sizes) <= 1
    assert cut(ranges, pieces) == groups  # deterministic: a replayed batch plans the same tasks


@given(ranges_st, st.integers(0, 10 ** 6))
def test_offsets_round_trip_through_json(ranges, batch):
    import json

    member, b, back = from_json(json.loads(json.dumps(to_json("m-1", batch, ranges))))
    assert (member, b) == ("m-1", batch)
    assert {tp: sorted(rs) for tp, rs in back.items()} == {tp: sorted(rs) for tp, rs in ranges.items()}


def test_a_checkpoint_of_an_offset_query_is_refused_by_name():
    with pytest.raises(ValueError, match="not a share group offset"):
        from_json({"t": {"0": 5}})


def test_split_ranges_cuts_around_marked_offsets():
    assert split_ranges(10, 20, [(12, "release"), (13, "reject"), (20, "release"), (99, "reject")]) == [
        (10, 11, "accept"), (12, 12, "release"), (13, 13, "reject"), (14, 19, "accept"), (20, 20, "release")]
    assert split_ranges(5, 5, []) == [(5, 5, "accept")]


def test_marks_travel_through_files_and_each_is_taken_once(tmp_path):
    path = str(tmp_path / "acks")
    assert release([("t", 0, 3), {"topic": "t", "partition": 0, "offset": 4}], "g", path) == 2
    assert reject([("t", 1, 7), ("t", 0, 4)], "g", path) == 2

    def first_batch(t, p, o):
        return (t, p) == ("t", 0) and o <= 3
    assert take_marks("g", path, first_batch) == {("t", 0, 3): "release"}
    assert take_marks("g", path, first_batch) == {}  # taken
    # reject wins over release for one record; marks of other batches stay for them
    assert take_marks("g", path, lambda t, p, o: True) == {("t", 0, 4): "reject", ("t", 1, 7): "reject"}
    assert not list((tmp_path / "acks").glob("*.json"))


def test_foreach_record_releases_the_rows_whose_function_raises(tmp_path):
    path = str(tmp_path / "acks")
    rows = [{"topic": "t", "partition": 0, "offset": o, "key": b"bad" if o == 2 else b"ok"} for o in range(4)]
    done = []

    def fn(row):
        if row["key"] == b"bad":
            raise ValueError("boom")
        done.append(row["offset"])
    assert foreach_record(rows, fn, "g", path=path) == (4, 1)
    assert done == [0, 1, 3]
    assert take_marks("g", path, lambda *_: True) == {("t", 0, 2): "release"}
    with pytest.raises(ValueError, match="on_error"):
        foreach_record(rows, fn, "g", on_error="drop", path=path)


BASE = {"kafka.bootstrap.servers": "127.0.0.1:9092", "subscribe": "orders", "kafka.share.group.id": "q"}


def test_share_options_parse():
    o = parse_source_options({**BASE, "kafka.share.parallelism": "8", "maxOffsetsPerTrigger": "1000"}, True)
    assert (o.share_group_id, o.share_parallelism, o.max_offsets_per_trigger) == ("q", 8, 1000)


@pytest.mark.parametrize("extra, streaming, message", [
    ({}, False, "a share group is a queue, read by spark.readStream only"),
    ({"group.id": "g"}, True, "either group.id"),
    ({"subscribe": None, "subscribePattern": "o.*"}, True, "use subscribe"),
    ({"startingOffsets": "earliest"}, True, "share.auto.offset.reset"),
    ({"members": "2"}, True, "one member of its share group"),
    ({"kafka.share.group.id": " "}, True, "empty"),
    ({"kafka.share.group.id": None, "kafka.share.parallelism": "4"}, True, "only meaningful with kafka.share.group.id"),
])
def test_share_options_that_cannot_work_are_refused_by_name(extra, streaming, message):
    opts = {k: v for k, v in {**BASE, **extra}.items() if v is not None}
    with pytest.raises(ValueError, match=message):
        parse_source_options(opts, streaming)


@given(ranges_st)
def test_merged_joins_adjacent_ranges_of_one_delivery_count_and_keeps_every_offset(ranges):
    out = merged(ranges)
    offsets = {(tp, o, dc) for tp, rs in ranges.items() for a, b, dc in rs for o in range(a, b + 1)}
    assert {(tp, o, dc) for tp, rs in out.items() for a, b, dc in rs for o in range(a, b + 1)} == offsets
    for rs in out.values():
        assert all(not (x[1] + 1 == y[0] and x[2] == y[2]) for x, y in zip(rs, rs[1:], strict=False))
    assert merged({("t", 0): [(5, 9, 1), (0, 4, 1), (10, 12, 2)]}) == {("t", 0): [(0, 9, 1), (10, 12, 2)]}
