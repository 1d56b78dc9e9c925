"""Cron across worker processes that are killed: every slot is enqueued exactly once.

Three `cron_node.py` processes tick the same every-second schedule on one real
backend, with no leader. While they run, one is SIGKILLed and restarted, then
another. Each process appends a line for every job its enqueues wrote; storage
is then read back by slot id. Exactly once means: every slot of the window has a
job, and no slot's job was written by two processes (or twice by one).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import conveyor
import pytest
from conveyor.core import slot_id

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

NODE = Path(__file__).resolve().parent / "cron_node.py"
ENTRY = "heartbeat"
REDIS_CRON_DB = 12


def backend_config(name: str, folder: Path) -> str:
    if name == "sqlite":
        return f'provider = "db"\nurl = "sqlite:///{folder / "jobs.db"}"\n'
    if name == "postgresql":
        from conveyor.testing.postgres_server import fresh_database

        url = fresh_database(prefix="conveyor_cron")
        return f'provider = "db"\nurl = "{url}"\nauto_migrate = true\n'
    from conveyor.testing.redis_server import redis_url

    prefix = f"cron-{uuid.uuid4().hex[:8]}"
    return f'provider = "redis"\n[redis]\nurl = "{redis_url(REDIS_CRON_DB)}"\nprefix = "{prefix}"\n'


@pytest.fixture(params=["sqlite", "postgresql", "redis"])
def site(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Path]:
    config = tmp_path / "conveyor.toml"
    backend = backend_config(request.param, tmp_path)
    head, _, redis_table = backend.partition("[redis]")
    config.write_text(
        head
        + textwrap.dedent(f"""
        entry_points = false
        lease_ms = 3000

        [workers]
        count = 1
        poll_interval_ms = 50

        [[cron]]
        name = "{ENTRY}"
        schedule = "* * * * * *"
        job_type = "tick"
        missed = "catch_up_one"
        """)
        + (f"\n[redis]{redis_table}" if redis_table else "")
    )
    if request.param == "postgresql":
        from conveyor.shell.migrate import migrate

        migrate(config)
    yield tmp_path


class Node:
    def __init__(self, site: Path) -> None:
        self.log = (site / f"node-{time.monotonic_ns()}.err").open("wb")
        self.popen = subprocess.Popen(
            [sys.executable, str(NODE), str(site / "conveyor.toml"), str(site / "ledger")],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )

    def ready(self, timeout_s: float = 60) -> Node:
        assert self.popen.stdout is not None
        deadline = time.monotonic() + timeout_s
        line = self.popen.stdout.readline()
        assert line.strip() == "ready" and time.monotonic() < deadline, self.stderr()
        return self

    def kill(self) -> None:
        self.popen.send_signal(signal.SIGKILL)
        self.popen.wait(10)

    def stop(self) -> int:
        self.popen.send_signal(signal.SIGTERM)
        return self.popen.wait(30)

    def stderr(self) -> str:
        self.log.flush()
        return Path(self.log.name).read_text(errors="replace")[-3000:]


def whole_seconds(start: datetime, end: datetime) -> list[datetime]:
    first = start.replace(microsecond=0) + timedelta(seconds=1)
    return [first + timedelta(seconds=n) for n in range(int((end - first).total_seconds()) + 1)]


def test_three_nodes_with_kills_enqueue_every_slot_exactly_once(site: Path) -> None:
    fleet = [Node(site) for _ in range(3)]
    for node in fleet:
        node.ready()
    covered_from = datetime.now(UTC)
    for _ in range(2):
        time.sleep(2.5)
        fleet.pop(0).kill()  # SIGKILL: no chance to stop its ticker or finish a write
        fleet.append(Node(site))
        fleet[-1].ready()
    time.sleep(2.5)
    covered_to = datetime.now(UTC)
    for node in fleet:
        assert node.stop() == 0, node.stderr()

    lines = [line.split() for line in (site / "ledger").read_text().splitlines()]
    writes = Counter(job_id for kind, job_id, *_ in lines if kind == "enqueued")
    twice = {job_id: n for job_id, n in writes.items() if n > 1}
    assert not twice, f"slots whose job was written more than once: {twice}"

    slots = whole_seconds(covered_from, covered_to - timedelta(seconds=1))
    assert len(slots) >= 6
    runtime = conveyor.build(site / "conveyor.toml")
    try:
        missing = [s for s in slots if runtime.get(slot_id(ENTRY, s)) is None]
    finally:
        runtime.close()
    assert not missing, f"slots with no job: {[s.isoformat() for s in missing]}"
    assert {str(slot_id(ENTRY, s)) for s in slots} <= set(writes)
