"""The simulator's per-step counts equal SGLang's serving loop written out in other ways:
through the public cache API, through ``Drafter``, and (opt-in) through SGLang's own C++."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.testing import assert_array_equal

import ngramspec as ns
from ngramspec.simulate import _replay_stepwise
from ngramspec.streams import embedded_streams_path


@pytest.fixture(scope="module")
def corpus() -> list[dict]:
    return ns.read_streams(embedded_streams_path())


def subset(rows: list[dict], k: int) -> list[dict]:
    """Every (len/k)-th request: all four tasks, in file order."""
    return rows[::len(rows) // k][:k]


def recorded_argmax(tokens, mask, b: int, output: list[int], done: int) -> np.ndarray:
    """The greedy target's argmax at every slot of row ``b``, from the mask's ancestor sets:
    the recorded next token where the slot's path follows the recording, else -1."""
    n = tokens.shape[1]
    pred = np.full(n, -1, dtype=np.int64)
    for i in range(n):
        path = [int(tokens[b, j]) for j in range(1, i + 1) if mask[b, i, j]]
        end = done + len(path)
        if end < len(output) and output[done:end] == path:
            pred[i] = output[end]
    return pred


def replay_public_api(cfg: ns.NgramConfig, rows: list[dict], concurrency: int,
                      make_cache=None) -> list[list[int]]:
    """SGLang 0.5.23's serving loop, written out against match/insert/erase/verify_greedy."""
    cache = make_cache() if make_cache else ns.NgramCache(config=cfg)
    depth = cfg.max_trie_depth
    queue, running = list(range(len(rows))), []
    outs: list[list[int]] = [[] for _ in rows]
    steps: list[list[int]] = [[] for _ in rows]
    while queue or running:
        while queue and len(running) < concurrency:
            r = queue.pop(0)
            outs[r] = rows[r]["output_ids"][:1]
            if len(rows[r]["output_ids"]) > 1:
                running.append(r)
        if not running:
            continue
        seqs = [rows[r]["prompt_ids"] + outs[r] for r in running]
        contexts = [s[-depth:] for s in seqs]
        ids = [rows[r]["id"] for r in running]
        lens = [len(s) for s in seqs]
        if make_cache:  # the SGLang peer: plain arrays back
            tokens, mask = cache.match(contexts, request_ids=ids, total_lens=lens)
            drafts = ns.DraftBatch(tokens, mask, np.zeros(len(running), np.int32))
        else:
            drafts = cache.match(contexts, request_ids=ids, total_lens=lens)
            tokens, mask = drafts.tokens, drafts.mask
        pred = np.stack([recorded_argmax(tokens, mask, b, rows[r]["output_ids"], len(outs[r]))
                         for b, r in enumerate(running)])
        result = ns.verify_greedy(drafts, pred)
        cache.insert(contexts)
        for b, r in enumerate(running):
            left = len(rows[r]["output_ids"]) - len(outs[r])
            emitted = result.emitted[b][:left].tolist()
            outs[r] += emitted
            steps[r].append(len(emitted))
        done = [r for r in running if len(outs[r]) == len(rows[r]["output_ids"])]
        cache.erase([rows[r]["id"] for r in done])
        running = [r for r in running if r not in done]
    for r, row in enumerate(rows):
        assert outs[r] == row["output_ids"]  # greedy verification reproduces the recording
    return steps


