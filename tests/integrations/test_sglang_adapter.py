"""ngramspec.integrations.sglang.NgramCorpus without SGLang: SGLang's interface (types, shapes,
errors), the SGLang-exact path against NgramCache and simulate, the options beyond SGLang
against simulate (tokens per verify step, per request and step), and the launcher against a
stand-in SGLang package (a spawned scheduler process, as the server starts it).

The differential against SGLang's own class is tests/integrations/test_sglang_adapter_vs_sglang.py
(marker ``sglang``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from numpy.testing import assert_array_equal

import ngramspec as ns
from ngramspec.integrations import sglang_launch
from ngramspec.integrations.sglang import SEPARATOR_TOKEN, NgramCorpus, resolve_config
from ngramspec.integrations.sglang_replay import accepted_length, replay_worker
from ngramspec.sweep.budget import SGLANG_SLOTS

ROOT = Path(__file__).resolve().parents[2]


def _streams(limit: int) -> list[dict]:
    rows = ns.read_streams(ROOT / "ngramspec" / "data" / "qwen2.5-coder-0.5b-greedy.jsonl.gz")
    return rows[::max(1, len(rows) // limit)][:limit]


def _corpus(cfg: ns.NgramConfig, **kw) -> NgramCorpus:
    """As the worker creates it: the server's arguments of cfg, plus cfg itself."""
    a = cfg.to_sglang_args(plugin=True)
    return NgramCorpus(max_trie_depth=a["speculative_ngram_max_trie_depth"],
                       min_bfs_breadth=a["speculative_ngram_min_bfs_breadth"],
                       max_bfs_breadth=a["speculative_ngram_max_bfs_breadth"],
                       draft_token_num=a["speculative_num_draft_tokens"],
                       match_type=a["speculative_ngram_match_type"],
                       capacity=a["speculative_ngram_capacity"], config=cfg, **kw)


def _replay(corpus, rows, concurrency, cfg, hooks=True, on_get=None):
    return replay_worker(corpus, [r["prompt_ids"] for r in rows],
                         [r["output_ids"] for r in rows], concurrency=concurrency,
                         max_trie_depth=cfg.max_trie_depth, draft_token_num=cfg.draft_token_num,
                         hooks=hooks, on_get=on_get)


# ---- SGLang's interface -----------------------------------------------------------------------

def test_outputs_are_flat_int64_as_sglangs():
    corpus = NgramCorpus(max_trie_depth=12, draft_token_num=8, capacity=10_000)
    corpus.batch_put([list(range(1, 11)), [1, 2, 3, 44, 55, 66, 77, 88, 99, 100]])
    corpus.synchronize()
    tokens, mask = corpus.batch_get(["a", "b", "c"], [[1, 2, 3], [3, 44], [3, 6, 999]],
                                    [3, 2, 3])
    assert tokens.dtype == np.int64 and mask.dtype == np.int64
    assert tokens.shape == (24,) and mask.shape == (3 * 64,)
    assert_array_equal(tokens.reshape(3, 8), [[3, 4, 44, 5, 55, 6, 66, 77],
                                              [44, 55, 66, 77, 88, 99, 100, 0],
                                              [999, 0, 0, 0, 0, 0, 0, 0]])
    # SGLang's padding: token 0, a mask row of the root and the slot itself
    padded = np.eye(8, dtype=np.int64)
    padded[:, 0] = 1
    assert_array_equal(mask.reshape(3, 8, 8)[2], padded)
    empty = corpus.batch_get([], [], [])
    assert empty[0].dtype == np.int64 and empty[0].shape == (0,) and empty[1].shape == (0,)


