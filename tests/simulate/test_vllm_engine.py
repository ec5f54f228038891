"""vLLM's pricing (engine "vllm"), ngramspec's chains (chain=True) and the command line for
vLLM: every figure recomputed here by hand, every refusal named."""

from __future__ import annotations

import json

import numpy as np
import pytest
from numpy.testing import assert_array_equal

import ngramspec as ns
from ngramspec.config.vllm import launch_line, speculative_config
from ngramspec.costs import CostModel, CostTable, predict_serving, schedule
from ngramspec.costs.serving import _starts
from ngramspec.reference.lookup import verify_chain

from cli_helpers import run as run_cli

STEP_MS, TOKEN_MS = 12.0, 0.1


@pytest.fixture(scope="module")
def streams():
    return ns.read_streams(ns.streams.embedded_streams_path())[:40]


def _by_hand(result, step_ms: float, token_ms: float, draft_ms: float) -> float:
    """vLLM's rule written out: requests admitted in order as others finish; a step of b
    requests schedules sum(1 + draft) tokens and costs step_ms + token_ms * tokens."""
    steps = np.array([e.size for e in result.emitted])
    start = _starts(steps, result.concurrency)
    total = int((start + steps).max())
    tokens = np.zeros(total)
    for r, (s0, d) in enumerate(zip(start, result.drafts)):
        for i, n in enumerate(d):
            tokens[s0 + i] += 1 + int(n)
    return float(sum(step_ms + token_ms * t + draft_ms for t in tokens))


@pytest.mark.parametrize("concurrency", [1, 4, 16])
@pytest.mark.parametrize("chain", [False, True])
def test_vllm_pricing_equals_a_recomputation_by_hand(streams, concurrency, chain):
    cfg = (ns.NgramConfig.recommended(chain=True, draft_token_num=6) if chain else
           ns.NgramConfig(profile="vllm-0.33", prompt_lookup_min=2, prompt_lookup_max=4,
                          num_speculative_tokens=5))
    r = ns.simulate(streams, config=cfg, concurrency=concurrency, step_api_steps=0)
    cost = CostModel(step_ms=STEP_MS, token_ms=TOKEN_MS)
    p = predict_serving(r, cost, engine="vllm", draft_ms=0.25)
    assert p.speculative_ms == pytest.approx(_by_hand(r, STEP_MS, TOKEN_MS, 0.25), rel=1e-12)
    # a table read at the mean tokens per request: the same for a table measured from the model
    table = CostTable.from_model(cost, max_batch=concurrency, max_tokens=6)
    assert predict_serving(r, table, engine="vllm", draft_ms=0.25).speculative_ms == \
        pytest.approx(p.speculative_ms, rel=1e-12)


def test_a_fractional_token_count_is_read_between_the_measured_ones():
    t = CostTable([(2, 1, 10.0), (2, 2, 14.0), (2, 4, 30.0)])
    assert t.ms_array(np.array([2, 2]), np.array([1.5, 3.0])).tolist() == [12.0, 22.0]


def test_vllm_steps_send_each_requests_own_tokens():
    rows = [{"id": 0, "prompt_ids": [1, 2, 3, 1, 2, 3, 1, 2], "output_ids": [3, 1, 2, 3, 9, 9]},
            {"id": 1, "prompt_ids": [7, 8], "output_ids": [5, 6, 7, 8, 4]}]
    cfg = ns.NgramConfig(profile="vllm-0.33", prompt_lookup_min=1, prompt_lookup_max=2,
                         num_speculative_tokens=3)
    r = ns.simulate(rows, config=cfg, concurrency=2)
    # Request 0: context ..1 2 3 (first output 3): the suffix "2 3" first occurs at 1, so
    # the draft is 1 2 3 (all accepted) + bonus 9; then context ends "3 9": "9" never
    # occurred before, nothing to draft: one token.  Request 1: 7 8 5 has no earlier "5"
    # or "8 5"; 7 8 5 6 likewise; then "...5 6 7": "7" occurred at 0, draft 8 5 6, the
    # recording goes on 8 4: one accepted, the bonus 4 ends it.
    assert [e.tolist() for e in r.emitted] == [[4, 1], [1, 1, 2]]
    assert [d.tolist() for d in r.drafts] == [[3, 0], [0, 0, 3]]
    s = schedule(r, engine="vllm")
    # step 0: (1+3) + (1+0) over 2 requests; step 1: (1+0) + (1+0); step 2: 1+3 alone
    assert s.tokens.tolist() == [2.5, 1.0, 4.0] and s.batch.tolist() == [2, 2, 1]


