"""The README says how long each first-use compile takes that a reader following it meets.

Every command and snippet the README shows that runs on the shipped data is run in the
README's order on one empty Numba cache, after the set-up command; each one that compiles a
kernel must be named in the README as ``time COMMAND`` with an "about N s" figure, and each
``time COMMAND`` must be one that compiles (no stale figure).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SETUP = "ngramspec simulate --by task"

# A first use that compiles, as the README names it: "`time COMMAND" with an "about N s"
# figure beside it.
TIMED = re.compile(r"`time ([^`;]+)")


def readme() -> str:
    return (ROOT / "README.md").read_text(encoding="utf-8")


def flat(text: str) -> str:
    """Text with every run of whitespace one space (inline code wraps across lines)."""
    return " ".join(text.split())


def sections(text: str) -> list[tuple[str, str]]:
    """(title, body) of the README's ``##`` sections, in order."""
    parts = re.split(r"^## (.*)$", text, flags=re.M)
    return list(zip(parts[1::2], parts[2::2]))


def first_uses(text: str) -> list[tuple[str, list[str]]]:
    """(name as the README times it, argv or Python source) in the README's order: the
    ``ngramspec simulate`` commands without placeholders (in code blocks and inline), then a
    ``Use N`` section's Python snippets as one file, ``python useN.py``."""
    uses: list[tuple[str, list[str]]] = []
    for title, body in sections(text):
        inline = flat(re.sub(r"```.*?```", "", body, flags=re.S))
        candidates = [line for block in re.findall(r"```\n(.*?)```", body, re.S)
                      for line in block.splitlines()] + re.findall(r"`([^`]+)`", inline)
        for candidate in candidates:
            if "ngramspec simulate " not in candidate:
                continue
            cmd = candidate[candidate.index("ngramspec simulate "):]
            cmd = flat(re.split(r"&&|#|;", cmd)[0])
            if not re.search(r"\b[A-Z_]{4,}\b", cmd) and cmd not in [u[0] for u in uses]:
                uses.append((cmd, cmd.split()[1:]))
        blocks = re.findall(r"```python\n(.*?)```", body, re.S)
        number = re.match(r"Use (\d+)", title)
        if blocks and number:
            head = "" if "import ngramspec as ns" in blocks[0] else "import ngramspec as ns\n"
            uses.append((f"python use{number[1]}.py", [head + "".join(blocks)]))
    return uses


def timed_mentions(text: str) -> dict[str, str]:
    """``time COMMAND`` mentions of the README's prose: command -> the text around it (its
    paragraph, up to 200 characters before and 100 after)."""
    mentions = {}
    for paragraph in re.split(r"\n\s*\n", re.sub(r"```.*?```", "", text, flags=re.S)):
        paragraph = flat(paragraph)
        for m in TIMED.finditer(paragraph):
            mentions[flat(m[1])] = paragraph[max(0, m.start() - 200):m.end() + 100]
    return mentions


def test_the_readme_times_each_first_use_it_shows():
    text = readme()
    mentions = timed_mentions(text)
    for cmd in ("ngramspec simulate --preset recommended", "python use1.py",
                "ngramspec simulate --step-ms 12 --token-ms 0.1 --concurrency 1,4,16,48"):
        assert cmd in mentions, f"the README does not say how long `{cmd}` compiles first"
    for cmd, around in mentions.items():
        assert re.search(r"about \d+ s\b", around), (cmd, around)
    # The set-up run's figure, and how the others are timed after it.
    assert "about 22 s" in flat(text) and "NUMBA_CACHE_DIR=$(mktemp -d)" in text
    names = [u[0] for u in first_uses(text)]
    assert names[0] == SETUP and "python use1.py" in names and "python use3.py" in names


@pytest.mark.slow
def test_each_first_use_compile_is_in_the_readme(tmp_path):
    text = readme()
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "numba"), NGRAMSPEC_NUMBA_CACHE="1",
               NGRAMSPEC_COMPILE_NOTICE="1")
    env.pop("NUMBA_DISABLE_JIT", None)

    def compiles(name: str, argv: list[str]) -> list[str]:
        if name.startswith("python "):
            script = tmp_path / name.split()[1]
            script.write_text(argv[0], encoding="utf-8")
            argv = [str(script)]
        else:
            argv = ["-m", "ngramspec", *argv]
        # Run outside the checkout, as a user runs the installed `ngramspec` and scripts: one
        # copy of the package, one disk cache (from the checkout, `python -m` would import the
        # checkout's copy and the scripts the installed one, each compiling for itself).
        proc = subprocess.run([sys.executable, *argv], cwd=tmp_path, env=env,
                              capture_output=True, text=True, stdin=subprocess.DEVNULL,
                              timeout=600)
        assert proc.returncode == 0, (name, proc.stderr[-2000:])
        return re.findall(r"ngramspec: compiling (the .*?) \.\.\.", proc.stderr)

    uses = first_uses(text)
    assert uses[0][0] == SETUP
    mentions = timed_mentions(text)
    compiled = {}
    for name, argv in uses:
        compiled[name] = compiles(name, argv)
        if name == "ngramspec simulate --step-ms 12 --token-ms 0.1 --concurrency 1,4,16,48":
            # "--engine sglang then adds at most the match kernel of SGLang's drop-in" (use 1
            # compiles it; the prediction's step API does not call it)
            assert set(compiles("sglang", [*argv, "--engine", "sglang"])) <= {
                "the trie match and draft-tree kernel"}
    assert compiled[SETUP], "the set-up run compiled nothing on an empty cache"
    for name, kernels in list(compiled.items())[1:]:
        if kernels:
            assert name in mentions, (f"`{name}` compiles {', '.join(kernels)} on first use "
                                      "and the README does not say how long")
    for name in mentions:
        assert compiled.get(name), f"the README times `{name}`, which compiles nothing"
