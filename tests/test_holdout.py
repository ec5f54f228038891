"""The tuning / hold-out split is fixed, disjoint, balanced per task and keeps conversations whole."""

import collections

import pytest

from ngramspec.holdout import group_key, split_of, split_streams
from ngramspec.streams import embedded_streams_path, read_streams


@pytest.fixture(scope="module")
def records():
    return read_streams(embedded_streams_path())


def test_parts_are_disjoint_and_cover_everything(records):
    tune = {r["id"] for r in split_streams(records, part="tune")}
    held = {r["id"] for r in split_streams(records, part="holdout")}
    assert not tune & held
    assert tune | held == {r["id"] for r in records}


def test_every_task_is_split_nearly_evenly(records):
    parts = split_of(records)
    for task in {r["task"] for r in records}:
        keys = {group_key(r["id"]): parts[r["id"]] for r in records if r["task"] == task}
        count = collections.Counter(keys.values())
        assert abs(count["tune"] - count["holdout"]) <= 1, (task, count)


def test_turns_of_a_conversation_stay_together(records):
    parts = split_of(records)
    by_key = collections.defaultdict(set)
    for r in records:
        by_key[group_key(r["id"])].add(parts[r["id"]])
    assert all(len(v) == 1 for v in by_key.values())
    assert any(r["id"].endswith("/turn2") for r in records)


def test_split_does_not_depend_on_record_order(records):
    assert split_of(records) == split_of(list(reversed(records)))


def test_unknown_part_is_refused(records):
    with pytest.raises(ValueError, match="part must be one of"):
        split_streams(records, part="test")
