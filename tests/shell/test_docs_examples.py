"""The runnable examples in docs/ run."""

import re
from pathlib import Path

DOCS = Path(__file__).resolve().parents[2] / "docs"


def _last_python_block(page: str) -> str:
    blocks = re.findall(r"```python\n(.*?)```", (DOCS / page).read_text(), re.S)
    assert blocks, f"no python example in {page}"
    return blocks[-1]


def test_the_workers_page_example_runs(capsys) -> None:
    exec(compile(_last_python_block("workers.md"), "workers.md", "exec"), {})
    assert capsys.readouterr().out.strip() == "5"
