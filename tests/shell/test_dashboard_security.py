"""The dashboard's guards over plain HTTP: an action must come from the dashboard's
own origin and carry a token only the server can sign, failed logins are throttled
per client, and invisible or direction-changing characters in stored text are
shown, not obeyed. The browser tests (test_dashboard_browser.py) replay the
cross-origin attacks in Chromium."""

from __future__ import annotations

import base64
import re
from collections.abc import Iterator
from typing import Any

import conveyor
import pytest
from conveyor.dashboard import (
    CSRF_COOKIE,
    CSRF_FIELD,
    BasicAuth,
    HostCheck,
    LoginThrottle,
    create_app,
)
from conveyor.shell.runtime import Runtime
from starlette.testclient import TestClient

CSRF_META = re.compile(r'<meta name="csrf-token" content="([^"]+)">')


def declined(args: dict[str, Any]) -> None:
    raise conveyor.Permanent(args.get("why", "declined"))


@pytest.fixture
def rt() -> Iterator[Runtime]:
    runtime = conveyor.build({"provider": "memory"}, handlers={"declined": declined})
    yield runtime
    runtime.close()


def dead_letter(rt: Runtime, **args: Any) -> conveyor.Job:
    job = rt.enqueue("declined", args, max_retries=0)
    rt.drain()
    return job


def is_dead(rt: Runtime, job: conveyor.Job) -> bool:
    view = rt.get(job.id)
    return view is not None and view.dead


def token(client: TestClient, **headers: str) -> str:
    found = CSRF_META.search(client.get("/", headers=headers).text)
    assert found is not None
    return found.group(1)


def purge(client: TestClient, job: conveyor.Job, field: str, **headers: str) -> Any:
    form = {CSRF_FIELD: field, "job_id": str(job.id)}
    return client.post("/dead/purge", data=form, headers=headers, follow_redirects=False)