def replay_drafter(cfg: ns.NgramConfig, rows: list[dict], concurrency: int) -> list[list[int]]:
    """The same loop through ``ns.Drafter`` (add_request / propose / accept / finish)."""
    drafter = ns.Drafter(config=cfg)
    queue, running = list(range(len(rows))), []
    steps: list[list[int]] = [[] for _ in rows]
    while queue or running:
        while queue and len(running) < concurrency:
            r = queue.pop(0)
            if len(rows[r]["output_ids"]) > 1:
                drafter.add_request(rows[r]["id"], rows[r]["prompt_ids"],
                                    rows[r]["output_ids"][0])
                running.append(r)
        if not running:
            continue
        drafts = drafter.propose([rows[r]["id"] for r in running])
        done_lens = [len(drafter.output(rows[r]["id"])) for r in running]
        pred = np.stack([recorded_argmax(drafts.tokens, drafts.mask, b, rows[r]["output_ids"],
                                         done_lens[b]) for b, r in enumerate(running)])
        result = ns.verify_greedy(drafts, pred)
        emitted = {}
        for b, r in enumerate(running):
            left = len(rows[r]["output_ids"]) - done_lens[b]
            emitted[rows[r]["id"]] = result.emitted[b][:left]
            steps[r].append(min(int(result.accept_lens[b]), left))
        drafter.accept(emitted)
        for r in list(running):
            if len(drafter.output(rows[r]["id"])) == len(rows[r]["output_ids"]):
                drafter.finish(rows[r]["id"])
                running.remove(r)
    return steps


def assert_lists_equal(got: list, want: list) -> None:
    """Per-request arrays equal, and as many of them (zip alone would stop at the shorter)."""
    assert len(got) == len(want)
    for a, b in zip(got, want):
        assert_array_equal(a, b)


def assert_steps_equal(result: ns.SimulationResult, want: list[list[int]]) -> None:
    assert_lists_equal(result.emitted, [np.asarray(w, dtype=np.int32) for w in want])


CASES = [(mt, c) for mt in ("BFS", "PROB") for c in (1, 4)]


@pytest.mark.parametrize("match_type,concurrency", CASES)
def test_compiled_loop_equals_public_api_replay(corpus, match_type, concurrency):
    rows = subset(corpus, 20)
    cfg = ns.NgramConfig(match_type=match_type)
    got = ns.simulate(rows, config=cfg, concurrency=concurrency)
    want = replay_public_api(cfg, rows, concurrency)
    assert_steps_equal(got, want)
    # Speculation did something (the comparison is not between two empty loops).
    assert got.tokens_per_step > 1.2
    for r, row in enumerate(rows):
        assert got.emitted[r].sum() == len(row["output_ids"]) - 1


@pytest.mark.parametrize("match_type,concurrency", [("BFS", 4), ("PROB", 1)])
def test_compiled_loop_equals_drafter_replay(corpus, match_type, concurrency):
    rows = subset(corpus, 16)
    cfg = ns.NgramConfig(match_type=match_type)
    assert_steps_equal(ns.simulate(rows, config=cfg, concurrency=concurrency),
                       replay_drafter(cfg, rows, concurrency))


@pytest.mark.parametrize("cfg", [ns.NgramConfig(profile="sglang-0.5.9"),
                                 ns.NgramConfig.recommended()], ids=["0.5.9", "recommended"])
def test_other_profiles_and_options_follow_the_drafter(corpus, cfg):
    """Outside the compiled loop's scope (window-era profile, options beyond SGLang) the
    simulation is the Drafter's loop."""
    rows = subset(corpus, 8)
    got = ns.simulate(rows, config=cfg, concurrency=2)
    assert_steps_equal(got, replay_drafter(cfg, rows, 2))
    assert got.emitted[0].sum() == len(rows[0]["output_ids"]) - 1


@pytest.mark.parametrize("backend", ["reference", "numba"])
def test_step_by_step_paths_equal_compiled_loop(corpus, backend):
    rows = subset(corpus, 8)
    cfg = ns.NgramConfig(match_type="PROB", capacity=3_000)  # eviction on the way
    compiled = ns.simulate(rows, config=cfg, concurrency=3)
    prompts = [np.asarray(r["prompt_ids"], np.int32) for r in rows]
    outputs = [np.asarray(r["output_ids"], np.int32) for r in rows]
    emitted, drafts, _, steps, _ = _replay_stepwise(prompts, outputs, cfg, 3, backend,
                                            [r["id"] for r in rows], None)
    assert_lists_equal(compiled.emitted, emitted)
    assert_lists_equal(compiled.drafts, drafts)
    assert steps == compiled.batch_steps
    if backend == "reference":
        via_simulate = ns.simulate(rows, config=cfg, concurrency=3, backend="reference")
        assert_lists_equal(compiled.emitted, via_simulate.emitted)


