"""How a waiting process hears of a finish on Redis (`adapters.redis.finishes`): each
wait is registered with the server before its first read, a record goes to the inboxes
registered for its job and to no other, and registrations live as long as the waits."""

from __future__ import annotations

import asyncio
import os
import time
import uuid
import warnings
from collections.abc import Iterator
from typing import Any

import attrs
import conveyor
import pytest
import redis
from backends import REDIS_TEST_DB
from conveyor import ResultTimeout
from conveyor.core import JobStatus
from conveyor.shell.adapters.redis import finishes
from conveyor.shell.adapters.redis_queue import RedisJobStore
from conveyor.testing.redis_server import redis_url
from helpers import make_job

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def client() -> Iterator[redis.Redis]:
    made = redis.Redis.from_url(redis_url(REDIS_TEST_DB))
    yield made
    made.close()


@pytest.fixture
def prefix() -> str:
    return f"inbox-{uuid.uuid4().hex[:8]}"


def _store(prefix: str) -> RedisJobStore:
    """A store as one process opens it: its own client, so its own listener."""
    return RedisJobStore(redis_url(REDIS_TEST_DB), prefix)


def _finished(job: Any, status: JobStatus = JobStatus.COMPLETED) -> Any:
    return attrs.evolve(job, status=status, result="ok")


def _eventually(check: Any, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.05)
    return False


def test_a_wait_is_registered_before_its_watch_is_handed_over_and_its_final_record_ends_it(
    client: redis.Redis, prefix: str
) -> None:
    waiting, writing = _store(prefix), _store(prefix)
    job = make_job("work")
    waiters = waiting.keys.waiters(str(job.id))
    try:
        with waiting.watch_finished(job.id) as watch:
            assert len(client.smembers(waiters)) == 1, "registered before the first read"
            assert 0 < client.pttl(waiters) <= finishes.WAITER_KEEP_MS
            writing.record(_finished(job))
            assert watch.wait(10.0), "the record's push woke the waiter"
            carried = watch.take_carried()
            assert carried is not None and carried.status is JobStatus.COMPLETED
            assert carried.result == "ok", "the record came with the wake-up"
            assert client.exists(waiters) == 0, "a final record takes the registrations"
    finally:
        waiting.close()
        writing.close()


def test_a_record_goes_only_to_the_processes_waiting_for_its_job(
    client: redis.Redis, prefix: str
) -> None:
    one, other, writing = _store(prefix), _store(prefix), _store(prefix)
    mine, theirs = make_job("work"), make_job("work")
    try:
        with one.watch_finished(mine.id) as watch, other.watch_finished(theirs.id):
            # A bystander inbox registered for `theirs` only, popped by nobody.
            client.sadd(one.keys.waiters(str(theirs.id)), "bystander")
            writing.record(_finished(mine))
            assert watch.wait(10.0)
            writing.record(_finished(theirs))
            got = [m.decode().partition("\n")[0] for m in client.lrange(
                one.keys.inbox("bystander"), 0, -1)]  # fmt: skip
            assert got == [str(theirs.id)], "mine was never pushed to the bystander"
            assert 0 < client.pttl(one.keys.inbox("bystander")) <= finishes.INBOX_KEEP_MS
    finally:
        for store in (one, other, writing):
            store.close()


def test_a_record_that_is_not_final_keeps_the_registration(
    client: redis.Redis, prefix: str
) -> None:
    waiting, writing = _store(prefix), _store(prefix)
    job = make_job("work")
    try:
        with waiting.watch_finished(job.id) as watch:
            writing.record(attrs.evolve(job, status=JobStatus.PENDING))
            assert watch.wait(10.0)
            assert client.exists(waiting.keys.waiters(str(job.id))) == 1
            writing.record(_finished(job))
            assert watch.wait(10.0), "the final record still reached the wait"
    finally:
        waiting.close()
        writing.close()


