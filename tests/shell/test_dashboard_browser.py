"""The dashboard in a real browser: `conveyor dashboard` on a SQLite file, driven by
headless Chromium through Playwright.

Playwright's own browser download is not used: the browser is the system's
`chromium` package. On a machine without it (a fresh CI runner, as root) the
session fixture installs it with apt once; only where apt itself is missing is the
module skipped, saying so.

With `CONVEYOR_UPDATE_SCREENSHOTS=1` the page screenshots are also written to
docs/images/dashboard-<page>.png, the ones docs/dashboard.md shows.
"""

from __future__ import annotations

import html
import http.server
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import conveyor
import pytest
from conveyor.shell.presence import WorkerInfo
from conveyor.testing.redis_server import RedisServer
from playwright.sync_api import Browser, Page, sync_playwright

ROOT = Path(__file__).resolve().parents[2]
IMAGES = ROOT / "docs" / "images"

XSS_ARGS = {
    "note": "<script>window.__xss = 'args'</script><img src=x onerror=\"window.__xss='img'\">"
}
XSS_ERROR = "<img src=x onerror=\"window.__xss='error'\"><script>window.__xss='error'</script>"

#: Installing Chromium on a fresh machine (the first test's setup) can take minutes.
pytestmark = pytest.mark.timeout(900)

#: A domain whose hosts the browser maps to 127.0.0.1.
TEST_DOMAIN = "conveyor.test"

PAGES = {
    "overview": ("/", "Overview"),
    "jobs": ("/jobs", "Jobs"),
    "dead": ("/dead", "Dead letters"),
    "workers": ("/workers", "Workers"),
    "limits": ("/limits", "Limits"),
    "cron": ("/cron", "Cron"),
}

LONG_PARTITION = "tenant-" + "x" * 193


def _install_chromium() -> str:
    """The path of the system's Chromium, installed with apt when missing."""
    found = shutil.which("chromium")
    if found is not None:
        return found
    apt = shutil.which("apt-get")
    if apt is None:
        pytest.skip("chromium is not installed and apt-get is not available to install it")
    if os.geteuid() != 0:
        pytest.skip("chromium is not installed and installing it with apt-get needs root")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = [apt, "install", "-y", "--no-install-recommends", "chromium"]
    if subprocess.run(install, env=env, capture_output=True, timeout=800).returncode != 0:
        # A fresh machine's package lists may be empty or stale.
        subprocess.run([apt, "update"], env=env, capture_output=True, check=True, timeout=300)
        subprocess.run(install, env=env, capture_output=True, check=True, timeout=800)
    found = shutil.which("chromium")
    if found is None:
        pytest.fail("apt-get installed chromium, but no `chromium` command is on PATH")
    return found


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    # Module scope, not session: Playwright's sync API keeps an asyncio loop running
    # in the main thread while it is open, and `asyncio.run` in any later test
    # would refuse to start.
    executable = _install_chromium()
    with sync_playwright() as playwright:
        # As root (CI containers) Chromium refuses to start sandboxed.
        # Hosts under conveyor.test reach this machine: the dashboard and a page on a
        # sibling subdomain, for the CSRF attacks below.
        launched = playwright.chromium.launch(
            executable_path=executable,
            headless=True,
            args=["--no-sandbox", f"--host-resolver-rules=MAP *.{TEST_DOMAIN} 127.0.0.1"],
        )
        yield launched
        launched.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def fail_with_markup(args: dict[str, Any]) -> None:
    raise conveyor.Permanent(XSS_ERROR)


def decline(args: dict[str, Any]) -> None:
    raise conveyor.Permanent(f"card {args['n']} declined: insufficient funds")


def succeed(args: dict[str, Any]) -> dict[str, Any]:
    return {"echo": args}


