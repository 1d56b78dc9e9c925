"""docs/architecture.md stays true to the tree: every file and folder it names exists,
its picture of the shell's layers is the order the import contract enforces, and
the modules stay as small as it says."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src"
PAGE = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")


def named_paths() -> list[str]:
    """Every `core/...`, `shell/...` or `testing/...` path the page names in backticks."""
    return sorted(set(re.findall(r"`((?:core|shell|testing)/[\w/.]+?)`", PAGE)))


def test_every_path_the_page_names_exists() -> None:
    paths = named_paths()
    assert len(paths) > 20, paths
    missing = [p for p in paths if not (SRC / p.rstrip("/")).exists()]
    assert missing == []


def test_the_layers_drawn_are_the_layers_the_import_contract_enforces() -> None:
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    layers = next(c["layers"] for c in contracts["contracts"] if c["type"] == "layers")
    drawn = re.findall(r"^ \+- (shell\.\w+)", PAGE, flags=re.MULTILINE)
    enforced = [name.removeprefix("conveyor.") for name in layers]
    assert [d for d in drawn if d in enforced] == enforced


def test_no_module_is_over_400_lines_as_the_page_says() -> None:
    assert "under 400 lines" in PAGE
    long = {
        str(path.relative_to(SRC)): n
        for path in [*SRC.rglob("*.py"), *SRC.rglob("*.lua")]
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > 400
    }
    assert long == {}
