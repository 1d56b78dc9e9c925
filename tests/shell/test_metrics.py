"""Prometheus metrics: what a scrape of `/metrics` shows after real jobs ran on SQLite,
PostgreSQL and Redis, and `conveyor worker --metrics-port` serving it."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import conveyor
import pytest
from backends import Backend, make_backend
from conveyor import Workflow
from conveyor.shell.config import load_config
from conveyor.shell.metrics import JobMetrics, instrument, serve
from conveyor.shell.ports import QueueCounts
from conveyor.shell.registry import Permanent, Registry
from conveyor.shell.runtime import Runtime
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families
from returns.result import Failure

SERVERS = ("sqlite", "postgresql", "redis")


@pytest.fixture(params=SERVERS)
def server_backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    made = make_backend(request.param)
    yield made
    made.cleanup()


def _runtime(backend: Backend, handlers: dict[str, Any], queues: tuple[str, ...] = ("default",)):
    config = load_config(
        {
            "provider": "memory",
            "entry_points": False,
            "retry": {"initial_delay_ms": 1, "max_delay_ms": 5, "jitter": False},
            "workers": {"queues": list(queues)},
        },
        env={},
    )
    registry = Registry()
    for job_type, handler in handlers.items():
        registry.register(job_type, handler)
    return Runtime(config, backend.queue, backend.store, registry)


@pytest.fixture
def exported() -> Iterator[list[Any]]:
    """Metrics servers started by a test, closed after it."""
    started: list[Any] = []
    yield started
    for server in started:
        server.close()


def _serve(runtime: Runtime, exported: list[Any]) -> tuple[JobMetrics, str]:
    metrics = instrument(runtime, CollectorRegistry())
    server = serve(metrics, 0, "127.0.0.1")
    exported.append(server)
    return metrics, f"http://127.0.0.1:{server.address[1]}/metrics"


def scrape(url: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of a scrape: (name, labels) -> value."""
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def sample(samples: dict, name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))


def total(samples: dict, name: str, **labels: str) -> float | None:
    """The sum over every priority of the series matching `labels` (None when none does)."""
    wanted = set(labels.items())
    found = [v for (n, ls), v in samples.items() if n == name and wanted <= ls]
    return sum(found) if found else None


def _failing(args: Any) -> None:
    raise ConnectionError("upstream down")


def test_a_scrape_counts_each_enqueued_job_by_queue_and_type(server_backend, exported) -> None:
    runtime = _runtime(server_backend, {"ship": lambda a: "ok"})
    _, url = _serve(runtime, exported)
    runtime.enqueue("ship", {"n": 1})
    runtime.enqueue_many("ship", [{"n": 2}, {"n": 3}], queue="bulk")
    samples = scrape(url)
    assert sample(samples, "conveyor_jobs_enqueued_total", queue="default", job_type="ship") == 1
    assert sample(samples, "conveyor_jobs_enqueued_total", queue="bulk", job_type="ship") == 2


def test_a_scrape_counts_outcomes_succeeded_retried_and_dead_lettered(
    server_backend, exported
) -> None:
    runtime = _runtime(
        server_backend,
        {"ship": lambda a: "ok", "flaky": _failing, "refuse": lambda a: Failure(Permanent("no"))},
    )
    _, url = _serve(runtime, exported)
    runtime.enqueue("ship")
    runtime.enqueue("flaky", max_retries=1)
    runtime.enqueue("refuse")
    runtime.drain(wait_scheduled=True, timeout_s=30)
    samples = scrape(url)

    def finished(job_type: str, outcome: str) -> float | None:
        return sample(
            samples,
            "conveyor_jobs_finished_total",
            queue="default",
            job_type=job_type,
            outcome=outcome,
        )

    assert finished("ship", "succeeded") == 1
    assert finished("flaky", "retried") == 1
    assert finished("flaky", "dead_lettered") == 1
    assert finished("refuse", "dead_lettered") == 1
    assert finished("refuse", "retried") is None
    assert finished("ship", "dead_lettered") is None


def test_a_scrape_counts_cancelled_jobs(server_backend, exported) -> None:
    runtime = _runtime(server_backend, {"ship": lambda a: "ok"})
    _, url = _serve(runtime, exported)
    runtime.cancel(runtime.enqueue("ship").id)
    runtime.cancel_many(job_type="ship")  # nothing left to cancel: nothing counted
    samples = scrape(url)
    labels = {"queue": "default", "job_type": "ship"}
    assert sample(samples, "conveyor_jobs_finished_total", outcome="cancelled", **labels) == 1
    assert sample(samples, "conveyor_jobs_finished_total", outcome="succeeded", **labels) is None