@pytest.mark.parametrize("match_type", ["BFS", "PROB"])
def test_sglang_keywords_draft_as_ngramcache(match_type):
    kw = {"max_trie_depth": 5, "min_bfs_breadth": 1, "max_bfs_breadth": 3, "draft_token_num": 6,
          "match_type": match_type, "capacity": 200}
    corpus, cache = NgramCorpus(**kw), ns.NgramCache(**kw)
    rng = np.random.default_rng(7)
    seqs = {k: list(rng.integers(0, 5, 3)) for k in "abcd"}
    for step in range(60):
        ids = sorted(rng.choice(list("abcd"), size=int(rng.integers(1, 5)), replace=False))
        for k in ids:
            seqs[k] += list(rng.integers(0, 5, int(rng.integers(1, 3))))
        tails = [seqs[k][-5:] for k in ids]
        lens = [len(seqs[k]) for k in ids]
        corpus.synchronize()
        tokens, mask = corpus.batch_get(ids, tails, lens)
        want = cache.match(tails, request_ids=ids, total_lens=lens)
        assert_array_equal(tokens, want.tokens.reshape(-1))
        assert_array_equal(mask, want.mask.reshape(-1))
        corpus.batch_put(tails)
        cache.insert(tails)
        if step % 17 == 16:
            gone = [ids[0]]
            corpus.erase_match_state(gone)
            cache.erase(gone)
        if step == 40:
            corpus.reset()
            cache.reset()


def test_batch_put_is_ordered_before_the_next_draft():
    corpus = NgramCorpus(max_trie_depth=4, draft_token_num=4, capacity=1000)
    for i in range(50):
        corpus.batch_put([[1, 2, 3, 4 + i % 3]])
    corpus.synchronize()
    tokens, _ = corpus.batch_get(["x"], [[1, 2]], [2])
    assert tokens.reshape(-1)[:2].tolist() == [2, 3]
    assert len(corpus.cache) > 1  # every queued window is in


def test_sglang_exact_path_equals_simulate():
    cfg = ns.NgramConfig(capacity=100_000)
    rows = _streams(16)
    sim = ns.simulate(rows, config=cfg, concurrency=4)
    got = _replay(_corpus(cfg), rows, 4, cfg, hooks=False)
    for a, b in zip(got, sim.emitted):
        assert_array_equal(a, b)


# ---- beyond SGLang: recommended() ------------------------------------------------------------

@pytest.mark.parametrize("concurrency", [1, 4, 16])
def test_recommended_tokens_per_step_equal_simulates(concurrency):
    cfg = ns.NgramConfig.recommended(capacity=200_000)
    rows = _streams(24)
    sim = ns.simulate(rows, config=cfg, concurrency=concurrency)
    seen = []
    got = _replay(_corpus(cfg), rows, concurrency, cfg,
                  on_get=lambda ids, t, m: seen.append((t.size, m.size, len(ids))))
    for a, b in zip(got, sim.emitted):  # every request, every verify step
        assert_array_equal(a, b)
    tps = sum(int(e.sum()) for e in got) / sum(e.size for e in got)
    assert tps == sim.tokens_per_step > 2.0
    assert all(t == b * 16 and m == b * 256 for t, m, b in seen)  # the worker's fixed slots


def test_recommended_without_the_worker_hook_sees_less():
    """Without note_prompts/note_finished only the last max_trie_depth prompt tokens are
    indexed: the launcher's worker hook is what makes recommended() pay."""
    cfg = ns.NgramConfig.recommended(capacity=200_000)
    rows = _streams(24)
    with_hook = _replay(_corpus(cfg), rows, 4, cfg, hooks=True)
    without = _replay(_corpus(cfg), rows, 4, cfg, hooks=False)
    tps = [sum(int(e.sum()) for e in g) / sum(e.size for e in g) for g in (with_hook, without)]
    assert tps[1] < tps[0]


def test_policy_path_survives_gaps_erase_and_reset():
    cfg = ns.NgramConfig.recommended(capacity=10_000)
    corpus = _corpus(cfg)
    seq = [5, 6, 7, 5, 6, 7, 5, 6]
    t, _ = corpus.batch_get(["a"], [seq], [len(seq)])
    # a request that comes back with tokens its last tree cannot have emitted: started afresh
    t, m = corpus.batch_get(["a"], [seq + [9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9]],
                            [len(seq) + 18])
    assert t.shape == (16,) and m.shape == (256,)
    corpus.erase_match_state(["a", "unknown"])
    corpus.reset()
    t, _ = corpus.batch_get(["a"], [[1, 2]], [2])
    assert t.tolist() == [2] + [0] * 15


