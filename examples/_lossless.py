"""The table both speculative-decoding examples print: per request, whether speculative
decoding gave exactly plain greedy decoding's output, and what each cost in forward passes.

Imported by ``numpy_speculative_greedy.py`` and ``hf_speculative_greedy.py`` (run from any
directory: Python puts a script's own folder on the import path).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np


class LosslessTable:
    """Print a header now, one row per :meth:`add`, and the verdict at :meth:`finish`.

    ``lead``: the leading columns as (header, format spec) pairs, e.g. ``[("request", "<34")]``;
    ``forwards``: what a forward pass runs, for the verdict line (``"target"``, ``"model"``).
    """

    def __init__(self, lead: Sequence[tuple[str, str]], *, forwards: str) -> None:
        self.lead = list(lead)
        self.forwards = forwards
        self.all_same = True
        self.plain_fwd = self.spec_fwd = 0
        print(" ".join(f"{h:{f}}" for h, f in self.lead)
              + f" {'identical':>9} {'plain fwd':>9} {'spec fwd':>8} {'accept len':>10}")

    def add(self, lead: Sequence[object], plain: list[int], spec: list[int], plain_fwd: int,
            spec_fwd: int, accept_lens: Sequence[float]) -> None:
        """One request: its leading cells, both outputs, both forward counts, and the accept
        length of every speculative step."""
        same = plain == spec
        self.all_same &= same
        self.plain_fwd += plain_fwd
        self.spec_fwd += spec_fwd
        mean = np.mean(accept_lens) if len(accept_lens) else float("nan")
        print(" ".join(f"{v:{f}}" for v, (_, f) in zip(lead, self.lead))
              + f" {'yes' if same else 'NO':>9} {plain_fwd:>9} {spec_fwd:>8} {mean:>10.2f}")
        if not same:
            k = next((j for j, (a, b) in enumerate(zip(plain, spec)) if a != b),
                     min(len(plain), len(spec)))
            print(f"       first difference at output token {k}: plain {plain[k:k + 1]}, "
                  f"speculative {spec[k:k + 1]}")

    def finish(self, *, check: bool, note: str = "") -> int:
        """Print the verdict; the exit status (1 when ``check`` and an output differed)."""
        print(f"all identical: {'yes' if self.all_same else 'NO'}; {self.forwards} forwards "
              f"{self.plain_fwd} plain vs {self.spec_fwd} speculative{note}")
        return 1 if check and not self.all_same else 0
