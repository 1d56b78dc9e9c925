"""The watchdog's settings and its pieces that need no server: `workers.stall_leases`
and `--stall-leases` (the flag wins, a bad value is refused naming it), the answer of
`/healthz` and `/readyz` as HTTP, and the liveness mark the supervisor reads."""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
from conveyor.core import Health, ValidationError
from conveyor.shell.cli.worker import _stall_policy
from conveyor.shell.config import load_config
from conveyor.shell.health import health_app
from conveyor.shell.liveness import LivenessMark, read_mark


def test_the_config_key_sets_the_leases_and_the_flag_wins() -> None:
    config = load_config({"lease_ms": 2000, "workers": {"stall_leases": 5}}, env={})
    assert config.workers.stall_leases == 5
    from_file = _stall_policy(argparse.Namespace(stall_leases=None), config)
    assert (from_file.stall_leases, from_file.limit_s) == (5, 10.0)
    assert _stall_policy(argparse.Namespace(stall_leases=0), config).enabled is False
    assert load_config({}, env={}).workers.stall_leases == 3


def test_a_negative_stall_leases_key_is_refused_naming_it() -> None:
    with pytest.raises(ValidationError) as caught:
        load_config({"workers": {"stall_leases": -1}}, env={})
    assert "workers.stall_leases" in str(caught.value)


def test_a_negative_stall_leases_flag_is_refused_naming_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from conveyor.shell import cli

    assert cli.main(["worker", "--stall-leases", "-2"]) == 2
    assert "--stall-leases" in capsys.readouterr().err


def _call(app: Any, path: str) -> tuple[str, dict[str, Any]]:
    said: list[str] = []
    body = b"".join(app({"PATH_INFO": path}, lambda status, headers: said.append(status)))
    return said[0], json.loads(body)


@pytest.mark.parametrize(
    ("health", "healthz", "readyz"),
    [
        (Health(True, True, "claiming"), "200 OK", "200 OK"),
        (Health(True, False, "stopping: ..."), "200 OK", "503 Service Unavailable"),
        (
            Health(False, False, "stalled: ..."),
            "503 Service Unavailable",
            "503 Service Unavailable",
        ),
    ],
    ids=["claiming", "draining", "stalled"],
)
def test_each_probe_answers_its_own_question_with_the_reason(
    health: Health, healthz: str, readyz: str
) -> None:
    app = health_app(lambda: health, lambda environ, start: [b"metrics"])
    body = {"live": health.live, "ready": health.ready, "reason": health.reason}
    assert _call(app, "/healthz") == (healthz, body)
    assert _call(app, "/readyz") == (readyz, body)
    assert b"".join(app({"PATH_INFO": "/metrics"}, lambda *a: None)) == b"metrics"


def test_the_mark_is_fresh_while_touched_and_carries_the_reason_once_stalled(
    tmp_path: Path,
) -> None:
    path = tmp_path / "0"
    assert read_mark(path) is None, "no mark before the copy made it"
    mark = LivenessMark(path)
    mark.touch()
    reading = read_mark(path)
    assert reading is not None and reading.reason == "" and reading.age_s < 1
    old = time.time() - 30
    os.utime(path, (old, old))
    reading = read_mark(path)
    assert reading is not None and 29 < reading.age_s < 40
    mark.report("stalled: worker loop 0: no progress for 185 s")
    mark.report("stalled: written once")
    reading = read_mark(path)
    assert reading is not None and reading.reason == "stalled: worker loop 0: no progress for 185 s"
