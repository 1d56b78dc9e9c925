"""The web dashboard over every backend, through Starlette's test client: each page
renders what the runtime holds, filters and paging work, actions act, and the
safety rules hold (read-only, authentication, CSRF, escaping, `/healthz`)."""

from __future__ import annotations

import base64
import html
import json
import logging
import os
import re
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any
from uuid import uuid4

import attrs
import conveyor
import pytest
import redis
from backends import REDIS_TEST_DB, Backend
from conveyor.core import CronEntry, JobStatus, ValidationError
from conveyor.core.limits import Cap, QueueLimits
from conveyor.dashboard import CSRF_COOKIE, CSRF_FIELD, BasicAuth, create_app
from conveyor.shell.config import Config
from conveyor.shell.dashboard import views
from conveyor.shell.presence import MemoryPresence, Presence, WorkerInfo
from conveyor.shell.registry import Registry
from conveyor.shell.runtime import Runtime
from conveyor.testing.clock import ManualClock
from helpers import T0
from starlette.applications import Starlette
from starlette.routing import Mount
from starlette.testclient import TestClient

SCRIPT = "<script>window.__xss=1</script>"
IMG = '<img src=x onerror="window.__xss=1">'


def ok(args: dict[str, Any]) -> dict[str, Any]:
    return {"echo": args}


def declined(args: dict[str, Any]) -> None:
    raise conveyor.Permanent(f"card declined {SCRIPT}{IMG}")


def _presence(backend: Backend) -> Presence:
    if backend.name in ("sqlite", "postgresql"):
        from conveyor.shell.presence import WORKERS, SqlPresence

        engine = backend.queue.engine
        with engine.begin() as conn:
            conn.execute(WORKERS.delete())
        return SqlPresence(engine)
    if backend.name == "redis":
        from conveyor.shell.presence import RedisPresence
        from conveyor.testing.redis_server import redis_url

        return RedisPresence(redis.Redis.from_url(redis_url(REDIS_TEST_DB)))
    return MemoryPresence()


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(T0 + timedelta(minutes=30, seconds=10))


@pytest.fixture
def rt(backend: Backend, clock: ManualClock) -> Runtime:
    """A runtime over the backend polling `default` and `mail`, with one cron entry."""
    config = Config(
        provider="memory",
        workers=attrs_evolve_workers(("default", "mail")),
        cron=(CronEntry(name="nightly", schedule="30 2 * * *", job_type="ok"),),
    )
    registry = Registry({"ok": ok, "declined": declined, "flaky": flaky})
    return Runtime(
        config,
        backend.queue,
        backend.store,
        registry,
        presence=_presence(backend),
        clock=clock,
        jitter=lambda: 0.5,
    )


def flaky(args: dict[str, Any]) -> None:
    raise ConnectionError("upstream timed out")


def attrs_evolve_workers(queues: tuple[str, ...]) -> Any:
    import attrs

    return attrs.evolve(Config().workers, queues=queues)


def client_for(rt: Runtime, **options: Any) -> TestClient:
    # These pages are tested for what they show: a read slowed past the 2 s deadline
    # by a busy machine must not turn one into the "not answered" page (the deadline
    # has its own tests, in test_dashboard_outage.py).
    options.setdefault("backend_timeout_s", 30.0)
    return TestClient(create_app(rt, **options))


@pytest.fixture
def client(rt: Runtime) -> TestClient:
    return client_for(rt)


CSRF_META = re.compile(r'<meta name="csrf-token" content="([^"]+)">')


def token(client: TestClient, prefix: str = "", **headers: str) -> str:
    """The CSRF token a page's forms carry (its cookie is kept by the client)."""
    found = CSRF_META.search(client.get(f"{prefix}/", headers=headers).text)
    assert found is not None and client.cookies.get(CSRF_COOKIE)
    return found.group(1)


def dead_letter(rt: Runtime, **options: Any) -> conveyor.Job:
    job = rt.enqueue("declined", {"card": "4242"}, max_retries=0, **options)
    rt.drain()
    view = rt.get(job.id)
    assert view is not None and view.dead
    return job


def post(client: TestClient, path: str, **form: str) -> Any:
    return client.post(path, data={CSRF_FIELD: token(client), **form}, follow_redirects=False)


# ---- pages render ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "heading"),
    [
        ("/", "Overview"),
        ("/jobs", "Jobs"),
        ("/dead", "Dead letters"),
        ("/dead/confirm?action=retry", "Retry dead letters"),
        ("/workers", "Workers"),
        ("/limits", "Limits"),
        ("/cron", "Cron"),
    ],
)
def test_each_page_renders(rt: Runtime, client: TestClient, path: str, heading: str) -> None:
    rt.enqueue("ok", {"n": 1})
    dead_letter(rt)
    answer = client.get(path)
    assert answer.status_code == 200
    assert f"<h1>{heading}</h1>" in answer.text


def test_healthz_answers_ok_without_authentication(rt: Runtime) -> None:
    answer = client_for(rt, auth=BasicAuth("ops", "pw")).get("/healthz")
    assert (answer.status_code, answer.json()) == (200, {"status": "ok"})


def test_healthz_is_503_when_the_backend_fails(rt: Runtime, monkeypatch: Any) -> None:
    def down(job_id: object) -> None:
        raise ConnectionError("server gone")

    monkeypatch.setattr(rt, "get", down)
    answer = client_for(rt).get("/healthz")
    assert answer.status_code == 503 and answer.json()["status"] == "unavailable"


# ---- overview -------------------------------------------------------------------------


def queue_row(html: str, queue: str) -> list[str]:
    row = re.search(rf'<tr data-queue="{queue}".*?</tr>', html, re.S)
    assert row is not None, html
    return [
        re.sub(r"<[^>]+>", "", cell).strip() for cell in re.findall(r"<td.*?</td>", row[0], re.S)
    ]


def test_the_overview_counts_each_queue_by_state(rt: Runtime, client: TestClient) -> None:
    dead_letter(rt, queue="mail")
    rt.enqueue("ok", {}, queue="mail")
    rt.enqueue("ok", {}, queue="mail", delay=3600)
    cells = queue_row(client.get("/").text, "mail")
    # queue, ready, scheduled, waiting, in flight, dead
    assert cells[:6] == ["mail", "1", "1", "0", "0", "1"]


