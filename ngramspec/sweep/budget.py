"""The draft budget for an engine that verifies a fixed number of slots.

SGLang's NGRAM worker verifies ``draft_token_num`` slots per request at every step, so the
slots are the cost whatever the trees hold: the best ``draft_token_num`` for SGLang is found
by pricing each candidate with ``engine="sglang"``.  :data:`BUDGETS` is the grid searched
when none is given (``ngramspec sweep --engine sglang``).
"""

from __future__ import annotations

__all__ = ["BUDGETS"]

#: ``draft_token_num`` values searched by default under SGLang's pricing (slots per request,
#: the root included): from a single draft to the ``recommended`` preset's 16.
BUDGETS = (2, 3, 4, 6, 8, 10, 12, 16)
