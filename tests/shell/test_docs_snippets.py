"""Every ```python block in README.md and docs/*.md runs, or says why it cannot.

A block runs here as written, in a fresh temporary directory as the working
directory, with no `CONVEYOR_*` environment. A block that continues an earlier one or
stands for your own code gets the names it leaves out from `SETUPS` (and nothing
else). A block that cannot run here says so with a comment right before it:

    <!-- not run: needs a Redis server at localhost:6379 -->

A block that neither runs nor carries that comment fails its test.
"""

from __future__ import annotations

import logging
import os
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
NOT_RUN = re.compile(r"<!--\s*not run:\s*(?P<reason>[^>]*?)\s*-->\Z")


@dataclass(frozen=True)
class Snippet:
    page: str
    ordinal: int  # 1-based, among the page's python blocks
    line: int
    code: str
    not_run: str | None  # the reason given, when marked as not runnable

    @property
    def id(self) -> str:
        return f"{self.page}#{self.ordinal}"


def python_snippets(page: str, text: str) -> list[Snippet]:
    found = []
    for match in FENCE.finditer(text):
        if match.group(1) != "python":
            continue
        marker = NOT_RUN.search(text[: match.start()].rstrip())
        found.append(
            Snippet(
                page=page,
                ordinal=len(found) + 1,
                line=text.count("\n", 0, match.start()) + 2,
                code=match.group(2),
                not_run=marker.group("reason") if marker else None,
            )
        )
    return found


def fenced(text: str, language: str) -> list[str]:
    return [m.group(2) for m in FENCE.finditer(text) if m.group(1) == language]


def all_snippets() -> list[Snippet]:
    return [
        snippet
        for path in PAGES
        for snippet in python_snippets(
            path.relative_to(ROOT).as_posix(), path.read_text(encoding="utf-8")
        )
    ]


# ---- what a block needs that it does not say itself -------------------------

Setup = Callable[[Path, pytest.MonkeyPatch], Iterator[dict[str, Any]]]


def _handler(args: Any) -> dict[str, Any]:
    return {"ok": True}


@contextmanager
def readme_quick_start(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    """The quick start's conveyor.toml and myapp/jobs.py, as the README shows them."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    (tmp / "conveyor.toml").write_text(fenced(readme, "toml")[0])
    (tmp / "myapp").mkdir()
    (tmp / "myapp" / "__init__.py").write_text("")
    (tmp / "myapp" / "jobs.py").write_text(python_snippets("README.md", readme)[0].code)
    monkeypatch.syspath_prepend(str(tmp))
    try:
        ns: dict[str, Any] = {}
        yield ns
        stats = ns["runtime"].drain()
        assert (stats.completed, stats.dead_lettered) == (1, 0)
    finally:
        for name in ("myapp.jobs", "myapp"):
            sys.modules.pop(name, None)


@contextmanager
def configuration_runtime(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    """A SQLite conveyor.toml polling both queues, `fn`, and an engine on its database."""
    import conveyor
    from conveyor.shell.adapters.sql import make_engine

    (tmp / "conveyor.toml").write_text(
        'provider = "db"\nurl = "sqlite:///jobs.db"\n'
        '[workers]\ncount = 1\nqueues = ["default", "emails"]\n'
    )
    engine = make_engine("sqlite:///jobs.db")
    try:
        yield {"conveyor": conveyor, "fn": _handler, "engine": engine}
    finally:
        engine.dispose()


@contextmanager
def conveyor_toml_memory(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    import conveyor

    (tmp / "conveyor.toml").write_text('provider = "memory"\n')
    yield {"conveyor": conveyor}


@contextmanager
def send_email_handler(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    yield {"send_email": _handler}


@contextmanager
def handlers_for_a_registry(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    yield {"send_email": _handler, "resize": _handler}


@contextmanager
def a_registry(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    from conveyor.shell.registry import Registry

    yield {"registry": Registry({"send-email": _handler})}


@contextmanager
def conveyor_log_handlers_restored(
    tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[dict[str, Any]]:
    logger = logging.getLogger("conveyor")
    before = list(logger.handlers)
    try:
        yield {}
    finally:
        logger.handlers = before


@contextmanager
def metrics_served(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    ns: dict[str, Any] = {"send_email": _handler}
    try:
        yield ns
    finally:
        # The default prometheus registry is process-wide: leave it as it was.
        for name in ("server", "metrics"):
            if name in ns:
                ns[name].close()


@contextmanager
def a_runtime_and_a_tracer_provider(
    tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[dict[str, Any]]:
    import conveyor
    from opentelemetry.sdk.trace import TracerProvider

    yield {
        "runtime": conveyor.build({"provider": "memory"}),
        "tracer_provider": TracerProvider(),
    }


SETUPS: dict[str, Callable[[Path, pytest.MonkeyPatch], Any]] = {
    "README.md#2": readme_quick_start,
    "docs/configuration.md#1": configuration_runtime,
    "docs/observability.md#2": conveyor_log_handlers_restored,
    "docs/observability.md#3": metrics_served,
    "docs/observability.md#4": a_runtime_and_a_tracer_provider,
    "docs/retention.md#1": conveyor_toml_memory,
    "docs/workers.md#1": handlers_for_a_registry,
    "docs/workers.md#2": a_registry,
}


@contextmanager
def nothing(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    yield {}


def stop_what_it_started(ns: dict[str, Any]) -> None:
    from conveyor.shell.pool import WorkerPool
    from conveyor.shell.runtime import Runtime

    for value in ns.values():
        if isinstance(value, Runtime):
            value.stop(0)
            value.close()
        elif isinstance(value, WorkerPool):
            value.stop(0)


RUNNABLE = [s for s in all_snippets() if s.not_run is None]


@pytest.mark.parametrize("snippet", RUNNABLE, ids=[s.id for s in RUNNABLE])
def test_the_python_block_runs(
    snippet: Snippet, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in [k for k in os.environ if k.startswith("CONVEYOR_")]:
        monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    setup = SETUPS.get(snippet.id, nothing)
    with setup(tmp_path, monkeypatch) as ns:
        ns.update({"__name__": "docs_snippet"})
        try:
            code = compile(snippet.code, f"{snippet.page}:{snippet.line}", "exec")
            exec(code, ns)
        finally:
            stop_what_it_started(ns)


def test_every_setup_is_for_a_block_that_runs() -> None:
    assert set(SETUPS) - {s.id for s in RUNNABLE} == set()


@pytest.mark.parametrize(
    "snippet",
    [s for s in all_snippets() if s.not_run is not None],
    ids=[s.id for s in all_snippets() if s.not_run is not None],
)
def test_a_block_marked_not_run_says_why(snippet: Snippet) -> None:
    assert snippet.not_run


def test_a_python_block_without_a_marker_is_collected_to_run() -> None:
    page = "Text.\n\n```python\nraise SystemExit\n```\n"
    assert [s.not_run for s in python_snippets("x.md", page)] == [None]


def test_the_not_run_marker_must_come_right_before_the_block() -> None:
    page = (
        "<!-- not run: needs a PostgreSQL server -->\n\n```python\nconnect()\n```\n\n"
        "Some text.\n\n```python\nstill_run()\n```\n"
    )
    assert [s.not_run for s in python_snippets("x.md", page)] == [
        "needs a PostgreSQL server",
        None,
    ]