def test_the_overview_splits_depth_by_priority(rt: Runtime, client: TestClient) -> None:
    rt.enqueue("ok", {}, queue="mail", priority="high")
    rt.enqueue("ok", {}, queue="mail", priority="high")
    rt.enqueue("ok", {}, queue="mail", priority="low")
    table = re.search(r'<table id="priorities">.*?</table>', client.get("/").text, re.S)
    assert table is not None
    rows = re.findall(r"<tr><td>mail</td><td>(\w+)</td><td class=\"num\">(\d+)</td>", table[0])
    assert rows == [("high", "2"), ("low", "1")]


def test_the_overview_shows_the_oldest_ready_jobs_age(
    rt: Runtime, client: TestClient, clock: ManualClock
) -> None:
    rt.enqueue("ok", {}, queue="mail")
    clock.advance(timedelta(seconds=90))
    assert queue_row(client.get("/").text, "mail")[6] == "1.5 min"


def test_the_overview_flags_a_queue_no_live_worker_polls(rt: Runtime, client: TestClient) -> None:
    rt.enqueue("ok", {}, queue="mail")
    page = client.get("/").text
    assert 'role="alert">No live worker polls mail' in page
    assert "no live worker polls this queue" in page


def test_the_overview_lists_live_workers_and_clears_the_flag(
    rt: Runtime, client: TestClient
) -> None:
    rt.enqueue("ok", {}, queue="mail")
    rt.presence.beat(WorkerInfo("web-1:42:abc", "web-1", 42, ("mail",), rt.clock.now()))
    page = client.get("/").text
    assert "<code>web-1:42:abc</code> polling mail" in page
    assert 'role="alert"' not in page
    assert queue_row(page, "mail")[7] == "1"


def test_the_throughput_chart_counts_finished_jobs_per_minute(
    rt: Runtime, client: TestClient, clock: ManualClock
) -> None:
    for _ in range(3):
        rt.enqueue("ok", {})
    rt.drain()
    minute = clock.now().strftime("%H:%M")
    clock.advance(timedelta(minutes=2))
    dead_letter(rt)
    page = client.get("/").text
    assert f"<title>{minute}: 3 completed</title>" in page
    assert f"<title>{clock.now().strftime('%H:%M')}: 1 failed</title>" in page
    assert "4 finished in the last hour" in page


def test_the_throughput_chart_leaves_out_jobs_finished_over_an_hour_ago(
    rt: Runtime, client: TestClient, clock: ManualClock
) -> None:
    rt.enqueue("ok", {})
    rt.drain()
    clock.advance(timedelta(minutes=61))
    assert "0 finished in the last hour" in client.get("/").text


def test_the_live_fragment_is_the_overview_without_the_page_around_it(
    rt: Runtime, client: TestClient
) -> None:
    rt.enqueue("ok", {}, queue="mail")
    fragment = client.get("/live/overview")
    assert fragment.status_code == 200
    assert "<html" not in fragment.text and 'data-queue="mail"' in fragment.text
    assert 'data-live="/live/overview"' in client.get("/").text


# ---- jobs -----------------------------------------------------------------------------


def listed_ids(html: str) -> list[str]:
    table = re.search(r'<table id="jobs">.*?</table>', html, re.S)
    assert table is not None
    return re.findall(r'<a href="/jobs/([0-9a-f-]{36})">', table[0])


@pytest.mark.parametrize(
    ("query", "wanted"),
    [
        ("queue=mail", {"mail-ready"}),
        ("state=failed", {"dead"}),
        ("state=dead", {"dead"}),
        ("state=pending", {"mail-ready", "tenant-ready"}),
        ("type=declined", {"dead"}),
        ("tenant=acme", {"tenant-ready", "tenant-done"}),
        ("state=completed&tenant=acme", {"tenant-done"}),
    ],
)
def test_the_jobs_listing_filters_by_queue_state_type_and_tenant(
    rt: Runtime, client: TestClient, query: str, wanted: set[str]
) -> None:
    done = rt.enqueue("ok", {}, tenant_id="acme")
    rt.drain()
    made = {
        "tenant-done": done,
        "dead": dead_letter(rt),
        "mail-ready": rt.enqueue("ok", {}, queue="mail"),
        "tenant-ready": rt.enqueue("ok", {}, tenant_id="acme"),
    }
    names = {str(job.id): name for name, job in made.items()}
    shown = [names.get(i, i) for i in listed_ids(client.get(f"/jobs?{query}").text)]
    assert set(shown) == wanted


