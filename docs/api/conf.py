"""Sphinx configuration of the API reference (built from the docstrings; CI builds it with
warnings as errors: ``sphinx-build -W -b html docs/api OUT``)."""

project = "ngramspec"
extensions = ["sphinx.ext.autodoc", "sphinx.ext.napoleon"]
napoleon_google_docstring = False
napoleon_numpy_docstring = True
napoleon_use_rtype = False
autodoc_member_order = "bysource"
autodoc_typehints = "none"  # the numpy-style sections say it, in words
autodoc_default_options = {"members": True, "undoc-members": False, "show-inheritance": False}
exclude_patterns = ["_build"]
html_theme = "alabaster"
napoleon_use_ivar = True
# Attribute names such as ``tokens`` exist on several classes; an ambiguous link is not an error.
suppress_warnings = ["ref.python"]