def _serve(config: Path, *flags: str) -> tuple[subprocess.Popen[bytes], str]:
    """`conveyor dashboard` on `config` and a free port, once it answers `/healthz`."""
    port = _free_port()
    command = [sys.executable, "-m", "conveyor.shell.cli", "--config", str(config)]
    server = subprocess.Popen(
        [*command, "dashboard", "--port", str(port), *flags],
        cwd=config.parent,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            with urllib.request.urlopen(f"{url}/healthz", timeout=2) as answer:
                if answer.status == 200:
                    return server, url
        except OSError:
            pass
        if server.poll() is not None or time.monotonic() > deadline:
            server.kill()
            output = server.stdout.read().decode() if server.stdout else ""
            pytest.fail(f"conveyor dashboard did not start:\n{output}")
        time.sleep(0.1)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """`conveyor dashboard` serving a SQLite file that holds completed, dead, queued
    and cron jobs; the test process writes to the same file through its runtime."""
    folder = tmp_path_factory.mktemp("dashboard")
    config = folder / "conveyor.toml"
    config.write_text(
        f'provider = "db"\nurl = "sqlite:///{folder / "jobs.db"}"\n'
        'workers = { queues = ["default", "mail", "payments"] }\n\n'
        '[[cron]]\nname = "nightly-report"\nschedule = "30 2 * * *"\njob_type = "succeed"\n\n'
        "[limits.payments]\nfair = true\nweights = { acme = 3 }\n"
        '[[limits.payments.caps]]\njob_type = "succeed"\nper_partition = true\nmax_running = 2\n'
        "[[limits.payments.rates]]\nstarts = 50\nper_seconds = 60\n"
    )
    runtime = conveyor.build(
        str(config), handlers={"fail": fail_with_markup, "decline": decline, "succeed": succeed}
    )
    for n in range(12):
        runtime.enqueue("succeed", {"n": n})
    poisoned = runtime.enqueue("fail", XSS_ARGS, max_retries=0)
    plain_dead = [runtime.enqueue("decline", {"n": n}, max_retries=0) for n in range(3)]
    runtime.drain()
    runtime.enqueue("succeed", {"later": True}, queue="mail", priority="high")
    # One job claimed and one worker heartbeat, for the workers page.
    slow = runtime.enqueue("succeed", {"slow": True}, priority="critical")
    runtime.queue.dequeue("default", runtime.clock.now())
    worker = WorkerInfo(
        "web-1:4242:9f3a1c", "web-1", 4242, ("default",), runtime.clock.now(), (str(slow.id),)
    )
    runtime.presence.beat(worker)
    # A limited queue with one partition at its cap, for the limits page.
    for partition, n in (("acme", 6), ("globex", 3), ("initech", 1)):
        runtime.enqueue_many(
            "succeed", [{"n": i} for i in range(n)], queue="payments", partition=partition
        )
    runtime.queue.dequeue_limited("payments", runtime.clock.now(), 4, runtime.limits["payments"])
    # The longest partition key there may be (200 characters, one word), once claimed.
    runtime.enqueue("succeed", {"n": 0}, queue="payments", partition=LONG_PARTITION)
    server, url = _serve(config)
    try:
        yield {
            "url": url,
            "runtime": runtime,
            "poisoned": poisoned,
            "dead": plain_dead,
            "running": slow,
        }
    finally:
        server.terminate()
        server.wait(10)
        runtime.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    opened = context.new_page()
    problems: list[str] = []
    opened.on("pageerror", lambda error: problems.append(str(error)))
    opened.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    yield opened
    context.close()
    # A script error or a Content-Security-Policy violation shows up here.
    assert problems == []


@pytest.mark.parametrize("name", list(PAGES))
def test_each_page_loads_in_the_browser(
    served: dict[str, Any], page: Page, name: str, tmp_path: Path
) -> None:
    path, heading = PAGES[name]
    answer = page.goto(served["url"] + path)
    assert answer is not None and answer.status == 200
    assert page.locator("h1").inner_text() == heading
    shot = tmp_path / f"dashboard-{name}.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 0
    if os.environ.get("CONVEYOR_UPDATE_SCREENSHOTS") == "1":
        IMAGES.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shot, IMAGES / shot.name)


