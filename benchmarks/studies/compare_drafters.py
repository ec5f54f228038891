"""Drafters side by side on the recorded streams: SGLang's defaults, prompt lookup, Arctic.

Every drafter is replayed through the same greedy serving loop at concurrency 1
(``benchmarks/peers/replay.py``) on the 133 streams shipped with ngramspec, in one run:

- ``SGLang BFS`` / ``SGLang PROB``: ngramspec's ``Drafter`` at SGLang 0.5.23's server defaults
  (bit-exact with SGLang's C++ core; the replay is also checked step by step against
  ``ns.simulate``).  SGLang sends ``draft_token_num - 1 = 11`` nodes every step, token-0
  padding included; the padding is verified like any node, so the full tree is used.
- ``SGLang BFS, its C++ core``: SGLang 0.5.23's C++ core itself (built from its wheel), driven
  the same way; its drafting time is the wall time inside its C match and insert calls on
  inputs packed beforehand (so it excludes any Python), reported for the whole corpus only.
- ``prompt lookup``: vLLM's n-gram proposer rule (longest of the last 3/2/1 tokens found
  earlier in prompt + output, its EARLIEST occurrence, the next 8 tokens as a chain); and the
  same with the most recent occurrence (``prompt lookup (latest)``).
- ``ngramspec ...``: ngramspec's options beyond SGLang (``NgramConfig``; ``recommended()`` =
  index_prompt + local_index + exact_counts + ADAPTIVE with min_token_prob 0.5,
  max_spec_factor 1, shared_pseudo_count 2, max_trie_depth 24 and draft_token_num 16, tuned
  on the tuning part), sending only real drafts.  An ADAPTIVE drafter that drafts nothing on a
  step lets it run as a plain decode (``verify_share`` in the cost model).
- ``Arctic``: ArcticInference 0.3.0 suffix decoding (``SuffixDecodingCache``, tree drafts,
  ``max_spec_tokens=11``, ``max_spec_factor=4``, ``min_token_prob=0.1``, max tree depth 64;
  prompt in the request's local tree, responses in the global tree), built from its sdist at
  benchmark time (``benchmarks/peers/arctic.py``); skipped with a note if it cannot be built.

Columns (pooled over all verify steps of the group's requests):

- tokens/step: emitted tokens (accepted drafts + bonus) / verify steps;
- sent/step: draft tree nodes sent to the target per step (padding included);
- real/step: real draft tokens per step (padding excluded; equal to sent for the peers);
- with draft: share of steps with at least one real draft;
- draft µs/step: thread CPU time of the drafter (admission, propose, update after accept,
  finish) / verify steps, in this process (noisy on shared machines);
- speed-up: predicted decode speed with speculation over speed without, under the seed's cost
  model (``ns.CostModel``): without speculation a request emits 1 token per ``decode_ms``
  (12.2 ms); with it, ``tokens/step`` tokens per ``verify_ms + draft_ms`` (30 ms + the
  drafting time per step), so ``speed-up = tokens/step * decode_ms / (verify_ms + draft_ms)``.
  The verify cost is taken as independent of the tree size; below 1.0 speculation slows
  decoding down (break-even at 30 / 12.2 = 2.46 tokens/step without drafting time).

Parts (``--parts``, default ``tune,holdout``): the fixed split of ``ngramspec.sweep.split`` (by
conversation, per task); each part is replayed on its own from empty caches, so the hold-out
figures come from traffic that no tuning step read (``all``: the 133 streams in one replay).
After the tables, every ngramspec drafter is set against Arctic's curve over
``max_spec_tokens`` (:mod:`benchmarks.peers.protocol`): its tokens/step over Arctic's at the same
real drafts per step, interpolated, never past Arctic's widest point (``-`` there).

    python -m benchmarks.studies.compare_drafters                   # all peers, tune and hold-out
    python -m benchmarks.studies.compare_drafters --parts all       # the 133 streams in one replay
    python -m benchmarks.studies.compare_drafters --no-arctic --json out.json
    python -m benchmarks.studies.compare_drafters --repeat 5 --only "C++,recommended()"  # CPU medians
"""

from __future__ import annotations

import argparse
import json
import platform
from datetime import date
from pathlib import Path

import numpy as np

import ngramspec as ns

from benchmarks.common import load_rows
from benchmarks.peers import protocol as H
from benchmarks.peers import replay as dr

