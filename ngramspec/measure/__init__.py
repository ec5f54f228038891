"""Measuring against a real model: a model's step costs (``calibrate.py``), a prediction held
against the model (``check.py``), predicted against realised accept lengths
(``reliability.py``), and the transformers decoding loop the first two time
(``torch_loop.py``).  Needs the optional extras each names (torch, transformers)."""
