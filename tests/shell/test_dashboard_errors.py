"""What the dashboard answers when something goes wrong: a request under a name it
does not answer to, a read the backend fails, and a bug of the dashboard's own (which
is not dressed up as the backend's)."""

from __future__ import annotations

from typing import Any

import conveyor
import pytest
from conveyor.dashboard import HostCheck, create_app
from conveyor.shell.runtime import Runtime
from starlette.testclient import TestClient


@pytest.fixture
def rt() -> Any:
    runtime = conveyor.build({"provider": "memory"}, handlers={"ok": lambda args: None})
    yield runtime
    runtime.close()


def test_a_refused_host_is_answered_with_the_security_headers_and_shown_in_part(
    rt: Runtime,
) -> None:
    # The refusal had none of them (no nosniff, no CSP) and repeated the whole header.
    from conveyor.shell.dashboard.rendering import SECURITY_HEADERS

    client = TestClient(HostCheck(create_app(rt), ["127.0.0.1"]))
    host = "evil.example<script>alert(1)</script>" + "x" * 5000
    refused = client.get("/", headers={"host": host})
    assert refused.status_code == 400
    for name, value in SECURITY_HEADERS.items():
        assert refused.headers[name] == value
    assert "evil.example<script>alert(1)</script>" in refused.text
    assert len(refused.text) < 400


def test_a_page_the_backend_fails_to_read_is_a_page_naming_what_failed(tmp_path: Any) -> None:
    # The SQLite file's folder was removed under a running dashboard: each page a new
    # connection served was a bare "Internal Server Error".
    import shutil

    folder = tmp_path / "data"
    folder.mkdir()
    runtime = conveyor.build({"provider": "db", "url": f"sqlite:///{folder / 'jobs.db'}"}, env={})
    try:
        runtime.enqueue("anything", {})
        client = TestClient(create_app(runtime))
        assert client.get("/jobs").status_code == 200
        shutil.rmtree(folder)
        runtime.queue.engine.dispose()  # pooled connections held the removed file open
        answer = client.get("/jobs")
        assert answer.status_code == 503
        assert "did not answer the read for this page" in answer.text
        assert "unable to open database file" in answer.text
        assert "x-frame-options" in answer.headers
        health = client.get("/healthz")
        assert (health.status_code, health.json()["error"]) == (503, "OperationalError")
        live = client.get("/live/overview")
        assert live.status_code == 503 and "unable to open database file" in live.text
    finally:
        runtime.close()


def test_a_bug_of_the_dashboards_own_is_not_told_as_the_backends(
    rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every error of a page was a 503 blaming the backend, so a test of what a page
    # does not show passed on a page that never rendered.
    from conveyor.shell.dashboard.app import Dashboard

    def broken(self: Any, data: Any) -> Any:
        raise AttributeError("a bug in the page")

    monkeypatch.setattr(Dashboard, "_overview_context", broken)
    with pytest.raises(AttributeError, match="a bug in the page"):
        TestClient(create_app(rt)).get("/")
