"""The README's quickstart runs as written."""

from pathlib import Path


def python_blocks(text: str) -> list[str]:
    blocks = []
    start = text.find("```python\n")
    while start != -1:
        start += len("```python\n")
        end = text.index("```", start)
        blocks.append(text[start:end])
        start = text.find("```python\n", end)
    return blocks


def test_quickstart_runs():
    text = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    blocks = python_blocks(text)
    assert len(blocks) >= 2
    scope: dict = {}
    exec(compile(blocks[0], "README.md", "exec"), scope)
    assert scope["drafts"].tokens.shape == (1, 12)
    assert scope["result"].accept_lens.shape == (1,)
    for block in blocks[1:]:  # later blocks continue in the same scope
        exec(compile(block, "README.md", "exec"), scope)
    assert scope["drafter"].requests == []
