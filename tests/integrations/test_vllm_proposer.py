"""``ngramspec.integrations.vllm.Proposer`` driven as vLLM 0.33's model runner drives a
``custom_class`` proposer, without vLLM: rows appended, freed and condensed
(:class:`benchmarks.studies.vllm_proposer.BatchSim` over the shipped greedy streams), each
chain verified against the recording and its accepted tokens + bonus fed back.  The drafts
equal, request by request and step by step, those of a ``Drafter`` with the same
configuration driven directly with request ids; every output is a list of at most ``k`` ints,
none past ``max_model_len``; the configuration's errors name the variable and the field; the
cost-aware choice is exact."""

from __future__ import annotations

import itertools
import types

import numpy as np
import pytest

import ngramspec as ns
from ngramspec.costs import CostModel, CostTable
from ngramspec.integrations import vllm as iv
from ngramspec.integrations.vllm import ENV_CONFIG, ENV_COSTS, ENV_PRESET, Proposer
from ngramspec.streams import embedded_streams_path

from benchmarks.studies.vllm_proposer import BatchSim, Call

SHIPPED = ns.read_streams(embedded_streams_path())
STREAMS = SHIPPED[:18]


def vllm_config(k: int = 5, *, max_num_seqs: int = 8, max_model_len: int = 2048) -> object:
    n = types.SimpleNamespace
    return n(speculative_config=n(num_speculative_tokens=k),
             scheduler_config=n(max_num_seqs=max_num_seqs),
             model_config=n(max_model_len=max_model_len))


class Reference:
    """A ``Drafter`` with the proposer's configuration, driven with the streams' ids in the
    proposer's order of calls: finish the requests that left (in order of arrival), accept
    what the pending ones emitted, add the new ones (row order), propose (row order)."""

    def __init__(self, config: ns.NgramConfig, k: int, max_model_len: int) -> None:
        self.drafter = ns.Drafter(config=config)
        self.k, self.max_len = k, max_model_len
        self.arrival: dict[int, int] = {}
        self.pending: set[int] = set()
        self.checked = self.added = 0

    def __call__(self, call: Call) -> None:
        d = self.drafter
        for sid in sorted((s for s in call.gone if s in self.arrival), key=self.arrival.get):
            d.finish(sid)
            del self.arrival[sid]
            self.pending.discard(sid)
        emitted = {sid: s for sid, s in zip(call.rows, call.sampled) if s and sid in self.pending}
        assert set(emitted) == self.pending
        if emitted:
            d.accept(emitted)
        self.pending = set()
        for sid, s in zip(call.rows, call.sampled):
            if s and sid not in self.arrival:
                self.arrival[sid] = self.added
                self.added += 1
                d.add_request(sid, self.prompts[sid], s[0])  # a new row samples its first token
        go = [(row, sid) for row, (sid, s) in enumerate(zip(call.rows, call.sampled))
              if s and d.total_len(sid) < self.max_len]
        want = [[] for _ in call.rows]
        if go:
            batch = d.propose([sid for _, sid in go])
            for j, (row, sid) in enumerate(go):
                c = min(int(batch.num_drafts[j]), self.k, self.max_len - d.total_len(sid))
                want[row] = batch.tokens[j, 1:1 + c].tolist()
            self.pending = {sid for _, sid in go}
        assert call.drafts == want, f"rows {call.rows}"
        self.checked += 1


def drive(streams, *, k=5, concurrency=4, max_model_len=2048, abort=0.0, partial=0.0,
          seed=0, config=None, max_output=150, max_num_seqs=None):
    sim = BatchSim(streams, concurrency=concurrency, max_model_len=max_model_len, abort=abort,
                   partial_prefill=partial, max_output=max_output, seed=seed)
    p = Proposer(vllm_config(k, max_num_seqs=max_num_seqs or concurrency,
                             max_model_len=max_model_len), config=config, environ={})
    ref = Reference(p.config, k, max_model_len)
    ref.prompts = {r.sid: r.prompt for r in sim.queue}
    run = sim.run(p.propose, k, on_call=ref)
    return p, ref, run


