"""`sqlite_synchronous` sets SQLite's `PRAGMA synchronous` on every connection of the
SQL backend, from the config file, `build` or the environment: FULL by default (no
acknowledged commit lost to an OS crash or power loss), NORMAL for faster commits
that only a process crash cannot lose."""

from __future__ import annotations

from pathlib import Path

import conveyor
import pytest
from conveyor import ValidationError

#: SQLite's numbers for the modes.
LEVEL = {"OFF": 0, "NORMAL": 1, "FULL": 2, "EXTRA": 3}


def synchronous_of(runtime: conveyor.Runtime) -> int:
    with runtime.queue.engine.connect() as conn:  # type: ignore[attr-defined]
        return int(conn.exec_driver_sql("PRAGMA synchronous").scalar())


def build(tmp_path: Path, env: dict[str, str] | None = None, **config: object) -> conveyor.Runtime:
    settings = {"provider": "db", "url": f"sqlite:///{tmp_path / 'jobs.db'}", **config}
    return conveyor.build(settings, env=env or {})


def test_full_is_the_default(tmp_path: Path) -> None:
    runtime = build(tmp_path)
    try:
        assert synchronous_of(runtime) == LEVEL["FULL"]
    finally:
        runtime.close()


@pytest.mark.parametrize("mode", ["NORMAL", "EXTRA", "OFF"])
def test_the_configured_mode_is_every_connection_s(tmp_path: Path, mode: str) -> None:
    runtime = build(tmp_path, sqlite_synchronous=mode)
    try:
        assert synchronous_of(runtime) == LEVEL[mode]
        job = runtime.enqueue("t", {})
        assert runtime.get(job.id) is not None, "a write under the mode lands"
    finally:
        runtime.close()


def test_the_environment_sets_it_too(tmp_path: Path) -> None:
    runtime = build(tmp_path, env={"CONVEYOR_SQLITE_SYNCHRONOUS": "NORMAL"})
    try:
        assert synchronous_of(runtime) == LEVEL["NORMAL"]
    finally:
        runtime.close()


@pytest.mark.parametrize("value", ["full", "SAFE", "", 2])
def test_another_value_is_refused_naming_the_key(tmp_path: Path, value: object) -> None:
    with pytest.raises(ValidationError) as refused:
        build(tmp_path, sqlite_synchronous=value)
    assert refused.value.fields == ("sqlite_synchronous",)
    assert "must be one of OFF, NORMAL, FULL, EXTRA" in str(refused.value)