def test_small_capacity_eviction_equals_public_api(corpus):
    rows = subset(corpus, 10)
    cfg = ns.NgramConfig(capacity=500)
    assert_steps_equal(ns.simulate(rows, config=cfg, concurrency=2),
                       replay_public_api(cfg, rows, 2))


@pytest.mark.parametrize("match_type,want", [("BFS", 1.72), ("PROB", 1.65)])
def test_whole_corpus_known_figures(corpus, match_type, want):
    """All 133 streams at concurrency 1, server defaults: the figures measured with SGLang's
    C++ core (BFS 1.72, PROB 1.65; BFS code editing 1.48)."""
    r = ns.simulate(corpus, config=ns.NgramConfig(match_type=match_type))
    assert round(r.tokens_per_step, 2) == want
    assert r.summary.emitted_tokens == sum(len(x["output_ids"]) - 1 for x in corpus)
    if match_type == "BFS":
        assert round(r.by("task")["code_edit"].tokens_per_step, 2) == 1.48


def test_summary_definitions():
    rows = [{"id": "a", "prompt_ids": [5, 1, 2, 3, 4, 9], "output_ids": [1, 2, 3, 4, 1, 2, 3],
             "task": "x"},
            {"id": "b", "prompt_ids": [], "output_ids": [1, 2, 3, 4, 8], "task": "y"},
            {"id": "c", "prompt_ids": [3], "output_ids": [6], "task": "y"}]
    r = ns.simulate(rows, config=ns.NgramConfig(draft_token_num=4, capacity=1000), concurrency=2)
    em = np.concatenate(r.emitted)
    dr = np.concatenate(r.drafts)
    s = r.summary
    assert s.verify_steps == em.size and s.emitted_tokens == em.sum() == 6 + 4
    assert s.tokens_per_step == em.sum() / em.size
    assert s.acceptance_by_depth == [float(np.mean(em - 1 >= k)) for k in range(1, 4)]
    assert np.isclose(sum(s.acceptance_by_depth), s.tokens_per_step - 1)
    assert s.draft_nodes_per_step == dr.mean()
    assert s.share_steps_with_draft == np.mean(dr > 0)
    assert r.emitted[2].size == 0  # one output token: only the prefill
    groups = r.by("task")
    assert list(groups) == ["x", "y"] and groups["y"].requests == 2
    assert groups["x"].verify_steps + groups["y"].verify_steps == s.verify_steps
    report = r.to_dict(by="task")
    assert set(report) == {"config", "summary", "groups", "requests"}
    assert report["requests"][0]["emitted"] == r.emitted[0].tolist()
    assert report["requests"][0]["task"] == "x"
    assert report["config"]["draft_token_num"] == 4
    with pytest.raises(KeyError, match="no request has that field"):
        r.by("nope")


def test_progress_is_reported(corpus):
    calls = []
    ns.simulate(subset(corpus, 30), progress=lambda done, total: calls.append((done, total)))
    total = sum(len(x["output_ids"]) for x in subset(corpus, 30))
    assert calls[-1] == (total, total)
    assert [c[0] for c in calls] == sorted(c[0] for c in calls)


def test_bad_arguments():
    rows = [{"id": 1, "prompt_ids": [1], "output_ids": [2, 3]}]
    with pytest.raises(ValueError, match="concurrency must be >= 1"):
        ns.simulate(rows, concurrency=0)
    with pytest.raises(TypeError, match="concurrency must be an int"):
        ns.simulate(rows, concurrency=1.5)
    with pytest.raises(ValueError, match="backend must be one of"):
        ns.simulate(rows, backend="cuda")
    with pytest.raises(TypeError, match="config must be an NgramConfig"):
        ns.simulate(rows, config={"match_type": "BFS"})
    with pytest.raises(ValueError, match="no requests"):
        ns.simulate([])