#: (label, proposer name, settings).
PEERS = [
    ("SGLang BFS (defaults)", "ngramspec", dict(match_type="BFS")),
    ("SGLang PROB", "ngramspec", dict(match_type="PROB")),
    ("SGLang BFS, its C++ core (µs: C calls only)", "sglang_cpp", dict(match_type="BFS")),
    ("prompt lookup (vLLM, earliest)", "prompt_lookup", dict(occurrence="earliest")),
    ("prompt lookup (latest)", "prompt_lookup", dict(occurrence="latest")),
    ("Arctic suffix decoding", "arctic", {}),
    # ngramspec's options beyond SGLang (real drafts sent, no padding).
    ("ngramspec BFS + index_prompt", "ngramspec",
     dict(match_type="BFS", index_prompt=True, send="real")),
    ("ngramspec PROB + index_prompt + exact_counts", "ngramspec",
     dict(match_type="PROB", index_prompt=True, exact_counts=True, send="real")),
    ("ngramspec ADAPTIVE, shared trie only", "ngramspec",
     dict(match_type="ADAPTIVE", index_prompt=True, exact_counts=True, min_token_prob=0.18,
          max_spec_factor=4.0, max_trie_depth=24, send="real")),
    ("ngramspec recommended()", "ngramspec", dict(recommended=True, send="real")),
    ("ngramspec recommended(), shared_pseudo_count=0", "ngramspec",
     dict(recommended=True, shared_pseudo_count=0.0, send="real")),
    ("ngramspec recommended() before issue 18 (min_token_prob 0.18, factor 4)", "ngramspec",
     dict(recommended=True, min_token_prob=0.18, max_spec_factor=4.0, shared_pseudo_count=0.0,
          draft_token_num=12, send="real")),
    ("ngramspec recommended(), draft only when E[accept] >= 2.46", "ngramspec",
     dict(recommended=True, min_expected_accept=2.46, send="real")),
    ("ngramspec recommended(), draft only when E[accept] >= 4", "ngramspec",
     dict(recommended=True, min_expected_accept=4.0, send="real")),
]

#: SGLang's C++ core on these 133 streams (concurrency 1): tokens per verify step.
SGLANG_EXPECTED = {"BFS": 1.72, "PROB": 1.65}


def _check_sglang(stats, rows, match_type: str) -> None:
    """The ngramspec Drafter replay must equal ns.simulate step by step, and give SGLang's
    pooled figure on the whole corpus."""
    sim = ns.simulate(rows, config=ns.NgramConfig(match_type=match_type))
    for s, em, drafts in zip(stats, sim.emitted, sim.drafts):
        if not (np.array_equal(s.emitted, em) and np.array_equal(s.real, drafts)):
            raise AssertionError(f"SGLang {match_type}: replay differs from ns.simulate on "
                                 f"request {s.id!r}")
    if len(rows) == 133:
        tps = dr.pool(stats).tokens_per_step
        assert round(tps, 2) == SGLANG_EXPECTED[match_type], (
            f"SGLang {match_type}: {tps:.4f} tokens/step, expected {SGLANG_EXPECTED[match_type]}")


