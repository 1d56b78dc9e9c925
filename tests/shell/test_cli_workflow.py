"""`conveyor workflow show` and `conveyor workflow cancel` on a SQLite project."""

from __future__ import annotations

import json
from pathlib import Path

import conveyor
import pytest
from cli_support import call_main
from conveyor import Workflow, dep


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> Path:
    config = tmp_path / "conveyor.toml"
    config.write_text(
        f'provider = "db"\nurl = "sqlite:///{tmp_path / "jobs.db"}"\nentry_points = false\n'
    )
    monkeypatch.chdir(tmp_path)
    assert call_main(capsys, "migrate").returncode == 0
    return config


def _workflow(config: Path) -> tuple[Workflow, object]:
    rt = conveyor.build(str(config), handlers={"a": lambda a: "ok"})
    wf = Workflow()
    root = wf.add("a", name="fetch")
    wf.add("a", after=[dep(root, on_failure="skip")], name="merge")
    rt.enqueue(wf)
    return wf, rt


def test_show_lists_each_job_state_and_what_it_waits_for(project: Path, capsys) -> None:
    wf, rt = _workflow(project)
    ran = call_main(capsys, "workflow", "show", str(wf.id), "--json")
    assert ran.returncode == 0, ran.stderr
    shown = json.loads(ran.stdout)
    assert [(m["name"], m["state"]) for m in shown["members"]] == [
        ("fetch", "pending"),
        ("merge", "waiting"),
    ]
    assert shown["members"][1]["waits_for"] == [{"job": "fetch", "on_failure": "skip"}]
    assert shown["state"] == "running"
    text = call_main(capsys, "workflow", "show", str(wf.id))
    assert "fetch (skip)" in text.stdout and "1 waiting" in text.stdout
    assert "workflow running; 2 jobs:" in text.stdout
    rt.drain()
    done = call_main(capsys, "workflow", "show", str(wf.id), "--json")
    assert json.loads(done.stdout)["state"] == "completed"
    rt.close()


def test_status_counts_the_jobs_that_wait_as_the_dashboard_does(project: Path, capsys) -> None:
    # The table had no waiting column: a workflow's waiting jobs showed nowhere in it.
    _, rt = _workflow(project)
    lines = call_main(capsys, "status").stdout.splitlines()
    header = lines[0].split()
    assert header[:5] == ["queue", "ready", "scheduled", "waiting", "in"], header
    row = next(line.split() for line in lines if line.startswith("default"))
    assert row[1:5] == ["1", "0", "1", "0"], row
    rt.close()


def test_cancel_ends_every_unfinished_job_and_an_unknown_id_is_an_error(
    project: Path, capsys
) -> None:
    wf, rt = _workflow(project)
    ran = call_main(capsys, "workflow", "cancel", str(wf.id))
    assert ran.returncode == 0, ran.stderr
    assert rt.workflow(wf.id).counts == {"cancelled": 2}
    missing = call_main(capsys, "workflow", "show", "00000000-0000-4000-8000-000000000000")
    assert missing.returncode == 1 and "no workflow" in missing.stderr
    bad = call_main(capsys, "workflow", "show", "not-an-id")
    assert bad.returncode == 2
    # It was called a job id.
    assert "workflow_id: 'not-an-id' is not a workflow id" in bad.stderr, "named as given"
    rt.close()


def test_cancel_json_gives_the_counts(project: Path, capsys) -> None:
    wf, rt = _workflow(project)
    ran = call_main(capsys, "workflow", "cancel", str(wf.id), "--json")
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout) == {"workflow_id": str(wf.id), "counts": {"cancelled": 2}}
    rt.close()
