"""Where accepted draft tokens came from: the trie's part of the merged tree or a corpus's.

The compiled replay tags each node of the merge with the part that created it; here it is
checked against an independent definition, a ``Drafter`` replay that looks each accepted
token's path up in the trees of the merge's parts (the cache's recorded parts,
``tree_paths``): a token counts for the first part (the trie's tree, then the corpora in merge
order) whose tree holds its path.
"""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
from numpy.testing import assert_array_equal

import ngramspec as ns
from helpers import stream_records, write_jsonl
from ngramspec.cli import main
from ngramspec.cache.corpora import read_corpus, tree_paths
from ngramspec.simulate import _replay_stepwise, admit
from ngramspec.streams import embedded_streams_path


@pytest.fixture(scope="module")
def streams():
    return ns.read_streams(embedded_streams_path())


@pytest.fixture(scope="module")
def rows(streams):
    return [r for r in streams if r["task"] == "doc_grounded"][:7]


def _corpora(streams, rows, count: int) -> dict[str, list]:
    """The requests' own prompts (the documents they are grounded on), and with two corpora
    also a distractor: other tasks' prompts and outputs."""
    out = {"docs": [r["prompt_ids"] for r in rows]}
    if count == 2:
        out["others"] = [r["prompt_ids"] + r["output_ids"] for r in streams
                         if r["task"] != "doc_grounded"][:12]
    return out


def _argmax(tokens, mask, out, done):
    """The recorded greedy output as the target's argmax at every slot of one tree."""
    n = tokens.size
    pred = np.zeros(n, np.int64)
    for i in range(n):
        pos = done + int(mask[i].sum()) - 1
        pred[i] = out[pos] if pos < out.size else 0
    return pred


def drafter_attribution(rows, cfg, corpora, concurrency):
    """The serving loop through a Drafter (admission in file order, finished requests leave),
    each accepted draft token attributed by the paths of the merge's parts.  Returns the
    per-request counts by source (columns: trie, then the corpora in merge order) and the
    tokens emitted per step."""
    cache = ns.NgramCache(config=cfg)
    for cid, docs in corpora.items():
        cache.add_corpus(cid, docs)
    names = ["trie", *cache.corpora()]
    cache._corpora.record_parts = True
    drafter = ns.Drafter(cache=cache)
    outs = [np.asarray(r["output_ids"], np.int32) for r in rows]
    counts = np.zeros((len(rows), len(names)), np.int64)
    emitted = [[] for _ in rows]
    done = [0] * len(rows)
    nxt, running = 0, []
    while nxt < len(rows) or running:
        nxt = admit(nxt, running, concurrency, [o.size for o in outs],
                    lambda r: drafter.add_request(rows[r]["id"], rows[r]["prompt_ids"],
                                                  int(outs[r][0])), done)
        if not running:
            continue
        d = drafter.propose([rows[r]["id"] for r in running])
        pred = np.stack([_argmax(d.tokens[b], d.mask[b], outs[r], done[r])
                         for b, r in enumerate(running)])
        lens = ns.verify_greedy(d, pred).accept_lens
        parts = [(names.index(cid) if cid else 0, t, m)
                 for cid, (t, m) in cache._corpora.last_parts]
        accepted = {}
        for b, r in enumerate(running):
            e = min(int(lens[b]), outs[r].size - done[r])
            drafted = outs[r][done[r]:done[r] + e - 1].tolist() if e > 1 else []
            paths = [(col, tree_paths(t[b], m[b])) for col, t, m in parts]
            for i in range(1, len(drafted) + 1):
                prefix = tuple(drafted[:i])
                hits = [col for col, p in paths if prefix in p]
                counts[r, hits[0] if hits else 0] += 1  # none: accepted padding (the trie's)
            emitted[r].append(e)
            accepted[rows[r]["id"]] = outs[r][done[r]:done[r] + e]
            done[r] += e
        drafter.accept(accepted)
        for r in running:
            if done[r] == outs[r].size:
                drafter.finish(rows[r]["id"])
        running = [r for r in running if done[r] < outs[r].size]
    return names, counts, [np.asarray(e, np.int32) for e in emitted]


def _check_sums(result):
    total = np.zeros(len(result.emitted), np.int64)
    for counts in result.accepted_by_source.values():
        total += counts
    assert_array_equal(total, [int(e.sum()) - e.size for e in result.emitted])
    s = result.summary
    assert sum(s.accepted_by_source.values()) == s.emitted_tokens - s.verify_steps


@pytest.mark.parametrize("match_type", ["BFS", "PROB"])
@pytest.mark.parametrize("n_corpora", [1, 2])
@pytest.mark.parametrize("concurrency", [1, 3])
def test_compiled_attribution_equals_the_drafter_paths(streams, rows, match_type, n_corpora,
                                                       concurrency):
    cfg = ns.NgramConfig(external_sam_budget=4, match_type=match_type)
    corpora = _corpora(streams, rows, n_corpora)
    result = ns.simulate(rows, config=cfg, corpora=corpora, concurrency=concurrency)
    names, counts, emitted = drafter_attribution(rows, cfg, corpora, concurrency)
    for a, b in zip(result.emitted, emitted):
        assert_array_equal(a, b)
    assert list(result.accepted_by_source) == names
    for k, name in enumerate(names):
        assert_array_equal(result.accepted_by_source[name], counts[:, k])
    _check_sums(result)
    assert result.summary.accepted_by_source["docs"] > 0  # the check is not vacuous
    # The step-by-step path (the Drafter on the numba cache) reports the same.
    found: dict = {}
    _replay_stepwise([np.asarray(r["prompt_ids"], np.int32) for r in rows],
                     [np.asarray(r["output_ids"], np.int32) for r in rows], cfg, concurrency,
                     "numba", [r["id"] for r in rows], None, corpora, sources=found)
    assert list(found) == names
    for name in names:
        assert_array_equal(found[name], result.accepted_by_source[name])