def test_the_job_page_loads_in_the_browser_with_its_attempts(
    served: dict[str, Any], page: Page, tmp_path: Path
) -> None:
    job = served["dead"][0]
    page.goto(f"{served['url']}/jobs/{job.id}")
    assert page.locator("h1").inner_text() == f"Job {job.id}"
    assert page.locator("#attempts li").count() == 1
    assert "dead_lettered" in page.locator("#attempts").inner_text()
    page.click("#show-args")
    assert '"n": 0' in page.locator("#args").inner_text()
    shot = tmp_path / "dashboard-job.png"
    page.screenshot(path=str(shot), full_page=True)
    if os.environ.get("CONVEYOR_UPDATE_SCREENSHOTS") == "1":
        shutil.copyfile(shot, IMAGES / shot.name)


def test_the_limits_page_names_the_partition_a_cap_holds_back(
    served: dict[str, Any], page: Page
) -> None:
    page.goto(served["url"] + "/limits")
    row = page.locator('section[data-queue="payments"] tr[data-partition="acme"]')
    assert "cap succeed per partition full (2/2)" in row.locator("td.waits").inner_text()
    assert page.locator('section[data-queue="payments"] .throttled').inner_text() == "4"
    page.goto(served["url"] + "/")
    assert "Limits hold back 4 ready jobs of payments" in page.locator("#throttled").inner_text()


def test_the_longest_partition_key_keeps_the_limits_page_within_the_window(
    served: dict[str, Any], page: Page
) -> None:
    # A 200-character key made the page 2,038 px wide in a 1,280 px window.
    page.goto(served["url"] + "/limits")
    assert page.locator(f'tr[data-partition="{LONG_PARTITION}"]').count() == 1
    assert page.evaluate("document.documentElement.scrollWidth") <= 1280


def test_the_overview_updates_live_without_a_reload(served: dict[str, Any], page: Page) -> None:
    page.goto(served["url"] + "/")
    page.evaluate("window.__loaded_once = true")
    cell = page.locator('#queues tr[data-queue="mail"] td.ready')
    before = int(cell.inner_text())
    served["runtime"].enqueue("succeed", {"live": True}, queue="mail")
    page.wait_for_function(
        "n => Number(document.querySelector('#queues tr[data-queue=\"mail\"] td.ready')"
        ".textContent) === n",
        arg=before + 1,
        timeout=15_000,
    )
    # The same document: a reload would have dropped this flag.
    assert page.evaluate("window.__loaded_once") is True


def test_the_retry_button_revives_a_dead_letter(served: dict[str, Any], page: Page) -> None:
    job = served["dead"][1]
    page.goto(served["url"] + "/dead")
    row = page.locator("#dead tr", has_text=str(job.id))
    row.locator("button.retry").click()
    page.wait_for_url(f"**/jobs/{job.id}?*")
    assert "Retried 1 dead letter" in page.locator(".notice").inner_text()
    view = served["runtime"].get(job.id)
    assert view is not None and view.state is conveyor.JobStatus.PENDING


def test_a_purge_asks_for_confirmation_before_it_deletes(
    served: dict[str, Any], page: Page
) -> None:
    runtime, job = served["runtime"], served["dead"][2]
    page.goto(served["url"] + "/dead")
    page.locator("#dead tr", has_text=str(job.id)).locator(".danger").click()
    page.wait_for_load_state("load")
    assert page.locator("h1").inner_text() == "Purge dead letter"
    assert str(job.id) in page.locator("#affected").inner_text()
    view = runtime.get(job.id)
    assert view is not None and view.dead, "one click purged the dead letter"
    page.click("#confirm")
    page.wait_for_url("**/dead?*")
    assert "Purged 1 dead letter" in page.locator(".notice").inner_text()
    assert runtime.get(job.id) is None


