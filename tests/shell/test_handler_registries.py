"""A configured handler module may offer a `Registry` instead of a mapping: its
registrations arrive with their options (a timeout, process execution, a tenant
scope), which a plain mapping cannot carry, so `conveyor worker` runs such handlers
as the module registered them."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import conveyor
import pytest
from cli_support import CONVEYOR, process_env
from conveyor.core import JobStatus, ValidationError

JOBS = """
from conveyor import Registry

def render(args, ctx):
    import os
    return {"pid": os.getpid()}

def rebuild(args, ctx):
    return "scoped"

registry = Registry()
registry.register("video.render", render, timeout=60, execution="process")
registry.register("report.rebuild", rebuild, tenant_scoped=True)

def make_registry():
    return registry

taken = Registry()
taken.register("video.render", render)

CALLED = []

def purge_old_rows(args=None):
    CALLED.append(args)
    return {"purged": 10}
"""


@pytest.fixture
def modules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "registry_jobs.py").write_text(JOBS)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "registry_jobs", raising=False)
    return tmp_path


def _built(*specs: str) -> conveyor.Runtime:
    return conveyor.build(
        {"provider": "memory", "handlers": list(specs), "entry_points": False}, env={}
    )


@pytest.mark.parametrize("spec", ["registry_jobs:registry", "registry_jobs:make_registry"])
def test_a_registry_named_in_the_config_brings_each_registration_with_its_options(
    modules: Path, spec: str
) -> None:
    runtime = _built(spec)
    render = runtime.registry.registration("video.render")
    rebuild = runtime.registry.registration("report.rebuild")
    assert render is not None and render.execution == "process" and render.timeout_ms == 60_000
    assert rebuild is not None and rebuild.tenant_scoped
    runtime.close()


def test_a_job_type_both_a_registry_and_a_mapping_claim_is_refused_naming_the_entry(
    modules: Path,
) -> None:
    with pytest.raises(ValidationError) as refused:
        _built("registry_jobs:registry", "registry_jobs:taken")
    assert str(refused.value).startswith("handlers[1]: ")
    assert "'video.render' is already registered" in str(refused.value)


@pytest.mark.parametrize("name", ["purge_old_rows", "render"])
def test_an_entry_naming_a_handler_is_refused_without_calling_it(modules: Path, name: str) -> None:
    # The handler ran at config load (with no args), then was refused as a mapping
    # ("handler for 'purged' is not callable"), or failed with a bare TypeError.
    with pytest.raises(ValidationError) as refused:
        _built(f"registry_jobs:{name}")
    assert str(refused.value).startswith("handlers[0]: ")
    assert "takes arguments, as a handler does" in str(refused.value)
    assert sys.modules["registry_jobs"].CALLED == []


def test_one_collection_listed_twice_is_loaded_once(modules: Path) -> None:
    # The second entry was refused: "already registered; pass replace=True", which no
    # config can pass.
    runtime = _built("registry_jobs:registry", "registry_jobs:registry")
    assert runtime.registry.registration("video.render") is not None
    runtime.close()


def test_build_takes_a_registry_as_its_handlers_with_each_registrations_options() -> None:
    # It was refused: "handlers: must be a mapping of job type to handler (or Tasks)".
    import process_handlers
    from conveyor import Registry, Tasks

    registry = Registry()
    registry.register("render", process_handlers.double, execution="process", timeout=5)
    runtime = conveyor.build({"provider": "memory", "entry_points": False}, handlers=registry, env={})
    render = runtime.registry.registration("render")
    assert render is not None and render.execution == "process" and render.timeout_ms == 5000
    runtime.close()
    with pytest.raises(TypeError, match=r"execution= is not a task option: register the function"):
        Tasks().task(name="render", execution="process")


def test_conveyor_worker_runs_a_process_executed_handler_a_registry_declares(
    modules: Path,
) -> None:
    url = f"sqlite:///{modules / 'jobs.db'}"
    (modules / "conveyor.toml").write_text(
        f'url = "{url}"\nhandlers = ["registry_jobs:registry"]\nentry_points = false\n'
        "[workers]\npoll_interval_ms = 100\n"
    )
    runtime = conveyor.build({"url": url, "entry_points": False}, env={})
    job = runtime.enqueue("video.render", {})
    worker = subprocess.Popen(
        [*CONVEYOR, "worker"],
        cwd=modules,
        env=process_env(modules),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        view = runtime.get(job.id)
        while time.monotonic() < deadline and worker.poll() is None:
            view = runtime.get(job.id)
            if view is not None and view.state.is_terminal:
                break
            time.sleep(0.1)
    finally:
        worker.terminate()
        _, err = worker.communicate(timeout=30)
        runtime.close()
    assert view is not None and view.state is JobStatus.COMPLETED, err
    assert view.job is not None and view.job.result["pid"] != worker.pid, "ran in a child"
