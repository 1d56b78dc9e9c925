"""Every background loop of a worker process rides out a PostgreSQL outage as the
worker's claim loop does: the process says once that the server went and once that
it came back, with no traceback, however many cron ticks, prunes, presence beats and
lease checks fail in between."""

from __future__ import annotations

import logging
import sys
import time
from pathlib import Path

import conveyor
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "faults"))
from fault_pg import PgCluster

pytestmark = pytest.mark.timeout(180)

OUTAGE_S = 8.0


def test_a_worker_with_cron_and_pruning_tells_a_postgresql_outage_in_two_lines(
    caplog: pytest.LogCaptureFixture,
) -> None:
    cluster = PgCluster().start()
    ran: list[str] = []
    try:
        runtime = conveyor.build(
            {
                "provider": "db",
                "url": cluster.url,
                "auto_migrate": True,
                "entry_points": False,
                # A short lease: the adapters' own retries (a quarter lease) give up
                # well within the outage, so it reaches every loop.
                "lease_ms": 2000,
                "workers": {"count": 2, "poll_interval_ms": 50},
                "retention": {"prune_interval_ms": 100},
                "cron": [
                    {"name": "tick", "schedule": "* * * * * *", "job_type": "tick"},
                    {"name": "tock", "schedule": "*/2 * * * * *", "job_type": "tick"},
                ],
            },
            handlers={"tick": lambda args: ran.append("tick")},
            env={},
        )
        with caplog.at_level(logging.DEBUG, logger="conveyor"), runtime:
            deadline = time.monotonic() + 20
            while not ran and time.monotonic() < deadline:
                time.sleep(0.1)
            assert ran, "cron enqueued nothing before the outage"
            caplog.clear()
            cluster.crash()
            time.sleep(OUTAGE_S)
            cluster.start()
            before = len(ran)
            deadline = time.monotonic() + 30
            while len(ran) == before and time.monotonic() < deadline:
                time.sleep(0.1)
            assert len(ran) > before, "no cron job ran after the server came back"
            time.sleep(1.0)
            records = [
                r for r in caplog.records if r.name.startswith("conveyor") and r.levelno >= logging.INFO
            ]
    finally:
        cluster.cleanup()
    lines = "\n".join(f"{r.levelname} {r.name}: {r.getMessage()}" for r in records)
    assert not [r for r in records if r.exc_info or r.exc_text], f"a traceback:\n{lines}"
    warnings = [r for r in records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "unreachable" in warnings[0].getMessage(), lines
    back = [r for r in records if "is back after" in r.getMessage()]
    assert len(back) == 1, lines
    # Cron's own note that slots fell behind during the outage may follow, once per entry.
    assert len(records) <= 6, lines


def test_the_pauses_while_a_server_is_away_double_to_their_cap_and_start_again() -> None:
    from conveyor.shell.outage import Backoff

    away = Backoff(0.1, 1.0)
    assert [away.next() for _ in range(6)] == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    away.reset()
    assert away.next() == 0.1
