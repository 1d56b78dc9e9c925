"""The dashboard while its backend is down: each page says so within about 2 seconds
(not a long wait and then a bare error), without the password, and the pages come
back once the server does. Real PostgreSQL and Redis servers of the test's own,
stopped and started again. The browser test of the overview's stale mark is in
test_dashboard_browser.py."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import conveyor
import pytest
from conveyor.dashboard import create_app
from conveyor.testing.redis_server import RedisServer
from starlette.testclient import TestClient

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "faults"))
from fault_pg import PgCluster

pytestmark = pytest.mark.timeout(180)

PASSWORD = "hunter2-outage"


class Server:
    def __init__(self, name: str, url: str, down: Callable[[], None], up: Callable[[], None]):
        self.name, self.url, self.down, self.up = name, url, down, up


@pytest.fixture(params=["redis", "postgresql"])
def server(request: pytest.FixtureRequest) -> Iterator[Server]:
    if request.param == "redis":
        redis = RedisServer(password=PASSWORD).start()
        yield Server("Redis", redis.url, redis.kill, redis.start)
        redis.cleanup()
    else:
        cluster = PgCluster().start()
        yield Server("PostgreSQL", cluster.url, cluster.crash, cluster.start)
        cluster.cleanup()


def config(url: str) -> dict[str, Any]:
    backend: dict[str, Any] = (
        {"provider": "redis", "redis": {"url": url}}
        if url.startswith("redis")
        else {"provider": "db", "url": url, "auto_migrate": True}
    )
    # The default lease (60 s): the adapters retry a dropped connection for 15 s.
    return {
        **backend,
        "entry_points": False,
        "retention": {"prune_interval_ms": 0},
        # So that the Limits and Cron pages have something to read from the backend.
        "limits": {"payments": {"fair": True}},
        "cron": [{"name": "nightly", "schedule": "30 2 * * *", "job_type": "fail"}],
    }


def fail(args: dict[str, Any]) -> None:
    raise conveyor.Permanent("no")


def answers_while_up(client: TestClient, path: str) -> None:
    """The page answers 200 while the server is up. A loaded machine's first read (a
    cold connection, a fresh server's caches) may pass the 2 s deadline once; the page
    says so with a 503 and must load on a later try."""
    deadline = time.monotonic() + 20
    while (answer := client.get(path)).status_code != 200:
        assert answer.status_code == 503, (path, answer.status_code, answer.text[:300])
        assert time.monotonic() < deadline, (path, answer.text[:300])
        time.sleep(0.2)


PAGES = ["/", "/jobs", "/dead", "/workers", "/limits", "/cron", "/live/overview"]


def test_every_page_says_the_backend_is_unreachable_within_about_two_seconds(
    server: Server,
) -> None:
    runtime = conveyor.build(config(server.url), handlers={"fail": fail})
    try:
        job = runtime.enqueue("fail", {}, max_retries=0)
        runtime.drain()
        flow = conveyor.Workflow()
        flow.add("fail", after=[flow.add("fail", name="first")], name="then")
        workflow = f"/workflows/{runtime.enqueue(flow)}"
        client = TestClient(create_app(runtime), raise_server_exceptions=False)
        for path in [*PAGES, f"/jobs/{job.id}", f"/dead/purge?job_id={job.id}", workflow]:
            answers_while_up(client, path)
        server.down()
        outage_began = time.monotonic()
        for path in [*PAGES, f"/jobs/{job.id}", workflow, "/healthz"]:
            began = time.monotonic()
            answer = client.get(path)
            took = time.monotonic() - began
            assert answer.status_code == 503, (path, answer.status_code, answer.text[:300])
            assert took < 3.0, (path, took)
            if path != "/healthz":
                assert "unreachable" in answer.text or "did not answer" in answer.text, path
                assert server.name in answer.text, path
            assert PASSWORD not in answer.text
        # One read waits out the deadline; the rest answer at once while it is out.
        assert time.monotonic() - outage_began < 6
        server.up()
        deadline = time.monotonic() + 30
        while client.get("/").status_code != 200:
            assert time.monotonic() < deadline, "the dashboard did not come back"
            time.sleep(0.2)
        assert client.get("/dead").status_code == 200
        assert client.get("/healthz").json() == {"status": "ok"}
    finally:
        runtime.close()


def test_an_action_while_the_backend_is_down_is_a_503_saying_so(server: Server) -> None:
    runtime = conveyor.build(config(server.url), handlers={"fail": fail})
    try:
        job = runtime.enqueue("fail", {}, max_retries=0)
        runtime.drain()
        client = TestClient(create_app(runtime), raise_server_exceptions=False)
        page = client.get(f"/dead/purge?job_id={job.id}").text
        token = page.split('name="csrf_token" value="', 1)[1].split('"', 1)[0]
        server.down()
        began = time.monotonic()
        answer = client.post(
            "/dead/retry", data={"csrf_token": token, "job_id": str(job.id)}, follow_redirects=False
        )
        assert answer.status_code == 503 and server.name in answer.text
        assert PASSWORD not in answer.text
        assert time.monotonic() - began < 20
    finally:
        server.up()
        runtime.close()