def test_the_duration_histogram_observes_every_attempt(server_backend, exported) -> None:
    def slow(args: Any) -> str:
        time.sleep(0.06)
        return "ok"

    runtime = _runtime(server_backend, {"slow": slow, "flaky": _failing})
    _, url = _serve(runtime, exported)
    runtime.enqueue("slow")
    runtime.enqueue("flaky", max_retries=2)
    runtime.drain(wait_scheduled=True, timeout_s=30)
    samples = scrape(url)
    labels = {"queue": "default", "job_type": "slow"}
    assert sample(samples, "conveyor_job_duration_seconds_count", **labels) == 1
    assert sample(samples, "conveyor_job_duration_seconds_sum", **labels) >= 0.05
    assert sample(samples, "conveyor_job_duration_seconds_bucket", **labels, le="0.05") == 0
    assert sample(samples, "conveyor_job_duration_seconds_bucket", **labels, le="+Inf") == 1
    flaky = {"queue": "default", "job_type": "flaky"}
    assert sample(samples, "conveyor_job_duration_seconds_count", **flaky) == 3


def test_a_scrape_reports_depth_by_queue_and_state_and_jobs_in_flight(
    server_backend, exported
) -> None:
    runtime = _runtime(server_backend, {})
    _, url = _serve(runtime, exported)
    for n in range(3):
        runtime.enqueue("ship", {"n": n})
    runtime.enqueue("ship", delay=3600)
    runtime.enqueue("ship", queue="other")
    claim = server_backend.queue.dequeue("default", runtime.clock.now())
    assert claim is not None
    samples = scrape(url)
    assert total(samples, "conveyor_queue_depth", queue="default", state="ready") == 2
    assert total(samples, "conveyor_queue_depth", queue="default", state="scheduled") == 1
    assert total(samples, "conveyor_jobs_in_flight", queue="default") == 1
    assert total(samples, "conveyor_queue_depth", queue="other", state="ready") == 1
    assert total(samples, "conveyor_jobs_in_flight", queue="other") == 0


def test_a_scrape_counts_the_jobs_of_a_workflow_that_wait_for_others(
    server_backend, exported
) -> None:
    # Only `default` is worked, so the released parts stay ready in `reports`.
    runtime = _runtime(server_backend, {"ship": lambda args: None})
    _, url = _serve(runtime, exported)
    wf = Workflow()
    fetch = wf.add("ship", name="fetch")
    parts = [wf.add("ship", after=[fetch], queue="reports", name=f"part{i}") for i in range(3)]
    wf.add("ship", after=parts, name="merge")
    runtime.enqueue(wf)
    samples = scrape(url)
    waiting = {"priority": "", "state": "waiting"}
    assert sample(samples, "conveyor_queue_depth", queue="reports", **waiting) == 3
    assert sample(samples, "conveyor_queue_depth", queue="default", **waiting) == 1
    assert total(samples, "conveyor_queue_depth", queue="default", state="ready") == 1
    # Once the root has run, its dependents are released: ready, no longer waiting.
    runtime.drain()
    samples = scrape(url)
    assert sample(samples, "conveyor_queue_depth", queue="reports", **waiting) == 0
    assert total(samples, "conveyor_queue_depth", queue="reports", state="ready") == 3
    assert sample(samples, "conveyor_queue_depth", queue="default", **waiting) == 1


def _enqueue_by_priority(runtime: Runtime, backend: Backend) -> None:
    """default: one critical in flight, two high and one low ready, one critical and
    one low scheduled."""
    runtime.enqueue("ship", priority="critical")
    assert backend.queue.dequeue("default", runtime.clock.now()) is not None
    for priority in ("high", "high", "low"):
        runtime.enqueue("ship", priority=priority)
    for priority in ("critical", "low"):
        runtime.enqueue("ship", priority=priority, delay=3600)


def test_a_scrape_reports_ready_depth_per_priority(server_backend, exported) -> None:
    runtime = _runtime(server_backend, {})
    _, url = _serve(runtime, exported)
    _enqueue_by_priority(runtime, server_backend)
    samples = scrape(url)
    ready = {
        p: sample(samples, "conveyor_queue_depth", queue="default", priority=p, state="ready")
        for p in ("critical", "high", "normal", "low")
    }
    assert ready == {"critical": 0, "high": 2, "normal": 0, "low": 1}


def test_a_scrape_reports_scheduled_and_in_flight_per_priority(server_backend, exported) -> None:
    runtime = _runtime(server_backend, {})
    _, url = _serve(runtime, exported)
    _enqueue_by_priority(runtime, server_backend)
    samples = scrape(url)

    def scheduled(priority: str) -> float | None:
        labels = {"queue": "default", "priority": priority, "state": "scheduled"}
        return sample(samples, "conveyor_queue_depth", **labels)

    def in_flight(priority: str) -> float | None:
        return sample(samples, "conveyor_jobs_in_flight", queue="default", priority=priority)

    assert [scheduled(p) for p in ("critical", "high", "normal", "low", "")] == [
        1, 0, 0, 1, None
    ]  # fmt: skip
    assert [in_flight(p) for p in ("critical", "high", "normal", "low", "")] == [
        1, 0, 0, 0, None
    ]  # fmt: skip


