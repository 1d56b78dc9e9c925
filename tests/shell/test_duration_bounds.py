"""Every duration a config or a call gives is at most 100 years (`MAX_DURATION_MS`):
a longer one is refused as invalid input naming its field, where it used to be taken
and then crash the first computation of a date from it (`OverflowError` in a worker's
every round, in `prune`, in `drain`). 100 years itself works."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import conveyor
import pytest
from conveyor.core import LeasePolicy, RetentionPolicy, RetryPolicy, ValidationError
from conveyor.core.field_checks import MAX_DURATION_MS

TOO_LONG = MAX_DURATION_MS + 1

#: Each duration key of the config, as the mapping that sets it and its path.
KEYS: list[tuple[dict[str, Any], str]] = [
    ({"lease_ms": TOO_LONG}, "lease_ms"),
    ({"startup_timeout_ms": TOO_LONG}, "startup_timeout_ms"),
    ({"retention": {"completed_ms": TOO_LONG}}, "retention.completed_ms"),
    ({"retention": {"dead_ms": TOO_LONG}}, "retention.dead_ms"),
    ({"retention": {"prune_interval_ms": TOO_LONG}}, "retention.prune_interval_ms"),
    ({"retry": {"initial_delay_ms": TOO_LONG}}, "retry.initial_delay_ms"),
    ({"retry": {"max_delay_ms": TOO_LONG}}, "retry.max_delay_ms"),
    ({"requeue": {"requeue_delay_ms": TOO_LONG}}, "requeue.requeue_delay_ms"),
    ({"requeue": {"max_requeue_age_ms": TOO_LONG}}, "requeue.max_requeue_age_ms"),
    ({"workers": {"poll_interval_ms": TOO_LONG}}, "workers.poll_interval_ms"),
    ({"workers": {"promote_interval_ms": TOO_LONG}}, "workers.promote_interval_ms"),
    ({"workers": {"grace_ms": TOO_LONG}}, "workers.grace_ms"),
]


@pytest.mark.parametrize(("setting", "path"), KEYS, ids=[path for _, path in KEYS])
def test_a_config_duration_over_100_years_is_refused_naming_its_key(
    setting: dict[str, Any], path: str
) -> None:
    with pytest.raises(ValidationError) as refused:
        conveyor.build({"provider": "memory", **setting}, env={})
    fields = [error.field for error in refused.value.errors]
    assert fields == [path]
    assert "at most 3155760000000 (100 years)" in str(refused.value)


def test_the_redis_replica_wait_timeout_is_bounded_too() -> None:
    from conveyor.shell.config import parse_config

    with pytest.raises(ValidationError) as refused:
        parse_config({"provider": "redis", "redis": {"replica_wait_timeout_ms": TOO_LONG}})
    assert "100 years" in str(refused.value)
    assert "replica_wait_timeout_ms" in str(refused.value)


def test_the_core_policies_refuse_them_in_python_as_well() -> None:
    for make in (
        lambda: RetentionPolicy(completed_ms=TOO_LONG),
        lambda: RetryPolicy(max_delay_ms=TOO_LONG),
        lambda: LeasePolicy(lease_ms=TOO_LONG),
        lambda: LeasePolicy(lease_ms=float("inf")),
    ):
        with pytest.raises(ValidationError, match=r"100 years|must be a number"):
            make()


def test_100_years_works_where_a_longer_duration_crashed() -> None:
    config = {
        "provider": "memory",
        "lease_ms": MAX_DURATION_MS,
        "retention": {"completed_ms": MAX_DURATION_MS, "dead_ms": MAX_DURATION_MS},
    }
    rt = conveyor.build(config, handlers={"ok": lambda args: args["n"]}, env={})
    try:
        job = rt.enqueue("ok", {"n": 7})
        assert rt.drain().completed == 1
        assert rt.result(job.id, timeout=5) == 7
        assert rt.prune(dry_run=True) == 0
        assert rt.prune(older_than_ms=MAX_DURATION_MS, dry_run=True) == 0
        with pytest.raises(ValidationError, match="older_than_ms: must be at most"):
            rt.prune(older_than_ms=10**30, dry_run=True)
    finally:
        rt.close()


def _cli(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONVEYOR_")}
    env["CONVEYOR_URL"] = f"sqlite:///{folder / 'jobs.db'}"
    return subprocess.run(
        [sys.executable, "-m", "conveyor.shell.cli", *args],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize("older_than", ["800000d", "99999999999d"])
def test_prune_older_than_over_100_years_is_invalid_input(tmp_path: Path, older_than: str) -> None:
    assert _cli(tmp_path, "migrate").returncode == 0
    done = _cli(tmp_path, "prune", "--dry-run", "--older-than", older_than)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        f"conveyor: invalid input: --older-than: must be at most 100 years, got {older_than}"
    ]


def test_prune_older_than_a_bare_number_warns_that_it_reads_seconds(tmp_path: Path) -> None:
    assert _cli(tmp_path, "migrate").returncode == 0
    done = _cli(tmp_path, "prune", "--dry-run", "--older-than", "7")
    assert done.returncode == 0, done.stderr
    assert "would prune 0 records" in done.stdout
    assert "read as 7 seconds; give the unit (7s, 7d)" in done.stderr
    quiet = _cli(tmp_path, "prune", "--dry-run", "--older-than", "7d")
    assert "give the unit" not in quiet.stderr
