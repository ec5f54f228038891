"""The README's quickstart runs as written."""

from pathlib import Path


def test_quickstart_runs():
    text = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    start = text.index("```python\n") + len("```python\n")
    code = text[start:text.index("```", start)]
    scope: dict = {}
    exec(compile(code, "README.md", "exec"), scope)
    assert scope["drafts"].tokens.shape == (1, 12)
    assert scope["result"].accept_lens.shape == (1,)