def test_the_last_page_a_listing_reaches_links_to_no_page_it_refuses(
    rt: Runtime, client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    # At page 200 of a longer listing the "older" link led to page 201, refused (400).
    monkeypatch.setattr(views, "MAX_PAGE", 2)
    rt.enqueue_many("ok", [{"n": n} for n in range(views.PAGE_SIZE * 2 + 5)], queue="mail")
    last = client.get("/jobs?queue=mail&page=2").text
    assert 'rel="next"' not in last
    assert "narrow the filters to see older ones" in last
    assert client.get("/jobs?queue=mail&page=3").status_code == 400


def test_the_jobs_listing_is_paged_and_the_next_link_keeps_the_filters(
    rt: Runtime, client: TestClient
) -> None:
    jobs = rt.enqueue_many("ok", [{"n": n} for n in range(views.PAGE_SIZE + 5)], queue="mail")
    first = client.get("/jobs?queue=mail").text
    assert len(listed_ids(first)) == views.PAGE_SIZE
    assert 'href="/jobs?queue=mail&amp;page=2"' in first
    second = client.get("/jobs?queue=mail&page=2").text
    assert len(listed_ids(second)) == 5
    assert set(listed_ids(first)) | set(listed_ids(second)) == {str(j.id) for j in jobs}
    assert 'rel="next"' not in second


@pytest.mark.parametrize(
    ("query", "field"),
    [("state=finished", "state"), ("queue=no%20spaces", "queue"), ("page=0", "page")],
)
def test_a_bad_filter_is_a_400_naming_it(client: TestClient, query: str, field: str) -> None:
    answer = client.get(f"/jobs?{query}")
    assert answer.status_code == 400 and f"{field}:" in answer.text


# ---- one job --------------------------------------------------------------------------


def test_the_job_page_shows_the_attempt_timeline(rt: Runtime, client: TestClient) -> None:
    job = rt.enqueue("flaky", {}, max_retries=1)
    rt.drain()
    view = rt.get(job.id)
    assert view is not None and len(view.attempts) == 1
    first = view.attempts[0]
    page = client.get(f"/jobs/{job.id}").text
    assert "#1 retried" in page
    assert f"worker <code>{first.worker}</code>" in page
    assert 'ConnectionError: <span class="error-message">upstream timed out' in page
    assert "<summary>traceback</summary>" in page and "Traceback (most recent call last)" in page


def test_the_job_page_shows_a_running_jobs_claim_and_lease(rt: Runtime, client: TestClient) -> None:
    job = rt.enqueue("ok", {})
    claim = rt.queue.dequeue("default", rt.clock.now())
    assert claim is not None
    page = client.get(f"/jobs/{job.id}").text
    assert "running" in page and f"<code>{claim.token}</code>" in page
    lease_end = (claim.locked_at + rt._lease()).isoformat(timespec="seconds")
    assert f"<th>lease expires</th><td>{lease_end}</td>" in page
    assert "<th>attempt</th><td>1 (retries 0 of" in page, "the attempt it is in"
    listing = client.get("/jobs?state=running").text
    assert re.search(rf"{job.id}.*?<td class=\"num\">1</td>", listing, re.S)


def test_a_running_job_asked_to_stop_offers_no_second_cancel(
    rt: Runtime, client: TestClient
) -> None:
    # The Cancel button stayed, and pressing it again told of a new request.
    job = rt.enqueue("ok", {})
    assert rt.queue.dequeue("default", rt.clock.now()) is not None
    cancel_form = f'action="/jobs/{job.id}/cancel"'
    assert cancel_form in client.get(f"/jobs/{job.id}").text
    assert post(client, f"/jobs/{job.id}/cancel").status_code == 303
    page = client.get(f"/jobs/{job.id}").text
    assert "running</span> · cancel requested" in page
    assert cancel_form not in page


def test_the_job_page_shows_args_and_result_only_on_request(
    rt: Runtime, client: TestClient
) -> None:
    job = rt.enqueue("ok", {"secret": "hunter2"})
    rt.drain()
    plain = client.get(f"/jobs/{job.id}").text
    assert "hunter2" not in plain
    assert 'id="show-args"' in plain and 'id="show-result"' in plain
    shown = client.get(f"/jobs/{job.id}?args=1&result=1").text
    assert '<pre id="args">' in shown and "hunter2" in shown
    assert '<pre id="result">' in shown and "echo" in shown


def test_the_job_page_shows_a_result_as_the_json_it_is(rt: Runtime, client: TestClient) -> None:
    # It showed the frozen record's repr as a string: "FrozenMap({'greeting': ...})".
    rt.registry.register("greet", lambda args: {"greeting": "Grüße", "n": [1, 2]})
    job = rt.enqueue("greet", {"name": "Zoë"})
    rt.drain()
    shown = client.get(f"/jobs/{job.id}?args=1&result=1").text
    result = re.search(r'<pre id="result">(.*?)</pre>', shown, re.S)
    assert result is not None
    assert json.loads(html.unescape(result.group(1))) == {"greeting": "Grüße", "n": [1, 2]}
    assert "Grüße" in result.group(1) and "Zoë" in shown


@pytest.mark.parametrize("job_id", ["6f1c2a53-0d4e-4b7a-9a51-3c8e2f0b9d17", "not-a-uuid"])
def test_an_unknown_job_is_a_404(client: TestClient, job_id: str) -> None:
    assert client.get(f"/jobs/{job_id}").status_code == 404


def test_cancel_cancels_a_queued_job(rt: Runtime, client: TestClient) -> None:
    job = rt.enqueue("ok", {}, delay=3600)
    answer = post(client, f"/jobs/{job.id}/cancel")
    assert answer.status_code == 303 and "?done=cancelled&seal=" in answer.headers["location"]
    view = rt.get(job.id)
    assert view is not None and view.state is JobStatus.CANCELLED


# ---- dead letters ---------------------------------------------------------------------


def test_the_dead_letter_page_lists_and_counts_them(rt: Runtime, client: TestClient) -> None:
    jobs = [dead_letter(rt) for _ in range(2)]
    page = client.get("/dead").text
    assert "2 dead letter(s) match." in page
    assert all(str(job.id) in page for job in jobs)


def test_the_dead_letter_page_filters_by_queue_type_and_tenant(
    rt: Runtime, client: TestClient
) -> None:
    mail = dead_letter(rt, queue="mail")
    acme = dead_letter(rt, tenant_id="acme")
    plain = dead_letter(rt)
    by_queue = client.get("/dead?queue=mail").text
    assert "1 dead letter(s) match." in by_queue and str(mail.id) in by_queue
    assert str(plain.id) not in by_queue
    by_tenant = client.get("/dead?tenant=acme").text
    assert str(acme.id) in by_tenant and str(mail.id) not in by_tenant
    assert "3 dead letter(s) match." in client.get("/dead?type=declined").text
    assert "0 dead letter(s) match." in client.get("/dead?type=ok").text


def test_retry_revives_one_dead_letter(rt: Runtime, client: TestClient) -> None:
    job = dead_letter(rt)
    answer = post(client, "/dead/retry", job_id=str(job.id))
    assert answer.status_code == 303
    assert answer.headers["location"].startswith(f"/jobs/{job.id}?done=retried&n=1&seal=")
    view = rt.get(job.id)
    assert view is not None and view.state is JobStatus.PENDING


def test_retrying_a_job_that_is_not_a_dead_letter_is_a_409_as_purging_it_is(
    rt: Runtime, client: TestClient
) -> None:
    # A retry answered 400 (a bad request) where a purge of the same job answers 409.
    for job_id in (str(rt.enqueue("ok", {}).id), "6f1c2a53-0d4e-4b7a-9a51-3c8e2f0b9d17"):
        retried = post(client, "/dead/retry", job_id=job_id)
        assert retried.status_code == 409 and "is not a dead letter" in retried.text
        assert post(client, "/dead/purge", job_id=job_id).status_code == 409
    malformed = post(client, "/dead/retry", job_id="not-a-uuid")
    assert malformed.status_code == 400 and "job_id" in malformed.text


def test_purge_deletes_one_dead_letter(rt: Runtime, client: TestClient) -> None:
    gone, kept = dead_letter(rt), dead_letter(rt)
    answer = post(client, "/dead/purge", job_id=str(gone.id))
    assert answer.status_code == 303 and "done=purged&n=1" in answer.headers["location"]
    assert rt.get(gone.id) is None and rt.get(kept.id) is not None


def test_a_purge_button_leads_to_a_confirmation_not_to_the_purge(
    rt: Runtime, client: TestClient
) -> None:
    job = dead_letter(rt)
    for path in ("/dead", f"/jobs/{job.id}"):
        page = client.get(path).text
        assert f'href="/dead/purge?job_id={job.id}"' in page
        assert 'action="/dead/purge"' not in page  # no form there deletes at once
    confirm = client.get(f"/dead/purge?job_id={job.id}")
    assert confirm.status_code == 200 and "Purge dead letter" in confirm.text
    assert 'action="/dead/purge"' in confirm.text and str(job.id) in confirm.text
    view = rt.get(job.id)
    assert view is not None and view.dead


@pytest.mark.parametrize("job_id", ["", "nope", "0d9b6e4a-7c21-4f3e-8b65-1a2d3c4e5f60"])
def test_the_purge_confirmation_of_no_dead_letter_is_a_404(client: TestClient, job_id: str) -> None:
    assert client.get(f"/dead/purge?job_id={job_id}").status_code == 404


def test_a_bulk_action_first_shows_how_many_it_will_affect(rt: Runtime, client: TestClient) -> None:
    for _ in range(3):
        dead_letter(rt, queue="mail")
    dead_letter(rt)
    page = client.get("/dead/confirm?action=purge&queue=mail").text
    assert "This will purge <strong>3</strong> dead letter(s) matching" in page
    assert '<input type="hidden" name="queue" value="mail">' in page
    assert len(rt.list_dead()) == 4  # the confirmation page changes nothing


def test_bulk_retry_revives_every_dead_letter_matching_the_filter(
    rt: Runtime, client: TestClient
) -> None:
    matching = [dead_letter(rt, tenant_id="acme") for _ in range(3)]
    other = dead_letter(rt)
    answer = post(client, "/dead/bulk", action="retry", tenant="acme")
    assert answer.status_code == 303 and "done=retried&n=3" in answer.headers["location"]
    for job in matching:
        view = rt.get(job.id)
        assert view is not None and view.state is JobStatus.PENDING
    assert [j.id for j in rt.list_dead()] == [other.id]


def test_bulk_purge_with_no_filter_purges_every_dead_letter(
    rt: Runtime, client: TestClient
) -> None:
    for queue in ("default", "mail"):
        dead_letter(rt, queue=queue)
    answer = post(client, "/dead/bulk", action="purge")
    assert "done=purged&n=2" in answer.headers["location"]
    assert rt.list_dead() == []


AS_OF = re.compile(r'<input type="hidden" name="as_of" value="(\d+)">')


def test_a_bulk_action_acts_only_on_the_dead_letters_its_confirmation_counted(
    rt: Runtime, client: TestClient, clock: ManualClock
) -> None:
    # Confirmed "Purge 2"; three more died before the click, and five were purged.
    for _ in range(2):
        dead_letter(rt)
    page = client.get("/dead/confirm?action=purge").text
    assert "This will purge <strong>2</strong> dead letter(s)" in page
    found = AS_OF.search(page)
    assert found is not None, "the confirmation says as of when it counted"
    clock.advance(timedelta(seconds=1))
    later = [dead_letter(rt) for _ in range(3)]
    answer = post(client, "/dead/bulk", action="purge", as_of=found.group(1))
    assert "done=purged&n=2" in answer.headers["location"]
    assert sorted(str(j.id) for j in rt.list_dead()) == sorted(str(j.id) for j in later)


@pytest.mark.parametrize("as_of", ["9" * 20, "-5", "1e9"])
def test_a_bulk_action_s_moment_past_any_date_is_refused_by_name(
    rt: Runtime, client: TestClient, as_of: str
) -> None:
    # Twenty nines passed the check and overflowed: a 500.
    dead_letter(rt)
    answer = post(client, "/dead/bulk", action="purge", as_of=as_of)
    assert answer.status_code == 400
    assert "as_of" in answer.text
    assert len(rt.list_dead()) == 1


def test_a_bulk_purge_with_no_filter_takes_at_most_what_one_action_takes(
    rt: Runtime, client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The page promised 10,000 and "run it again for the rest"; all 10,050 went.
    from conveyor.shell.dashboard import actions, views

    monkeypatch.setattr(views, "BULK_LIMIT", 2)
    monkeypatch.setattr(actions, "BULK_LIMIT", 2, raising=False)
    for _ in range(3):
        dead_letter(rt)
    answer = post(client, "/dead/bulk", action="purge")
    assert "done=purged&n=2" in answer.headers["location"]
    assert len(rt.list_dead()) == 1


def test_bulk_purge_by_type_leaves_other_dead_letters(rt: Runtime, client: TestClient) -> None:
    dead_letter(rt)
    post(client, "/dead/bulk", action="purge", type="ok")
    assert len(rt.list_dead()) == 1


# ---- workers and cron ---------------------------------------------------------------


def test_the_workers_page_shows_heartbeats_queues_and_running_jobs(
    rt: Runtime, client: TestClient, clock: ManualClock
) -> None:
    rt.presence.beat(WorkerInfo("node-7:99:f00", "node-7", 99, ("default", "mail"), clock.now()))
    job = rt.enqueue("ok", {})
    assert rt.queue.dequeue("default", clock.now()) is not None
    clock.advance(timedelta(seconds=4))
    page = client.get("/workers").text
    assert "<code>node-7:99:f00</code>" in page and "default, mail" in page
    assert "4.0 s ago" in page
    running = re.search(r'<table id="running">.*?</table>', page, re.S)
    assert running is not None and str(job.id) in running[0]


def test_a_worker_whose_heartbeat_stopped_is_not_listed(
    rt: Runtime, client: TestClient, clock: ManualClock
) -> None:
    rt.presence.beat(WorkerInfo("gone:1:abc", "gone", 1, ("default",), clock.now()))
    clock.advance(timedelta(minutes=5))
    assert "gone:1:abc" not in client.get("/workers").text


# ---- limits ---------------------------------------------------------------------------


def _claim_limited(rt: Runtime, queue: str, want: int) -> int:
    return len(rt.queue.dequeue_limited(queue, rt.clock.now(), want, rt.limits[queue]).claims)


def test_the_limits_page_shows_shares_caps_in_use_and_throttled_work(
    rt: Runtime, client: TestClient
) -> None:
    rt.limits["pay"] = QueueLimits(
        fair=True, weights={"acme": 3}, caps=(Cap(2, "charge", per_partition=True),)
    )
    rt.enqueue_many("charge", [{}] * 5, queue="pay", partition="acme")
    rt.enqueue_many("charge", [{}] * 2, queue="pay", partition="globex")
    assert _claim_limited(rt, "pay", 10) == 4
    html = client.get("/limits").text
    section = re.search(r'<section class="limits" data-queue="pay">.*?</section>', html, re.S)
    assert section is not None, html
    rows = {
        cells[0]: cells[1:]
        for row in re.findall(r"<tr data-partition=.*?</tr>", section[0], re.S)
        if (
            cells := [
                re.sub(r"<[^>]+>", "", c).strip() for c in re.findall(r"<td.*?</td>", row, re.S)
            ]
        )
    }
    assert rows == {
        "acme": ["3", "100%", "3", "2", "cap charge per partition full (2/2)"],
        "globex": ["1", "-", "0", "2", "-"],
    }
    assert '<strong class="throttled">3</strong>' in section[0]
    assert "2 / 2" in section[0] and "<strong>full</strong>" in section[0]


def test_the_overview_says_when_limits_hold_work_back(rt: Runtime, client: TestClient) -> None:
    rt.limits["pay"] = QueueLimits(max_running=1)
    rt.enqueue_many("ok", [{}] * 3, queue="pay")
    assert "throttled" not in client.get("/live/overview").text
    assert _claim_limited(rt, "pay", 5) == 1
    notice = re.search(r'<p class="notice" id="throttled">(.*?)</p>', client.get("/").text, re.S)
    assert notice is not None
    assert re.sub(r"<[^>]+>", "", notice[1]) == "Limits hold back 2 ready jobs of pay: see Limits."


def test_the_limits_page_says_when_no_queue_has_limits(client: TestClient) -> None:
    assert 'id="no-limits"' in client.get("/limits").text


def test_the_cron_page_shows_each_entry_with_its_next_and_last_run(
    rt: Runtime, client: TestClient
) -> None:
    page = client.get("/cron").text
    assert "nightly" in page and "<code>30 2 * * *</code>" in page
    assert (T0 + timedelta(hours=2, minutes=30)).isoformat(timespec="seconds") in page


def test_run_now_enqueues_the_cron_entrys_job(rt: Runtime, client: TestClient) -> None:
    answer = post(client, "/cron/run", name="nightly")
    assert answer.status_code == 303
    job_id = answer.headers["location"].split("/jobs/")[1].split("?")[0]
    view = rt.get(job_id)
    assert view is not None and view.job is not None and view.job.job_type == "ok"


def test_run_now_of_an_unknown_entry_is_a_400(client: TestClient) -> None:
    answer = post(client, "/cron/run", name="nope")
    assert answer.status_code == 400 and "no cron entry" in answer.text


# ---- read-only ------------------------------------------------------------------------

ACTIONS = [
    ("/dead/retry", {}),
    ("/dead/purge", {}),
    ("/dead/bulk", {"action": "purge"}),
    ("/cron/run", {"name": "nightly"}),
    ("/jobs/{id}/cancel", {}),
]


@pytest.mark.parametrize(("path", "form"), ACTIONS)
def test_read_only_mode_refuses_every_action(rt: Runtime, path: str, form: dict[str, str]) -> None:
    job = dead_letter(rt)
    client = client_for(rt, read_only=True)
    answer = post(client, path.format(id=job.id), job_id=str(job.id), **form)
    assert answer.status_code == 403 and "read-only" in answer.text
    assert [j.id for j in rt.list_dead()] == [job.id]
    assert rt.queue.counts(rt.clock.now()) == {} or all(
        c.ready == 0 for c in rt.queue.counts(rt.clock.now()).values()
    )


def test_read_only_pages_offer_no_action_buttons(rt: Runtime) -> None:
    job = dead_letter(rt)
    client = client_for(rt, read_only=True)
    for path in ("/dead", f"/jobs/{job.id}", "/cron"):
        page = client.get(path).text
        assert 'method="post"' not in page and "read-only" in page


# ---- authentication -------------------------------------------------------------------


def basic(user: str, password: str) -> dict[str, str]:
    encoded = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"authorization": f"Basic {encoded}"}


@pytest.mark.parametrize("path", ["/", "/jobs", "/dead", "/workers", "/cron", "/live/overview"])
def test_a_page_without_basic_auth_is_refused_with_a_challenge(rt: Runtime, path: str) -> None:
    answer = client_for(rt, auth=BasicAuth("ops", "s3cret")).get(path)
    assert answer.status_code == 401
    assert answer.headers["www-authenticate"].startswith("Basic ")


def test_wrong_basic_auth_credentials_are_refused(rt: Runtime) -> None:
    client = client_for(rt, auth=BasicAuth("ops", "s3cret"))
    assert client.get("/", headers=basic("ops", "guess")).status_code == 401
    assert client.get("/", headers={"authorization": "Basic %%%"}).status_code == 401


def test_right_basic_auth_credentials_are_let_through(rt: Runtime) -> None:
    client = client_for(rt, auth=BasicAuth("ops", "s3cret"))
    assert client.get("/", headers=basic("ops", "s3cret")).status_code == 200


def test_an_action_without_authentication_is_refused(rt: Runtime) -> None:
    job = dead_letter(rt)
    client = client_for(rt, auth=BasicAuth("ops", "s3cret"))
    client.cookies.set(CSRF_COOKIE, "t" * 43)
    answer = client.post(
        "/dead/purge", data={CSRF_FIELD: "t" * 43, "job_id": str(job.id)}, follow_redirects=False
    )
    assert answer.status_code == 401
    assert rt.get(job.id) is not None


def test_an_auth_hook_decides_per_request(rt: Runtime) -> None:
    client = client_for(rt, auth=lambda request: request.headers.get("x-team") == "ops")
    assert client.get("/").status_code == 403
    assert client.get("/", headers={"x-team": "ops"}).status_code == 200


def test_basic_auth_parses_user_and_password() -> None:
    assert isinstance(BasicAuth.parse("ops:s3:cret"), BasicAuth)
    for bad in ("ops", ":pw", "ops:"):
        problem = BasicAuth.parse(bad)
        assert isinstance(problem, conveyor.core.FieldError) and problem.field == "--basic-auth"


# ---- CSRF -----------------------------------------------------------------------------


def test_pages_set_a_strict_same_site_http_only_csrf_cookie(client: TestClient) -> None:
    cookie = client.get("/").headers["set-cookie"].lower()
    assert cookie.startswith(f"{CSRF_COOKIE}=")
    assert "samesite=strict" in cookie and "httponly" in cookie


def test_forms_carry_a_token_signed_over_the_cookie_not_the_cookie_itself(
    rt: Runtime, client: TestClient
) -> None:
    dead_letter(rt)
    page = client.get("/dead").text
    value = client.cookies.get(CSRF_COOKIE)
    assert value and value not in page
    assert f'name="{CSRF_FIELD}" value="{token(client)}"' in page


@pytest.mark.parametrize("field", [None, "", "forged-token-forged-token-forged-token-x"])
def test_an_action_without_the_right_csrf_token_is_refused(
    rt: Runtime, client: TestClient, field: str | None
) -> None:
    job = dead_letter(rt)
    token(client)
    form = {"job_id": str(job.id)} | ({} if field is None else {CSRF_FIELD: field})
    answer = client.post("/dead/retry", data=form, follow_redirects=False)
    assert answer.status_code == 403 and "CSRF" in answer.text
    view = rt.get(job.id)
    assert view is not None and view.dead


def test_a_csrf_cookie_that_is_not_a_token_is_refused_even_when_the_field_repeats_it(
    rt: Runtime, client: TestClient
) -> None:
    job = dead_letter(rt)
    client.cookies.set(CSRF_COOKIE, "x")
    answer = client.post(
        "/dead/retry", data={CSRF_FIELD: "x", "job_id": str(job.id)}, follow_redirects=False
    )
    assert answer.status_code == 403


def test_an_oversized_action_form_is_refused(rt: Runtime, client: TestClient) -> None:
    job = dead_letter(rt)
    answer = post(client, "/dead/retry", job_id=str(job.id), padding="x" * 20_000)
    assert answer.status_code == 413
    view = rt.get(job.id)
    assert view is not None and view.dead


def test_an_action_without_the_csrf_cookie_is_refused(rt: Runtime, client: TestClient) -> None:
    job = dead_letter(rt)
    value = token(client)
    client.cookies.clear()
    answer = client.post(
        "/dead/retry", data={CSRF_FIELD: value, "job_id": str(job.id)}, follow_redirects=False
    )
    assert answer.status_code == 403
    view = rt.get(job.id)
    assert view is not None and view.dead


# ---- escaping -------------------------------------------------------------------------


def test_markup_in_args_and_errors_comes_out_escaped(rt: Runtime, client: TestClient) -> None:
    job = rt.enqueue("declined", {"note": SCRIPT, "pic": IMG}, tenant_id="t1", max_retries=0)
    rt.drain()
    pages = [
        client.get(path).text
        for path in ("/dead", f"/jobs/{job.id}?args=1&result=1", "/jobs?state=failed", "/")
    ]
    for page in pages:
        assert "<script>window" not in page and "<img src=x" not in page
    assert "&lt;script&gt;window.__xss=1&lt;/script&gt;" in pages[0]
    assert "&lt;img src=x onerror=" in pages[1]


def test_every_response_carries_a_content_security_policy(client: TestClient) -> None:
    headers = client.get("/").headers
    assert "script-src 'self'" in headers["content-security-policy"]
    assert headers["x-frame-options"] == "DENY"


# ---- mounting -------------------------------------------------------------------------


def test_the_app_mounts_under_a_prefix_and_links_within_it(rt: Runtime) -> None:
    job = dead_letter(rt)
    host = Starlette(routes=[Mount("/ops/jobs", app=create_app(rt))])
    client = TestClient(host)
    page = client.get("/ops/jobs/dead").text
    assert f'href="/ops/jobs/jobs/{job.id}"' in page
    assert 'action="/ops/jobs/dead/retry"' in page
    assert "/ops/jobs" in client.cookies.jar.__iter__().__next__().path
    answer = client.post(
        "/ops/jobs/dead/retry",
        data={CSRF_FIELD: token(client, "/ops/jobs"), "job_id": str(job.id)},
        follow_redirects=False,
    )
    assert answer.headers["location"].startswith("/ops/jobs/jobs/")


# ---- the listing behind the jobs page, and the command line ---------------------------


def test_list_jobs_keeps_only_the_tenants_jobs_queued_and_finished(rt: Runtime) -> None:
    done = rt.enqueue("ok", {}, tenant_id="acme")
    rt.drain()
    queued = rt.enqueue("ok", {}, tenant_id="acme")
    rt.enqueue("ok", {}, tenant_id="globex")
    rt.enqueue("ok", {})
    listed = [v.job_id for v in rt.list_jobs(tenant_id="acme")]
    assert listed == [str(queued.id), str(done.id)]


@pytest.mark.parametrize("limit", [-1, 2.5, True])
def test_list_jobs_refuses_a_limit_that_is_no_count(rt: Runtime, limit: object) -> None:
    rt.enqueue("ok", {})
    with pytest.raises(ValidationError, match="limit: must be an integer >= 0"):
        rt.list_jobs(limit=limit)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("argv", "field"),
    [
        (["dashboard", "--basic-auth", "no-colon"], "--basic-auth"),
        (["dashboard", "--port", "70000"], "--port"),
    ],
)
def test_the_dashboard_command_refuses_bad_input_in_one_line(
    argv: list[str], field: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from conveyor.shell import cli

    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"conveyor: invalid input: {field}") and err.count("\n") == 1


