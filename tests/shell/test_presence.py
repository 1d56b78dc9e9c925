"""The live-workers list on every backend: a process that died without leaving (a
SIGKILL, the OOM killer) is forgotten by a later beat, so the list does not grow with
every crash for as long as the installation lives."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import conveyor
import pytest
from backends import BACKENDS, REDIS_TEST_DB
from conveyor.shell.presence import WorkerInfo
from conveyor.shell.runtime.presence_beat import FORGET_AFTER, PRESENCE_TTL


def _config(name: str, folder: Path) -> dict[str, Any]:
    base: dict[str, Any] = {"entry_points": False, "workers": {"count": 0}}
    if name == "memory":
        return {**base, "provider": "memory"}
    if name == "sqlite":
        return {**base, "url": f"sqlite:///{folder / 'jobs.db'}"}
    if name == "postgresql":
        from conveyor.testing.postgres_server import fresh_database

        return {**base, "url": fresh_database(prefix="conveyor_presence"), "auto_migrate": True}
    from conveyor.testing.redis_server import redis_url

    prefix = f"presence-{uuid.uuid4().hex[:8]}"
    return {
        **base,
        "provider": "redis",
        "redis": {"url": redis_url(REDIS_TEST_DB), "prefix": prefix},
    }


def _info(worker_id: str, seen: datetime) -> WorkerInfo:
    return WorkerInfo(worker_id=worker_id, host="h", pid=1, queues=("default",), last_seen=seen)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_worker_gone_without_leaving_is_forgotten_after_a_while(
    backend: str, tmp_path: Path
) -> None:
    # A process killed never ran its `leave`: its entry stayed for ever (on Redis one
    # field per crash in one hash, read whole by every `status`).
    runtime = conveyor.build(_config(backend, tmp_path))
    presence = runtime.presence
    now = datetime.now(UTC)
    try:
        presence.beat(_info("crashed-long-ago", now - FORGET_AFTER - timedelta(minutes=1)))
        presence.beat(_info("crashed-lately", now - PRESENCE_TTL * 2))
        presence.beat(_info("alive", now))
        assert presence.forget(now - FORGET_AFTER) == 1
        kept = {w.worker_id for w in presence.live(now, FORGET_AFTER * 2)}
        assert kept == {"crashed-lately", "alive"}
        assert {w.worker_id for w in presence.live(now, PRESENCE_TTL)} == {"alive"}
    finally:
        runtime.close()


def test_a_starting_process_forgets_the_workers_gone_long_ago(tmp_path: Path) -> None:
    from conveyor.shell import outage
    from conveyor.shell.runtime.presence_beat import PresenceBeat

    runtime = conveyor.build(_config("sqlite", tmp_path))
    now = datetime.now(UTC)
    try:
        runtime.presence.beat(_info("crashed-long-ago", now - FORGET_AFTER * 2))
        beat = PresenceBeat(
            runtime.presence,
            "me",
            lambda: _info("me", datetime.now(UTC)),
            outage.for_server("SQLite", "test"),
        )
        beat.start()
        beat.stop()
        seen = {w.worker_id for w in runtime.presence.live(now, FORGET_AFTER * 4)}
    finally:
        runtime.close()
    assert "crashed-long-ago" not in seen


def test_a_heartbeat_failing_the_same_way_is_told_once_a_minute_not_every_beat(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A database file read-only to the worker logged a WARNING and a traceback every
    # 5 s for as long as the worker ran.
    from conveyor.shell import outage
    from conveyor.shell.runtime.presence_beat import PresenceBeat

    class ReadOnly:
        def beat(self, info: WorkerInfo) -> None:
            raise PermissionError("attempt to write a readonly database")

    beat = PresenceBeat(
        ReadOnly(),  # type: ignore[arg-type]
        "me",
        lambda: _info("me", datetime.now(UTC)),
        outage.for_server("SQLite", "test"),
    )
    with caplog.at_level("DEBUG", logger="conveyor.runtime"):
        for _ in range(5):
            beat.beat()
    warned = [r for r in caplog.records if r.levelname == "WARNING"]
    assert len(warned) == 1 and warned[0].exc_info is not None
    assert "attempt to write a readonly database" in warned[0].getMessage()
    assert sum(r.levelname == "DEBUG" for r in caplog.records) == 4