def test_markup_in_args_and_errors_does_not_execute(served: dict[str, Any], page: Page) -> None:
    job = served["poisoned"]
    for path in ("/dead", f"/jobs/{job.id}?args=1", "/jobs?state=failed"):
        page.goto(served["url"] + path)
        page.wait_for_load_state("load")
        assert page.evaluate("typeof window.__xss") == "undefined", path
    # The markup is shown as text.
    page.goto(f"{served['url']}/jobs/{job.id}?args=1")
    assert "<script>window.__xss = 'args'</script>" in page.locator("#args").inner_text()
    assert XSS_ERROR in page.locator("p.error .error-message").inner_text()


def test_a_worker_links_to_the_job_it_is_running(served: dict[str, Any], page: Page) -> None:
    runtime, running = served["runtime"], served["running"]
    # Beat again: the fixture's heartbeat may have aged out while other tests ran.
    worker = WorkerInfo(
        "web-1:4242:9f3a1c", "web-1", 4242, ("default",), runtime.clock.now(), (str(running.id),)
    )
    runtime.presence.beat(worker)
    page.goto(f"{served['url']}/workers")
    page.locator("#workers td.jobs a").first.click()
    page.wait_for_url(f"**/jobs/{served['running'].id}")
    assert str(served["running"].id) in page.content()


def test_the_workflow_page_draws_the_graph_and_its_cancel_changes_the_states(
    served: dict[str, Any], page: Page, tmp_path: Path
) -> None:
    runtime, url = served["runtime"], served["url"]
    wf = conveyor.Workflow()
    fetch = wf.add("succeed", {"day": "2026-12-01"}, name="fetch")
    parts = [wf.add("succeed", {"part": n}, after=[fetch], name=f"render-{n}") for n in range(3)]
    wf.add("succeed", after=[conveyor.dep(parts[0], on_failure="skip"), *parts[1:]], name="merge")
    workflow_id = runtime.enqueue(wf)
    page.goto(f"{url}/workflows/{workflow_id}")
    assert page.locator("h1").inner_text() == f"Workflow {workflow_id}"
    boxes = page.locator("svg#graph g.node")
    assert boxes.count() == 5
    assert page.locator("svg#graph g.edge").count() == 6
    assert page.locator("svg#graph g.edge[data-policy='skip'] text").text_content() == "skip"
    drawn = boxes.evaluate_all("gs => gs.map(g => g.dataset.state)")
    assert sorted(drawn) == ["pending", "waiting", "waiting", "waiting", "waiting"]
    # The browser lays the boxes out as the server placed them: the root left of its
    # dependents, the fan-in right of them, the parts one above another.
    where = {
        handle.name: page.locator(f"svg#graph g.node[data-job='{handle.job_id}']").bounding_box()
        for handle in (fetch, *parts)
    }
    merge_box = page.locator("svg#graph g.node[data-layer='2']").bounding_box()
    assert all(box is not None for box in (*where.values(), merge_box))
    assert where["fetch"]["x"] < where["render-0"]["x"] < merge_box["x"]
    assert where["render-0"]["y"] < where["render-1"]["y"] < where["render-2"]["y"]
    shot = tmp_path / "dashboard-workflow.png"
    page.screenshot(path=str(shot), full_page=True)
    if os.environ.get("CONVEYOR_UPDATE_SCREENSHOTS") == "1":
        shutil.copyfile(shot, IMAGES / shot.name)

    page.click("#cancel-workflow")
    page.wait_for_url(f"**/workflows/{workflow_id}?*")
    assert "Cancelled the workflow's 5 unfinished job(s)" in page.locator(".notice").inner_text()
    drawn = page.locator("svg#graph g.node").evaluate_all("gs => gs.map(g => g.dataset.state)")
    assert drawn == ["cancelled"] * 5
    assert page.locator("#cancel-workflow").count() == 0
    state = runtime.workflow(workflow_id)
    assert {m.state for m in state.members} == {conveyor.JobStatus.CANCELLED}

    # A box links to its job's page, which links back to the workflow.
    page.locator(f"svg#graph g.node[data-job='{parts[1].job_id}']").click()
    page.wait_for_url(f"**/jobs/{parts[1].job_id}")
    page.click("#workflow-link")
    page.wait_for_url(f"**/workflows/{workflow_id}")
    assert page.locator("svg#graph g.node").count() == 5