@pytest.mark.parametrize("missing", ["starlette", "jinja2", "uvicorn"])
def test_the_dashboard_command_without_its_extra_says_which_to_install(
    missing: str, tmp_path: Path
) -> None:
    # A None entry makes `import missing` fail as if it were not installed.
    code = (
        f"import sys; sys.modules[{missing!r}] = None\n"
        "from conveyor.shell.cli.command import main\n"
        "sys.exit(main(['dashboard']))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env={**os.environ, "CONVEYOR_PROVIDER": "memory"},
    )
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert f"needs {missing}: pip install 'conveyor-jobs[dashboard]'" in lines[0]


# ---- the store reads behind the pages ---------------------------------------------------


def test_the_chart_counts_every_job_finished_in_the_hour_however_many(
    rt: Runtime, client: TestClient, clock: ManualClock
) -> None:
    # More records than the chart once read (the newest 2,000), all in one minute.
    job = rt.enqueue("ok", {})
    rt.drain()
    record = rt.store.get(job.id)
    assert record is not None
    for _ in range(2_100):
        rt.store.record(attrs.evolve(record, id=uuid4()))
    page = client.get("/").text
    assert f"<title>{clock.now().strftime('%H:%M')}: 2101 completed</title>" in page
    assert "2101 finished in the last hour" in page