@pytest.mark.parametrize("k, concurrency, abort, partial, seed", [
    (5, 1, 0.0, 0.0, 0), (3, 4, 0.05, 0.3, 1), (7, 8, 0.02, 0.5, 2)])
def test_drafts_equal_a_drafter_driven_with_ids(k, concurrency, abort, partial, seed):
    p, ref, run = drive(STREAMS, k=k, concurrency=concurrency, abort=abort, partial=partial,
                        seed=seed)
    assert ref.checked == len(run.seconds) > 50
    assert p.resyncs == 0
    assert sum(run.sent) > 0 and run.tokens_per_step > 1.5
    # every request is finished once its row is gone (the last ones wait for a next call)
    assert len(p.drafter.requests) <= concurrency


def test_more_rows_than_max_num_seqs():
    """The row arrays grow past scheduler_config.max_num_seqs if a batch is larger."""
    p, ref, run = drive(STREAMS[:10], k=4, concurrency=5, max_num_seqs=1, abort=0.05,
                        max_output=60)
    assert ref.checked > 20 and p.resyncs == 0


def test_rows_moved_by_condense_are_recognised():
    """Aborts at random free rows in the middle: condense moves the last row there."""
    seen = []
    sim = BatchSim(STREAMS, concurrency=6, abort=0.15, max_output=80, seed=3)
    p = Proposer(vllm_config(4, max_num_seqs=6), environ={})
    ref = Reference(p.config, 4, 2048)
    ref.prompts = {r.sid: r.prompt for r in sim.queue}

    def both(call):
        seen.append(call.rows)
        ref(call)
    sim.run(p.propose, 4, on_call=both)
    moved = sum(1 for a, b in zip(seen, seen[1:]) for row, sid in enumerate(b)
                if sid in a and a.index(sid) != row)
    assert moved >= 3 and p.resyncs == 0


def test_max_model_len_caps_drafts_and_sglang_config():
    """Contexts that reach max_model_len: no draft there, none past it (BatchSim checks),
    still equal to the reference; an SGLang-exact chain config too."""
    short = [s for s in STREAMS if len(s["prompt_ids"]) < 200]
    p, ref, run = drive(short, k=6, concurrency=3, max_model_len=260, max_output=None,
                        config="sglang")
    assert ref.checked > 50 and p.config.match_type == "BFS" and p.config.chain


def test_identical_contexts_and_skipped_rows():
    """Two identical requests side by side are interchangeable; a proposed request that then
    samples nothing (its drafts discarded) gets no draft, and drafts again afterwards."""
    s = STREAMS[0]
    p = Proposer(vllm_config(5, max_num_seqs=4), environ={})
    prompt, out = np.asarray(s["prompt_ids"], np.int32), np.asarray(s["output_ids"], np.int32)
    ctx = np.zeros((4, 2048), np.int32)
    n = np.zeros(4, np.int32)
    for r in (0, 1):
        ctx[r, :prompt.size] = prompt
        ctx[r, prompt.size] = out[0]
        n[r] = prompt.size + 1
    pos = [1, 1]
    drafts = p.propose([[int(out[0])], [int(out[0])]], n, ctx)
    later = 0
    for step in range(40):
        if step <= 10:
            assert drafts[0] == drafts[1]
        sampled = []
        for r in (0, 1):
            if r == 1 and step == 10:
                sampled.append([])
                continue
            d, ref = drafts[r], out[pos[r]:]
            a = 0
            while a < len(d) and d[a] == ref[a]:
                a += 1
            em = ref[:a + 1]
            ctx[r, n[r]:n[r] + em.size] = em
            n[r] += em.size
            pos[r] += em.size
            sampled.append(em.tolist())
        drafts = p.propose(sampled, n, ctx)
        if step == 10:
            assert drafts[1] == []
        elif step > 10:
            later += len(drafts[1])
    assert later > 0 and p.resyncs == 0 and len(p.drafter.requests) == 2


