"""A relative SQLite path in a config file is read from the file's folder, and the
commands that only read never create a database (SQLite, the `conveyor` CLI run as
a user runs it, from another directory than the project's)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import conveyor
import pytest
from conveyor.shell.config import load_config

CONVEYOR = [sys.executable, "-m", "conveyor.shell.cli"]


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("CONVEYOR_")}


def run(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CONVEYOR, *args], cwd=cwd, env=_env(), capture_output=True, text=True, timeout=60
    )


@pytest.fixture
def project(tmp_path: Path) -> Path:
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "conveyor.toml").write_text('provider = "db"\nurl = "sqlite:///jobs.db"\n')
    return folder


@pytest.fixture
def elsewhere(tmp_path: Path) -> Path:
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    return folder


def test_status_from_another_directory_reads_the_projects_database(
    project: Path, elsewhere: Path
) -> None:
    assert run(project, "enqueue", "x", "{}").returncode == 0
    result = run(elsewhere, "--config", str(project / "conveyor.toml"), "status", "--json")
    assert result.returncode == 0, result.stderr
    (row,) = [q for q in json.loads(result.stdout)["queues"] if q["queue"] == "default"]
    assert row["ready"] == 1
    assert list(elsewhere.iterdir()) == [], "nothing was created in the current directory"


def test_a_relative_config_path_reads_the_database_beside_the_file(
    project: Path, elsewhere: Path
) -> None:
    assert run(project, "enqueue", "x", "{}").returncode == 0
    relative = os.path.relpath(project / "conveyor.toml", elsewhere)
    result = run(elsewhere, "--config", relative, "jobs", "list", "--json")
    assert result.returncode == 0, result.stderr
    assert len(json.loads(result.stdout)) == 1


def test_the_file_path_is_read_from_the_files_folder_the_environment_from_the_shell(
    project: Path, elsewhere: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(elsewhere)
    from_file = load_config(project / "conveyor.toml", env={})
    assert from_file.url == f"sqlite:///{project / 'jobs.db'}"
    from_env = load_config(project / "conveyor.toml", env={"CONVEYOR_URL": "sqlite:///mine.db"})
    assert from_env.url == "sqlite:///mine.db", "the environment's path follows the shell"
    assert load_config({"url": "sqlite:///jobs.db"}, env={}).url == "sqlite:///jobs.db"


def test_the_default_database_of_a_config_file_is_beside_the_file(
    tmp_path: Path, elsewhere: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "conveyor.toml").write_text("lease_ms = 30000\n")
    monkeypatch.chdir(elsewhere)
    assert load_config(tmp_path / "conveyor.toml", env={}).url == (
        f"sqlite:///{tmp_path / 'conveyor.db'}"
    )


@pytest.mark.parametrize(
    "url",
    [
        "sqlite:////abs/jobs.db",
        "sqlite://",
        "sqlite:///:memory:",
        "sqlite:///file:jobs.db?mode=ro&uri=true",
        "postgresql+psycopg://u@h/db",
    ],
)
def test_only_a_relative_sqlite_file_path_changes(url: str) -> None:
    from conveyor.shell.config.paths import anchor_sqlite

    assert anchor_sqlite(url, Path("/srv/app")) == url


def test_a_relative_path_keeps_its_driver_and_query() -> None:
    from conveyor.shell.config.paths import anchor_sqlite

    assert anchor_sqlite("sqlite+pysqlite:///data/j.db?timeout=5", Path("/srv/app")) == (
        "sqlite+pysqlite:////srv/app/data/j.db?timeout=5"
    )


READ_ONLY = [
    ("status",),
    ("status", "--json"),
    ("jobs", "list"),
    ("job", "show", "6f1c1b8e-2f7d-4a63-9a56-0d1f3c6c9b11"),
    ("dead", "list"),
    ("dead", "show", "6f1c1b8e-2f7d-4a63-9a56-0d1f3c6c9b11"),
    ("cron", "list"),
    # Commands that act only on jobs already stored: with no database, none is there.
    ("prune",),
    ("prune", "--dry-run"),
    ("prune", "--older-than", "7d"),
    ("jobs", "cancel", "--queue", "default"),
    ("jobs", "cancel", "--queue", "default", "--dry-run"),
    ("job", "cancel", "6f1c1b8e-2f7d-4a63-9a56-0d1f3c6c9b11"),
    ("dead", "retry", "--all"),
    ("dead", "retry", "6f1c1b8e-2f7d-4a63-9a56-0d1f3c6c9b11"),
    ("dead", "purge", "--all", "--yes"),
    ("dead", "purge", "6f1c1b8e-2f7d-4a63-9a56-0d1f3c6c9b11"),
]


@pytest.mark.parametrize("argv", READ_ONLY, ids=[" ".join(a) for a in READ_ONLY])
def test_a_command_on_stored_jobs_creates_no_database(project: Path, argv: tuple[str]) -> None:
    result = run(project, *argv)
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"no database at {project / 'jobs.db'}" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert not (project / "jobs.db").exists()


def test_the_dashboard_creates_no_database(project: Path) -> None:
    pytest.importorskip("starlette")
    result = run(project, "dashboard", "--port", "1")
    assert result.returncode == 1, result.stderr
    assert "no database at" in result.stderr
    assert not (project / "jobs.db").exists()


def test_a_command_that_writes_still_creates_the_database(project: Path) -> None:
    assert run(project, "enqueue", "x", "{}").returncode == 0
    assert (project / "jobs.db").exists()
    rt = conveyor.build(project / "conveyor.toml")
    try:
        assert rt.status().queues[0].ready == 1
    finally:
        rt.close()


def test_a_relative_path_into_a_new_folder_is_made_beside_the_file(
    project: Path, elsewhere: Path
) -> None:
    (project / "conveyor.toml").write_text('provider = "db"\nurl = "sqlite:///data/jobs.db"\n')
    result = run(elsewhere, "--config", str(project / "conveyor.toml"), "enqueue", "x", "{}")
    assert result.returncode == 0, result.stderr
    assert (project / "data" / "jobs.db").exists()
    assert list(elsewhere.iterdir()) == []
