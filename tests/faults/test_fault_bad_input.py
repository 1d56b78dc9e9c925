"""Bad input: each gets a clear error, nothing else is lost, and the worker keeps running.

Payloads are written straight into the backend's storage (the SQL `payload`
column, the Redis job hash's `body`) under a job that was enqueued normally, as a
foreign producer, a corrupted disk or an attacker with write access would leave
them. Names and sizes are checked at the front door, `create_job` and
`Runtime.enqueue`.
"""

from __future__ import annotations

import json
import pickle
import sys
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
import sqlalchemy as sa
from conveyor.core import JobStatus, Policies, RequeuePolicy, ValidationError, create_job
from conveyor.core.validation import DEFAULT_MAX_ARGS_BYTES
from conveyor.shell.codec import to_document
from conveyor.shell.config import load_config
from conveyor.shell.registry import Registry
from conveyor.shell.runtime import Runtime
from conveyor.shell.worker.loop import WorkerPool
from fault_harness import Site, wait_until
from fault_worker import JOB_TYPE

pytestmark = pytest.mark.timeout(60)


class Running:
    """A worker pool in this process on the site's backend, with a handler for `work`
    only. Leaving the block checks the pool is still running, then stops it."""

    def __init__(self, site: Site, policies: Policies = Policies()) -> None:
        self.site = site
        self.ran: list[Mapping[str, Any]] = []
        registry = Registry({JOB_TYPE: self._work})
        self.pool = WorkerPool(
            site.queue,
            site.store,
            registry,
            worker_count=2,
            poll_interval_ms=20,
            promote_interval_ms=100,
            policies=policies,
        )

    def _work(self, args: Mapping[str, Any]) -> Any:
        self.ran.append(dict(args))
        return {"ok": True}

    def __enter__(self) -> Running:
        self.pool.start()
        return self

    def __exit__(self, *exc: object) -> None:
        alive = [t.is_alive() for t in self.pool._threads]
        self.pool.stop(5)
        if exc[0] is None:
            assert alive and all(alive), "every worker thread is still running"

    def settle(self, *ids: UUID, timeout_s: float = 20) -> None:
        """Wait until each job has a terminal record."""

        def settled() -> bool:
            return all((r := self.site.store.get(i)) and r.status.is_terminal for i in ids)

        wait_until(settled, timeout_s=timeout_s, what=f"{len(ids)} jobs to settle")

    def still_works(self) -> None:
        """A good job enqueued now completes."""
        job = self.site.job()
        self.site.queue.enqueue(job)
        self.settle(job.id)
        assert self.site.store.get(job.id).status is JobStatus.COMPLETED


def document(**changes: Any) -> dict[str, Any]:
    """A valid wire document of a `work` job, with `changes` applied."""
    job = create_job(id=UUID(int=0), job_type=JOB_TYPE, now=_now()).unwrap()
    return {**to_document(job), **changes}


def forged(site: Site, **changes: Any) -> UUID:
    """Plant a valid document with `changes`, under its carrier's id."""
    job_id = site.plant("placeholder")
    return site.overwrite(job_id, json.dumps(document(**{"id": str(job_id), **changes})))


def _now() -> datetime:
    return datetime.now(UTC)


def assert_decode_error(site: Site, job_id: UUID, *reason: str) -> None:
    dead = site.store.get(job_id)
    assert dead is not None and dead.status is JobStatus.FAILED, f"{job_id}: {dead!r}"
    assert dead.last_error is not None and dead.last_error.type == "decode-error"
    assert not dead.last_error.retryable
    for part in reason:
        assert part in dead.last_error.message, dead.last_error.message


def assert_good_ones_completed(site: Site, good: list[Any], running: Running) -> None:
    assert all(site.store.get(j.id).status is JobStatus.COMPLETED for j in good)
    assert {r["key"] for r in running.ran} >= {str(j.id) for j in good}
    c = site.counts()
    assert (c.ready, c.scheduled, c.in_flight) == (0, 0, 0), c


# ---- pickles and code ---------------------------------------------------------------