def test_tokens_that_are_no_path_resynchronise():
    """A recovered (sampled) token after an accepted draft that was no draft: the request is
    finished and added again from its context; nothing raises."""
    s = STREAMS[1]
    p = Proposer(vllm_config(5, max_num_seqs=2), environ={})
    prompt, out = np.asarray(s["prompt_ids"], np.int32), np.asarray(s["output_ids"], np.int32)
    ctx = np.zeros((2, 2048), np.int32)
    ctx[0, :prompt.size] = prompt
    ctx[0, prompt.size] = out[0]
    n = np.array([prompt.size + 1, 0], np.int32)
    drafts = p.propose([[int(out[0])]], n, ctx)
    bogus = 0
    for _ in range(60):
        d = drafts[0]
        em = [d[0] + 1, 7] if d else [7]  # "accepted" a token that was not drafted
        bogus += bool(d)
        ctx[0, n[0]:n[0] + len(em)] = em
        n[0] += len(em)
        drafts = p.propose([em], n, ctx)
        assert all(type(t) is int for t in drafts[0]) and len(drafts[0]) <= 5
    assert p.resyncs == bogus > 0


def test_num_speculative_tokens_first_and_empty_batch():
    """NgramProposer's form, num_speculative_tokens first: at most that many drafts, the
    first of the full chain."""
    s = STREAMS[2]
    prompt, out = np.asarray(s["prompt_ids"], np.int32), np.asarray(s["output_ids"], np.int32)
    ctx = np.zeros((2, 2048), np.int32)
    ctx[0, :prompt.size] = prompt
    ctx[0, prompt.size] = out[0]
    n = np.array([prompt.size + 1, 0], np.int32)
    full, short = Proposer(vllm_config(5), environ={}), Proposer(vllm_config(5), environ={})
    em = [int(out[0])]
    pos, some = 1, 0
    while pos + 8 < out.size:
        d = full.propose([em], n, ctx)[0]
        assert short.propose(2, [em], n, ctx, slot_mappings=None)[0] == d[:2]
        some += len(d) > 2
        a = 0
        while a < len(d) and d[a] == out[pos + a]:
            a += 1
        em = out[pos:pos + a + 1].tolist()  # a path of the chain + the bonus token
        ctx[0, n[0]:n[0] + len(em)] = em
        n[0] += len(em)
        pos += len(em)
    assert some
    assert full.propose([], n, ctx) == [] and len(full.drafter.requests) == 1
    n[0] = 0
    assert full.propose([[]], n, ctx) == [[]] and not full.drafter.requests  # its row is gone
    with pytest.raises(TypeError, match="takes 3 arrays"):
        full.propose([[1]], n)


# --- configuration and its errors ---------------------------------------------------------

def test_default_and_presets_and_toml():
    p = Proposer(vllm_config(4), environ={})
    assert p.config == iv.default_config(4)
    assert p.config.chain and p.config.draft_token_num == 5
    want = "chain" if "chain" in ns.config.PRESETS else "recommended"
    assert p.config == ns.NgramConfig.preset(want, chain=True, draft_token_num=5)
    p = Proposer(vllm_config(4), environ={ENV_PRESET: "recommended-cost-aware"})
    assert p.config.min_expected_accept == 4.0 and p.config.chain
    cfg = ns.NgramConfig.recommended(chain=True, draft_token_num=5, max_trie_depth=12)
    p = Proposer(vllm_config(4), environ={ENV_CONFIG: cfg.to_toml()})
    assert p.config == cfg
    p = Proposer(vllm_config(4), environ={ENV_CONFIG: cfg.to_toml(preset="recommended")})
    assert p.config == cfg
    p = Proposer(vllm_config(4), environ={ENV_CONFIG: 'preset = "sglang"\nmax_bfs_breadth = 3'})
    assert (p.config.max_bfs_breadth, p.config.draft_token_num, p.config.chain) == (3, 5, True)
    p = Proposer(vllm_config(4), config=ns.NgramConfig(), environ={ENV_PRESET: "nope"})
    assert p.config == ns.NgramConfig(chain=True, draft_token_num=5)