def test_figures_an_adapter_does_not_split_go_to_an_empty_priority(exported) -> None:
    # A third-party adapter may report totals only; the depth still adds up.
    backend = make_backend("memory")
    runtime = _runtime(backend, {})
    runtime.queue.counts = lambda now: {"default": QueueCounts(ready=3, in_flight=1)}
    _, url = _serve(runtime, exported)
    samples = scrape(url)
    ready = {"queue": "default", "priority": "", "state": "ready"}
    assert sample(samples, "conveyor_queue_depth", **ready) == 3
    assert sample(samples, "conveyor_jobs_in_flight", queue="default", priority="") == 1
    assert total(samples, "conveyor_queue_depth", queue="default", state="ready") == 3


def test_the_oldest_ready_age_grows_while_a_job_waits(server_backend, exported) -> None:
    runtime = _runtime(server_backend, {})
    _, url = _serve(runtime, exported)
    runtime.enqueue("ship")
    time.sleep(0.3)
    age = sample(scrape(url), "conveyor_queue_oldest_ready_age_seconds", queue="default")
    assert age is not None and 0.25 <= age < 30


def test_a_configured_queue_with_no_jobs_reports_zeros(server_backend, exported) -> None:
    runtime = _runtime(server_backend, {}, queues=("default", "idle"))
    _, url = _serve(runtime, exported)
    samples = scrape(url)
    for priority in ("critical", "high", "normal", "low"):
        for state in ("ready", "scheduled"):
            labels = {"queue": "idle", "priority": priority, "state": state}
            assert sample(samples, "conveyor_queue_depth", **labels) == 0
        assert sample(samples, "conveyor_jobs_in_flight", queue="idle", priority=priority) == 0
    assert sample(samples, "conveyor_queue_oldest_ready_age_seconds", queue="idle") == 0


def test_a_queue_that_cannot_be_read_leaves_depth_out_and_the_counters_in(exported, caplog) -> None:
    backend = make_backend("sqlite")
    try:
        runtime = _runtime(backend, {})
        _, url = _serve(runtime, exported)
        runtime.enqueue("ship")

        def down(now: Any) -> Any:
            raise ConnectionError("database down")

        runtime.queue.counts = down
        samples = scrape(url)
    finally:
        backend.cleanup()
    assert not any(name == "conveyor_queue_depth" for name, _ in samples)
    assert sample(samples, "conveyor_jobs_enqueued_total", queue="default", job_type="ship") == 1
    # An outage is one line without a traceback, once until the server answers.
    assert "could not read queue counts for metrics (ConnectionError: database down)" in (
        caplog.text
    )
    assert "Traceback" not in caplog.text


def test_a_scrape_while_redis_is_down_answers_within_a_scrapers_timeout(exported) -> None:
    from conveyor.testing.redis_server import RedisServer

    server = RedisServer().start()
    runtime = conveyor.build(
        {"provider": "redis", "redis": {"url": server.url, "prefix": "scrape-down"}},
        handlers={"ship": lambda args: None},
        env={},
    )
    try:
        _, url = _serve(runtime, exported)
        runtime.enqueue("ship", {})
        server.kill()
        # The reads' retry budget (15 s) outlasted Prometheus's 10 s scrape timeout:
        # the scraper got nothing, counters included. `scrape` gives up at 10 s.
        samples = scrape(url)
    finally:
        runtime.close()
    assert not any(name == "conveyor_queue_depth" for name, _ in samples)
    assert sample(samples, "conveyor_jobs_enqueued_total", queue="default", job_type="ship") == 1


def test_closing_the_metrics_removes_them_from_the_registry() -> None:
    backend = make_backend("memory")
    registry = CollectorRegistry()
    metrics = instrument(_runtime(backend, {}), registry)
    metrics.close()
    assert list(registry.collect()) == []
    instrument(_runtime(backend, {}), registry)  # the names are free again


# ---- the CLI -----------------------------------------------------------------

HANDLERS = """
from conveyor import Permanent
def ship(args):
    return "ok"
def refuse(args):
    raise Permanent("no")
HANDLERS = {"ship": ship, "refuse": refuse}
"""


