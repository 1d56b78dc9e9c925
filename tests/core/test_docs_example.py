"""The first Python example in docs/core.md runs and prints what the docs say."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "core.md"
FIRST_PYTHON_BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def first_python_block() -> str:
    match = FIRST_PYTHON_BLOCK.search(DOC.read_text(encoding="utf-8"))
    assert match is not None, "docs/core.md has no ```python block"
    return match.group(1)


def test_the_embedding_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    code = compile(first_python_block(), f"{DOC}:example", "exec")
    exec(code, {"__name__": "docs_core_example"})
    printed = capsys.readouterr().out
    assert printed == "retry 1 at 2026-01-01T00:00:01+00:00\n"


def test_the_docs_quote_the_examples_output() -> None:
    assert "It prints `retry 1 at 2026-01-01T00:00:01+00:00`" in DOC.read_text(encoding="utf-8")