def test_dead_letters_filtered_by_type_are_counted_and_paged_by_the_store(
    rt: Runtime, client: TestClient
) -> None:
    for _ in range(views.PAGE_SIZE + 2):
        dead_letter(rt)
    rt.enqueue("flaky", {}, max_retries=0)
    rt.drain()
    assert client.get("/dead?type=declined&page=2").status_code == 200
    listed = views.dead_listing(rt, views.Filters(job_type="declined"), 2)
    assert listed[1] == views.PAGE_SIZE + 2
    assert len(listed[0].rows) == 2 and not listed[0].has_next
    other = views.dead_listing(rt, views.Filters(job_type="flaky"), 1)
    assert other[1] == 1 and other[0].rows[0].job_type == "flaky"


# ---- workers' current jobs --------------------------------------------------------------


def test_the_workers_page_shows_the_jobs_each_worker_is_running(
    rt: Runtime, client: TestClient, clock: ManualClock
) -> None:
    job = rt.enqueue("ok", {})
    assert rt.queue.dequeue("default", clock.now()) is not None
    info = WorkerInfo("node-7:99:f00", "node-7", 99, ("default",), clock.now(), (str(job.id),))
    rt.presence.beat(info)
    page = client.get("/workers").text
    workers = re.search(r'<table id="workers">.*?</table>', page, re.S)
    assert workers is not None and f'href="/jobs/{job.id}"' in workers[0]
    running = re.search(r'<table id="running">.*?</table>', page, re.S)
    assert running is not None
    row = next(r for r in running[0].split("<tr>") if str(job.id) in r)
    assert "<code>node-7:99:f00</code>" in row


