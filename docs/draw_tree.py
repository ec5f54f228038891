"""Draw the example draft tree and its attention mask of docs/custom-loop.md (needs matplotlib).

Run:  python docs/draw_tree.py   (writes docs/img/draft-tree.png)
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

import ngramspec as ns  # noqa: E402


def example() -> tuple[ns.DraftBatch, int]:
    cache = ns.NgramCache(max_trie_depth=4, max_bfs_breadth=3, draft_token_num=8, capacity=100)
    cache.insert([[5, 1, 2, 3, 7, 1, 2, 4, 9, 2, 3, 8]])
    return cache.match([[6, 1, 2]]), 3


def main() -> None:
    d, prefix = example()
    n, k = d.draft_token_num, int(d.num_drafts[0])
    depth, par, tok = d.depth[0], d.parents[0], d.tokens[0]
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 4.4), gridspec_kw={"width_ratios": [1, 1.2]})

    # Tree: x by slot order within a level, y by depth.
    xs = np.zeros(n)
    for lvl in range(depth.max() + 1):
        slots = [i for i in range(n) if depth[i] == lvl]
        for j, i in enumerate(slots):
            xs[i] = j - (len(slots) - 1) / 2
    for i in range(1, n):
        ax.plot([xs[par[i]], xs[i]], [-depth[par[i]], -depth[i]], color="0.6", zorder=1,
                linestyle="-" if i <= k else ":")
    for i in range(n):
        real = i <= k
        ax.scatter(xs[i], -depth[i], s=900, zorder=2, edgecolors="k",
                   facecolors="#ffd27f" if i == 0 else ("#9ecae1" if real else "white"),
                   linestyle="-" if real else "--")
        ax.text(xs[i], -depth[i], f"{tok[i]}", ha="center", va="center", fontsize=12,
                weight="bold")
        ax.text(xs[i] + 0.28, -depth[i] + 0.2, f"slot {i}", fontsize=8, color="0.3")
    ax.set_title("draft tree: root (last token), drafts, padding (dotted)")
    ax.set_ylabel("depth  (position = kv_len + depth)")
    ax.set_yticks(-np.arange(depth.max() + 1), [str(v) for v in range(depth.max() + 1)])
    ax.set_xticks([])
    ax.set_xlim(xs.min() - 1, xs.max() + 1)
    ax.set_ylim(-depth.max() - 0.6, 0.6)
    for side in ("top", "right", "bottom"):
        ax.spines[side].set_visible(False)

    m = d.attention_mask([prefix])[0].astype(float)
    m[:, :prefix] *= 0.5  # prefix columns in a lighter shade
    bx.imshow(m, cmap="Blues", vmin=0, vmax=1)
    bx.set_xticks(range(prefix + n), [f"kv{j}" for j in range(prefix)] +
                  [f"s{i}" for i in range(n)], fontsize=8)
    bx.set_yticks(range(n), [f"s{i}: {tok[i]}" for i in range(n)], fontsize=8)
    bx.axvline(prefix - 0.5, color="k", lw=1)
    bx.set_title(f"attention_mask([{prefix}]): queries x (KV cache + tree)")
    fig.tight_layout()
    out = Path(__file__).parent / "img" / "draft-tree.png"
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