def basic(user: str, password: str) -> dict[str, str]:
    return {"authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


# ---- DNS rebinding: the names the dashboard answers to ---------------------------------


@pytest.mark.parametrize("host", ["127.0.0.1:8000", "localhost:8000", "[::1]:8000", "LOCALHOST"])
def test_a_dashboard_held_to_the_loopback_names_answers_them(rt: Runtime, host: str) -> None:
    client = TestClient(HostCheck(create_app(rt), ["127.0.0.1", "localhost", "::1"]))
    assert client.get("/", headers={"host": host}).status_code == 200


@pytest.mark.parametrize(
    "host",
    [
        "rebind.attacker.example:8000",
        "127.0.0.1.nip.io",
        "",
        "[::1",
        # urlsplit read the part after "@" as the name.
        "evil.example@127.0.0.1:8000",
    ],
)
def test_a_page_under_another_name_can_neither_read_nor_act(rt: Runtime, host: str) -> None:
    # A name re-pointed at 127.0.0.1 makes the attacker's page the dashboard's own
    # origin: its reads and its posts would pass the origin and token checks.
    job = dead_letter(rt, why="secret-4111")
    client = TestClient(HostCheck(create_app(rt), ["127.0.0.1", "localhost", "::1"]))
    page = client.get(f"/jobs/{job.id}?args=1", headers={"host": host})
    assert page.status_code == 400
    assert "secret-4111" not in page.text
    assert "answers to 127.0.0.1, ::1, localhost only" in page.text
    form = {CSRF_FIELD: token(client, host="127.0.0.1:8000"), "job_id": str(job.id)}
    posted = client.post("/dead/purge", data=form, headers={"host": host})
    assert posted.status_code == 400
    assert is_dead(rt, job)


@pytest.mark.parametrize(
    "address", ["127.0.0.2", "127.1.2.3", "[::1]", "::ffff:127.0.0.1", "127.1", "localhost"]
)
def test_every_loopback_address_is_held_to_the_loopback_names(address: str) -> None:
    # Only 127.0.0.1, localhost and ::1 were: `--host 127.0.0.2` answered to any name.
    from conveyor.shell.dashboard.hosts import is_loopback, names_of_loopback

    assert is_loopback(address)
    assert not is_loopback("0.0.0.0") and not is_loopback("192.168.1.5")
    # The names it answers to by default: the loopback ones and its own address.
    names = names_of_loopback(address)
    assert {"127.0.0.1", "localhost", "::1", address.strip("[]")} == set(names)
    assert names_of_loopback("0.0.0.0") == ()


def test_the_health_check_answers_a_probe_by_address_whatever_the_names(rt: Runtime) -> None:
    # A load balancer's or Kubernetes' probe sends the pod's address as its Host: with
    # --allowed-host set, /healthz answered 400 and the probe failed.
    client = TestClient(HostCheck(create_app(rt), ["jobs.example.com"]))
    assert client.get("/healthz", headers={"host": "10.1.2.3:8000"}).status_code == 200
    assert client.get("/", headers={"host": "10.1.2.3:8000"}).status_code == 400
    # Mounted under a prefix in an application of one's own, too.
    from starlette.applications import Starlette
    from starlette.routing import Mount

    held = HostCheck(create_app(rt), ["jobs.example.com"])
    mounted = TestClient(Starlette(routes=[Mount("/ops/jobs", app=held)]))
    assert mounted.get("/ops/jobs/healthz", headers={"host": "10.1.2.3"}).status_code == 200
    assert mounted.get("/ops/jobs/", headers={"host": "10.1.2.3"}).status_code == 400


def test_a_star_lets_every_name_through(rt: Runtime) -> None:
    client = TestClient(HostCheck(create_app(rt), ["*"]))
    assert client.get("/", headers={"host": "jobs.example.com"}).status_code == 200


# ---- CSRF: a planted cookie ------------------------------------------------------------


def test_a_planted_cookie_that_the_form_repeats_does_not_pass(rt: Runtime) -> None:
    # What a sibling subdomain or another port of the host can do: set the cookie to
    # a value of its choosing and post a form that repeats it.
    job = dead_letter(rt)
    client = TestClient(create_app(rt))
    planted = "p" * 43
    client.cookies.set(CSRF_COOKIE, planted)
    answer = purge(client, job, planted)
    assert answer.status_code == 403 and "CSRF" in answer.text
    assert is_dead(rt, job)


def test_the_page_token_passes(rt: Runtime) -> None:
    job = dead_letter(rt)
    client = TestClient(create_app(rt))
    assert purge(client, job, token(client)).status_code == 303
    assert not is_dead(rt, job)


def test_a_token_signed_by_another_secret_does_not_pass(rt: Runtime) -> None:
    # A restarted dashboard (a new random secret) asks for a reload; one with the same
    # secret (several processes behind one address) takes the other's tokens.
    job = dead_letter(rt)
    first = TestClient(create_app(rt, csrf_secret="s" * 32))
    field = token(first)
    restarted = TestClient(create_app(rt))
    restarted.cookies = first.cookies
    assert purge(restarted, job, field).status_code == 403
    twin = TestClient(create_app(rt, csrf_secret="s" * 32))
    twin.cookies = first.cookies
    assert purge(twin, job, field).status_code == 303


def test_a_token_taken_under_other_credentials_does_not_pass(rt: Runtime) -> None:
    job = dead_letter(rt)
    team = {"Bearer alice", "Bearer bob"}
    client = TestClient(create_app(rt, auth=lambda r: r.headers.get("authorization") in team))
    field = token(client, authorization="Bearer bob")
    assert purge(client, job, field, authorization="Bearer alice").status_code == 403
    assert is_dead(rt, job)
    assert purge(client, job, field, authorization="Bearer bob").status_code == 303


def test_a_short_csrf_secret_is_refused(rt: Runtime) -> None:
    with pytest.raises(conveyor.ValidationError, match="csrf_secret: must be at least 16"):
        create_app(rt, csrf_secret="short")


# ---- CSRF: where the request comes from ------------------------------------------------

FOREIGN = [
    {"origin": "http://127.0.0.1:9999"},
    {"origin": "http://testserver:8001"},
    {"origin": "http://evil.testserver"},
    {"origin": "https://testserver.evil.example"},
    {"origin": "null"},
    {"sec-fetch-site": "same-site"},
    {"sec-fetch-site": "cross-site"},
    # The browser's word on the request wins over an Origin that would pass.
    {"sec-fetch-site": "same-site", "origin": "http://testserver"},
    # "none" (the user's own doing) vouches for no page: a foreign Origin still counts.
    {"sec-fetch-site": "none", "origin": "http://evil.example"},
]


@pytest.mark.parametrize("headers", FOREIGN)
def test_an_action_from_another_origin_is_refused_with_a_valid_token(
    rt: Runtime, headers: dict[str, str]
) -> None:
    job = dead_letter(rt)
    client = TestClient(create_app(rt))
    answer = purge(client, job, token(client), **headers)
    assert answer.status_code == 403 and "another origin" in answer.text
    assert is_dead(rt, job)


OWN = [
    {"origin": "http://testserver"},
    {"origin": "http://TESTSERVER:80"},
    {"origin": "https://testserver"},  # a proxy in front ends TLS: the Host has no port
    {"sec-fetch-site": "same-origin"},
    {"sec-fetch-site": "same-origin", "origin": "http://testserver"},
    {"sec-fetch-site": "none"},
    {},  # neither header: not sent by a browser page, so not forged by one
]


@pytest.mark.parametrize("headers", OWN)
def test_an_action_from_the_dashboards_own_origin_is_carried_out(
    rt: Runtime, headers: dict[str, str]
) -> None:
    job = dead_letter(rt)
    client = TestClient(create_app(rt))
    assert purge(client, job, token(client), **headers).status_code == 303
    assert not is_dead(rt, job)


def test_an_origin_on_another_port_of_the_host_is_refused(rt: Runtime) -> None:
    job = dead_letter(rt)
    client = TestClient(create_app(rt), base_url="http://127.0.0.1:8000")
    field = token(client)
    assert purge(client, job, field, origin="http://127.0.0.1:8001").status_code == 403
    assert purge(client, job, field, origin="http://127.0.0.1:8000").status_code == 303


def test_a_trusted_origin_may_post_actions(rt: Runtime) -> None:
    # A proxy that rewrites the Host header: the browser's origin is not the Host.
    job = dead_letter(rt)
    client = TestClient(create_app(rt, trusted_origins=["https://ops.example.com"]))
    field = token(client)
    assert purge(client, job, field, origin="https://ops.example.com:8443").status_code == 403
    assert purge(client, job, field, origin="https://ops.example.com").status_code == 303


def test_a_trusted_origin_that_is_not_an_origin_is_refused(rt: Runtime) -> None:
    with pytest.raises(conveyor.ValidationError, match=r"trusted_origins: 'ops\.example\.com/path'"):
        create_app(rt, trusted_origins=["ops.example.com/path"])


def test_the_origin_is_checked_before_the_form_is_read(rt: Runtime) -> None:
    client = TestClient(create_app(rt))
    answer = client.post(
        "/dead/purge", content=b"x" * 100_000, headers={"origin": "http://elsewhere"}
    )
    assert answer.status_code == 403 and "another origin" in answer.text


# ---- failed logins ---------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def guarded(rt: Runtime, clock: Clock, client: str = "203.0.113.7") -> TestClient:
    throttle = LoginThrottle(limit=5, window_s=60, clock=clock)
    app = create_app(rt, auth=BasicAuth("ops", "s3cret"), login_throttle=throttle)
    return TestClient(app, client=(client, 50000))


def test_failed_logins_past_the_limit_are_answered_429_even_with_the_right_password(
    rt: Runtime,
) -> None:
    clock = Clock()
    client = guarded(rt, clock)
    for _ in range(5):
        assert client.get("/", headers=basic("ops", "guess")).status_code == 401
    refused = client.get("/", headers=basic("ops", "s3cret"))
    assert refused.status_code == 429
    assert 0 < int(refused.headers["retry-after"]) <= 60
    clock.now += 61
    assert client.get("/", headers=basic("ops", "s3cret")).status_code == 200


def test_the_throttle_holds_a_guesser_to_the_limit_per_window(rt: Runtime) -> None:
    clock = Clock()
    client = guarded(rt, clock)
    answered = []
    for _ in range(300):  # 300 guesses over 5 minutes
        answered.append(client.get("/", headers=basic("ops", "guess")).status_code)
        clock.now += 1
    assert answered.count(401) == 25 and answered.count(429) == 275


def test_the_throttle_counts_per_client_address(rt: Runtime) -> None:
    clock = Clock()
    throttle = LoginThrottle(limit=2, window_s=60, clock=clock)
    app = create_app(rt, auth=BasicAuth("ops", "s3cret"), login_throttle=throttle)
    guesser = TestClient(app, client=("203.0.113.7", 1))
    operator = TestClient(app, client=("198.51.100.2", 1))
    for _ in range(3):
        guesser.get("/", headers=basic("ops", "guess"))
    assert guesser.get("/", headers=basic("ops", "s3cret")).status_code == 429
    assert operator.get("/", headers=basic("ops", "s3cret")).status_code == 200


def test_a_login_prompt_without_credentials_is_not_a_failure(rt: Runtime) -> None:
    client = guarded(rt, Clock())
    for _ in range(10):
        assert client.get("/").status_code == 401  # the browser's first ask, each time
    assert client.get("/", headers=basic("ops", "s3cret")).status_code == 200


def test_a_successful_login_clears_the_count(rt: Runtime) -> None:
    client = guarded(rt, Clock())
    for _ in range(4):
        client.get("/", headers=basic("ops", "guess"))
    assert client.get("/", headers=basic("ops", "s3cret")).status_code == 200
    for _ in range(4):
        assert client.get("/", headers=basic("ops", "guess")).status_code == 401


def test_the_throttle_forgets_the_oldest_clients_past_its_size() -> None:
    clock = Clock()
    throttle = LoginThrottle(limit=1, window_s=60, clock=clock, max_clients=3)
    for n in range(5):
        throttle.failed(f"10.0.0.{n}")
    assert [throttle.wait_s(f"10.0.0.{n}") > 0 for n in range(5)] == [
        False,
        False,
        True,
        True,
        True,
    ]


# ---- invisible and direction-changing characters ---------------------------------------

#: A right-to-left override that would show "invoice.exe" as "invoice.pdf"-like text,
#: a zero-width space, a zero-width joiner, a BOM and an escape sequence.
HIDDEN = {"\u202e": "[U+202E]", "\u200b": "[U+200B]", "\u200d": "[U+200D]"}
HIDDEN |= {"\ufeff": "[U+FEFF]", "\x1b": "[U+001B]", "\u2066": "[U+2066]"}


def test_hidden_characters_in_stored_text_are_shown_as_marks(rt: Runtime) -> None:
    why = "refund to acct " + "".join(HIDDEN) + "fdp.exe"
    # (A partition holding them is refused at enqueue: see test_handler_failures.)
    job = rt.enqueue("declined", {"why": why}, max_retries=0, partition="acme")
    rt.drain()
    client = TestClient(create_app(rt))
    for path in ("/dead", f"/jobs/{job.id}", "/jobs?state=failed"):
        page = client.get(path).text
        for char, mark in HIDDEN.items():
            assert char not in page, (path, mark)
            assert mark in page, (path, mark)
    assert "refund to acct [U+202E][U+200B]" in client.get(f"/jobs/{job.id}").text


def test_plain_text_and_line_breaks_are_left_alone(rt: Runtime) -> None:
    text = "Zürich \u2013 ok\n\tnext line 日本 👍"
    job = rt.enqueue("declined", {"why": text}, max_retries=0)
    rt.drain()
    page = TestClient(create_app(rt)).get(f"/jobs/{job.id}").text
    assert text in page and "[U+" not in page


# ---- an action the backend fails ----------------------------------------------------


def test_an_action_the_backend_fails_is_a_page_naming_what_failed(tmp_path: Any) -> None:
    # Another connection holds the write lock (a stuck writer, a backup): the cancel
    # gave up after its retries and the page was a bare "Internal Server Error".
    import sqlite3

    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    # A short lease: the write retries for a quarter of it before it gives up.
    runtime = conveyor.build({"provider": "db", "url": url, "lease_ms": 2000}, env={})
    try:
        job = runtime.enqueue("anything", {}, delay=3600)
        client = TestClient(create_app(runtime))
        form = {CSRF_FIELD: token(client)}
        lock = sqlite3.connect(str(tmp_path / "jobs.db"), isolation_level=None)
        lock.execute("BEGIN IMMEDIATE")
        try:
            answer = client.post(f"/jobs/{job.id}/cancel", data=form, follow_redirects=False)
        finally:
            lock.rollback()
            lock.close()
        assert answer.status_code == 503
        assert "did not carry out the action" in answer.text
        assert f"could not cancel job {job.id}" in answer.text
        view = runtime.get(job.id)
        assert view is not None and view.state is conveyor.JobStatus.SCHEDULED
    finally:
        runtime.close()
