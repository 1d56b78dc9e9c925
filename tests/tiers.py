"""Which tier a test belongs to, worked out from what it uses (see docs/testing.md).

* `server`: the test needs PostgreSQL or Redis. A test parametrized by backend (the
  `backend` fixture, `site`, `@pytest.mark.parametrize("name", BACKENDS)`, ...) is one
  exactly when its backend is PostgreSQL or Redis; its backend decides, since its
  fixtures name every backend's server. Any other test is one when its own code or a
  fixture it uses calls a server's entry point (`SERVER_CALLS`), or builds a backend
  (`BACKEND_FACTORIES`) named by a server's name or by a list holding one.
* `subprocess`: the test, a fixture it uses, or a helper function of the test folders
  that either calls (followed through any depth) uses a name that spawns a process
  (`SPAWN_NAMES`). A helper that spawns through the library instead (a process pool
  named in a config) is reached through a fixture whose code names a spawn.

Nothing is marked by hand: `tests/conftest.py` adds the markers at collection, and
`tier_guard.py` fails any test without them that starts a server or a process, so a
test this module misjudges fails in the fast tier instead of slowing it down quietly.
"""

from __future__ import annotations

import functools
import inspect
import os
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from types import CodeType
from typing import Any

TESTS = Path(__file__).resolve().parent
SERVER_BACKENDS = frozenset({"postgresql", "redis", "redis-cluster"})
BACKEND_NAMES = frozenset({"memory", "sqlite", *SERVER_BACKENDS})
#: Calls that start or reach a test server (`conveyor.testing`'s server helpers, the
#: Redis Cluster's among them, and `PgCluster`, the fault tests' own PostgreSQL).
SERVER_CALLS = frozenset(
    {
        "postgres_url",
        "fresh_database",
        "redis_url",
        "redis_server",
        "RedisServer",
        "restart_redis",
        "redis_cluster",
        "redis_cluster_urls",
        "RedisCluster",
        "PgCluster",
    }
)
#: Test helpers that build a backend from its name.
BACKEND_FACTORIES = frozenset({"make_backend", "make_site"})
#: Names whose use spawns a process.
SPAWN_NAMES = frozenset(
    {
        "subprocess",
        "Popen",
        "multiprocessing",
        "ProcessPoolExecutor",
        "fork",
        "posix_spawn",
        "create_subprocess_exec",
        "create_subprocess_shell",
        "run_quietly",  # dev.py's install step
    }
)


def _codes(code: CodeType) -> Iterator[CodeType]:
    """`code` and the code of every function, lambda and class nested in it."""
    yield code
    for const in code.co_consts:
        if isinstance(const, CodeType):
            yield from _codes(const)


def _consts(code: CodeType) -> Iterator[object]:
    for inner in _codes(code):
        for const in inner.co_consts:
            yield from const if isinstance(const, tuple) else (const,)


@functools.cache
def _in_tests(filename: str) -> bool:
    return filename.startswith(str(TESTS) + os.sep)


def _is_test_code(obj: Any) -> bool:
    if inspect.isfunction(obj):
        return _in_tests(obj.__code__.co_filename)
    module = sys.modules.get(getattr(obj, "__module__", None) or "")
    return _in_tests(getattr(module, "__file__", None) or "")


def _functions(obj: object, depth: int = 4) -> Iterator[Callable[..., Any]]:
    """The plain functions of a test function, fixture or class (its methods), and of
    the functions and classes their closures hold (how a generated test case, such as
    a hypothesis state machine's, reaches the factory it was made from)."""
    obj = getattr(obj, "_get_wrapped_function", lambda: obj)()
    obj = inspect.unwrap(obj)  # type: ignore[arg-type]
    if depth == 0:
        return
    if inspect.isclass(obj):
        for member in vars(obj).values():
            yield from _functions(member, depth - 1)
    elif inspect.ismethod(obj):
        yield from _functions(obj.__func__, depth)
    elif inspect.isfunction(obj):
        yield obj
        for cell in obj.__closure__ or ():
            try:
                held = cell.cell_contents
            except ValueError:  # a cell not filled yet
                continue
            if inspect.isfunction(held) or inspect.isclass(held):
                yield from _functions(held, depth - 1)


def _names(func: Callable[..., Any]) -> set[str]:
    return {name for code in _codes(func.__code__) for name in code.co_names}


def names_server(func: Callable[..., Any]) -> bool:
    """True when `func`'s own code starts or reaches a server."""
    names = _names(func)
    if names & SERVER_CALLS:
        return True
    if not names & BACKEND_FACTORIES:
        return False
    strings = {c for c in _consts(func.__code__) if isinstance(c, str)}
    for name in names:  # a module-level list of backend names, such as BACKENDS
        value = func.__globals__.get(name)
        if isinstance(value, tuple | list | frozenset | set):
            strings |= {v for v in value if isinstance(v, str)}
    return bool(strings & SERVER_BACKENDS)


def spawns(funcs: Iterable[Callable[..., Any]]) -> bool:
    """True when any of `funcs`, or a test-folder helper they use, names a spawn."""
    seen: set[CodeType] = set()
    todo = [f for f in funcs if _is_test_code(f)]
    while todo:
        func = todo.pop()
        if func.__code__ in seen:
            continue
        seen.add(func.__code__)
        names = _names(func)
        if names & SPAWN_NAMES:
            return True
        for name in names:
            value = func.__globals__.get(name)
            if value is not None and (inspect.isfunction(value) or inspect.isclass(value)):
                todo += [f for f in _functions(value) if _is_test_code(f)]
    return False


def _param_values(item: Any) -> list[str]:
    callspec = getattr(item, "callspec", None)
    if callspec is None:
        return []
    values: list[str] = []
    for value in callspec.params.values():
        parts = value if isinstance(value, tuple | list) else (value,)
        values += [v for v in parts if isinstance(v, str)]
    return values


def _used(item: Any) -> list[Callable[..., Any]]:
    """The test function and the function of every fixture it uses (its own, not
    pytest's), the nearest definition of each name."""
    defs = item._fixtureinfo.name2fixturedefs
    roots = [item.obj] + [defs[name][-1].func for name in item.fixturenames if defs.get(name)]
    return [f for root in roots for f in _functions(root) if _is_test_code(f)]


def tiers_of(item: Any) -> set[str]:
    """The tier markers `item` needs: a subset of {"server", "subprocess"}."""
    used = _used(item)
    marks = set()
    backends = BACKEND_NAMES.intersection(_param_values(item))
    if backends:
        if backends & SERVER_BACKENDS:
            marks.add("server")
    elif any(names_server(f) for f in used):
        marks.add("server")
    if spawns(used):
        marks.add("subprocess")
    return marks