# ---- CSRF attacks from the same site: another port, a sibling subdomain ----------------

OPERATOR = ("ops", "s3cret")
PLANTED = "planted-by-the-attacker-0123456789abcdef"


class Attacker:
    """Another HTTP service on this host: serves one page, optionally with a
    `Set-Cookie` header, as a page on another port or subdomain could."""

    def __init__(self) -> None:
        self.html = ""
        self.set_cookie: str | None = None
        attacker = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = attacker.html.encode()
                self.send_response(200)
                self.send_header("content-type", "text/html; charset=utf-8")
                self.send_header("content-length", str(len(body)))
                if attacker.set_cookie is not None:
                    self.send_header("set-cookie", attacker.set_cookie)
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def forged_form(action: str, fields: dict[str, str], script: str = "") -> str:
    inputs = "".join(
        f'<input type="hidden" name="{html.escape(k)}" value="{html.escape(v)}">'
        for k, v in fields.items()
    )
    return (
        f'<!doctype html><form method="post" action="{html.escape(action)}">{inputs}</form>'
        f"<script>{script}document.forms[0].submit();</script>"
    )


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """`conveyor dashboard --basic-auth` on a SQLite file of its own, and the runtime
    that writes dead letters into it."""
    folder = tmp_path_factory.mktemp("guarded")
    config = folder / "conveyor.toml"
    config.write_text(f'provider = "db"\nurl = "sqlite:///{folder / "jobs.db"}"\n')
    runtime = conveyor.build(str(config), handlers={"decline": decline})
    # Reached as dash.conveyor.test too, so the CSRF checks are what the attacks meet.
    names = ("--allowed-host", "127.0.0.1", "--allowed-host", f"dash.{TEST_DOMAIN}")
    server, url = _serve(config, "--basic-auth", ":".join(OPERATOR), *names)
    try:
        yield {"url": url, "port": url.rsplit(":", 1)[1], "runtime": runtime}
    finally:
        server.terminate()
        server.wait(10)
        runtime.close()


@pytest.fixture
def attacker() -> Iterator[Attacker]:
    made = Attacker()
    yield made
    made.close()


@pytest.fixture
def operator(browser: Browser) -> Iterator[Page]:
    """A page of an operator logged in to the dashboard with basic auth."""
    username, password = OPERATOR
    context = browser.new_context(http_credentials={"username": username, "password": password})
    yield context.new_page()
    context.close()


def dead_letters(runtime: Any, n: int, tenant: str | None = None) -> list[conveyor.Job]:
    jobs = [
        runtime.enqueue("decline", {"n": i}, max_retries=0, tenant_id=tenant) for i in range(n)
    ]
    runtime.drain()
    assert all(runtime.get(job.id).dead for job in jobs)
    return jobs


def test_a_page_on_another_port_that_sets_the_cookie_cannot_purge(
    guarded: dict[str, Any], attacker: Attacker, operator: Page
) -> None:
    runtime = guarded["runtime"]
    (job,) = dead_letters(runtime, 1)
    operator.goto(guarded["url"] + "/dead")  # logged in, with a cookie of its own
    # Cookies are not kept per port: this one replaces the dashboard's.
    attacker.set_cookie = f"conveyor_csrf={PLANTED}; Path=/"
    attacker.html = forged_form(
        guarded["url"] + "/dead/purge", {"csrf_token": PLANTED, "job_id": str(job.id)}
    )
    with operator.expect_navigation(url=guarded["url"] + "/**") as landed:
        operator.goto(f"http://127.0.0.1:{attacker.port}/")
    jar = {c["name"]: c["value"] for c in operator.context.cookies(guarded["url"])}
    assert jar["conveyor_csrf"] == PLANTED  # the attack's premise held
    answer = landed.value
    assert answer is not None and answer.status == 403
    assert "another origin" in answer.text()
    assert runtime.get(job.id).dead, "the forged purge deleted the dead letter"