def test_chain_simulation_is_a_drafter_loop_verifying_chains(streams):
    cfg = ns.NgramConfig.recommended(chain=True, draft_token_num=5)
    r = ns.simulate(streams[:12], config=cfg, concurrency=3, step_api_steps=0)
    # The same loop written out with the public calls, one request at a time in the
    # admission order of concurrency 3 (the drafter's state is shared, so replay it in step).
    d = ns.Drafter(config=cfg)
    outs = [np.asarray(s["output_ids"]) for s in streams[:12]]
    done, emitted = {}, {i: [] for i in range(12)}
    running, nxt = [], 0
    while nxt < 12 or running:
        while nxt < 12 and len(running) < 3:
            done[nxt] = 1
            if outs[nxt].size > 1:
                d.add_request(nxt, streams[nxt]["prompt_ids"], int(outs[nxt][0]))
                running.append(nxt)
            nxt += 1
        if not running:
            continue
        batch = d.propose(running)
        assert (batch.depth[:, 1:] <= np.arange(1, batch.draft_token_num)).all()
        step = {}
        for b, i in enumerate(running):
            chain = batch.chain()[b]
            assert_array_equal(chain, batch.tokens[b, 1:1 + batch.num_drafts[b]])
            rec = outs[i][done[i]:]
            e = min(verify_chain(chain, rec), rec.size)
            emitted[i].append(e)
            bonus = rec[e - 1] if verify_chain(chain, rec) <= rec.size else 0
            step[i] = np.append(chain[:verify_chain(chain, rec) - 1], bonus)
        d.accept(step, max_tokens=[outs[i].size - done[i] for i in running])
        for i in running:
            done[i] += emitted[i][-1]
            if done[i] == outs[i].size:
                d.finish(i)
        running = [i for i in running if done[i] < outs[i].size]
    assert [e.tolist() for e in r.emitted] == [emitted[i] for i in range(12)]


