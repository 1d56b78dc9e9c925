"""What the dashboard makes of query strings a user can type or edit: a number is
ASCII digits of a sane length, whatever else `str.isdigit` accepts; the dead-letter
pages take no `state` (a dead letter's is always the same), so none can describe or
act on a filter they do not apply; and the static files sit behind the same auth as
the pages."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import conveyor
import pytest
from conveyor.dashboard import CSRF_FIELD, BasicAuth, create_app
from conveyor.shell.dashboard import views
from conveyor.shell.runtime import Runtime
from starlette.applications import Starlette
from starlette.routing import Mount
from starlette.testclient import TestClient
from test_dashboard import client_for

CSRF_META = re.compile(r'<meta name="csrf-token" content="([^"]+)">')

#: Typed numbers that `str.isdigit()` accepts and `int()` refuses: a superscript two,
#: and more digits than `int()` converts (4,300 by default).
NOT_INT = ["%C2%B2", "9" * 5000]

#: Digits `int()` reads but a URL a person types does not hold: Arabic-Indic one and
#: a fullwidth one.
NOT_ASCII = ["%D9%A1", "%EF%BC%91"]

PAGE_REFUSED = f"page: must be a whole number from 1 to {views.MAX_PAGE}"

STATE_REFUSED = "state: dead letters take no state filter"


def declined(args: dict[str, Any]) -> None:
    raise conveyor.Permanent("card declined")


def done(args: dict[str, Any]) -> None:
    return None


@pytest.fixture
def rt() -> Iterator[Runtime]:
    config = {"provider": "memory", "workers": {"queues": ["default", "mail"]}}
    runtime = conveyor.build(config, handlers={"declined": declined, "ok": done})
    yield runtime
    runtime.close()


@pytest.fixture
def client(rt: Runtime) -> TestClient:
    return client_for(rt)


def dead_letters(rt: Runtime, count: int, **options: Any) -> list[conveyor.Job]:
    jobs = [rt.enqueue("declined", {}, max_retries=0, **options) for _ in range(count)]
    rt.drain()
    assert {job.id for job in jobs} <= {job.id for job in rt.list_dead()}
    return jobs


def post(client: TestClient, path: str, **form: str) -> Any:
    found = CSRF_META.search(client.get("/").text)
    assert found is not None
    return client.post(path, data={CSRF_FIELD: found[1], **form}, follow_redirects=False)


# ---- `n`, the count an action's notice reports --------------------------------------

#: Every HTML page, and the 404 and 400 pages (which render the same way), with the
#: status each answers when `n` is left out.
PAGES = [
    ("/", 200),
    ("/jobs", 200),
    ("/dead", 200),
    ("/dead/confirm?action=retry", 200),
    ("/workers", 200),
    ("/limits", 200),
    ("/cron", 200),
    ("/jobs/nope", 404),
    ("/jobs?page=0", 400),
]


@pytest.mark.parametrize("count", NOT_INT)
@pytest.mark.parametrize(("path", "status"), PAGES)
def test_a_count_int_refuses_is_ignored_on_every_page(
    client: TestClient, path: str, status: int, count: str
) -> None:
    joiner = "&" if "?" in path else "?"
    assert client.get(f"{path}{joiner}n={count}").status_code == status


SECRET = "a-secret-of-this-test-server"


def sealed(done: str, count: str) -> str:
    """The query string a redirect of this server gives after an action."""
    from urllib.parse import unquote, urlencode

    from conveyor.shell.dashboard.actions import sealed as server_sealed
    from conveyor.shell.dashboard.csrf import CsrfGuard

    count = unquote(count)  # as the server reads it: NOT_INT holds %-escapes
    return urlencode(server_sealed("/dead", {"done": done, "n": count}, CsrfGuard(SECRET)))


@pytest.mark.parametrize("count", [*NOT_INT, *NOT_ASCII, "abc", "-2", "+2", "1_000"])
def test_the_notice_of_a_count_that_is_no_plain_number_says_one(rt: Runtime, count: str) -> None:
    client = client_for(rt, csrf_secret=SECRET)
    page = client.get(f"/dead?{sealed('purged', count)}")
    assert page.status_code == 200 and "Purged 1 dead letter(s)." in page.text


@pytest.mark.parametrize("count", ["0", "3", "10000"])
def test_the_notice_reports_a_plain_count(rt: Runtime, count: str) -> None:
    client = client_for(rt, csrf_secret=SECRET)
    assert f"Purged {count} dead letter(s)." in client.get(f"/dead?{sealed('purged', count)}").text


def test_a_notice_this_server_did_not_seal_is_not_shown(rt: Runtime) -> None:
    # A link could show "Purged 303 dead letter(s)." when nothing was done.
    client = client_for(rt, csrf_secret=SECRET)
    assert "Purged" not in client.get("/dead?done=purged&n=303").text
    forged = sealed("purged", "303").replace("n=303", "n=304")
    assert "Purged" not in client.get(f"/dead?{forged}").text


def test_a_notice_sealed_for_one_page_is_not_shown_on_another(rt: Runtime) -> None:
    # The seal covered only the notice: a real cancel's redirect, put on a finished
    # job's page (or the overview), told an operator that job was asked to stop.
    client = client_for(rt, csrf_secret=SECRET)
    cancelled, other = rt.enqueue("ok", {}, delay=3600), rt.enqueue("ok", {}, delay=3600)
    token = re.search(r'name="csrf-token" content="([^"]+)"', client.get("/").text)
    assert token is not None
    answer = client.post(
        f"/jobs/{cancelled.id}/cancel", data={CSRF_FIELD: token.group(1)}, follow_redirects=False
    )
    query = answer.headers["location"].partition("?")[2]
    assert "Cancelled the job." in client.get(f"/jobs/{cancelled.id}?{query}").text
    assert "Cancelled the job." not in client.get(f"/jobs/{other.id}?{query}").text
    assert "Cancelled the job." not in client.get(f"/?{query}").text


# ---- `page` ---------------------------------------------------------------------------


@pytest.mark.parametrize("number", [*NOT_INT, *NOT_ASCII, "abc", "1234567890"])
@pytest.mark.parametrize("path", ["/jobs", "/dead"])
def test_a_page_number_that_is_no_plain_number_is_the_400_of_a_bad_page(
    client: TestClient, path: str, number: str
) -> None:
    answer = client.get(f"{path}?page={number}")
    assert answer.status_code == 400 and PAGE_REFUSED in answer.text


@pytest.mark.parametrize("path", ["/jobs", "/dead"])
def test_a_plain_page_number_in_range_is_served(client: TestClient, path: str) -> None:
    assert client.get(f"{path}?page=007").status_code == 200
    assert client.get(f"{path}?page={views.MAX_PAGE}").status_code == 200


@pytest.mark.parametrize(
    ("text", "number"),
    [("0", 0), ("007", 7), ("999999999", 999_999_999), ("", None), ("1234567890", None)]
    + [
        (odd, None)
        for odd in ("\u00b2", "\u0661", "\uff11", " 1", "1 ", "+1", "-1", "1_0", "1.0", "9" * 5000)
    ],
)
def test_a_whole_number_is_at_most_nine_ascii_digits(text: str, number: int | None) -> None:
    assert views.whole_number(text) == number


# ---- `state` on the dead-letter pages --------------------------------------------------


@pytest.mark.parametrize("state", ["completed", "failed", "dead", "bogus"])
@pytest.mark.parametrize("path", ["/dead", "/dead/confirm?action=purge"])
def test_the_dead_letter_pages_refuse_a_state_naming_it(
    rt: Runtime, client: TestClient, path: str, state: str
) -> None:
    dead_letters(rt, 3)
    joiner = "&" if "?" in path else "?"
    answer = client.get(f"{path}{joiner}state={state}")
    assert answer.status_code == 400 and STATE_REFUSED in answer.text
    assert "matching" not in answer.text and 'name="state"' not in answer.text


@pytest.mark.parametrize(("action", "state"), [("purge", "completed"), ("retry", "failed")])
def test_a_bulk_action_with_a_state_is_refused_and_does_nothing(
    rt: Runtime, client: TestClient, action: str, state: str
) -> None:
    dead_letters(rt, 3)
    answer = post(client, "/dead/bulk", action=action, state=state)
    assert answer.status_code == 400 and STATE_REFUSED in answer.text
    assert len(rt.list_dead()) == 3


def test_an_empty_state_is_no_filter_on_the_dead_letter_pages(
    rt: Runtime, client: TestClient
) -> None:
    dead_letters(rt, 2, queue="mail")
    dead_letters(rt, 1)
    listing = client.get("/dead?state=&queue=mail")
    assert listing.status_code == 200 and "2 dead letter(s) match." in listing.text
    confirm = client.get("/dead/confirm?action=purge&state=&queue=mail").text
    assert "This will purge <strong>2</strong> dead letter(s) matching" in confirm
    assert "state" not in confirm


def test_the_dead_letter_links_carry_no_state(rt: Runtime, client: TestClient) -> None:
    dead_letters(rt, 1, queue="mail")
    listing = client.get("/dead?queue=mail").text
    assert 'href="/dead/confirm?queue=mail&amp;action=purge"' in listing
    assert "state" not in listing


def test_the_jobs_page_keeps_its_state_filter(rt: Runtime, client: TestClient) -> None:
    (dead,) = dead_letters(rt, 1)
    finished = rt.enqueue("ok", {})
    rt.drain()
    failed = client.get("/jobs?state=failed").text
    assert str(dead.id) in failed and str(finished.id) not in failed
    completed = client.get("/jobs?state=completed").text
    assert str(finished.id) in completed and str(dead.id) not in completed
    assert client.get("/jobs?state=bogus").status_code == 400


# ---- the static files ------------------------------------------------------------------


@pytest.mark.parametrize("asset", ["dashboard.css", "live.js"])
def test_the_static_files_need_the_same_login_as_the_pages(rt: Runtime, asset: str) -> None:
    client = client_for(rt, auth=BasicAuth("ops", "pw"))
    refused = client.get(f"/static/{asset}")
    assert refused.status_code == 401 and "www-authenticate" in refused.headers
    assert client.get(f"/static/{asset}", auth=("ops", "wrong")).status_code == 401
    assert client.get(f"/static/{asset}", auth=("ops", "pw")).status_code == 200
    assert client.get("/healthz").status_code == 200  # probes still need no login


def test_the_static_files_follow_an_auth_hook_under_a_mount(rt: Runtime) -> None:
    dashboard = create_app(rt, auth=lambda r: r.headers.get("x-team") == "ops")
    client = TestClient(Starlette(routes=[Mount("/ops/jobs", app=dashboard)]))
    assert client.get("/ops/jobs/static/dashboard.css").status_code == 403
    allowed = client.get("/ops/jobs/static/dashboard.css", headers={"x-team": "ops"})
    assert allowed.status_code == 200 and allowed.headers["content-type"].startswith("text/css")