class Exploit:
    """Unpickling this creates the marker file: proof that something unpickled it."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> Any:
        return (open, (str(self.marker), "w"))


def test_a_pickle_payload_is_dead_lettered_as_decode_error_and_never_unpickled(
    site: Site, tmp_path: Path
) -> None:
    marker = tmp_path / "unpickled"
    good = site.produce(3)
    # Text-safe protocol 0 for the SQL text column; a binary pickle on Redis.
    blob = (
        pickle.dumps(Exploit(marker), protocol=5)
        if site.name == "redis"
        else pickle.dumps(Exploit(marker), protocol=0).decode("ascii")
    )
    pickle.loads(pickle.dumps(Exploit(tmp_path / "probe"))).close()
    assert (tmp_path / "probe").exists(), "the exploit works when something does unpickle it"
    bad = site.plant(blob)
    good += site.produce(3)
    with Running(site) as running:
        running.settle(bad, *(j.id for j in good))
        assert_decode_error(site, bad, "not JSON")
        running.still_works()
    assert not marker.exists(), "the payload was unpickled"
    assert_good_ones_completed(site, good, running)


def test_a_payload_naming_code_imports_nothing_and_runs_no_handler(
    site: Site, tmp_path: Path
) -> None:
    marker = tmp_path / "ran"
    assert "this" not in sys.modules
    # A job type that is a module name, and one that is an import path (never a valid name).
    module_named = site.job()
    site.queue.enqueue(
        create_job(
            id=module_named.id,
            job_type="this",
            args={"cmd": f"touch {marker}"},
            now=_now(),
        ).unwrap()
    )
    import_path = forged(site, job_type="subprocess:run", args={"args": ["touch", str(marker)]})
    good = site.produce(3)
    # No handler anywhere: give up at once instead of waiting for another node.
    policies = Policies(requeue=RequeuePolicy(requeue_delay_ms=10, max_requeue_age_ms=0))
    with Running(site, policies) as running:
        running.settle(module_named.id, import_path, *(j.id for j in good))
        no_handler = site.store.get(module_named.id)
        assert no_handler.status is JobStatus.FAILED
        assert no_handler.last_error.type == "no-handler"
        assert_decode_error(site, import_path, "job_type")
        running.still_works()
    assert "this" not in sys.modules, "a job type was imported"
    assert not marker.exists()
    assert all(set(r) == {"key"} for r in running.ran), "only `work` jobs reached a handler"
    assert_good_ones_completed(site, good, running)


# ---- names and sizes ------------------------------------------------------------------

HOSTILE = {
    "quote": "it's\"",
    "semicolon": "a;DROP TABLE conveyor_job_queue",
    "nul": "a\x00b",
    "10kb": "a" * 10_240,
    "brace": "{conveyor}",
    "colon": "queue:default:normal",
    "empty": "",
    "space": "a b",
}


@pytest.mark.parametrize("field", ["queue", "job_type"])
@pytest.mark.parametrize("name", HOSTILE.values(), ids=HOSTILE.keys())
def test_create_job_rejects_a_hostile_name_naming_the_field(field: str, name: str) -> None:
    options: dict[str, Any] = {"job_type": "work", "queue": "default", field: name}
    result = create_job(id=UUID(int=1), now=_now(), **options)
    error = result.failure()
    assert isinstance(error, ValidationError)
    assert error.fields == (field,)
    assert field in str(error)


def runtime(site: Site) -> Runtime:
    config = load_config({"provider": "memory", "entry_points": False}, env={})
    return Runtime(config, site.queue, site.store, Registry({JOB_TYPE: lambda args: None}))


def test_hostile_names_are_refused_at_enqueue_and_nothing_is_stored(site: Site) -> None:
    rt = runtime(site)
    for name in HOSTILE.values():
        with pytest.raises(ValidationError) as queue_error:
            rt.enqueue(JOB_TYPE, {}, queue=name)
        assert queue_error.value.fields == ("queue",)
        with pytest.raises(ValidationError) as type_error:
            rt.enqueue(name, {})
        assert type_error.value.fields == ("job_type",)
    counts = site.queue.counts(_now()).values()
    assert all(c.ready + c.scheduled + c.in_flight == 0 for c in counts), "nothing was stored"


def args_of_size(size: int) -> dict[str, Any]:
    """Args whose compact UTF-8 JSON is exactly `size` bytes."""
    overhead = len(json.dumps({"key": "", "blob": ""}, separators=(",", ":")))
    return {"blob": "x" * (size - overhead)}


def test_args_over_the_size_limit_are_refused_at_enqueue_and_exactly_the_limit_runs(
    site: Site,
) -> None:
    rt = runtime(site)
    with pytest.raises(ValidationError) as error:
        rt.enqueue(JOB_TYPE, {"key": "", **args_of_size(DEFAULT_MAX_ARGS_BYTES + 1)})
    assert error.value.fields == ("args",)
    assert f"the limit is {DEFAULT_MAX_ARGS_BYTES} bytes" in str(error.value)
    assert "xxxx" not in str(error.value), "the message does not echo the args"
    assert sum(c.ready for c in site.queue.counts(_now()).values()) == 0

    at_limit = rt.enqueue(JOB_TYPE, {"key": "", **args_of_size(DEFAULT_MAX_ARGS_BYTES)})
    with Running(site) as running:
        running.settle(at_limit.id)
    assert site.store.get(at_limit.id).status is JobStatus.COMPLETED
    [args] = running.ran
    assert len(json.dumps(args, separators=(",", ":")).encode()) == DEFAULT_MAX_ARGS_BYTES


# ---- malformed and forged payloads ----------------------------------------------------


def nested_args(depth: int) -> str:
    text = json.dumps(document(), separators=(",", ":"))
    return text.replace('"args":{}', '"args":{"x":' + "[" * depth + "]" * depth + "}")


MALFORMED = {
    "nested-100000": ("[" * 100_000 + "]" * 100_000, "RecursionError"),
    "args-nested-100": (None, "$.args"),
    "nan": (None, "NaN is not valid JSON"),
    "infinity": (None, "Infinity is not valid JSON"),
    "truncated": ('{"v":1,"id":', "not JSON"),
    "not-an-object": ("[1,2,3]", "expected a JSON object"),
    "other-version": (None, "unknown format version 2"),
}


@pytest.mark.parametrize("case", MALFORMED, ids=MALFORMED)
def test_a_malformed_json_payload_is_dead_lettered_as_decode_error(site: Site, case: str) -> None:
    payload, reason = MALFORMED[case]
    good = site.produce(2)
    if case == "args-nested-100":
        bad = site.plant("placeholder")
        site.overwrite(bad, nested_args(100).replace(str(UUID(int=0)), str(bad)))
    elif case in ("nan", "infinity"):
        bad = forged(site, args={"x": float("nan") if case == "nan" else float("inf")})
    elif case == "other-version":
        bad = forged(site, v=2)
    else:
        assert payload is not None
        bad = site.plant(payload)
    with Running(site) as running:
        running.settle(bad, *(j.id for j in good))
        assert_decode_error(site, bad, reason)
        running.still_works()
    assert_good_ones_completed(site, good, running)


INVALID_UTF8 = b'{"v":1,"id":"\xff\xfe","args":{"secret":"\xc3\x28"}}'


def test_an_invalid_utf8_payload_is_dead_lettered_and_does_not_wedge_the_queue(
    site: Site, request: pytest.FixtureRequest
) -> None:
    if site.name == "postgresql":
        # PostgreSQL itself refuses to store it in a UTF8 database: nothing to decode.
        with pytest.raises(sa.exc.DataError, match="invalid byte sequence"):
            site.plant(INVALID_UTF8)
        return
    bad = site.plant(INVALID_UTF8)
    good = site.produce(2)
    with Running(site) as running:
        running.settle(bad, *(j.id for j in good), timeout_s=5)
        # Redis hands back the raw bytes (not UTF-8, so not JSON); SQLite's driver hands
        # back text with the bad bytes escaped, which parses but is no job document.
        reason = "not a job document" if site.name == "sqlite" else "not JSON"
        assert_decode_error(site, bad, reason)
    assert_good_ones_completed(site, good, running)


FORGED = {
    "unknown-status": ({"status": "hacked"}, "expected JobStatus @ $.status"),
    "negative-attempt": ({"attempt": -1}, "attempt: must be >= 0"),
    "negative-retries": ({"retry_count": -3}, "retry_count: must be >= 0"),
    "bool-attempt": ({"attempt": True}, "$.attempt"),
    "negative-reclaims": (
        {"metadata": {"first_missing_at": None, "requeue_count": 0, "reclaim_count": -5}},
        "counters must be >= 0",
    ),
    # A record claiming to be claimed already, under a lease taken in the far future.
    "far-future-lease": (
        {"status": "running", "started_at": "9999-12-31T23:59:59+00:00"},
        "no move from 'running'",
    ),
    "time-out-of-range": ({"run_at": "10000-01-01T00:00:00+00:00"}, "$.run_at"),
    "naive-time": ({"created_at": "2026-01-01T00:00:00"}, "$.created_at"),
    "hostile-queue": ({"queue": "a'; DROP TABLE x;--"}, "queue: may hold only"),
    "other-job": ({"id": str(UUID(int=7))}, str(UUID(int=7))),
}


@pytest.mark.parametrize("case", FORGED, ids=FORGED)
def test_a_forged_field_is_dead_lettered_as_decode_error_and_the_worker_keeps_going(
    site: Site, case: str
) -> None:
    changes, reason = FORGED[case]
    good = site.produce(2)
    bad = forged(site, **changes)
    with Running(site) as running:
        running.settle(bad, *(j.id for j in good))
        assert_decode_error(site, bad, reason)
        running.still_works()
    assert not running.ran or all(r.get("key") != str(bad) for r in running.ran)
    assert_good_ones_completed(site, good, running)


def test_lease_fields_forged_into_a_payload_are_ignored_the_claim_holds_the_lease(
    site: Site,
) -> None:
    lease = {"locked_at": "9999-01-01T00:00:00+00:00", "lease_ms": 10**15, "locked_by": "me"}
    bad = forged(site, **lease)
    with Running(site) as running:
        running.settle(bad)
    assert site.store.get(bad).status is JobStatus.COMPLETED
    assert site.counts().in_flight == 0


# ---- values no encoder or clock can take ------------------------------------------------

UNENCODABLE = {
    "int-5000-digits": ({"n": 10**5000}, {}),
    "surrogate-key": ({"\ud800": 1}, {}),
    "surrogate-value": ({"k": "\udc00"}, {}),
    "delay-9999-years": ({}, {"delay": timedelta(days=9999 * 365)}),
    "run-at-past-9999-in-utc": (
        {},
        {"run_at": datetime.max.replace(tzinfo=timezone(-timedelta(hours=1)))},
    ),
}


@pytest.mark.parametrize("case", UNENCODABLE, ids=UNENCODABLE)
def test_a_value_json_or_datetime_cannot_take_is_refused_at_enqueue_naming_the_field(
    site: Site, case: str
) -> None:
    args, options = UNENCODABLE[case]
    with pytest.raises(ValidationError) as error:
        runtime(site).enqueue(JOB_TYPE, args, **options)
    assert error.value.fields == (("args",) if args else tuple(options))
    assert "\n" not in str(error.value)
    assert sum(c.ready + c.scheduled for c in site.queue.counts(_now()).values()) == 0


@pytest.mark.parametrize("seconds", [float("nan"), float("inf"), 1e20], ids=["nan", "inf", "1e20"])
def test_a_delay_of_seconds_no_timedelta_can_hold_is_refused_at_enqueue(
    site: Site, seconds: float
) -> None:
    with pytest.raises(ValidationError) as error:
        runtime(site).enqueue(JOB_TYPE, {}, delay=seconds)
    assert error.value.fields == ("delay",)