def _project(tmp_path: Path, backend: Backend) -> Path:
    (tmp_path / "metrics_handlers.py").write_text(HANDLERS)
    if backend.name == "sqlite":
        where = f'provider = "db"\nurl = "sqlite:///{tmp_path / "jobs.db"}"\n'
    elif backend.name == "postgresql":
        from backends import _postgres_url

        where = f'provider = "db"\nurl = "{_postgres_url()}"\n'
    else:
        from backends import REDIS_TEST_DB
        from conveyor.testing.redis_server import redis_url

        where = f'provider = "redis"\n[redis]\nurl = "{redis_url(REDIS_TEST_DB)}"\n'
    (tmp_path / "conveyor.toml").write_text(
        'handlers = ["metrics_handlers:HANDLERS"]\nentry_points = false\n'
        + where
        + '[workers]\ncount = 1\nqueues = ["default"]\npoll_interval_ms = 20\n'
    )
    return tmp_path


def _env(project: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONVEYOR_")}
    env["PYTHONPATH"] = str(project) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def test_worker_metrics_port_serves_the_metrics_of_its_jobs(server_backend, tmp_path) -> None:
    project = _project(tmp_path, server_backend)
    enqueue = [sys.executable, "-m", "conveyor.shell.cli", "enqueue"]
    for job_type in ("ship", "ship", "refuse"):
        done = subprocess.run(
            [*enqueue, job_type], cwd=project, env=_env(project), capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
    worker = subprocess.Popen(
        [sys.executable, "-m", "conveyor.shell.cli", "worker", "--metrics-port", "0"],
        cwd=project,
        env=_env(project),
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert worker.stderr is not None
        lines: list[str] = []
        while not any("metrics at" in line for line in lines):
            line = worker.stderr.readline()
            assert line, "".join(lines)
            lines.append(line)
        port = re.search(r"metrics at http://[^:]+:(\d+)/metrics", "".join(lines))
        assert port is not None
        url = f"http://127.0.0.1:{port.group(1)}/metrics"
        deadline = time.monotonic() + 30
        while True:
            samples = scrape(url)
            dead = sample(
                samples,
                "conveyor_jobs_finished_total",
                queue="default",
                job_type="refuse",
                outcome="dead_lettered",
            )
            ok = sample(
                samples,
                "conveyor_jobs_finished_total",
                queue="default",
                job_type="ship",
                outcome="succeeded",
            )
            if (dead, ok) == (1, 2) or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert (dead, ok) == (1, 2)
        labels = {"queue": "default", "job_type": "ship"}
        assert sample(samples, "conveyor_job_duration_seconds_count", **labels) == 2
        assert total(samples, "conveyor_queue_depth", queue="default", state="ready") == 0
        assert total(samples, "conveyor_jobs_in_flight", queue="default") == 0
    finally:
        worker.send_signal(signal.SIGTERM)
        code = worker.wait(timeout=30)
    assert code == 0


def test_worker_metrics_without_prometheus_client_is_one_line_naming_the_extra(
    tmp_path,
) -> None:
    code = (
        "import sys; sys.modules['prometheus_client'] = None\n"
        "from conveyor.shell.cli.command import main\n"
        "sys.exit(main(['worker', '--metrics-port', '0']))\n"
    )
    env = {**_env(tmp_path), "CONVEYOR_URL": f"sqlite:///{tmp_path / 'jobs.db'}"}
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env=env,
    )
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "pip install 'conveyor-jobs[metrics]'" in lines[0]


@pytest.mark.parametrize("port", ["-1", "65536"])
def test_worker_refuses_a_metrics_port_that_is_not_a_port(tmp_path, port) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "conveyor.shell.cli", "worker", "--metrics-port", port],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env={**_env(tmp_path), "CONVEYOR_URL": f"sqlite:///{tmp_path / 'jobs.db'}"},
    )
    assert result.returncode == 2
    assert "--metrics-port" in result.stderr


def test_worker_says_which_flag_when_its_metrics_port_is_taken(tmp_path) -> None:
    # It said only "conveyor: OSError: [Errno 98] Address already in use".
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        worker = ["worker", "--metrics-port", str(port), "--metrics-addr", "127.0.0.1"]
        result = subprocess.run(
            [sys.executable, "-m", "conveyor.shell.cli", *worker],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=tmp_path,
            env={**_env(tmp_path), "CONVEYOR_URL": f"sqlite:///{tmp_path / 'jobs.db'}"},
        )
    assert result.returncode == 2, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert f"--metrics-port: cannot listen on 127.0.0.1:{port}" in last, last
    assert "in use" in last, last


def test_the_runtime_worker_and_cli_load_neither_metrics_nor_tracing_library() -> None:
    code = (
        "import json, sys\n"
        "import conveyor, conveyor.shell.cli.command, conveyor.shell.runtime, conveyor.shell.worker.loop\n"
        "print(json.dumps([m for m in ('prometheus_client', 'opentelemetry') "
        "if m in sys.modules]))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == []
