"""`conveyor worker --processes N`: N worker processes under one supervisor, run as a
user runs it (subprocesses, a real SQLite file); its refusal of bad input in-process."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import conveyor
import pytest
from conveyor.shell.cli import main
from conveyor.shell.cli.supervisor import Supervisor, child_argv
from conveyor.shell.worker.signals import RECYCLED_EXIT

CONVEYOR = [sys.executable, "-m", "conveyor.shell.cli"]

HANDLERS = """
import json, os, pathlib, time
OUT = pathlib.Path(os.environ["JOBS_OUT"])
def work(args):
    time.sleep(0.05)
    with OUT.open("a") as f:
        marker = os.environ.get("CONVEYOR_PROCESS_INDEX")
        f.write(json.dumps({"n": args["n"], "pid": os.getpid(), "marker": marker}) + "\\n")
HANDLERS = {"work": work}
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "supervised_handlers.py").write_text(HANDLERS)
    (tmp_path / "conveyor.toml").write_text(
        textwrap.dedent(f"""
        provider = "db"
        url = "sqlite:///{tmp_path / "jobs.db"}"
        handlers = ["supervised_handlers:HANDLERS"]
        entry_points = false
        [workers]
        count = 1
        queues = ["default"]
        poll_interval_ms = 20
        """)
    )
    return tmp_path


