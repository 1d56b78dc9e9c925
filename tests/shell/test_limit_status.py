"""`conveyor status` shows each limited queue's shares, caps in use and throttled work,
over a real SQLite file (the command called in-process; test_cli.py runs `status` in a
process of its own)."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from cli_support import call_main
from conveyor.shell.runtime import build
from helpers import make_job

CONFIG = """
provider = "db"
url = "sqlite:///{db}"
[workers]
queues = ["pay"]
[limits.pay]
fair = true
weights = {{ acme = 3 }}
[[limits.pay.caps]]
job_type = "charge"
per_partition = true
max_running = 1
[[limits.pay.rates]]
starts = 100
per_seconds = 60
"""


@pytest.fixture
def status(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Callable[..., str]:
    """`status(*flags)`: what `conveyor status` prints over a project of four `charge`
    jobs (three of acme, one of globex), two claimed (one per partition: the cap)."""
    (tmp_path / "conveyor.toml").write_text(CONFIG.format(db=tmp_path / "jobs.db"))
    monkeypatch.chdir(tmp_path)
    for name in os.environ:
        if name.startswith("CONVEYOR_"):
            monkeypatch.delenv(name)

    def conveyor(*args: str) -> str:
        result = call_main(capsys, *args)
        assert result.returncode == 0, result.stderr
        return result.stdout

    conveyor("migrate")
    for partition in ("acme", "acme", "acme", "globex"):
        conveyor("enqueue", "charge", "{}", "--queue", "pay", "--partition", partition)
    runtime = build(str(tmp_path / "conveyor.toml"))
    try:
        claims = runtime.queue.dequeue_limited(
            "pay", runtime.clock.now(), 10, runtime.limits["pay"]
        )
        assert len(claims.claims) == 2  # one per partition: the cap
    finally:
        runtime.close()
    return lambda *flags: conveyor("status", *flags)


def test_status_shows_shares_caps_in_use_and_what_each_partition_waits_for(
    status: Callable[..., str],
) -> None:
    text = status()
    assert "limits of queue pay (fair shares): 2 running, 2 ready held back" in text
    lines = {line.split()[0]: line.split() for line in text.splitlines() if line.strip()}
    assert lines["acme"][:5] == ["acme", "3", "100%", "2", "1"]
    assert "cap charge per partition full (1/1)" in lines["acme"][0] + " " + " ".join(
        lines["acme"][5:]
    )
    assert lines["globex"][:5] == ["globex", "1", "-", "0", "1"]
    assert any(
        line.split()[:5] == ["charge", "per", "partition", "acme", "1/1"]
        for line in text.splitlines()
    )
    rate = re.search(r"^all types: 100 per 60s +- +(\d+\.\d)/100 *$", text, re.M)
    assert rate is not None, text
    assert 98.0 <= float(rate[1]) <= 100.0


def test_status_json_carries_the_same_report(status: Callable[..., str]) -> None:
    [pay] = json.loads(status("--json"))["limits"]
    assert (pay["queue"], pay["fair"], pay["running"], pay["throttled"]) == ("pay", True, 2, 2)
    waits = {p["partition"]: p["waits"] for p in pay["partitions"]}
    assert waits == {"acme": "cap charge per partition full (1/1)", "globex": None}
    full = {(c["label"], c["partition"]): c["full"] for c in pay["caps"] if c["in_use"]}
    assert full == {
        ("charge per partition", "acme"): True,
        ("charge per partition", "globex"): True,
    }
    [rate] = pay["rates"]
    assert (rate["label"], rate["starts"], rate["empty"]) == ("all types: 100 per 60s", 100, False)
    assert 98.0 <= rate["tokens"] <= 100.0


class _ClaimsOnly:
    """A limited queue of someone else's making: it claims under limits but cannot
    report its usage."""

    def __init__(self, inner: object) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> object:
        if name == "limit_usage":
            raise AttributeError(name)
        return getattr(self._inner, name)


def test_a_queue_that_claims_under_limits_without_reporting_them_still_runs_them() -> None:
    from conveyor.core.limits import QueueLimits
    from conveyor.shell.adapters.memory import MemoryJobQueue, MemoryJobStore
    from conveyor.shell.ports import LimitedJobQueue, LimitReportingJobQueue
    from conveyor.shell.registry import Registry
    from conveyor.shell.worker.loop import Worker

    store = MemoryJobStore()
    queue = _ClaimsOnly(MemoryJobQueue(store))
    assert isinstance(queue, LimitedJobQueue) and not isinstance(queue, LimitReportingJobQueue)
    ran: list[int] = []
    worker = Worker(
        queue,
        store,
        Registry({"t": lambda a: ran.append(a["n"])}),
        limits=QueueLimits(max_running=1),
    )
    queue.enqueue_many([make_job("t", args={"n": n}) for n in range(3)])
    assert worker.drain() == 3 and sorted(ran) == [0, 1, 2]
    runtime = build({"provider": "memory", "limits": {"default": {"max_running": 1}}})
    runtime.queue = queue  # type: ignore[assignment]
    assert runtime.limit_reports(runtime.clock.now()) == ()


def test_status_json_lists_per_partition_rows_only_where_the_text_does(tmp_path: Path) -> None:
    # The JSON listed `charge per partition` for a partition running no `charge` job,
    # and a full bucket of a per-partition rate for each partition, used or not.
    config = {
        "provider": "db",
        "url": f"sqlite:///{tmp_path / 'jobs.db'}",
        "workers": {"queues": ["pay"]},
        "limits": {
            "pay": {
                "caps": [{"job_type": "charge", "per_partition": True, "max_running": 1}],
                "rates": [
                    {"job_type": "mail", "starts": 5, "per_seconds": 3600, "per_partition": True}
                ],
            }
        },
    }
    runtime = build(config, env={})
    try:
        runtime.enqueue("charge", {}, queue="pay", partition="acme")
        runtime.enqueue("mail", {}, queue="pay", partition="initech")
        runtime.enqueue("audit", {}, queue="pay", partition="globex")
        runtime.queue.dequeue_limited("pay", runtime.clock.now(), 10, runtime.limits["pay"])
        [pay] = runtime.status().to_dict()["limits"]
    finally:
        runtime.close()
    assert [(c["label"], c["partition"]) for c in pay["caps"]] == [
        ("charge per partition", "acme")
    ]
    assert [(r["partition"], round(r["tokens"])) for r in pay["rates"]] == [("initech", 4)]