def test_a_sibling_subdomain_that_plants_the_cookie_cannot_bulk_purge(
    guarded: dict[str, Any], attacker: Attacker, operator: Page
) -> None:
    runtime = guarded["runtime"]
    victims = dead_letters(runtime, 15, tenant="acme")
    dashboard = f"http://dash.{TEST_DOMAIN}:{guarded['port']}"
    operator.goto(dashboard + "/dead")
    fields = {"csrf_token": PLANTED, "action": "purge", "tenant": "acme"}
    plant = f"document.cookie = 'conveyor_csrf={PLANTED}; domain={TEST_DOMAIN}; path=/';"
    attacker.html = forged_form(dashboard + "/dead/bulk", fields, plant)
    with operator.expect_navigation(url=dashboard + "/**") as landed:
        operator.goto(f"http://evil.{TEST_DOMAIN}:{attacker.port}/")
    planted = [c for c in operator.context.cookies(dashboard) if c["value"] == PLANTED]
    assert planted and planted[0]["domain"].lstrip(".") == TEST_DOMAIN
    answer = landed.value
    assert answer is not None and answer.status == 403
    assert "another origin" in answer.text()
    assert all(runtime.get(job.id).dead for job in victims), "the forged bulk purge ran"


def test_a_page_whose_name_was_re_pointed_at_this_machine_cannot_read_the_dashboard(
    served: dict[str, Any], operator: Page
) -> None:
    # DNS rebinding: rebind.conveyor.test resolves to 127.0.0.1 here, as an attacker's
    # name would once re-pointed; to the browser the dashboard is then its own origin.
    port = served["url"].rsplit(":", 1)[1]
    answer = operator.goto(f"http://rebind.{TEST_DOMAIN}:{port}/dead?args=1")
    assert answer is not None and answer.status == 400
    assert "card 0 declined" not in operator.content()
    assert "answers to 127.0.0.1, ::1, localhost only" in operator.content()


def test_the_operators_own_purge_still_works_under_basic_auth(
    guarded: dict[str, Any], operator: Page
) -> None:
    runtime = guarded["runtime"]
    (job,) = dead_letters(runtime, 1, tenant="own")
    operator.goto(f"{guarded['url']}/dead?tenant=own")
    operator.locator("#dead tr", has_text=str(job.id)).locator(".danger").click()
    operator.click("#confirm")
    operator.wait_for_url("**/dead?*")
    assert "Purged 1 dead letter" in operator.locator(".notice").inner_text()
    assert runtime.get(job.id) is None


# ---- the backend going away under an open overview -------------------------------------


def test_the_live_overview_marks_its_figures_stale_while_the_backend_is_down(
    browser: Browser, tmp_path: Path
) -> None:
    redis = RedisServer().start()
    config = tmp_path / "conveyor.toml"
    config.write_text(f'provider = "redis"\nredis = {{ url = "{redis.url}" }}\n')
    runtime = conveyor.build(str(config), handlers={"succeed": succeed})
    runtime.enqueue("succeed", {"n": 1}, queue="mail")
    server, url = _serve(config)
    context = browser.new_context()
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    try:
        page.goto(url + "/")
        assert page.locator("#stale").is_hidden()
        redis.kill()
        page.wait_for_selector("#stale", state="visible", timeout=20_000)
        note = page.locator("#stale").inner_text()
        assert "Redis at redis://127.0.0.1" in note and "as of" in note, note
        assert page.locator("#live").get_attribute("data-stale") == "true"
        # The figures stay on the page, marked, rather than vanish or freeze silently.
        assert page.locator('#queues tr[data-queue="mail"] td.ready').inner_text() == "1"
        redis.start()
        page.wait_for_selector("#stale", state="hidden", timeout=40_000)
        assert page.locator("#live").get_attribute("data-stale") == "false"
        assert errors == []
    finally:
        context.close()
        server.terminate()
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
        runtime.close()
        redis.cleanup()
