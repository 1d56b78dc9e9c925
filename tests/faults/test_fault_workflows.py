"""A fan-out of 1,000 jobs into one fan-in, with worker processes killed (-9) and
restarted every 1-3 s: the fan-in runs once (again only after a crash while it ran),
never before its last input finished, and nothing is left waiting."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from conveyor import Workflow
from conveyor.core import JobStatus
from fault_harness import HERE, empty_backend
from fault_worker import open_backend

pytestmark = pytest.mark.timeout(240)

PARTS = 1000


def _spawn(url: str, runs: Path, log: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(HERE / "workflow_worker.py"), url, str(runs)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=log.open("ab"),
        text=True,
    )


@pytest.mark.parametrize("backend", ["sqlite", "postgresql", "redis"])
def test_a_fan_in_runs_once_after_its_last_input_while_workers_are_killed(
    backend: str, tmp_path: Path
) -> None:
    url = empty_backend(backend, tmp_path)
    queue, store = open_backend(url)
    wf = Workflow()
    parts = [wf.add("part", {"n": n, "ms": 3}) for n in range(PARTS)]
    fan_in = wf.add("fan_in", after=parts, name="fan_in")
    queue.enqueue_graph(wf.graph(datetime.now(UTC)))

    runs, log = tmp_path / "runs.jsonl", tmp_path / "workers.log"
    rng = random.Random(28)
    procs = [_spawn(url, runs, log) for _ in range(3)]
    killed: set[int] = set()
    kills = 0
    deadline = time.monotonic() + 180
    try:
        while time.monotonic() < deadline:
            record = store.get(fan_in.job_id)
            if record is not None and record.status is JobStatus.COMPLETED:
                break
            time.sleep(rng.uniform(1.0, 3.0))
            victim = procs.pop(rng.randrange(len(procs)))
            victim.kill()
            victim.wait()
            killed.add(victim.pid)
            kills += 1
            procs.append(_spawn(url, runs, log))
        else:
            raise AssertionError(f"the fan-in did not complete in time:\n{log.read_text()[-3000:]}")
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()

    assert kills >= 2, "the run outlasted several kills"
    lines = [json.loads(line) for line in runs.read_text().splitlines()]
    assert lines, "the fan-in ran"
    for line in lines:
        assert line["unfinished"] == 0, "the fan-in ran before its last input finished"
        assert line["inputs"] == PARTS
        assert line["sum"] == sum(range(PARTS))
    # Runs before the last are attempts a kill cut short (their process was killed).
    assert all(line["pid"] in killed for line in lines[:-1]), lines
    for part in parts:
        assert store.get(part.job_id).status is JobStatus.COMPLETED
    counts = queue.counts(datetime.now(UTC)).get("default")
    assert counts is None or counts.waiting == 0, "a job was left waiting"
    queue.close()