@pytest.mark.parametrize("backend", ["numba", "reference"])
def test_absurd_concurrency_is_clamped(backend):
    """A concurrency beyond the number of requests is clamped to it, never allocated."""
    rows = [{"id": i, "prompt_ids": [1, 2, 3], "output_ids": [1, 2, 3, 1, 2]} for i in range(3)]
    cfg = ns.NgramConfig(capacity=1000)
    for huge in (10**12, np.int64(2**62)):
        r = ns.simulate(rows, config=cfg, concurrency=huge, backend=backend)
        assert r.concurrency == 3
        want = ns.simulate(rows, config=cfg, concurrency=3, backend=backend)
        assert_lists_equal(r.emitted, want.emitted)
        assert r.batch_steps == want.batch_steps


def test_no_verify_steps_is_an_error_not_nan():
    """Requests whose recordings hold one output token have no verify step: simulate says so
    instead of reporting NaN figures."""
    rows = [{"id": i, "prompt_ids": [1, 2], "output_ids": [7]} for i in range(4)]
    for backend in ("numba", "reference"):
        with pytest.raises(ValueError, match="no verify steps.*single output token"):
            ns.simulate(rows, config=ns.NgramConfig.recommended(), backend=backend)


@st.composite
def small_runs(draw):
    depth = draw(st.integers(2, 6))
    lo = draw(st.integers(1, 3))
    cfg = ns.NgramConfig(max_trie_depth=depth, min_bfs_breadth=lo,
                         max_bfs_breadth=lo + draw(st.integers(0, 4)),
                         draft_token_num=draw(st.integers(1, 10)),
                         match_type=draw(st.sampled_from(["BFS", "PROB"])),
                         capacity=draw(st.one_of(st.integers(depth + 1, depth + 30),
                                                 st.just(100_000))))
    vocab = draw(st.integers(1, 5))
    tok = st.integers(0, vocab - 1)  # token 0 included: padding can be accepted
    rows = [{"id": i, "prompt_ids": draw(st.lists(tok, max_size=12)),
             "output_ids": draw(st.lists(tok, min_size=1, max_size=30))}
            for i in range(draw(st.integers(1, 6)))]
    return cfg, rows, draw(st.integers(1, 4))


@settings(max_examples=80, deadline=None)
@given(small_runs())
def test_compiled_loop_equals_public_api_on_random_streams(run):
    cfg, rows, concurrency = run
    if all(len(r["output_ids"]) == 1 for r in rows):
        with pytest.raises(ValueError, match="no verify steps"):
            ns.simulate(rows, config=cfg, concurrency=concurrency)
        return
    got = ns.simulate(rows, config=cfg, concurrency=concurrency)
    assert_steps_equal(got, replay_public_api(cfg, rows, concurrency))


# --- against SGLang's own C++ core (opt-in: -m sglang) ----------------------------------


@pytest.mark.sglang
@pytest.mark.parametrize("match_type,concurrency", CASES)
def test_compiled_loop_equals_sglang_driven_loop(corpus, match_type, concurrency):
    from benchmarks.peers import sglang as peer

    try:
        peer.build()
    except peer.PeerUnavailable as e:
        pytest.skip(f"SGLang peer unavailable: {e}")
    rows = subset(corpus, 20)
    cfg = ns.NgramConfig(match_type=match_type, capacity=1_000_000)
    want = replay_public_api(cfg, rows, concurrency, make_cache=lambda: peer.SglangPeer(
        match_type=match_type, capacity=1_000_000))
    assert_steps_equal(ns.simulate(rows, config=cfg, concurrency=concurrency), want)
