"""The import paths of modules that moved into topic packages keep working for one release:
the old path is the new module itself, with a DeprecationWarning that names the new path."""

from __future__ import annotations

import importlib
import subprocess
import sys
import warnings

import pytest

import ngramspec

MOVED = sorted(ngramspec._MOVED.items())


@pytest.mark.parametrize("old,new", MOVED)
def test_an_old_path_is_the_new_module_with_a_warning(old, new):
    sys.modules.pop(f"ngramspec.{old}", None)
    vars(ngramspec).pop(old, None)
    with pytest.warns(DeprecationWarning, match=rf"ngramspec\.{old} moved to ngramspec\.{new}"):
        module = importlib.import_module(f"ngramspec.{old}")
    assert module is importlib.import_module(f"ngramspec.{new}")
    assert module.__name__ == module.__spec__.name == f"ngramspec.{new}"  # its own spec kept
    assert getattr(ngramspec, old) is module


def test_the_warning_names_the_importing_line_and_shows_by_default():
    # Python shows a DeprecationWarning by default only when it is attributed to __main__.
    code = "from ngramspec.verify import verify_greedy\nfrom ngramspec import corpora\n"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    lines = [line for line in out.stderr.splitlines() if "DeprecationWarning" in line]
    assert lines == [
        "<string>:1: DeprecationWarning: ngramspec.verify moved to ngramspec.drafts.verify; "
        "the old path goes in the next release",
        "<string>:2: DeprecationWarning: ngramspec.corpora moved to ngramspec.cache.corpora; "
        "the old path goes in the next release"]


@pytest.mark.parametrize("old,new", MOVED[:3])
def test_an_old_name_as_an_attribute_warns_and_is_the_new_module(old, new):
    sys.modules.pop(f"ngramspec.{old}", None)
    vars(ngramspec).pop(old, None)
    with pytest.warns(DeprecationWarning, match=rf"ngramspec\.{old} moved to ngramspec\.{new}"):
        module = getattr(ngramspec, old)
    assert module is importlib.import_module(f"ngramspec.{new}")
    assert sys.modules[f"ngramspec.{old}"] is module


def test_old_names_from_an_old_path_still_import():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from ngramspec.config_vllm import speculative_config
        from ngramspec.persist import FORMAT
    from ngramspec.cache.persist import FORMAT as new_format
    from ngramspec.config.vllm import speculative_config as new_config

    assert speculative_config is new_config and FORMAT == new_format


def test_the_new_paths_and_the_front_import_without_a_warning():
    code = ("import warnings; warnings.simplefilter('error')\n"
            "import ngramspec, importlib\n"
            f"for new in {[new for _, new in MOVED]!r}:\n"
            "    importlib.import_module('ngramspec.' + new)\n"
            "from ngramspec.cache import NgramCache\nfrom ngramspec.streams import read_streams\n"
            "from ngramspec.drafter import Drafter\nfrom ngramspec.drafts import DraftBatch\n"
            "from ngramspec.config import NgramConfig, MATCH_MODES\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr


def test_an_unknown_name_is_still_an_error():
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("ngramspec.no_such_module")
    with pytest.raises(AttributeError, match="no attribute 'no_such_name'"):
        ngramspec.no_such_name  # noqa: B018