# ---- errors -----------------------------------------------------------------------------------

def test_errors():
    with pytest.raises(ValueError, match="Unknown match_type: 'ADAPTIVE'. Must be 'BFS' or "
                                         "'PROB'."):
        NgramCorpus(match_type="ADAPTIVE")
    corpus = NgramCorpus(capacity=1000)
    with pytest.raises(ValueError, match="batchMatch expects state_ids, tokens, and "
                                         "total_lens to match in size"):
        corpus.batch_get(["a", "b"], [[1]], [1])
    with pytest.raises(ValueError, match="speculative-num-draft-tokens 16"):
        NgramCorpus(max_trie_depth=24, draft_token_num=8, config="recommended")
    with pytest.raises(ValueError, match="speculative-ngram-max-trie-depth 24"):
        NgramCorpus(draft_token_num=16, config="recommended")
    with pytest.raises(ValueError, match="profile"):
        NgramCorpus(config=ns.NgramConfig(profile="sglang-0.5.9"))
    with pytest.raises(ValueError, match="preset"):
        NgramCorpus(config="no-such-preset-or-file")
    with pytest.raises(TypeError, match="config must be"):
        NgramCorpus(config=42)
    rec = NgramCorpus(max_trie_depth=24, draft_token_num=16, config="recommended")
    with pytest.raises(ValueError, match="duplicates"):
        rec.batch_get(["a", "a"], [[1], [1]], [1, 1])
    with pytest.raises(ValueError, match="3 req_ids but 1 prompts"):
        rec.note_prompts(["a", "b", "c"], [[1]])


def test_config_from_toml_file(tmp_path):
    path = tmp_path / "best.toml"
    cfg = ns.NgramConfig(match_type="PROB", max_bfs_breadth=4, draft_token_num=6)
    path.write_text(cfg.to_toml())
    assert resolve_config(path) == cfg == resolve_config(str(path))
    corpus = NgramCorpus(draft_token_num=6, config=path)
    assert corpus.config == cfg and corpus.draft_token_num == 6


# ---- external corpora --------------------------------------------------------------------------

def test_external_corpora_as_sglangs_bookkeeping():
    kw = {"max_trie_depth": 4, "max_bfs_breadth": 3, "draft_token_num": 6, "capacity": 1000,
          "external_sam_budget": 2, "external_corpus_max_tokens": 20}
    corpus = NgramCorpus(**kw)
    cache = ns.NgramCache(**kw)
    chunks = [[1, 2, 3, 9], [9, SEPARATOR_TOKEN, 7, 1], [2, 5]]
    n = corpus.load_external_corpus_named("docs", chunks)
    corpus.commit_external_corpus_load("docs", n)
    assert n == 10 and corpus.remaining_token_budget == 10
    assert cache.add_corpus("docs", [[1, 2, 3, 9, 9], [7, 1, 2, 5]]) == 10
    assert corpus.list_external_corpora() == cache.corpora() == {"docs": 10}
    for c in (corpus, cache):
        (c.batch_put if c is corpus else c.insert)([[1, 2, 3, 4]])
        c.synchronize()
    t, _ = corpus.batch_get(["q"], [[1, 2]], [2])
    assert_array_equal(t, cache.match([[1, 2]], request_ids=["q"], total_lens=[2])
                       .tokens.reshape(-1))
    with pytest.raises(ValueError, match="External corpus 'docs' already exists"):
        corpus.load_external_corpus_named("docs", [[1]])
    with pytest.raises(ValueError, match=r"exceeds the remaining token budget \(10\) after "
                                         r"loading 8 tokens"):
        corpus.load_external_corpus_named("big", [[1] * 8, [2] * 3])
    corpus.remove_external_corpus("nope")  # SGLang accepts unknown ids
    corpus.remove_external_corpus("docs")
    assert corpus.list_external_corpora() == {} and corpus.remaining_token_budget == 20


# ---- switching it on ---------------------------------------------------------------------------

