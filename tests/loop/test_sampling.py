"""Sampled verification (SGLang's target-only tree rule) and the claim behind replaying
sampled streams: accept lengths from exact-match replay of streams sampled from the target
have the same distribution as running the sampling rule in the loop.

Statistical tests use fixed seeds and Pearson's chi-square test (goodness of fit against
analytic probabilities, or homogeneity of two samples) with the p-value threshold ALPHA below;
the chi-square survival function is computed here (no SciPy needed) and checked against its
closed form.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from numpy.testing import assert_array_equal

import ngramspec as ns

ALPHA = 0.01  # a fixed-seed test passes when p >= ALPHA (and a lossy rule is caught: p < ALPHA)


# --- chi-square ---------------------------------------------------------------------------


def chi2_sf(x: float, dof: int) -> float:
    """P(X >= x) for X ~ chi-square(dof): the regularized upper incomplete gamma Q(dof/2, x/2),
    by its power series below a + 1 and its continued fraction above."""
    a, z = dof / 2.0, x / 2.0
    if z <= 0:
        return 1.0
    log_front = -z + a * math.log(z) - math.lgamma(a)
    if z < a + 1:
        term = total = 1.0 / a
        k = 0
        while abs(term) > abs(total) * 1e-16:
            k += 1
            term *= z / (a + k)
            total += term
        return max(0.0, 1.0 - total * math.exp(log_front))
    tiny = 1e-300
    b = z + 1 - a
    c, d = 1 / tiny, 1 / b
    h = d
    for i in range(1, 10_000):
        an = -i * (i - a)
        b += 2
        d = an * d + b
        d = tiny if abs(d) < tiny else d
        c = b + an / c
        c = tiny if abs(c) < tiny else c
        d = 1 / d
        h *= d * c
        if abs(d * c - 1) < 1e-16:
            break
    return math.exp(log_front) * h


def test_chi2_sf_against_its_closed_form():
    # Even dof 2m: Q(m, z) = exp(-z) * sum_{i<m} z^i / i!
    for m in (1, 2, 3, 7):
        for x in (0.3, 2.0, 5.5, 11.0, 30.0):
            z = x / 2
            want = math.exp(-z) * sum(z ** i / math.factorial(i) for i in range(m))
            assert chi2_sf(x, 2 * m) == pytest.approx(want, rel=1e-10)
    # dof 1: P(|N(0,1)| >= sqrt(x)) = erfc(sqrt(x / 2))
    for x in (0.1, 1.0, 3.84, 9.0):
        assert chi2_sf(x, 1) == pytest.approx(math.erfc(math.sqrt(x / 2)), rel=1e-10)


def gof_pvalue(counts, probs) -> float:
    """Pearson's goodness of fit of observed counts against probabilities (cells with
    probability 0 must be empty)."""
    counts, probs = np.asarray(counts, float), np.asarray(probs, float)
    assert (counts[probs == 0] == 0).all(), "an impossible outcome happened"
    keep = probs > 0
    e = counts.sum() * probs[keep]
    stat = float(((counts[keep] - e) ** 2 / e).sum())
    return chi2_sf(stat, int(keep.sum()) - 1)


def homogeneity_pvalue(a, b, *, min_expected: float = 5.0) -> float:
    """Pearson's chi-square test that two samples of integers share one distribution; bins
    are merged from the top until every expected count is >= min_expected."""
    a, b = np.asarray(a), np.asarray(b)
    lo, hi = min(a.min(), b.min()), max(a.max(), b.max())
    ca = np.bincount(a - lo, minlength=hi - lo + 1).astype(float)
    cb = np.bincount(b - lo, minlength=hi - lo + 1).astype(float)
    bins = []
    cur = np.zeros(2)
    for x, y in zip(ca, cb):  # merge adjacent values until both expectations are large
        cur += (x, y)
        tot = cur.sum()
        if tot * min(a.size, b.size) / (a.size + b.size) >= min_expected:
            bins.append(cur)
            cur = np.zeros(2)
    if cur.sum():
        if bins:
            bins[-1] = bins[-1] + cur
        else:
            bins.append(cur)
    table = np.array(bins).T  # 2 x K
    rows, cols, n = table.sum(axis=1), table.sum(axis=0), table.sum()
    e = np.outer(rows, cols) / n
    stat = float(((table - e) ** 2 / e).sum())
    return chi2_sf(stat, table.shape[1] - 1)


# --- trees and a known target -------------------------------------------------------------


def tree(tokens, parents) -> ns.DraftBatch:
    """A one-request DraftBatch from slot tokens and parent slots (root: -1)."""
    n = len(tokens)
    mask = np.zeros((1, n, n), bool)
    for i in range(n):
        j = i
        while j != -1:
            mask[0, i, j] = True
            j = parents[j]
    real = sum(1 for t, p in zip(tokens[1:], parents[1:]) if not (t == 0 and p == 0))
    return ns.DraftBatch(np.array([tokens], np.int32), mask, np.array([real], np.int32))


V = 8


def bigram_lm() -> np.ndarray:
    """P[a, b] = probability that token b follows token a.  Token 0 (SGLang's padding) is
    never produced, so padding is never accepted and replay and rule can agree exactly."""
    p = np.zeros((V, V))
    for a in range(1, V):
        main, second = a % (V - 1) + 1, (a + 2) % (V - 1) + 1
        rest = [t for t in range(1, V) if t not in (main, second)]
        p[a, main], p[a, second] = 0.7, 0.2
        p[a, rest] = 0.1 / len(rest)
    p[0, 1:] = 1 / (V - 1)  # the distribution after a padding slot: any, but valid
    return p


P = bigram_lm()


def probs_for(d: ns.DraftBatch) -> np.ndarray:
    """target_probs of the bigram LM: the distribution after each slot's token."""
    return P[d.tokens]


# --- the rule, step by step ---------------------------------------------------------------


def test_single_step_acceptance_matches_the_analytic_probabilities():
    # root (token 4) -> children 5, 3, 7 in slot order; 5 -> 6
    d = tree([4, 5, 3, 7, 6], [-1, 0, 0, 0, 1])
    probs = probs_for(d)
    rng = np.random.default_rng(1234)
    trials = 20_000
    outcome = np.zeros(5, int)  # accepted: 5 then 6, 5 only, 3, 7, none
    first = np.zeros(V, int)
    for _ in range(trials):
        r = ns.verify_sampling(d, probs, rng=rng)
        path = r.accept_index[0, 1:r.accept_lens[0]].tolist()
        outcome[{(1, 4): 0, (1,): 1, (2,): 2, (3,): 3, (): 4}[tuple(path)]] += 1
        first[r.emitted[0][0]] += 1
    p4 = P[4]
    want = [p4[5] * P[5, 6], p4[5] * (1 - P[5, 6]), p4[3], p4[7], 1 - p4[5] - p4[3] - p4[7]]
    assert gof_pvalue(outcome, want) >= ALPHA
    # The first emitted token (accepted child, or bonus drawn without the rejected ones) is
    # distributed as the target's next token.
    assert gof_pvalue(first, p4) >= ALPHA


def test_padding_duplicates_add_their_probability_again():
    """Root children 5 then three token-0 pads: token 0 is accepted with probability
    min(p5 + 3 p0, 1) - p5, not p0 (SGLang's bias, reproduced)."""
    d = tree([2, 5, 0, 0, 0], [-1, 0, 0, 0, 0])
    assert d.num_drafts.tolist() == [1]
    p = np.full((1, 5, V), 1 / V)
    p[0, 0] = [0.15, 0.2, 0.1, 0.1, 0.1, 0.25, 0.05, 0.05]  # after the root: p0 .15, p5 .25
    rng = np.random.default_rng(99)
    counts = np.zeros(5, int)  # first accepted slot 1..4, or none
    for _ in range(20_000):
        r = ns.verify_sampling(d, p, rng=rng)
        s = int(r.accept_index[0, 1])
        counts[s - 1 if s > 0 else 4] += 1
    p0, p5 = 0.15, 0.25
    want = [p5, p0, p0, p0, 1 - p5 - 3 * p0]
    assert gof_pvalue(counts, want) >= ALPHA
    assert counts[1:4].sum() / counts.sum() > 2 * p0  # clearly more than a fresh draw's p0


def test_certain_target_and_thresholds():
    d = tree([4, 5, 3], [-1, 0, 1])
    p = np.zeros((1, 3, V))
    p[0, 0, 5] = p[0, 1, 3] = p[0, 2, 7] = 1.0
    r = ns.verify_sampling(d, p, rng=np.random.default_rng(0))
    assert_array_equal(r.accept_index, [[0, 1, 2]])
    assert r.accept_lens.tolist() == [3] and r.emitted[0].tolist() == [5, 3, 7]
    # threshold_single: a child at least this probable is accepted whatever the coin.
    q = probs_for(d)
    hits = sum(int(ns.verify_sampling(d, q, rng=np.random.default_rng(s),
                                      threshold_single=0.5).accept_lens[0]) >= 2
               for s in range(200))
    assert hits == 200  # P[4, 5] = 0.7 >= 0.5


@pytest.mark.parametrize("probs,kwargs,err,message", [
    (np.zeros((1, 3, V)), {}, ValueError, r"target_probs\[0, 0\] sums to 0, not 1"),
    (np.full((1, 2, V), 1 / V), {}, ValueError, r"shape \(batch, draft_token_num, vocab\)"),
    (np.full((3, V), 1 / V), {}, None, None),
    (np.ones((1, 3, V), int), {}, TypeError, "floating-point"),
    (np.full((1, 3, V), np.nan), {}, ValueError, "must be finite"),
    (np.tile([-0.5, 1.5] + [0.0] * (V - 2), (1, 3, 1)), {}, ValueError, "is negative"),
    (np.full((1, 3, 4), 0.25), {}, ValueError, "draft token 5 at \\[0, 1\\] is outside"),
    (np.full((1, 3, V), 1 / V), {"threshold_acc": 0}, ValueError, "threshold_acc must be"),
    (np.full((1, 3, V), 1 / V), {"threshold_single": float("nan")}, ValueError,
     "threshold_single must be"),
])
def test_bad_inputs(probs, kwargs, err, message):
    d = tree([4, 5, 3], [-1, 0, 1])
    if err is None:  # SGLang's flat (B * n, V) layout is accepted
        assert ns.verify_sampling(d, probs, rng=np.random.default_rng(0)).accept_lens[0] >= 1
        return
    with pytest.raises(err, match=message):
        ns.verify_sampling(d, probs, rng=np.random.default_rng(0), **kwargs)


def test_rng_is_required_and_checked():
    d = tree([4, 5], [-1, 0])
    with pytest.raises(TypeError, match="rng must be a numpy.random.Generator"):
        ns.verify_sampling(d, probs_for(d), rng=0)
    with pytest.raises(TypeError, match="drafts must be a DraftBatch"):
        ns.verify_sampling([[4, 5]], probs_for(d), rng=np.random.default_rng(0))


# --- the claim: replaying sampled streams -------------------------------------------------

CFG = ns.NgramConfig(draft_token_num=8, capacity=100_000)
OUT_LEN = 40


def sample_tokens(rng, last: int, count: int) -> list[int]:
    out = []
    for _ in range(count):
        last = int(rng.choice(V, p=P[last]))
        out.append(last)
    return out


def replayed_steps(requests: int, seed: int) -> list[int]:
    """Verify steps per request when streams sampled from the target are replayed by exact
    match (ns.simulate: greedy verification against the recording).  One trie per request,
    so requests are independent draws."""
    rng = np.random.default_rng(seed)
    steps = []
    for i in range(requests):
        prompt = rng.integers(1, V, size=12).tolist()
        row = {"id": i, "prompt_ids": prompt,
               "output_ids": sample_tokens(rng, prompt[-1], OUT_LEN),
               "temperature": 1.0}
        r = ns.simulate([row], config=CFG)
        assert r.decoding["kind"] == "sampled"
        steps.append(int(r.emitted[0].size))
    return steps


def sampled_loop_steps(requests: int, seed: int, **thresholds) -> list[int]:
    """Verify steps per request when the same target decodes with ns.verify_sampling in the
    loop (drafts from ns.Drafter, target probabilities of each slot from the bigram LM)."""
    rng = np.random.default_rng(seed)
    steps = []
    for i in range(requests):
        prompt = rng.integers(1, V, size=12).tolist()
        drafter = ns.Drafter(config=CFG)
        drafter.add_request(i, prompt, sample_tokens(rng, prompt[-1], 1)[0])
        n = 0
        while drafter.output(i).size < OUT_LEN:
            d = drafter.propose([i])
            r = ns.verify_sampling(d, probs_for(d), rng=rng, **thresholds)
            drafter.accept({i: r.emitted[0][:OUT_LEN - drafter.output(i).size]})
            n += 1
        steps.append(n)
    return steps


@pytest.fixture(scope="module")
def replayed():
    return replayed_steps(500, seed=2026)


@pytest.mark.slow
def test_replaying_sampled_streams_gives_the_accept_length_distribution(replayed):
    loop = sampled_loop_steps(500, seed=7)
    assert np.mean(replayed) < OUT_LEN - 1  # the drafts are used: fewer steps than tokens
    assert homogeneity_pvalue(replayed, loop) >= ALPHA


@pytest.mark.slow
def test_the_test_catches_a_lossy_rule(replayed):
    """The same comparison against threshold_acc = 0.5 (accepts more than the target would):
    rejected, so the test above has power."""
    lossy = sampled_loop_steps(500, seed=7, threshold_acc=0.5)
    assert homogeneity_pvalue(replayed, lossy) < ALPHA


# --- sampling metadata of streams ---------------------------------------------------------


@pytest.mark.parametrize("field,value,message", [
    ("temperature", -0.5, "'temperature' must be >= 0"),
    ("temperature", "hot", "'temperature' must be a finite number or null"),
    ("temperature", float("nan"), "'temperature' must be a finite number or null"),
    ("top_p", 0.0, "'top_p' must be in (0, 1]"),
    ("top_p", 1.5, "'top_p' must be in (0, 1]"),
    ("top_k", 2.5, "'top_k' must be an integer >= 1, or -1 or 0"),
    ("top_k", -2, "'top_k' must be an integer >= 1, or -1 or 0"),
])
def test_bad_sampling_metadata_is_named(field, value, message):
    row = {"id": 1, "prompt_ids": [1], "output_ids": [2, 3], field: value}
    with pytest.raises(ns.StreamError) as e:
        ns.read_streams([row])
    assert message in str(e.value) and str(e.value).startswith("record 0")


def test_simulate_says_greedy_sampled_or_mixed(capsys):
    from ngramspec.cli import main
    base = {"prompt_ids": [1, 2, 3], "output_ids": [1, 2, 3, 1, 2]}
    rows = [dict(base, id=0), dict(base, id=1, temperature=0.0),
            dict(base, id=2, temperature=0.7, top_p=0.9, top_k=None)]
    assert ns.simulate(rows[:2]).decoding["kind"] == "greedy"
    assert ns.simulate(rows[2:]).decoding == {"kind": "sampled", "greedy": 0, "sampled": 1,
                                             "settings": [{"temperature": 0.7, "top_p": 0.9,
                                                           "top_k": None}]}
    r = ns.simulate(rows)
    assert r.decoding["kind"] == "mixed" and r.to_dict()["summary"]["decoding"] == "mixed"
    import tempfile, os
    from ngramspec.streams import write_streams
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "s.jsonl")
        write_streams(rows[2:], path)
        assert main(["simulate", path, "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "decoding: sampled (temperature=0.7 top_p=0.9)" in out