def _env(project: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(project) + os.pathsep + env.get("PYTHONPATH", "")
    env["JOBS_OUT"] = str(project / "out.jsonl")
    env.pop("CONVEYOR_URL", None)
    return env


def _worker(project: Path, *flags: str) -> subprocess.Popen[str]:
    """`conveyor worker` with `flags` on the project, its stderr kept."""
    return subprocess.Popen(
        [*CONVEYOR, "worker", *flags],
        cwd=project,
        env=_env(project),
        stderr=subprocess.PIPE,
        text=True,
    )


@contextlib.contextmanager
def _running(project: Path, *flags: str) -> Iterator[subprocess.Popen[str]]:
    """`_worker`, killed on the way out if a failed check left it running."""
    process = _worker(project, *flags)
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def _stop(process: subprocess.Popen[str], signum: int = signal.SIGTERM) -> tuple[int, str]:
    """Send `signum` and wait for the exit: its code and what it wrote to stderr."""
    process.send_signal(signum)
    code = process.wait(timeout=60)
    return code, process.stderr.read() if process.stderr else ""


def _site(project: Path) -> conveyor.Runtime:
    """A runtime on the project's database, in this process."""
    return conveyor.build(
        {"provider": "db", "url": f"sqlite:///{project / 'jobs.db'}", "entry_points": False},
        env={},
    )


def _enqueue(project: Path, numbers: range) -> None:
    """Jobs for the workers, written from this process (`conveyor enqueue` itself is
    tested in test_cli.py)."""
    runtime = _site(project)
    try:
        runtime.enqueue_many("work", [{"n": n} for n in numbers])
    finally:
        runtime.close()


def _done(project: Path) -> list[dict[str, int]]:
    out = project / "out.jsonl"
    return [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []


def _wait_for(project: Path, count: int, timeout_s: float = 60) -> list[dict[str, int]]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        done = _done(project)
        if len(done) >= count:
            return done
        time.sleep(0.05)
    raise AssertionError(f"only {len(_done(project))} of {count} jobs ran")


def _children(parent: int) -> set[int]:
    found = subprocess.run(
        ["ps", "-o", "pid=", "--ppid", str(parent)], capture_output=True, text=True
    ).stdout
    return {int(pid) for pid in found.split()}


def test_the_child_command_drops_processes_and_gives_each_copy_its_metrics_port() -> None:
    argv = ["--config", "c.toml", "worker", "--processes", "3", "--metrics-port", "9100", "-q", "a"]
    assert child_argv(argv, 0) == [
        "--config",
        "c.toml",
        "worker",
        "--metrics-port",
        "9100",
        "-q",
        "a",
    ]
    assert child_argv(argv, 2)[3:5] == ["--metrics-port", "9102"]
    assert child_argv(["worker", "--processes=2", "--metrics-port=9000"], 1) == [
        "worker",
        "--metrics-port=9001",
    ]


def test_two_processes_share_the_jobs_and_stop_together_on_sigterm(project: Path) -> None:
    _enqueue(project, range(30))
    supervisor = _worker(project, "--processes", "2")
    try:
        done = _wait_for(project, 30)
        children = _children(supervisor.pid)
    finally:
        supervisor.send_signal(signal.SIGTERM)
        code = supervisor.wait(timeout=60)
    assert code == 0, supervisor.stderr.read() if supervisor.stderr else ""
    assert sorted(job["n"] for job in done) == list(range(30)), "each job once"
    assert len(children) == 2
    assert {job["pid"] for job in done} == children, "both processes ran jobs"
    assert not any(_alive(pid) for pid in children), "the copies stopped with it"
    # A `conveyor` command a job runs is not a copy (it exited 78 on bad input).
    assert {job["marker"] for job in done} == {None}


def test_a_copy_that_dies_is_replaced_and_the_work_goes_on(project: Path) -> None:
    supervisor = _worker(project, "--processes", "2")
    try:
        deadline = time.monotonic() + 30
        while len(before := _children(supervisor.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        victim = min(before)
        os.kill(victim, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            now = _children(supervisor.pid)
            if len(now) == 2 and victim not in now:
                break
            time.sleep(0.1)
        assert len(now) == 2 and victim not in now, "a fresh copy took the dead one's place"
        _enqueue(project, range(10))
        done = _wait_for(project, 10)
    finally:
        supervisor.send_signal(signal.SIGTERM)
        supervisor.wait(timeout=60)
    assert sorted(job["n"] for job in done) == list(range(10))
    stderr = supervisor.stderr.read() if supervisor.stderr else ""
    assert f"(pid {victim}) was killed by SIGKILL after" in stderr, stderr


def test_processes_below_one_is_refused_naming_the_flag(
    project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(project)
    monkeypatch.delenv("CONVEYOR_URL", raising=False)
    try:
        code = main(["worker", "--processes", "0"])
    except SystemExit as exit:
        code = exit.code
    assert code == 2 and "--processes" in capsys.readouterr().err


def test_metrics_ports_past_65535_are_refused_before_any_copy_starts(
    project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Copy 1 was given port 65536, refused it (exit 2), and was restarted for ever.
    monkeypatch.chdir(project)
    monkeypatch.delenv("CONVEYOR_URL", raising=False)
    assert main(["worker", "--processes", "2", "--metrics-port", "65535"]) == 2
    err = capsys.readouterr().err
    assert "--metrics-port: with --processes 2, copy 1 would get port 65536" in err, err


def test_metrics_port_0_gives_each_copy_a_port_of_its_own_choosing() -> None:
    # 0 + 1 made copy 1 ask for port 1.
    assert child_argv(["worker", "--processes", "2", "--metrics-port", "0"], 1) == [
        "worker",
        "--metrics-port",
        "0",
    ]


def test_a_copy_refusing_its_input_stops_the_supervisor_with_exit_2(project: Path) -> None:
    # A handler module that raises on import: each copy exits 2 at its start, and the
    # supervisor restarted them for ever (1, 2, 4 ... 30 s apart), never exiting.
    (project / "supervised_handlers.py").write_text('raise RuntimeError("broken at import")\n')
    began = time.monotonic()
    done = subprocess.run(
        [*CONVEYOR, "worker", "--processes", "2"],
        cwd=project,
        env=_env(project),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert time.monotonic() - began < 30
    assert "broken at import" in done.stderr
    assert "refused its input or config (see above); stopping" in done.stderr, done.stderr
    assert "starting another" not in done.stderr, done.stderr


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (exited, not yet reaped by its dead parent's init) counts as gone.
    status = Path(f"/proc/{pid}/stat")
    return status.exists() and status.read_text().split()[2] != "Z"


def waiting_for_sigterm(ready: Path) -> list[str]:
    """A copy's command that touches `ready` once SIGTERM would stop it, exits 0 on
    it, and else lives a minute."""
    script = (
        "import pathlib, signal, sys, time\n"
        "signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))\n"
        f"pathlib.Path({str(ready)!r}).touch()\n"
        "time.sleep(60)\n"
    )
    return [sys.executable, "-c", script]


class _StopLandsAtTheReplacement(Supervisor):
    """Copy 0 recycles at once; the stop signal lands just as the supervisor starts
    its replacement (in the signal handler, between the loop's look and the start)."""

    def __init__(self, folder: Path) -> None:
        super().__init__([], count=1)
        self.folder, self.starts = folder, 0

    def command(self, index: int) -> list[str]:
        if self.starts == 1:
            return [sys.executable, "-c", f"raise SystemExit({RECYCLED_EXIT})"]
        return waiting_for_sigterm(self.folder / "ready")  # the replacement

    def _start(self, index: int) -> None:
        self.starts += 1
        if self.starts == 2:
            self.stop()
        super()._start(index)


def run_to_its_end(supervisor: Supervisor, timeout_s: float = 20) -> list[int]:
    """Run `supervisor` on a thread for up to `timeout_s`: its exit code, if it ended.
    A copy left running is killed, not left behind by the test."""
    codes: list[int] = []
    runner = threading.Thread(target=lambda: codes.append(supervisor.run()), daemon=True)
    runner.start()
    runner.join(timeout_s)
    for child in list(supervisor._children.values()):
        if child.poll() is None:
            child.kill()
            subprocess.Popen.wait(child)
    return codes


def test_a_copy_started_as_the_stop_signal_lands_is_told_to_stop_too(tmp_path: Path) -> None:
    supervisor = _StopLandsAtTheReplacement(tmp_path)
    codes = run_to_its_end(supervisor)
    assert codes == [0], "the supervisor waited for a copy nobody told to stop"
    assert supervisor.recycled == 1


def _started(supervisor: subprocess.Popen[str], count: int) -> set[int]:
    deadline = time.monotonic() + 30
    while len(found := _children(supervisor.pid)) < count and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(found) == count, f"{len(found)} of {count} copies started"
    return found


def test_a_hangup_stops_the_supervisor_and_its_copies_gracefully(project: Path) -> None:
    # SIGHUP (a closed terminal, an SSH drop) killed the supervisor outright: its copies
    # lived on with nobody to restart, recycle or stop them.
    with _running(project, "--processes", "2") as supervisor:
        children = _started(supervisor, 2)
        time.sleep(1.0)  # their signal handlers set up
        code, stderr = _stop(supervisor, signal.SIGHUP)
    assert code == 0, stderr
    assert "SIGHUP, 2 processes: stopping them gracefully" in stderr, stderr
    assert not any(_alive(pid) for pid in children), "the copies stopped with it"


def test_a_hangup_stops_a_single_worker_gracefully(project: Path) -> None:
    with _running(project) as worker:
        _enqueue(project, range(3))
        _wait_for(project, 3)
        code, stderr = _stop(worker, signal.SIGHUP)
    assert code == 0, stderr
    assert "SIGHUP, stopping gracefully" in stderr, stderr


def test_a_copy_that_crashed_before_the_stop_does_not_set_the_exit_code(project: Path) -> None:
    # The copy's crash was told when it happened; the stop that came while its restart
    # waited is a clean one (it exited with the crashed copy's code, e.g. 7 or 245).
    with _running(project, "--processes", "2") as supervisor:
        victim = min(_started(supervisor, 2))
        time.sleep(1.0)
        os.kill(victim, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while _alive(victim) or victim in _children(supervisor.pid):
            assert time.monotonic() < deadline, "the copy did not die"
            time.sleep(0.02)
        # Its replacement waits out the restart delay (1 s, doubling): stop before it.
        code, stderr = _stop(supervisor)
    assert f"(pid {victim}) was killed by SIGKILL after" in stderr, stderr
    assert code == 0, stderr


def test_each_copys_log_lines_say_which_copy_wrote_them(project: Path) -> None:
    # Under --processes the copies' lines were all alike: a failure could not be put
    # down to the copy (and pid) the supervisor names when one exits.
    (project / "supervised_handlers.py").write_text(
        HANDLERS + "\ndef bad(args):\n    raise ValueError('nope')\nHANDLERS['bad'] = bad\n"
    )
    runtime = _site(project)
    try:
        failing = runtime.enqueue("bad", {}, max_retries=0)
        with _running(project, "--processes", "2") as supervisor:
            _started(supervisor, 2)
            deadline = time.monotonic() + 30
            while not ((view := runtime.get(failing.id)) and view.state.is_terminal):
                assert time.monotonic() < deadline, "the failing job never ended"
                time.sleep(0.1)
            time.sleep(1.0)
            _, stderr = _stop(supervisor)
    finally:
        runtime.close()
    failed = [line for line in stderr.splitlines() if f"job {failing.id} (bad)" in line]
    assert failed and all(
        re.search(r"conveyor\.worker \[process [01]\]: job ", line) for line in failed
    ), stderr
    starts = re.findall(r"^conveyor worker process (\d) \S+: provider=db", stderr, re.M)
    assert sorted(starts) == ["0", "1"], stderr
    stops = [line for line in stderr.splitlines() if "SIGTERM, stopping gracefully" in line]
    assert sorted(line.split(":")[0] for line in stops) == [
        "conveyor worker process 0",
        "conveyor worker process 1",
    ], stderr


def test_a_job_that_ends_its_copy_with_exit_code_2_is_a_crash_not_a_refusal(
    project: Path,
) -> None:
    # Exit code 2 was read as "the copy refused its input": one job calling
    # os._exit(2) (or a C library's exit(2)) stopped every copy, and the supervisor.
    (project / "supervised_handlers.py").write_text(
        HANDLERS.replace(
            'HANDLERS = {"work": work}',
            "def quit(args):\n    os._exit(2)\n"
            'HANDLERS = {"work": work, "quit": quit}',
        )
    )
    runtime = _site(project)
    try:
        runtime.enqueue("quit", {}, max_retries=0)
    finally:
        runtime.close()
    with _running(project, "--processes", "2") as supervisor:
        _started(supervisor, 2)
        _enqueue(project, range(5))
        done = _wait_for(project, 5)
        alive = supervisor.poll() is None
        code, stderr = _stop(supervisor)
    assert alive, stderr
    assert sorted(job["n"] for job in done) == list(range(5))
    assert "exited with code 2 after" in stderr and "starting another" in stderr, stderr
    assert "invalid input" not in stderr, stderr
    assert code == 0, stderr


def test_ctrl_c_while_the_copies_start_stops_them_cleanly(project: Path) -> None:
    # A copy that had not set up its handlers died of KeyboardInterrupt (a traceback,
    # and its exit code, 1 or 254 or 130, became the supervisor's).
    with _running(project, "--processes", "2") as supervisor:
        _started(supervisor, 2)  # started, not yet ready: a Python still importing
        code, stderr = _stop(supervisor, signal.SIGINT)
    assert "Traceback" not in stderr, stderr
    assert "KeyboardInterrupt" not in stderr, stderr
    assert code == 0, stderr
