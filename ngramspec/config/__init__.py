"""Settings: :class:`NgramConfig` and what it is read from and written to.

``settings.py`` holds the class and its checks; ``modes.py`` the match-mode table and the
profiles; ``presets.py`` the named presets; ``toml.py``, ``sglang.py`` and ``vllm.py`` its
TOML file, SGLang's server arguments and vLLM's ``--speculative-config``;
``acceptance_table.py`` the fitted acceptance table ADAPTIVE's estimates resolve against.
"""

from .settings import MATCH_MODES, MATCH_TYPES, PRESETS, PROFILES, MatchMode, NgramConfig

__all__ = ["NgramConfig", "MATCH_TYPES", "MATCH_MODES", "MatchMode", "PROFILES", "PRESETS"]