def test_to_sglang_args_plugin():
    cfg = ns.NgramConfig.recommended()
    args = cfg.to_sglang_args(plugin=True)
    assert ns.NgramConfig.from_toml(args.pop("ngramspec_config")) == cfg
    assert args["speculative_ngram_match_type"] == "BFS"
    assert args["speculative_num_draft_tokens"] == 16
    assert ns.NgramConfig.from_sglang_args(args) == ns.NgramConfig(max_trie_depth=24,
                                                                    draft_token_num=16)
    exact = ns.NgramConfig(match_type="PROB", draft_token_num=8)
    plug = exact.to_sglang_args(plugin=True)
    plug.pop("ngramspec_config")
    assert plug == exact.to_sglang_args()  # the default form is unchanged
    with pytest.raises(ValueError, match="profile"):
        ns.NgramConfig(profile="sglang-0.5.9").to_sglang_args(plugin=True)


def test_server_flags():
    cfg = ns.NgramConfig.recommended()
    flags = sglang_launch.server_flags(cfg, ["--model-path", "m", ("--speculative-ngram-"
                                             "capacity"), "5"])
    assert flags[:2] == ["--speculative-algorithm", "NGRAM"]
    assert "--speculative-ngram-capacity" not in flags
    assert flags[flags.index("--speculative-num-draft-tokens") + 1] == "16"
    with pytest.raises(ValueError, match="needs --speculative-num-draft-tokens 16"):
        sglang_launch.server_flags(cfg, ["--speculative-num-draft-tokens", "8"])


def test_ngramspec_never_imports_sglang():
    code = ("import sys, ngramspec, ngramspec.integrations.sglang, "
            "ngramspec.integrations.sglang_launch, ngramspec.integrations.sglang_replay; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('sglang', 'torch')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"


FAKE = {
    "sglang/__init__.py": "",
    "sglang/srt/__init__.py": "",
    "sglang/srt/managers/__init__.py": "",
    "sglang/srt/speculative/__init__.py": "",
    "sglang/srt/speculative/cpp_ngram/__init__.py": "",
    "sglang/srt/speculative/cpp_ngram/ngram_corpus.py": """
        class NgramCorpus:
            def __init__(self, **kwargs):
                raise RuntimeError("SGLang's own drafter was used")
    """,
    "sglang/srt/speculative/ngram_worker.py": """
        from types import SimpleNamespace
        from sglang.srt.speculative.cpp_ngram.ngram_corpus import NgramCorpus

        class NGRAMWorker:
            def __init__(self, args):
                self.depth, self.n = args["depth"], args["n"]
                self.ngram_corpus = NgramCorpus(
                    min_bfs_breadth=1, max_bfs_breadth=10, match_type="BFS", capacity=10000,
                    max_trie_depth=self.depth, draft_token_num=self.n,
                    external_sam_budget=0, external_corpus_max_tokens=10000000)

            def _prepare_draft_tokens(self, batch):
                self.ngram_corpus.synchronize()
                tails = [(r.origin_input_ids_unpadded + r.output_ids)[-self.depth:]
                         for r in batch.reqs]
                lens = [len(r.origin_input_ids_unpadded) + len(r.output_ids)
                        for r in batch.reqs]
                return self.ngram_corpus.batch_get([r.rid for r in batch.reqs], tails, lens)

            def _prepare_for_speculative_decoding(self, batch):
                if batch.forward_mode.is_decode():
                    return self._prepare_draft_tokens(batch)
    """,
    "sglang/srt/managers/scheduler.py": """
        import json
        from types import SimpleNamespace

        def run_scheduler_process(args, queue):
            from sglang.srt.speculative.ngram_worker import NGRAMWorker
            w = NGRAMWorker(args)
            prompt = [7, 8, 9] * 20 + [1, 2, 3, 4, 5, 6] + [0] * 30
            req = SimpleNamespace(rid="a", origin_input_ids_unpadded=prompt, output_ids=[])
            extend = SimpleNamespace(is_decode=lambda: False)
            decode = SimpleNamespace(is_decode=lambda: True)
            w._prepare_for_speculative_decoding(SimpleNamespace(reqs=[req], forward_mode=extend))
            prepared = w.ngram_corpus._drafter.prepared  # indexed during the prefill
            req.output_ids = [1]
            tokens, mask = w._prepare_for_speculative_decoding(
                SimpleNamespace(reqs=[req], forward_mode=decode))
            queue.put(json.dumps(dict(cls=type(w.ngram_corpus).__mro__[1].__module__,
                                      tokens=tokens.tolist(), n=mask.size, prepared=prepared,
                                      after=w.ngram_corpus._drafter.prepared)))
    """,
    "sglang/launch_server.py": """
        import json, sys
        import multiprocessing as mp

        if __name__ == "__main__":
            from sglang.srt.managers.scheduler import run_scheduler_process
            ctx = mp.get_context("spawn")  # as SGLang starts its scheduler
            q = ctx.Queue()
            p = ctx.Process(target=run_scheduler_process,
                            args=(dict(depth=int(sys.argv[sys.argv.index(
                                "--speculative-ngram-max-trie-depth") + 1]),
                                  n=int(sys.argv[sys.argv.index(
                                "--speculative-num-draft-tokens") + 1])), q))
            p.start()
            print("RESULT", q.get(timeout=300))
            p.join()
    """,
}


@pytest.fixture
def fake_sglang(tmp_path):
    for name, text in FAKE.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return tmp_path


def test_launcher_switches_the_spawned_scheduler_over(fake_sglang):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(fake_sglang), str(ROOT)]))
    env.pop(sglang_launch.ENV_CONFIG, None)
    out = subprocess.run([sys.executable, "-m", "ngramspec.integrations.sglang_launch",
                          "--preset", "recommended", "--", "--model-path", "m"],
                         capture_output=True, text=True, env=env, cwd=fake_sglang, timeout=600,
                         check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.split("RESULT", 1)[1])
    assert got["cls"] == "ngramspec.integrations.sglang" and got["n"] == SGLANG_SLOTS ** 2
    # the prompt beyond its last 24 tokens (... 1 2 3 4 5 6, then 30 zeros) reached the
    # drafter through the worker hook: the first output token 1 drafts 2 (the tail alone,
    # zeros and 1, drafts nothing)
    assert got["tokens"][:2] == [1, 2]
    # the prompt was told at its extend batch (its index built during the prefill) and taken
    # up by the first batch_get
    assert got["prepared"] == ["a"] and got["after"] == []
    assert "ngramspec: SGLang's NGRAM drafter is ngramspec's NgramCorpus" in out.stderr


