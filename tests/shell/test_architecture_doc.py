"""docs/architecture.md stays true to the tree: every file and folder it names exists,
its picture of the shell's layers is the order the import contract enforces, and
the modules stay as small as it says."""

from __future__ import annotations

import ast
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


def import_graph() -> dict[str, set[str]]:
    """Every module of src/ and the modules it imports, relative imports of every kind
    (in functions, for type checkers): `from . import x` leans on the package itself."""
    mods = {}
    for path in SRC.rglob("*.py"):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        package = parts[-1] == "__init__"
        name = ".".join(parts[:-1] if package else parts)
        mods[name] = (path, parts[:-1])
    graph: dict[str, set[str]] = {name: set() for name in mods}
    for name, (path, package) in mods.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level:
                base = package[: len(package) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
                graph[name] |= {target} & mods.keys()
                if node.module:
                    graph[name] |= {f"{target}.{a.name}" for a in node.names} & mods.keys()
    return graph


def test_no_import_loop_in_src_as_the_page_says() -> None:
    assert "no import loop" in PAGE.lower()
    graph = import_graph()
    looped = []
    for start in graph:
        seen, todo = set(), list(graph[start])
        while todo:
            module = todo.pop()
            if module == start:
                looped.append(start)
                break
            if module not in seen:
                seen.add(module)
                todo.extend(graph[module])
    assert looped == []