def test_chains_follow_the_most_probable_path_not_the_biggest_branch():
    # root 5; slot 1 (p .9) has no child; slot 2 (p .3) has children 3 (p .2) and 4 (p .1).
    # Sizes choose slot 2's branch; expected accepted tokens choose slot 1 (.9 > .3 + .2).
    tokens = np.array([[5, 10, 20, 21, 22]], np.int32)
    mask = np.array([[[1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [1, 0, 1, 0, 0], [1, 0, 1, 1, 0],
                      [1, 0, 1, 0, 1]]], bool)
    probs = np.array([[1.0, 0.9, 0.3, 0.2, 0.1]])
    with_p = ns.DraftBatch(tokens, mask, np.array([4], np.int32), probs)
    without = ns.DraftBatch(tokens, mask, np.array([4], np.int32))
    assert [c.tolist() for c in with_p.chain()] == [[10]]
    assert [c.tolist() for c in without.chain()] == [[20, 21]]
    c = with_p.chains()
    assert c.num_drafts.tolist() == [1] and c.tokens.tolist() == [[5, 10, 0, 0, 0]]
    assert c.probs.tolist() == [[1.0, 0.9, 0.0, 0.0, 0.0]]
    assert c.parents.tolist() == [[-1, 0, 0, 0, 0]]


def test_vllm_profile_settings_are_checked_as_vllm_checks_them():
    cfg = ns.NgramConfig(profile="vllm-0.33", prompt_lookup_max=3)
    assert (cfg.prompt_lookup_min, cfg.prompt_lookup_max, cfg.draft_token_num) == (3, 3, 6)
    assert cfg.replace(num_speculative_tokens=2).draft_token_num == 3
    assert not cfg.sglang_exact and cfg.chains
    for kw, words in ((dict(prompt_lookup_min=4, prompt_lookup_max=2), "must be <="),
                      (dict(num_speculative_tokens=0), "num_speculative_tokens must be"),
                      (dict(match_type="PROB"), "options of SGLang's profiles"),
                      (dict(chain=True), "options beyond SGLang exist for profile"),
                      (dict(draft_token_num=3), "num_speculative_tokens \\+ 1")):
        with pytest.raises(ValueError, match=words):
            ns.NgramConfig(profile="vllm-0.33", **kw)
    with pytest.raises(ValueError, match="prompt_lookup_min is an option of profile 'vllm"):
        ns.NgramConfig(prompt_lookup_min=2)
    with pytest.raises(ValueError, match="has no trie"):
        ns.NgramCache(config=cfg)
    with pytest.raises(ValueError, match="simulate_stream replays SGLang's compiled loop"):
        ns.simulate_stream([], config=cfg)
    assert ns.NgramConfig.from_toml(cfg.to_toml()) == cfg


def test_speculative_config_and_launch_line():
    v = ns.NgramConfig(profile="vllm-0.33", prompt_lookup_min=2, prompt_lookup_max=4,
                       num_speculative_tokens=6)
    assert speculative_config(v) == {"method": "ngram", "num_speculative_tokens": 6,
                                     "prompt_lookup_min": 2, "prompt_lookup_max": 4}
    ours = ns.NgramConfig.recommended(chain=True, draft_token_num=5)
    assert speculative_config(ours) == {"method": "custom_class",
                                        "model": "ngramspec.integrations.vllm.Proposer",
                                        "num_speculative_tokens": 4}
    line = launch_line(ours)
    assert line.startswith("NGRAMSPEC_VLLM_CONFIG=") and "vllm serve MODEL" in line
    with pytest.raises(ValueError, match="vLLM verifies chains only"):
        speculative_config(ns.NgramConfig.recommended())


def test_sweep_best_as_vllm_prints_the_winners_speculative_config(tmp_path):
    out = tmp_path / "best.json"
    code, text = run_cli(["sweep", "--profile", "vllm-0.33", "--num-speculative-tokens",
                          "2,4", "--engine", "vllm", "--step-ms", "12", "--token-ms", "0.1",
                          "--limit", "20", "--best-as", "vllm", "--best-out", str(out)])
    assert code == 0, text
    written = json.loads(out.read_text())
    assert written["method"] == "ngram" and "vllm serve MODEL --speculative-config" in text
    # the winner is the argmax of the predictions, recomputed here
    rows = ns.read_streams(ns.streams.embedded_streams_path())[:20]
    ups = {k: predict_serving(ns.simulate(rows, config=ns.NgramConfig(
        profile="vllm-0.33", num_speculative_tokens=k)), CostModel(step_ms=12, token_ms=0.1),
        engine="vllm").speed_up for k in (2, 4)}
    assert written["num_speculative_tokens"] == max(ups, key=ups.get)


def test_engine_vllm_refuses_trees_and_best_as_vllm_needs_it(capsys):
    for argv, words in ((["simulate", "--engine", "vllm"], "verifies chains only"),
                        (["sweep", "--profile", "vllm-0.33", "--best-as", "vllm"],
                         "add --engine vllm"),
                        (["simulate", "--profile", "vllm-0.33", "--engine", "sglang"],
                         "price it with engine 'vllm'")):
        code, _ = run_cli(argv + ["--step-ms", "12", "--token-ms", "0.1", "--limit", "3"])
        err = capsys.readouterr().err
        assert code == 2 and words in err and "Traceback" not in err


def test_best_as_vllm_gives_k_per_batch_size_at_several_concurrencies(tmp_path):
    out = tmp_path / "best.json"
    code, text = run_cli(["sweep", "--profile", "vllm-0.33", "--num-speculative-tokens",
                          "2,7", "--prompt-lookup-min", "2", "--prompt-lookup-max", "5",
                          "--engine", "vllm", "--step-ms", "12", "--token-ms", "0.5",
                          "--concurrency", "1,8,32", "--limit", "40", "--best-as", "vllm",
                          "--best-out", str(out)])
    assert code == 0, text
    written = json.loads(out.read_text())
    rows = ns.read_streams(ns.streams.embedded_streams_path())[:40]
    cost = CostModel(step_ms=12, token_ms=0.5)
    best = {}
    for c in (1, 8, 32):
        ups = {k: predict_serving(ns.simulate(rows, config=ns.NgramConfig(
            profile="vllm-0.33", prompt_lookup_min=2, prompt_lookup_max=5,
            num_speculative_tokens=k), concurrency=c), cost, engine="vllm").speed_up
            for k in (2, 7)}
        k = max(ups, key=ups.get)
        best[c] = k if ups[k] > 1 else 0
    assert len(set(best.values())) > 1  # these streams and costs: k changes with the load
    from ngramspec.config.vllm import batch_schedule

    assert written["num_speculative_tokens_per_batch_size"] == batch_schedule(best)
    assert written["num_speculative_tokens"] == max(best.values())


def test_check_refuses_vllms_pricing_before_loading_anything():
    from ngramspec.measure.check import check_against_model

    table = CostTable([(1, 1, 10.0), (1, 8, 14.0)])
    with pytest.raises(ValueError, match="engine 'vllm': check decodes in its own loop"):
        check_against_model("no/such/model", [], cost_table=table, engine="vllm")