@pytest.mark.parametrize("environ, match", [
    ({ENV_CONFIG: "draft_token_num = 8", ENV_PRESET: "sglang"},
     "both NGRAMSPEC_VLLM_CONFIG and NGRAMSPEC_VLLM_PRESET are set"),
    ({ENV_PRESET: "fast"}, "NGRAMSPEC_VLLM_PRESET = 'fast' is no preset; presets: sglang"),
    ({ENV_CONFIG: "draft_token_num = 8"},
     "NGRAMSPEC_VLLM_CONFIG: draft_token_num = 8, but vLLM's num_speculative_tokens = 4 "
     "verifies chains of 4 drafts: draft_token_num must be 5"),
    ({ENV_CONFIG: "chain = false"}, "NGRAMSPEC_VLLM_CONFIG: chain = false, but vLLM verifies "
     "chains"),
    ({ENV_CONFIG: "max_bfs_breadht = 3"},
     "NGRAMSPEC_VLLM_CONFIG: TOML: unknown field 'max_bfs_breadht'"),
    ({ENV_CONFIG: "max_bfs_breadth = 0"}, "NGRAMSPEC_VLLM_CONFIG: .*max_bfs_breadth"),
    ({ENV_CONFIG: "max_bfs_breadth = [1"}, "NGRAMSPEC_VLLM_CONFIG: TOML"),
    ({ENV_CONFIG: 'profile = "vllm-0.33"'},
     "NGRAMSPEC_VLLM_CONFIG: profile 'vllm-0.33' is vLLM's own n-gram proposer"),
    ({ENV_CONFIG: 'preset = "calibrated"\nmin_expected_accept = "auto"'},
     'min_expected_accept = "auto" needs step costs: set NGRAMSPEC_VLLM_COSTS'),
    ({ENV_COSTS: "/nonexistent/costs.csv"}, "NGRAMSPEC_VLLM_COSTS = '/nonexistent/costs.csv'"),
])
def test_bad_environment_is_named(environ, match):
    with pytest.raises(ValueError, match=match):
        Proposer(vllm_config(4), environ=environ)


@pytest.mark.parametrize("cfg, match", [
    (types.SimpleNamespace(), "vllm_config has no speculative_config"),
    (types.SimpleNamespace(speculative_config=types.SimpleNamespace(),
                           scheduler_config=types.SimpleNamespace(max_num_seqs=4),
                           model_config=types.SimpleNamespace(max_model_len=64)),
     "vllm_config.speculative_config has no num_speculative_tokens"),
    (vllm_config(0), r"speculative_config.num_speculative_tokens must be an integer >= 1, got 0"),
    (vllm_config(max_model_len=None),
     "model_config.max_model_len must be an integer >= 1, got None"),
    (vllm_config(max_num_seqs=2.5), "scheduler_config.max_num_seqs must be an integer"),
])
def test_bad_vllm_config_is_named(cfg, match):
    with pytest.raises(ValueError, match=match):
        Proposer(cfg, environ={})


def test_cost_table_must_cover_the_verify_tokens(tmp_path):
    path = tmp_path / "c.csv"
    path.write_text(CostTable.from_model(CostModel(step_ms=10, token_ms=0.1), max_batch=8,
                                         max_tokens=4).to_csv())
    with pytest.raises(ValueError, match="NGRAMSPEC_VLLM_COSTS: the cost table measures tokens "
                                         "1..4 but a verify step of k = 5 drafts has 1..6"):
        Proposer(vllm_config(5), environ={ENV_COSTS: str(path)})
    assert Proposer(vllm_config(3), environ={ENV_COSTS: str(path)}).costs is not None


