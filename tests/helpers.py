"""Helpers shared by several test modules (the one home for them: test modules import this,
never each other).  Strategies for drafters live in the package: ngramspec.testing.strategies."""

from __future__ import annotations

import gzip
import json
from importlib.resources import files

import numpy as np
from hypothesis import strategies as st
from numpy.testing import assert_array_equal

import ngramspec as ns

STATE_ARRAYS = ("state_epoch", "state_processed_len", "state_count", "state_refs")


def canonical(cache: ns.NgramCache) -> tuple[int, dict[str, np.ndarray], list]:
    """``(epoch, arrays, request ids)``: a cache's canonical content (what a file holds)."""
    c = cache._canonical()
    names = ("node_token", "node_parent", "node_freq") + STATE_ARRAYS
    return c.epoch, {n: getattr(c, n).copy() for n in names}, list(c.request_ids)


def assert_same_content(a: ns.NgramCache, b: ns.NgramCache) -> None:
    ea, xa, ka = canonical(a)
    eb, xb, kb = canonical(b)
    assert (ea, ka) == (eb, kb)
    for name in xa:
        assert_array_equal(xa[name], xb[name], err_msg=name)


def rewrite_cache_file(src, dst, *, header=None, arrays=None, drop=(), fix_checksums=True):
    """Copy the cache file ``src`` to ``dst`` edited: its header by ``header(h)``, members
    replaced by ``arrays`` (their dtype and shape listed in the header), the members named in
    ``drop`` left out, and every listed checksum made to match its member (with
    ``fix_checksums=False`` the replaced members keep the checksums they had)."""
    from ngramspec.cache import persist

    with np.load(src) as f:
        members = {k: f[k] for k in f.files}
    h = json.loads(members.pop("header").tobytes())
    if header:
        header(h)
    for name, value in (arrays or {}).items():
        members[name] = value
        h["arrays"][name].update(dtype=value.dtype.str, shape=list(value.shape))
    if fix_checksums:
        for name, a in members.items():
            h["arrays"][name]["sha256"] = persist._sha256(a)
    members["header"] = np.frombuffer(json.dumps(h).encode(), np.uint8)
    for name in drop:
        members.pop(name, None)
    np.savez(dst, **members)


