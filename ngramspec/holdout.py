"""The fixed split of recorded streams into a tuning part and a hold-out part.

Its home is :mod:`ngramspec.sweep.split` (with the rule written out); this documented path
keeps working.

>>> from ngramspec.holdout import group_key
>>> group_key("mtbench/121/turn2")
'mtbench/121'
"""

from .sweep.split import PARTS, Part, group_key, split_of, split_streams  # noqa: F401

__all__ = ["PARTS", "group_key", "split_of", "split_streams"]