# --- cost-aware -----------------------------------------------------------------------------

def _brute(lengths, probs, batch, step_ms):
    best, arg = -1.0, None
    grid = np.arange(1, step_ms.size + 1)
    for counts in itertools.product(*[range(m + 1) for m in lengths]):
        gain = sum(float(probs[r, :c].sum()) for r, c in enumerate(counts))
        rate = (batch + gain) / np.interp(1 + sum(counts) / batch, grid, step_ms)
        if rate > best + 1e-12:
            best, arg = rate, counts
    return best, arg


@pytest.mark.parametrize("seed", range(12))
def test_choose_counts_is_exact(seed):
    rng = np.random.default_rng(seed)
    r = int(rng.integers(1, 4))
    lengths = rng.integers(0, 4, r)
    probs = np.sort(rng.random((r, 3)), axis=1)[:, ::-1]  # falling along each chain
    batch = r + int(rng.integers(0, 3))
    step = np.cumsum(np.r_[10.0, rng.random(3) * rng.choice([0.5, 5, 20])])
    counts = iv.choose_counts(lengths, probs, batch, step)
    best, _ = _brute(lengths, probs, batch, step)
    grid = np.arange(1, step.size + 1)
    got = (batch + sum(float(probs[i, :c].sum()) for i, c in enumerate(counts))) / \
        np.interp(1 + counts.sum() / batch, grid, step)
    assert got == pytest.approx(best, rel=1e-12)
    assert (counts <= lengths).all()


def test_choose_counts_without_probs_is_all_or_nothing():
    flat, steep = np.array([10.0, 10.1, 10.2]), np.array([10.0, 20.0, 30.0])
    assert iv.choose_counts(np.array([2, 1]), None, 2, flat).tolist() == [2, 1]
    assert iv.choose_counts(np.array([2, 1]), None, 2, steep).tolist() == [0, 0]
    assert iv.choose_counts(np.array([0, 0]), None, 2, flat).tolist() == [0, 0]


def test_cost_aware_proposer(tmp_path):
    """A verify token as dear as a decode step: nothing pays, nothing is sent.  A flat table:
    every chain token pays, the drafts are the cost-blind proposer's."""
    dear = CostTable.from_model(CostModel(step_ms=0.001, token_ms=10), max_batch=8,
                                max_tokens=8)
    flat = CostTable([(b, t, 10.0) for b in (1, 8) for t in (1, 8)])
    calibrated = iv.default_config(4, cost_aware=True)
    assert calibrated.calibrated_estimates and calibrated != iv.default_config(4)
    _, _, run = drive(STREAMS[:6], k=4, concurrency=3, config=calibrated)
    sim = BatchSim(STREAMS[:6], concurrency=3, max_output=150)
    p = Proposer(vllm_config(4, max_num_seqs=3), costs=dear, environ={})
    none = sim.run(p.propose, 4)
    assert sum(none.sent) == 0 and none.tokens_per_step == 1.0
    sim = BatchSim(STREAMS[:6], concurrency=3, max_output=150)
    p = Proposer(vllm_config(4, max_num_seqs=3), costs=flat, environ={})
    assert p.config == calibrated  # the default with costs: calibrated path probabilities
    ref = Reference(p.config, 4, 2048)
    ref.prompts = {r.sid: r.prompt for r in sim.queue}
    same = sim.run(p.propose, 4, on_call=ref)
    assert same.emitted == run.emitted
    path = tmp_path / "dear.csv"
    path.write_text(dear.to_csv())
    assert Proposer(vllm_config(4), environ={ENV_COSTS: str(path)}).costs is not None


def test_no_vllm_import():
    import sys

    assert not any(m == "vllm" or m.startswith("vllm.") for m in sys.modules)


def test_docstring_examples():
    import doctest

    result = doctest.testmod(iv, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0 and result.attempted > 0
