"""The step API: :class:`Drafter` (``step_api.py``), what SGLang's worker does per step at
kernel cost; its ``propose`` (``propose.py``), the checks and appends of its ``accept``
(``accept.py``) and its ``prepare``, a prompt indexed during the prefill (``admit.py``)."""

from .step_api import Drafter

__all__ = ["Drafter"]
