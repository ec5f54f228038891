"""How often each source's most frequent continuation is the next token: the measurement
behind ``shared_pseudo_count`` (tuning part only).

Replays a task group of the tuning part (``ngramspec.sweep.split``) through a ``Drafter`` on the
reference backend and, at every step, for every anchor the ADAPTIVE builder received (the
request's own trie ``L``, the shared trie ``S``; the longest anchor of a source apart from the
others), compares the predicted probability of the anchor's most frequent child
(``freq / total``) with whether that child is the next recorded token.  Buckets: source,
longest or not, anchor length (1-7, 8-11, 12+), ``total`` count (1, 2, 3-4, 5+).

    python -m benchmarks.studies.source_reliability doc_grounded
    python -m benchmarks.studies.source_reliability chat_multiturn --min-count 50
"""

from __future__ import annotations

import argparse
import collections

import numpy as np

import ngramspec as ns
import ngramspec.reference.adaptive as ref_adaptive
import ngramspec.reference.backend as ref_backend

from benchmarks.peers import protocol as H
from benchmarks.peers import replay as dr


def measure(task: str, config: ns.NgramConfig) -> dict[tuple, list]:
    """``{(source, longest, anchor bucket, count bucket): [anchors, right, sum of predicted]}``."""
    seen: dict[str, list] = {}
    build = ref_adaptive.build_adaptive

    def spy(sources, params, *args, **kwargs):
        seen["sources"] = [list(anchors) for anchors in sources]
        return build(sources, params, *args, **kwargs)

    rows = [r for r in H.load_parts()["tune"] if r.get("task") == task]
    if not rows:
        raise SystemExit(f"no request of task {task!r} in the tuning part")
    stats: dict[tuple, list] = collections.defaultdict(lambda: [0, 0, 0.0])
    ref_backend.build_adaptive = spy  # what the reference backend calls, observed
    try:
        prop = dr.NgramspecProposer(config=config, send="real", drafter=lambda config: ns.Drafter(
            config=config, backend="reference"))
        for row in rows:
            prompt = np.asarray(row["prompt_ids"], np.int32)
            out = np.asarray(row["output_ids"], np.int32)
            full = np.concatenate([prompt, out])
            prop.start(row["id"], prompt, int(out[0]))
            done = 1
            while done < out.size:
                tokens, parents = prop.propose(row["id"], full[:prompt.size + done])
                truth = int(out[done])
                sources = seen["sources"]
                for s, anchors in enumerate(sources):
                    src = "L" if len(sources) == 2 and s == 0 else "S"
                    for rank, (anchor, d) in enumerate(anchors):
                        total = ref_adaptive._conditional_total(anchor)
                        if total <= 0:
                            continue
                        top = max(anchor.lru, key=lambda c: c.freq)  # ties: most recent
                        db = d if d < 8 else 8 if d < 12 else 12
                        tb = 1 if total == 1 else 2 if total == 2 else 3 if total <= 4 else 5
                        entry = stats[(src, rank == 0, db, tb)]
                        entry[0] += 1
                        entry[1] += top.token == truth
                        entry[2] += top.freq / total
                acc = dr.greedy_accept(tokens, parents, out[done:])
                step = out[done:done + acc + 1]
                prop.on_accept(row["id"], step)
                done += step.size
            prop.stop(row["id"])
    finally:
        ref_backend.build_adaptive = build
    return dict(stats)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("task", help="task group of the tuning part, e.g. doc_grounded")
    parser.add_argument("--min-count", type=int, default=20,
                        help="show buckets with at least this many anchors (default 20)")
    args = parser.parse_args()
    config = ns.NgramConfig.recommended(max_spec_factor=0.6, shared_pseudo_count=0.0,
                                        draft_token_num=12)
    stats = measure(args.task, config)
    print(f"# {args.task}, tuning part: {config.to_toml().splitlines()[0]}\n")
    print("| source | longest anchor | anchor length | total count | anchors | predicted "
          "| right |\n|---|---|---:|---:|---:|---:|---:|")
    for (src, longest, db, tb), (n, right, pred) in sorted(stats.items()):
        if n >= args.min_count:
            lab = {8: "8-11", 12: "12+"}.get(db, str(db))
            cnt = {3: "3-4", 5: "5+"}.get(tb, str(tb))
            print(f"| {src} | {'yes' if longest else 'no'} | {lab} | {cnt} | {n} | "
                  f"{pred / n:.2f} | {right / n:.2f} |")


if __name__ == "__main__":
    main()