def recorded_streams(limit: int) -> list[dict]:
    with gzip.open(files("ngramspec") / "data" / "qwen2.5-coder-0.5b-greedy.jsonl.gz", "rt") as f:
        rows = [json.loads(line) for line in f]
    return rows[::max(1, len(rows) // limit)][:limit]


@st.composite
def scenarios(draw):
    depth = draw(st.integers(2, 8))
    lo = draw(st.integers(1, 4))
    hi = draw(st.integers(lo, lo + 8))
    cfg = dict(max_trie_depth=depth, min_bfs_breadth=lo, max_bfs_breadth=hi,
               draft_token_num=draw(st.integers(1, 24)),
               match_type=draw(st.sampled_from(["BFS", "PROB"])),
               capacity=draw(st.one_of(st.integers(depth + 1, depth + 12),
                                       st.integers(depth + 13, 400))))
    vocab = draw(st.integers(2, 6))
    tok = st.integers(-1, vocab - 2)  # a negative id and token 0 included
    inserts = draw(st.lists(st.lists(st.lists(tok, max_size=14), min_size=1, max_size=3),
                            min_size=1, max_size=6))
    contexts = draw(st.lists(st.lists(tok, min_size=1, max_size=depth + 3), min_size=1,
                             max_size=4))
    return cfg, inserts, contexts


def brute_force_links(mask: np.ndarray):
    """depth, parent, next_token, next_sibling of one request, straight from the definitions."""
    n = mask.shape[0]
    depth = [sum(bool(mask[t, j]) for j in range(t)) for t in range(n)]
    parent = [max([j for j in range(t) if mask[t, j]], default=-1) for t in range(n)]
    next_token = [min([i for i in range(t + 1, n) if mask[i, t]], default=-1) for t in range(n)]
    next_sibling = []
    for t in range(n):
        p = parent[t]
        if p == -1:
            next_sibling.append(-1)
            continue
        cands = [i for i in range(t + 1, n)
                 if mask[i, p] and not any(mask[i, j] for j in range(p + 1, i))]
        next_sibling.append(min(cands, default=-1))
    return depth, parent, next_token, next_sibling


def build(backend, cfg, inserts):
    cache = ns.NgramCache(backend=backend, **cfg)
    for batch in inserts:
        cache.insert(batch)
        assert len(cache) <= cfg["capacity"]
    return cache


# --- SGLang's own core (the -m sglang differential tests) ----------------------------------

#: Token ranges the differential tests draw from: tiny (n-grams repeat), signed, int32 limits.
PEER_VOCABS = [(0, 2), (-3, 6), (0, 50), (-(2**31), 2**31 - 1), (0, 151_935)]


def build_peer_or_skip(build, *args) -> None:
    """Build an SGLang peer from its wheel (``benchmarks.peers``), or skip the calling module
    when it cannot be built here."""
    import pytest

    from benchmarks.peers.sglang import PeerUnavailable

    try:
        build(*args)
    except PeerUnavailable as e:
        pytest.skip(f"SGLang peer unavailable: {e}")


def peer_fixture(build, *args):
    """A module-scoped autouse fixture that builds an SGLang peer (``build(*args)``) or skips
    the module: ``peer_built = peer_fixture(sglang_peer.build)`` in a test module."""
    import pytest

    @pytest.fixture(scope="module", autouse=True)
    def peer_built():
        build_peer_or_skip(build, *args)

    return peer_built


def random_ops_vs_peer(configs, vocabs=PEER_VOCABS):
    """The decorators of a random-operations test against a peer: each backend, 40 examples of
    a config drawn from ``configs``, a token range from ``vocabs`` and the operations' draws;
    the test takes ``(backend, cfg, vocab, data)``."""
    import pytest
    from hypothesis import given, settings

    def decorate(test):
        test = given(cfg=configs, vocab=st.sampled_from(vocabs), data=st.data())(test)
        test = settings(max_examples=40, deadline=None)(test)
        return pytest.mark.parametrize("backend", ["numba", "reference"])(test)

    return decorate


def peer_tree_options(draw, depth: int) -> dict:
    """The tree options both SGLang eras share, drawn for a trie of ``depth``."""
    lo = draw(st.integers(1, 8))
    return dict(min_bfs_breadth=lo, max_bfs_breadth=lo + draw(st.integers(0, 30)),
                draft_token_num=draw(st.sampled_from([1, 2, 5, 8, 12, 16, 32, 64])),
                match_type=draw(st.sampled_from(["BFS", "PROB"])),
                capacity=draw(st.one_of(st.integers(depth + 1, depth + 40),
                                        st.integers(200, 20_000))))


def write_jsonl(path, items):
    """``path`` (returned) holding one JSON value per line."""
    path.write_text("".join(json.dumps(x) + "\n" for x in items))
    return path


def stream_records(rows) -> list[dict]:
    """Recorded streams with their token fields and ids only."""
    return [{k: r[k] for k in ("id", "prompt_ids", "output_ids")} for r in rows]


# --- the serving loop through Drafter, by hand ----------------------------------------------


def recorded_argmax(drafts: ns.DraftBatch, b: int, output: list[int], done: int) -> np.ndarray:
    """The greedy target's argmax at every slot of row ``b``: the recorded next token where
    the slot's path follows the recording, else -1 (a token no draft carries)."""
    n = drafts.draft_token_num
    pred = np.full(n, -1, dtype=np.int64)
    for i in range(n):
        path = [int(drafts.tokens[b, j]) for j in range(1, i + 1) if drafts.mask[b, i, j]]
        end = done + len(path)
        if end < len(output) and output[done:end] == path:
            pred[i] = output[end]
    return pred


def replay_with_drafter(cfg: ns.NgramConfig, rows: list[dict], concurrency: int,
                        backend: str = "numba", check: bool = False):
    """The serving loop through ``Drafter``; ``check``: the tries' integrity as requests end."""
    drafter = ns.Drafter(config=cfg, backend=backend)
    queue, running, steps, drafts_log = list(rows), [], {}, []
    by_id = {r["id"]: r for r in rows}
    while queue or running:
        while queue and len(running) < concurrency:
            row = queue.pop(0)
            steps[row["id"]] = []
            if len(row["output_ids"]) > 1:
                drafter.add_request(row["id"], row["prompt_ids"], row["output_ids"][0])
                running.append(row["id"])
        if not running:
            continue
        drafts = drafter.propose(running)
        drafts_log.append(drafts.tokens.copy())
        emitted = {}
        for b, rid in enumerate(running):
            out = by_id[rid]["output_ids"]
            done = len(drafter.output(rid))
            pred = recorded_argmax(drafts, b, out, done)[None]
            one = ns.DraftBatch(drafts.tokens[b:b + 1].copy(), drafts.mask[b:b + 1].copy(),
                                drafts.num_drafts[b:b + 1].copy())
            emitted[rid] = ns.verify_greedy(one, pred).emitted[0][:len(out) - done]
        drafter.accept(emitted)
        for rid in list(running):
            steps[rid].append(len(emitted[rid]))
            if len(drafter.output(rid)) == len(by_id[rid]["output_ids"]):
                assert_array_equal(drafter.output(rid), by_id[rid]["output_ids"])
                assert drafter.steps(rid) == steps[rid]
                own = drafter._local[drafter._slot[rid]]
                if check and own is not None:
                    own.check_integrity()
                drafter.finish(rid)
                running.remove(rid)
    assert drafter.requests == [] and drafter.pending == []
    if check:
        drafter.cache.check_integrity()
    return steps, drafts_log


# --- vLLM's n-gram proposer (profile vllm-0.33) ---------------------------------------------

#: Token ids the lookup tests draw from: a few values (n-grams repeat), int32's largest among them.
LOOKUP_IDS = st.lists(st.sampled_from([0, 1, 2, 3, 7, 151_935, 2**31 - 1]), min_size=1,
                      max_size=4, unique=True)


@st.composite
def lookup_cases(draw, max_len: int = 40):
    """``(context, min_n, max_n, k)`` as vLLM takes them: ``1 <= min_n <= max_n``, ``k >= 1``,
    the context over 1 to 4 distinct ids (any length from 0, shorter than ``min_n`` too)."""
    ids = draw(LOOKUP_IDS)
    context = draw(st.lists(st.sampled_from(ids), max_size=max_len))
    min_n = draw(st.integers(1, 6))
    max_n = draw(st.integers(min_n, min_n + draw(st.sampled_from([0, 1, 3, 8]))))
    return context, min_n, max_n, draw(st.integers(1, 9))


@st.composite
def lookup_streams(draw, max_requests: int = 6):
    """Recorded streams for vLLM's proposer: 1..``max_requests`` requests over a few ids, the
    outputs at least 2 tokens long in one request (a verify step to simulate)."""
    ids = draw(LOOKUP_IDS)
    tok = st.sampled_from(ids)
    n = draw(st.integers(1, max_requests))
    rows = [{"id": f"r{i}", "prompt_ids": draw(st.lists(tok, min_size=1, max_size=30)),
             "output_ids": draw(st.lists(tok, min_size=1, max_size=40))} for i in range(n)]
    if all(len(r["output_ids"]) < 2 for r in rows):
        rows[0]["output_ids"] = rows[0]["output_ids"] + draw(st.lists(tok, min_size=1,
                                                                      max_size=8))
    return rows


#: ``(min_n, max_n, k)``: vLLM's default (5, 5, 5), min = max, k = 1, wide ranges.
LOOKUP_SETTINGS = [(5, 5, 5), (1, 1, 1), (1, 3, 4), (2, 5, 8), (3, 3, 2), (1, 8, 3)]


def compiled_lookup(context, *, min_n: int, max_n: int, k: int) -> np.ndarray:
    """``ngramspec.engine.vllm.lookup``'s draft for ``context`` (int32), in ``prompt_lookup``'s
    form."""
    from ngramspec.engine.vllm.lookup import lookup_draft

    out = np.zeros(k, np.int32)
    return out[:lookup_draft(np.asarray(context, dtype=np.int32), min_n, max_n, k, out)]


def chain_replay(propose, rows: list[dict]) -> tuple[list[list[int]], list[list[int]]]:
    """``(emitted, drafts)`` per request, by hand: the prefill emits the first output token;
    then at each step ``propose(context)`` (prompt + output so far) gives a chain, greedy
    verification accepts its longest prefix equal to the recorded next tokens and adds the
    bonus token, the step's emitted tokens cut where the recording ends."""
    emitted, drafts = [], []
    for row in rows:
        prompt, output = list(row["prompt_ids"]), list(row["output_ids"])
        seq = np.asarray(prompt + output, dtype=np.int32)
        done, em, dr = 1, [], []
        while done < len(output):
            draft = [int(t) for t in propose(seq[:len(prompt) + done])]
            accepted = 0
            while accepted < len(draft) and done + accepted < len(output) \
                    and draft[accepted] == output[done + accepted]:
                accepted += 1
            step = min(accepted + 1, len(output) - done)
            em.append(step)
            dr.append(len(draft))
            done += step
        emitted.append(em)
        drafts.append(dr)
    return emitted, drafts
