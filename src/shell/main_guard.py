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
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any


def only_under_main_guard(handler: Callable[..., Any]) -> bool:
    """True when `handler` belongs to `__main__` and its name is bound in the main
    script only inside the `if __name__ == "__main__":` block."""
    if getattr(handler, "__module__", None) != "__main__":
        return False
    name = getattr(handler, "__qualname__", "")
    path = getattr(sys.modules.get("__main__"), "__file__", None)
    if not name or "." in name or not path:
        return False
    try:
        tree = ast.parse(Path(path).read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError, UnicodeDecodeError):
        return False
    outside = set(_bound(tree.body, into_guard=False))
    return name not in outside and name in set(_bound(tree.body, into_guard=True))


def _bound(body: Sequence[ast.stmt], *, into_guard: bool) -> Iterator[str]:
    """The names `body` binds at module level, looking into compound statements (and
    into the main guard's block only when `into_guard`)."""
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            yield node.name
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                yield from (n.id for n in ast.walk(target) if isinstance(n, ast.Name))
        elif isinstance(node, ast.Import | ast.ImportFrom):
            yield from ((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.If) and _is_main_guard(node.test) and not into_guard:
            yield from _bound(node.orelse, into_guard=into_guard)
        else:
            for field in ("body", "orelse", "finalbody", "handlers"):
                inner = getattr(node, field, None)
                if isinstance(inner, list):
                    yield from _bound(
                        [s for s in inner if isinstance(s, ast.stmt)]
                        + [s for h in inner if isinstance(h, ast.ExceptHandler) for s in h.body],
                        into_guard=into_guard,
                    )


def _is_main_guard(test: ast.expr) -> bool:
    """`__name__ == "__main__"`, either way round."""
    if not isinstance(test, ast.Compare) or len(test.ops) != 1:
        return False
    sides = [test.left, test.comparators[0]]
    names = [s for s in sides if isinstance(s, ast.Name) and s.id == "__name__"]
    texts = [s for s in sides if isinstance(s, ast.Constant) and s.value == "__main__"]
    return isinstance(test.ops[0], ast.Eq) and len(names) == 1 and len(texts) == 1