def test_launcher_print_args(capsys):
    assert sglang_launch.launch(["--preset", "recommended", "--print-args", "--",
                                 "--model-path", "m"]) == 0
    line = capsys.readouterr().out
    assert "python -m sglang.launch_server --model-path m --speculative-algorithm NGRAM" in line
    assert f"--speculative-num-draft-tokens {SGLANG_SLOTS}" in line


def test_accepted_length():
    tokens = np.array([9, 1, 2, 3, 0])
    mask = np.array([[1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [1, 1, 1, 0, 0], [1, 0, 0, 1, 0],
                     [1, 0, 0, 0, 1]], bool)
    assert accepted_length(tokens, mask, np.array([1, 2, 7])) == 3
    assert accepted_length(tokens, mask, np.array([1, 2])) == 2  # cut at the recording's end
    assert accepted_length(tokens, mask, np.array([3, 2])) == 2
    assert accepted_length(tokens, mask, np.array([0, 5])) == 2  # a padding slot is a child
    assert accepted_length(tokens, mask, np.array([2])) == 1


def test_docstring_examples():
    import doctest

    from ngramspec.integrations import sglang

    result = doctest.testmod(sglang, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0 and result.attempted > 0


# ---- SGLang 0.5.9's NgramCache ------------------------------------------------------------------

def test_legacy_ngramcache_drafts_as_the_059_profile():
    from ngramspec.integrations.sglang_legacy import NgramCache as Legacy

    kw = {"branch_length": 6, "min_match_window_size": 1, "max_match_window_size": 4,
          "min_bfs_breadth": 1, "max_bfs_breadth": 3, "draft_token_num": 6, "capacity": 300}
    legacy, cache = Legacy(**kw), ns.NgramCache(profile="sglang-0.5.9", **kw)
    rng = np.random.default_rng(11)
    seqs = [list(rng.integers(0, 5, 3)) for _ in range(4)]
    for step in range(60):
        ctxs = [s[-4:] for s in seqs]
        legacy.synchronize()
        tokens, mask = legacy.batch_get(ctxs)
        want = cache.match(ctxs)
        assert tokens.dtype == mask.dtype == np.int64
        assert_array_equal(tokens, want.tokens.reshape(-1))
        assert_array_equal(mask, want.mask.reshape(-1))
        for s in seqs:  # 0.5.9 inserts after appending
            s += list(rng.integers(0, 5, int(rng.integers(1, 3))))
        windows = [s[-6:] for s in seqs]
        legacy.batch_put(windows)
        cache.insert(windows)
        if step == 30:
            legacy.reset()
            cache.reset()
    cfg = ns.NgramConfig(profile="sglang-0.5.9", max_match_window_size=10, draft_token_num=8)
    assert Legacy(config=cfg).config == cfg
    with pytest.raises(ValueError, match="max_match_window_size=4 but the config has 10"):
        Legacy(max_match_window_size=4, config=cfg)
    with pytest.raises(ValueError, match="profile"):
        Legacy(config="recommended")
    assert Legacy().batch_get([])[0].shape == (0,)


def test_legacy_docstring_examples():
    import doctest

    from ngramspec.integrations import sglang_legacy

    result = doctest.testmod(sglang_legacy,
                             optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0 and result.attempted > 0


def test_legacy_ngramcache_under_the_059_worker_equals_simulate():
    from ngramspec.integrations.sglang_legacy import NgramCache as Legacy

    cfg = ns.NgramConfig(profile="sglang-0.5.9", max_match_window_size=10, draft_token_num=8,
                         capacity=100_000)
    rows = _streams(16)
    sim = ns.simulate(rows, config=cfg, concurrency=4)
    got = replay_worker(Legacy(draft_token_num=8, capacity=100_000, config=cfg),
                        [r["prompt_ids"] for r in rows], [r["output_ids"] for r in rows],
                        concurrency=4, max_trie_depth=10, draft_token_num=8,
                        legacy_branch_length=cfg.branch_length)
    for a, b in zip(got, sim.emitted):
        assert_array_equal(a, b)


def test_route_scheduler_reaches_every_holder(fake_sglang, monkeypatch):
    """Module names, Engine's class attribute and launch_server's default argument that hold
    SGLang's run_scheduler_process all get the launcher's (in this process)."""
    import importlib

    monkeypatch.syspath_prepend(str(fake_sglang))
    for name in [m for m in sys.modules if m == "sglang" or m.startswith("sglang.")]:
        monkeypatch.delitem(sys.modules, name)
    try:
        _route_in_stand_in(importlib.import_module("sglang.srt.managers.scheduler"),
                           monkeypatch)
    finally:  # the stand-in leaves with the test
        for name in [m for m in sys.modules if m == "sglang" or m.startswith("sglang.")]:
            del sys.modules[name]


def _route_in_stand_in(sched, monkeypatch):
    import types

    original = sched.run_scheduler_process
    holder = types.ModuleType("sglang.srt.entrypoints_fake")
    holder.run_scheduler_process = original

    class Engine:
        run_scheduler_process_func = staticmethod(original)

    def launch_server(args, run_scheduler_process_func=original):
        return run_scheduler_process_func

    holder.Engine, holder.launch_server = Engine, launch_server
    monkeypatch.setitem(sys.modules, holder.__name__, holder)
    sglang_launch._route_scheduler()
    ours = sglang_launch.run_scheduler_process
    assert sched.run_scheduler_process is ours and holder.run_scheduler_process is ours
    assert Engine.run_scheduler_process_func is ours
    assert launch_server(None) is ours
    assert sched._ngramspec_original is original