def test_reference_backend_reports_the_same(streams, rows):
    cfg = ns.NgramConfig(external_sam_budget=4, draft_token_num=8)
    corpora = _corpora(streams, rows[:3], 2)
    fast = ns.simulate(rows[:3], config=cfg, corpora=corpora, concurrency=2)
    ref = ns.simulate(rows[:3], config=cfg, corpora=corpora, concurrency=2,
                      backend="reference")
    assert list(ref.accepted_by_source) == list(fast.accepted_by_source)
    for name, counts in fast.accepted_by_source.items():
        assert_array_equal(ref.accepted_by_source[name], counts)
    assert ref.summary.accepted_by_source == fast.summary.accepted_by_source
    _check_sums(ref)


def test_no_budget_for_the_corpora_is_all_trie(streams, rows):
    """external_sam_budget 1 split over two corpora gives each 0 nodes: the trie alone."""
    cfg = ns.NgramConfig(external_sam_budget=1)
    corpora = _corpora(streams, rows[:3], 2)
    result = ns.simulate(rows[:3], config=cfg, corpora=corpora)
    plain = ns.simulate(rows[:3], config=cfg.replace(external_sam_budget=0))
    assert list(result.accepted_by_source) == ["trie", "others", "docs"]
    assert_array_equal(result.accepted_by_source["trie"],
                       [int(e.sum()) - e.size for e in plain.emitted])
    assert_array_equal(result.accepted_by_source["docs"], np.zeros(3, np.int64))
    assert_array_equal(result.accepted_by_source["others"], np.zeros(3, np.int64))
    ref = ns.simulate(rows[:3], config=cfg, corpora=corpora, backend="reference")
    for name, counts in result.accepted_by_source.items():
        assert_array_equal(ref.accepted_by_source[name], counts)


def test_without_corpora_there_is_no_attribution(rows):
    result = ns.simulate(rows[:2], config=ns.NgramConfig())
    assert result.accepted_by_source is None
    assert result.summary.accepted_by_source is None
    report = json.loads(json.dumps(result.to_dict(by="task")))
    assert report["summary"]["accepted_by_source"] is None
    assert all("accepted_by_source" not in r for r in report["requests"])


def test_json_report_round_trip_and_groups(streams, rows):
    cfg = ns.NgramConfig(external_sam_budget=4)
    mixed = rows[:3] + [r for r in streams if r["task"] == "code_edit"][:2]
    result = ns.simulate(mixed, config=cfg, corpora=_corpora(streams, rows, 1))
    report = json.loads(json.dumps(result.to_dict(by="task")))
    assert report["summary"]["accepted_by_source"] == result.summary.accepted_by_source
    for i, req in enumerate(report["requests"]):
        assert req["accepted_by_source"] == {k: int(v[i])
                                             for k, v in result.accepted_by_source.items()}
    groups = result.by("task")
    assert set(report["groups"]) == {"doc_grounded", "code_edit"}
    for name, g in groups.items():
        assert report["groups"][name]["accepted_by_source"] == g.accepted_by_source
        assert sum(g.accepted_by_source.values()) == g.emitted_tokens - g.verify_steps
    pooled = {k: sum(g.accepted_by_source[k] for g in groups.values())
              for k in result.accepted_by_source}
    assert pooled == result.summary.accepted_by_source


@pytest.mark.parametrize("backend", ["numba", "reference"])
def test_a_corpus_named_trie_is_refused(rows, backend):
    with pytest.raises(ValueError, match="'trie' names the trie's share"):
        ns.simulate(rows[:1], config=ns.NgramConfig(external_sam_budget=2),
                    corpora={"trie": [[1, 2, 3]]}, backend=backend)


def test_cli_prints_where_accepted_tokens_came_from(rows, tmp_path):
    streams = write_jsonl(tmp_path / "s.jsonl", stream_records(rows[:3]))
    corpus = write_jsonl(tmp_path / "docs.jsonl", [r["prompt_ids"] for r in rows[:3]])
    out = io.StringIO()
    report = tmp_path / "r.json"
    assert main(["simulate", str(streams), "--external-sam-budget", "4", "--corpus",
                 str(corpus), "--no-progress", "--json", str(report)], stdout=out) == 0
    expected = ns.simulate(str(streams), config=ns.NgramConfig(external_sam_budget=4),
                           corpora={str(corpus): read_corpus(corpus)})
    counts = expected.summary.accepted_by_source
    total = sum(counts.values())
    assert counts[str(corpus)] > 0
    line = (f"accepted draft tokens: trie {100 * counts['trie'] / total:.1f}%, {corpus} "
            f"{100 * counts[str(corpus)] / total:.1f}% (of {total:,})")
    assert line in out.getvalue().splitlines()
    assert json.loads(report.read_text())["summary"]["accepted_by_source"] == counts
    plain = io.StringIO()
    assert main(["simulate", str(streams), "--no-progress"], stdout=plain) == 0
    assert "accepted draft tokens" not in plain.getvalue()
