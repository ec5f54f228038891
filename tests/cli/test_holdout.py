"""The tuning / hold-out split is fixed, disjoint, balanced per task and keeps conversations whole."""

import collections

import pytest

from ngramspec.sweep.split import group_key, split_of, split_streams
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


def test_the_fresh_recording_is_a_disjoint_second_hold_out(records):
    from ngramspec.streams import fresh_streams_path

    fresh = read_streams(fresh_streams_path())
    assert not {r["id"] for r in fresh} & {r["id"] for r in records}
    assert {r["task"] for r in fresh} == {r["task"] for r in records}
    shipped_prompts = {r["prompt_text"] for r in records}
    assert not any(r["prompt_text"] in shipped_prompts for r in fresh)
    by_id = {r["id"]: r for r in fresh}
    turns = [r for r in fresh if r["id"].endswith("/turn2")]
    assert turns
    for second in turns:  # turn 2 carries turn 1's prompt and answer, as in the shipped file
        first = by_id[group_key(second["id"])]
        answer = first["output_ids"][:-1] if first["finish_reason"] == "stop" else \
            first["output_ids"]
        head = first["prompt_ids"] + answer
        assert second["prompt_ids"][:len(head)] == head