def _median_run(runs: list, name: str) -> tuple:
    """The replay whose overall drafting time is the median of ``runs`` (the drafts and
    tokens of all of them equal)."""
    first = runs[0][1]
    for _, stats in runs[1:]:
        for a, b in zip(first, stats):
            if not (np.array_equal(a.emitted, b.emitted) and np.array_equal(a.real, b.real)):
                raise AssertionError(f"{name}: two replays of request {a.id!r} differ")

    def cost(run) -> float:
        proposer, stats = run
        return proposer.c_ns if name == "sglang_cpp" else sum(s.draft_ns for s in stats)

    ranked = sorted(runs, key=cost)
    return ranked[(len(ranked) - 1) // 2]


def run(rows, *, arctic: bool = True, decode_ms: float = 12.2, verify_ms: float = 30.0,
        check: bool = True, repeat: int = 1, only: list[str] | None = None) -> dict:
    """Every peer of :data:`PEERS` (those whose label contains one of ``only``, if given) on
    ``rows``; drafting µs per step are the median of ``repeat`` replays (the drafts of every
    replay are checked equal to the first's)."""
    model = ns.CostModel(decode_ms=decode_ms, verify_ms=verify_ms)
    results, notes = {}, []
    for label, name, settings in PEERS:
        if (name == "arctic" and not arctic) or (only and not any(o in label for o in only)):
            continue
        try:
            dr.replay(dr.make_proposer(name, **settings), rows[:2])   # warm-up (compile, build)
            runs = []
            for _ in range(max(1, repeat)):
                proposer = dr.make_proposer(name, **settings)
                runs.append((proposer, dr.replay(proposer, rows)))
        except Exception as exc:  # only the peer builds may be unavailable here
            if name not in ("arctic", "sglang_cpp"):
                raise
            notes.append(f"{label}: skipped ({type(exc).__name__}: {str(exc).splitlines()[0]})")
            continue
        proposer, stats = _median_run(runs, name)
        if check and name == "ngramspec" and set(settings) == {"match_type"}:
            _check_sglang(stats, rows, settings["match_type"])
        # A drafter that may send nothing runs those steps as plain decodes (ADAPTIVE);
        # SGLang's modes and the peers verify every step.
        adaptive = settings.get("recommended") or settings.get("match_type") == "ADAPTIVE"
        groups = {}
        for g, s in dr.pool_by(stats).items():
            d = s.to_dict()
            if name == "sglang_cpp":  # its own clock: wall time inside the C calls only
                d["draft_us_per_step"] = proposer.c_ns / 1e3 / dr.pool(stats).steps \
                    if g == "overall" else float("nan")
                if len(rows) == 133 and g == "overall":
                    assert round(s.tokens_per_step, 2) == SGLANG_EXPECTED["BFS"]
            d["speedup"] = model.predict(
                s.tokens_per_step, draft_ms=s.draft_us_per_step / 1e3,
                verify_share=s.share_steps_with_draft if adaptive else 1.0).speedup
            groups[g] = d
        results[label] = {"proposer": name, "settings": settings, "groups": groups}
    return {"cost_model": {"decode_ms": decode_ms, "verify_ms": verify_ms},
            "requests": len(rows), "results": results, "notes": notes}


def table(out: dict, group: str) -> str:
    lines = [f"### {group}", "",
             "| drafter | tokens/step | sent/step | real/step | with draft | draft µs/step "
             "| speed-up |", "|---|---:|---:|---:|---:|---:|---:|"]
    for label, r in out["results"].items():
        g = r["groups"].get(group)
        if g is None:
            continue
        lines.append(f"| {label} | {g['tokens_per_step']:.2f} | {g['sent_per_step']:.1f} | "
                     f"{g['real_per_step']:.1f} | {g['share_steps_with_draft']:.0%} | "
                     f"{g['draft_us_per_step']:.0f} | {g['speedup']:.2f} |")
    return "\n".join(lines)


def ratio_table(outs: dict[str, dict], curves: dict[str, dict]) -> str:
    """Every ngramspec drafter against Arctic at its own drafts/step, per part and group."""
    parts = list(outs)
    groups = list(next(iter(curves.values())))
    lines = ["| drafter | part | " + " | ".join(groups) + " |",
             "|---|---|" + "---:|" * len(groups)]
    for label, r in next(iter(outs.values()))["results"].items():
        if r["proposer"] != "ngramspec" or "send" not in r["settings"]:
            continue
        for part in parts:
            cells = []
            for g in groups:
                f = outs[part]["results"][label]["groups"][g]
                ref = H.at_width(curves[part][g], f["real_per_step"])
                cells.append("-" if ref != ref else f"{f['tokens_per_step'] / ref:.3f}")
            lines.append(f"| {label} | {part} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=None,
                        help="replay only the first N streams of each part (default: all)")
    parser.add_argument("--parts", default="tune,holdout",
                        help="comma-separated parts: tune, holdout, all (default tune,holdout)")
    parser.add_argument("--no-arctic", action="store_true", help="skip the Arctic peer")
    parser.add_argument("--repeat", type=int, default=1,
                        help="replays per drafter; µs/step from the median one (default 1)")
    parser.add_argument("--only", metavar="TEXT[,TEXT]",
                        help="only the drafters whose label contains one of these")
    parser.add_argument("--no-check", action="store_true",
                        help="skip the check of the SGLang replays against ns.simulate")
    parser.add_argument("--decode-ms", type=float, default=12.2)
    parser.add_argument("--verify-ms", type=float, default=30.0)
    parser.add_argument("--json", metavar="PATH", help="also write the figures as JSON")
    args = parser.parse_args()
    names = [p.strip() for p in args.parts.split(",") if p.strip()]
    bad = [p for p in names if p not in ("tune", "holdout", "all")]
    if bad or not names:
        parser.error(f"--parts takes tune, holdout and all, got {args.parts!r}")
    all_rows = load_rows()
    split = H.load_parts(all_rows)
    parts = {p: (all_rows if p == "all" else split[p])[:args.limit] for p in names}
    outs, curves = {}, {}
    for part, rows in parts.items():
        out = run(rows, arctic=not args.no_arctic, decode_ms=args.decode_ms,
                  verify_ms=args.verify_ms, check=not args.no_check, repeat=args.repeat,
                  only=args.only.split(",") if args.only else None)
        outs[part] = out
        groups = list(next(iter(out["results"].values()))["groups"]) if out["results"] else []
        print(f"# Drafters on part {part!r} ({len(rows)} recorded streams) | concurrency 1, "
              f"greedy replay | {platform.machine()}, {date.today().isoformat()} | cost model: "
              f"decode {args.decode_ms} ms, verify {args.verify_ms} ms per step\n")
        for g in ["overall"] + [g for g in groups if g != "overall"]:
            print(table(out, g) + "\n")
        for note in out["notes"]:
            print(f"note: {note}")
        if any(r["proposer"] == "arctic" for r in out["results"].values()):
            curves[part] = H.arctic_curve(rows)
    if curves:
        widths = list(H.ARCTIC_WIDTHS)
        print("### Arctic's curve: tokens/step @ drafts/step per max_spec_tokens\n")
        print(H.curve_table(curves, widths) + "\n")
        print("### ngramspec / Arctic at the same drafts per step (interpolated on its curve; "
              "- : wider than its widest point)\n")
        print(ratio_table({p: outs[p] for p in curves}, curves) + "\n")
    if args.json:
        Path(args.json).write_text(json.dumps({"parts": outs, "arctic_curve": curves},
                                              indent=1, default=str))


if __name__ == "__main__":
    main()
