"""An operator's retry of a dead letter that has a unique key, on every backend.

A dead letter holds its key no more, so another job may take it. Retrying the dead
letter then would put two live jobs under one key; the retry is refused instead,
naming the key and its holder, and nothing is written. With the key free, the
retried job holds it again."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

import conveyor
import pytest
from backends import Backend
from cli_support import cli, cli_project
from conveyor import Permanent
from conveyor.core import JobStatus, ValidationError
from conveyor.shell.config import Config
from conveyor.shell.registry import Registry
from conveyor.shell.runtime import Runtime
from conveyor.testing.clock import ManualClock

__all__ = ["cli", "cli_project"]  # fixtures, shared with the CLI tests

T0 = datetime(2026, 6, 1, 10, 0, tzinfo=UTC)


def _fails(args: Any) -> None:
    raise Permanent("the remote refused")


def _runtime(backend: Backend) -> Runtime:
    registry = Registry({"sync": _fails})
    return Runtime(
        Config(provider="memory"), backend.queue, backend.store, registry, clock=ManualClock(T0)
    )  # type: ignore[arg-type]


def test_a_dead_letter_whose_key_another_job_took_is_not_retried(backend: Backend) -> None:
    rt = _runtime(backend)
    first = rt.enqueue("sync", {"n": 1}, unique_key="sync:42")
    rt.drain()
    assert rt.get(first.id).dead
    second = rt.enqueue("sync", {"n": 2}, unique_key="sync:42", delay=600)
    assert second.id != first.id, "a dead letter holds its key no more"
    with pytest.raises(ValidationError) as refused:
        rt.retry_dead(first.id)
    assert refused.value.fields == ("job_id",)
    assert "'sync:42'" in str(refused.value) and str(second.id) in str(refused.value)
    assert rt.get(first.id).dead, "the refused retry wrote nothing"
    assert rt.enqueue("sync", {"n": 3}, unique_key="sync:42").id == second.id
    live = [v for v in rt.list_jobs(job_type="sync") if not v.state.is_terminal]
    assert [v.job_id for v in live] == [str(second.id)]


def test_a_retried_dead_letter_holds_its_key_again_once_it_is_free(backend: Backend) -> None:
    rt = _runtime(backend)
    first = rt.enqueue("sync", {"n": 1}, unique_key="sync:7")
    rt.drain()
    second = rt.enqueue("sync", {"n": 2}, unique_key="sync:7", delay=600)
    rt.cancel(second.id)
    revived = rt.retry_dead(first.id)
    assert revived.status is JobStatus.PENDING
    assert rt.enqueue("sync", {"n": 3}, unique_key="sync:7").id == first.id


def test_the_cli_names_the_holder_and_a_bulk_retry_skips_the_letter_with_a_warning(
    cli_project, cli, caplog: pytest.LogCaptureFixture
) -> None:
    rt = conveyor.build()  # the project's config, as the commands read it
    try:
        dead = rt.enqueue("explode", {}, unique_key="ship:9")
        rt.drain()
        holder = rt.enqueue("explode", {}, unique_key="ship:9", delay=600)
    finally:
        rt.close()
    refused = cli("dead", "retry", str(dead.id), check=False)
    assert refused.returncode == 1 and refused.stdout == ""
    assert refused.stderr == (
        f"conveyor: job {dead.id} was not retried: its unique key 'ship:9' is held by job "
        f"{holder.id} (scheduled); retry it once that job has ended, or cancel that job first\n"
    )
    with caplog.at_level(logging.WARNING, logger="conveyor.dead"):
        bulk = cli("dead", "retry", "--all", check=False)
    # It exited 0: a script could not tell a letter was left dead.
    assert bulk.returncode == 1
    assert bulk.stdout.strip() == "re-enqueued 0 dead letters; 1 refused (named above)"
    assert f"dead letter {dead.id} was not retried" in caplog.text