def test_a_registration_is_renewed_while_its_wait_lasts_and_expires_after(
    client: redis.Redis, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(finishes, "WAITER_KEEP_MS", 1500)
    monkeypatch.setattr(finishes, "RENEW_S", 0.2)
    monkeypatch.setattr(finishes, "_CHECK_S", 0.1)
    waiting = _store(prefix)
    job = make_job("work")
    waiters = waiting.keys.waiters(str(job.id))
    try:
        with waiting.watch_finished(job.id):
            time.sleep(2.5)  # past the first registration's life
            assert client.exists(waiters) == 1, "renewed while the wait lasts"
        assert _eventually(lambda: client.exists(waiters) == 0, 5.0), "expired once it ended"
    finally:
        waiting.close()


def test_a_listener_that_lost_its_connection_registers_again_and_wakes_every_waiter(
    client: redis.Redis, prefix: str
) -> None:
    waiting = _store(prefix)
    job = make_job("work")
    waiters = waiting.keys.waiters(str(job.id))
    try:
        with waiting.watch_finished(job.id) as watch:

            def blocked() -> list[str]:
                # The listener's BLPOP on its inbox: the one blocking pop in this test's
                # database (the test process has a server of its own).
                return [c["id"] for c in client.client_list()
                        if c.get("cmd") == "blpop" and c.get("db") == str(REDIS_TEST_DB)]  # fmt: skip

            assert _eventually(lambda: bool(blocked())), "the listener blocks on its inbox"
            client.delete(waiters)  # as a restarted server without the key would be
            for found in blocked():
                client.client_kill_filter(_id=found)
            assert _eventually(lambda: client.exists(waiters) == 1), "registered again"
            assert watch.wait(10.0), "and every waiter woken to read its job"
    finally:
        waiting.close()


def test_the_result_of_a_job_already_finished_registers_no_wait(
    client: redis.Redis, prefix: str
) -> None:
    """Only a wait that waits costs a write: a job found finished at the first read is
    answered without registering (a registration no record would ever take back)."""
    runtime = conveyor.build(
        {"provider": "redis", "redis": {"url": redis_url(REDIS_TEST_DB), "prefix": prefix}},
        handlers={"work": lambda args: 5},
        env={},
    )
    try:
        job = runtime.enqueue("work", {})
        runtime.drain()
        assert runtime.result(job.id, timeout=5) == 5
        assert asyncio.run(runtime.aresult(job.id, timeout=5)) == 5
        assert client.keys(f"{{{prefix}}}:waiters:*") == []
        pending = runtime.enqueue("work", {}, delay=3600)
        with pytest.raises(ResultTimeout):
            runtime.result(pending.id, timeout=0)
        assert client.keys(f"{{{prefix}}}:waiters:*") == [], "a wait of no time does not wait"
    finally:
        runtime.close()


def test_an_aresult_cancelled_while_its_wait_registers_leaves_no_watch_behind(
    prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A wait cancelled (`asyncio.wait_for`, a request's timeout) while its watch is
    being made: the watch is closed once made, or the listener would renew its
    registration for the life of the process."""
    runtime = conveyor.build(
        {"provider": "redis", "redis": {"url": redis_url(REDIS_TEST_DB), "prefix": prefix}},
        handlers={"work": lambda args: 5},
        env={},
    )
    store: Any = runtime.store
    real, made = store.watch_finished, []

    def slow_watch(job_id: Any) -> Any:
        time.sleep(0.3)  # a registration on a slow link
        made.append(real(job_id))
        return made[-1]

    monkeypatch.setattr(store, "watch_finished", slow_watch)
    job = runtime.enqueue("work", {}, delay=3600)

    async def cancelled_wait() -> None:
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(runtime.aresult(job.id, timeout=30), 0.1)
        await asyncio.sleep(0.6)  # the registration's thread has finished meanwhile

    try:
        asyncio.run(cancelled_wait())
        assert made, "the wait got as far as making its watch"
        assert store._finishes.signals.watched() == [], "and that watch was closed"
    finally:
        runtime.close()


def test_a_process_forked_from_a_waiting_one_waits_through_an_inbox_of_its_own(
    prefix: str,
) -> None:
    """A forked child shares its parent's store object but not its threads: it makes an
    inbox and a listener of its own (sharing the parent's, the two would pop each
    other's messages, or the child would think a listener runs that does not)."""
    waiting, writing = _store(prefix), _store(prefix)
    theirs, mine = make_job("work"), make_job("work")
    ready_r, ready_w = os.pipe()
    try:
        with waiting.watch_finished(theirs.id):  # the parent waits: its listener runs
            parent_inbox = next(iter(redis.Redis.from_url(redis_url(REDIS_TEST_DB)).smembers(
                waiting.keys.waiters(str(theirs.id)))))  # fmt: skip
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)  # fork with threads
                pid = os.fork()
            if pid == 0:  # the child
                code = 1
                try:
                    with waiting.watch_finished(mine.id) as watch:
                        os.write(ready_w, b"x")
                        child_inbox = waiting._finishes.name.encode()
                        if watch.wait(10.0) and child_inbox != parent_inbox:
                            code = 0
                finally:
                    os._exit(code)
            assert os.read(ready_r, 1) == b"x"
            writing.record(_finished(mine))
            _, status = os.waitpid(pid, 0)
            assert os.waitstatus_to_exitcode(status) == 0, "the child was woken on its own"
    finally:
        os.close(ready_r)
        os.close(ready_w)
        waiting.close()
        writing.close()
