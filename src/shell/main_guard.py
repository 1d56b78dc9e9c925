"""Whether a handler of the `__main__` module is bound only under its
`if __name__ == "__main__":` guard.

A child process started with `spawn` imports the parent's main script as
`__mp_main__`, where that guard's block does not run: a handler defined only there
cannot be found by name in the child, and every attempt would die unanswered. The
script's source is read to tell (the module object cannot: in the parent, the guard
ran); a script whose source cannot be read is given the benefit of the doubt.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any


def main_never_imported(handler: Callable[..., Any]) -> bool:
    """True when `handler` belongs to a `__main__` that a spawned child does not
    import at all: a package's `__main__.py` run with `python -m package`, or a
    directory or zip archive run by path (multiprocessing leaves those out, as their
    code runs unguarded)."""
    if getattr(handler, "__module__", None) != "__main__":
        return False
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    name = getattr(spec, "name", None)
    return isinstance(name, str) and (name == "__main__" or name.endswith(".__main__"))


def only_under_main_guard(handler: Callable[..., Any]) -> bool:
    """True when `handler` (or, for a callable instance, its class) belongs to
    `__main__` and its name is bound in the main script inside the
    `if __name__ == "__main__":` block and nowhere else (any other binding, at any
    depth, is taken to make it importable: the check refuses only what surely fails)."""
    if getattr(handler, "__module__", None) != "__main__":
        return False
    # A callable instance goes to the child by its class's name.
    named = handler if hasattr(handler, "__qualname__") else type(handler)
    name = getattr(named, "__qualname__", "")
    path = getattr(sys.modules.get("__main__"), "__file__", None)
    if not name or "." in name or not path:
        return False
    try:  # bytes: the parser reads a BOM and a coding line itself
        tree = ast.parse(Path(path).read_bytes())
    except (OSError, SyntaxError, ValueError):
        return False
    guards = [n for n in tree.body if isinstance(n, ast.If) and _is_main_guard(n.test)]
    guarded = [node for g in guards for stmt in g.body for node in ast.walk(stmt)]
    skip = {id(node) for node in guarded}
    outside = {n for node in ast.walk(tree) if id(node) not in skip for n in _bound(node)}
    return name not in outside and name in {n for node in guarded for n in _bound(node)}


def _bound(node: ast.AST) -> Iterator[str]:
    """The names `node` itself binds (or declares global)."""
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        yield node.name
    elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
        yield node.id
    elif isinstance(node, ast.alias):
        yield (node.asname or node.name).split(".")[0]
    elif isinstance(node, ast.Global | ast.Nonlocal):
        yield from node.names
    elif isinstance(node, ast.ExceptHandler | ast.MatchAs | ast.MatchStar) and node.name:
        yield node.name
    elif isinstance(node, ast.MatchMapping) and node.rest:
        yield node.rest


def _is_main_guard(test: ast.expr) -> bool:
    """`__name__ == "__main__"`, either way round."""
    if not isinstance(test, ast.Compare) or len(test.ops) != 1:
        return False
    sides = [test.left, test.comparators[0]]
    names = [s for s in sides if isinstance(s, ast.Name) and s.id == "__name__"]
    texts = [s for s in sides if isinstance(s, ast.Constant) and s.value == "__main__"]
    return isinstance(test.ops[0], ast.Eq) and len(names) == 1 and len(texts) == 1