def test_a_running_job_no_heartbeat_names_shows_no_worker(
    rt: Runtime, client: TestClient, clock: ManualClock
) -> None:
    rt.presence.beat(WorkerInfo("node-7:99:f00", "node-7", 99, ("default",), clock.now()))
    job = rt.enqueue("ok", {})
    assert rt.queue.dequeue("default", clock.now()) is not None
    page = client.get("/workers").text
    running = re.search(r'<table id="running">.*?</table>', page, re.S)
    assert running is not None
    row = next(r for r in running[0].split("<tr>") if str(job.id) in r)
    assert "node-7" not in row
    assert "idle" in page


def test_a_heartbeat_from_an_older_version_names_no_jobs() -> None:
    text = (
        '{"worker_id": "w:1:a", "host": "w", "pid": 1, "queues": ["default"],'
        ' "last_seen": "2026-01-01T00:00:00+00:00"}'
    )
    info = WorkerInfo.from_json(text)
    assert info is not None and info.jobs == ()


def test_a_working_process_heartbeat_names_the_job_it_is_running(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import threading

    from conveyor.shell.runtime import presence_beat as runtime_module

    monkeypatch.setattr(runtime_module, "PRESENCE_INTERVAL", timedelta(milliseconds=20))
    began, release = threading.Event(), threading.Event()

    def slow(args: dict[str, Any]) -> None:
        began.set()
        release.wait(10)

    rt = conveyor.build({"provider": "memory", "workers": {"prefetch": 1}})
    rt.registry.register("slow", slow)
    job = rt.enqueue("slow", {})
    rt.start()
    try:
        assert began.wait(10)
        seen: tuple[str, ...] = ()
        for _ in range(200):
            seen = tuple(
                j for w in rt.presence.live(rt.clock.now(), timedelta(minutes=1)) for j in w.jobs
            )
            if seen:
                break
            release.wait(0.02)
        assert seen == (str(job.id),)
    finally:
        release.set()
        rt.stop(5)


# ---- [dashboard] in the config file -----------------------------------------------------


def _served(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Runs `conveyor dashboard` up to the server start, capturing what it would serve."""
    import uvicorn

    served: dict[str, Any] = {}

    def run(app: Any, *, host: str, port: int, **_: Any) -> None:
        served.update(app=app, host=host, port=port)

    monkeypatch.setattr(uvicorn, "run", run)
    return served


def _config_file(tmp_path: Path, table: str) -> str:
    path = tmp_path / "conveyor.toml"
    path.write_text(f'provider = "db"\nurl = "sqlite:///jobs.db"\n\n[dashboard]\n{table}\n')
    # The database the dashboard reads: it creates none.
    conveyor.build({"provider": "db", "url": f"sqlite:///{tmp_path / 'jobs.db'}"}).close()
    return str(path)


def test_the_dashboard_takes_its_defaults_from_the_config_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from conveyor.shell import cli

    monkeypatch.delenv("CONVEYOR_DASHBOARD_BASIC_AUTH", raising=False)
    served = _served(monkeypatch)
    table = 'host = "0.0.0.0"\nport = 9090\nread_only = true\nbasic_auth = "ops:s3cret"'
    assert cli.main(["--config", _config_file(tmp_path, table), "dashboard"]) == 0
    assert (served["host"], served["port"]) == ("0.0.0.0", 9090)
    client = TestClient(served["app"])
    assert client.get("/").status_code == 401
    assert client.get("/", auth=("ops", "s3cret")).status_code == 200
    answer = client.post("/dead/purge", auth=("ops", "s3cret"), data={})
    assert answer.status_code == 403  # read-only


def test_the_dashboard_flags_and_environment_win_over_the_config_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from conveyor.shell import cli

    served = _served(monkeypatch)
    config = _config_file(tmp_path, 'host = "0.0.0.0"\nport = 9090\nbasic_auth = "ops:file"')
    monkeypatch.setenv("CONVEYOR_DASHBOARD_BASIC_AUTH", "ops:env")
    assert cli.main(["--config", config, "dashboard", "--host", "127.0.0.1", "--port", "8181"]) == 0
    assert (served["host"], served["port"]) == ("127.0.0.1", 8181)
    client = TestClient(served["app"], base_url="http://127.0.0.1:8181")
    assert client.get("/", auth=("ops", "file")).status_code == 401
    assert client.get("/", auth=("ops", "env")).status_code == 200
    argv = ["--config", config, "dashboard", "--basic-auth", "ops:flag"]
    assert cli.main(argv) == 0
    assert TestClient(served["app"]).get("/", auth=("ops", "flag")).status_code == 200


@pytest.mark.parametrize(
    ("table", "key"),
    [
        ('basic_auth = "no-colon"', "dashboard.basic_auth"),
        ("port = 70000", "dashboard.port"),
        ('read_only = "yes"', "dashboard.read_only"),
        ('user = "ops"', "dashboard.user"),
        ('allowed_hosts = "jobs.example.com"', "dashboard.allowed_hosts"),
        ('allowed_hosts = ["https://jobs.example.com"]', "dashboard.allowed_hosts"),
    ],
)
def test_a_bad_dashboard_table_is_refused_naming_the_key(
    table: str, key: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from conveyor.shell import cli

    assert cli.main(["--config", _config_file(tmp_path, table), "dashboard"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"conveyor: invalid input: {key}") and err.count("\n") == 1
    assert "no-colon" not in err


@pytest.mark.parametrize("name", ["2001:db8::1", "[2001:db8::1]", "fe80::1:2", "::1", "jobs.internal"])
def test_allowed_hosts_take_names_and_addresses_ipv6_included(name: str) -> None:
    # Every IPv6 address but ::1 was refused as "not a host name".
    from conveyor.shell.config import parse_config

    assert parse_config({"dashboard": {"allowed_hosts": [name]}}).dashboard.allowed_hosts == (name,)


def test_a_bad_allowed_host_flag_is_refused_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # With a port it was taken, and every request was then refused with a 400.
    from conveyor.shell import cli

    served = _served(monkeypatch)
    argv = ["--config", _config_file(tmp_path, ""), "dashboard", "--allowed-host", "a.test:8000"]
    assert cli.main(argv) == 2
    assert "--allowed-host: 'a.test:8000' is not a host name" in capsys.readouterr().err
    assert "app" not in served


def _finished(rt: Runtime, *, dead: bool = False) -> conveyor.Job:
    """A finished record to copy (it finished now, at the test clock)."""
    job = rt.enqueue("declined" if dead else "ok", {}, max_retries=0)
    rt.drain()
    record = rt.store.get(job.id)
    assert record is not None
    return record


def _copy_at(rt: Runtime, record: conveyor.Job, when: Any) -> conveyor.Job:
    copy = attrs.evolve(record, id=uuid4(), finished_at=when)
    rt.store.record(copy)
    return copy


def test_the_chart_counts_settled_minutes_once_and_new_records_on_each_refresh(
    rt: Runtime, clock: ManualClock
) -> None:
    chart = views.ThroughputCounts(rt)
    done = _finished(rt)
    old = clock.now() - timedelta(minutes=10)
    _copy_at(rt, done, old)
    assert sum(chart.read(clock.now()).completed) == 2
    _copy_at(rt, done, old)  # late, in a settled minute: counted at the next recount
    _copy_at(rt, done, clock.now())  # in the current minute: counted at once
    assert sum(chart.read(clock.now()).completed) == 3
    clock.advance(views.THROUGHPUT_REUSE + timedelta(seconds=1))
    assert sum(chart.read(clock.now()).completed) == 4


def test_an_action_on_the_dashboard_recounts_the_chart(
    rt: Runtime, client: TestClient, clock: ManualClock
) -> None:
    dead = _copy_at(rt, _finished(rt, dead=True), clock.now() - timedelta(minutes=10))
    assert "2 finished in the last hour" in client.get("/").text
    assert post(client, "/dead/purge", job_id=str(dead.id)).status_code == 303
    assert "1 finished in the last hour" in client.get("/").text


def test_the_dashboard_password_from_the_config_file_is_masked_in_its_repr() -> None:
    from conveyor.shell.config import parse_config

    config = parse_config({"dashboard": {"basic_auth": "ops:s3cret"}})
    assert config.dashboard.basic_auth == "ops:s3cret"
    assert "s3cret" not in repr(config)


@pytest.mark.parametrize(
    ("host", "warned"), [("127.0.0.2", False), ("0.0.0.0", True), ("dash.internal", True)]
)
def test_only_a_dashboard_reachable_from_other_machines_warns_of_no_authentication(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, host: str,
    warned: bool,
) -> None:
    # 127.0.0.2, a loopback address the dashboard itself holds to the loopback names,
    # was warned of as if reachable from anywhere; a name that resolves to a loopback
    # address and another must still be warned of.
    import socket

    from conveyor.shell import cli

    real = socket.getaddrinfo

    def resolve(name: str, *args: Any, **kwargs: Any) -> Any:
        if name != "dash.internal":
            return real(name, *args, **kwargs)
        return [(socket.AF_INET, 0, 0, "", (address, 0)) for address in ("10.1.2.3", "127.0.1.1")]

    monkeypatch.setattr(socket, "getaddrinfo", resolve)
    monkeypatch.delenv("CONVEYOR_DASHBOARD_BASIC_AUTH", raising=False)
    _served(monkeypatch)
    config = _config_file(tmp_path, f'host = "{host}"')
    with caplog.at_level(logging.WARNING):
        assert cli.main(["--config", config, "dashboard"]) == 0
    said = [r.getMessage() for r in caplog.records if "no authentication" in r.getMessage()]
    assert bool(said) is warned, said
