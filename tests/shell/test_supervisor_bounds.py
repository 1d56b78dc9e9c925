"""The supervisor's bounds: a stop that lands while it starts its copies starts no
more of them; `--processes` past what one machine runs is refused; and copies whose
supervisor was killed (SIGKILL, the OOM killer) stop gracefully instead of running
on with nobody to watch or stop them."""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
from conveyor.shell.cli import main
from conveyor.shell.cli.supervisor import MAX_PROCESSES, Supervisor
from test_supervisor import _alive, _running, _started, project, run_to_its_end, waiting_for_sigterm

__all__ = ["project"]  # the fixture, used by name


class _StopWhileStarting(Supervisor):
    """Five copies; the stop signal lands as the second one starts."""

    def __init__(self, folder: Path) -> None:
        super().__init__([], count=5)
        self.folder, self.starts = folder, 0

    def command(self, index: int) -> list[str]:
        return waiting_for_sigterm(self.folder / str(index))

    def _start(self, index: int) -> None:
        self.starts += 1
        if self.starts == 2:
            self.stop()  # as a signal handler would, between two starts
        super()._start(index)


def test_a_stop_while_the_copies_start_starts_no_more_of_them(tmp_path: Path) -> None:
    supervisor = _StopWhileStarting(tmp_path)
    codes = run_to_its_end(supervisor)
    assert supervisor.starts == 2, "copies went on starting after the stop"
    assert codes == [0]


@pytest.mark.parametrize("count", [MAX_PROCESSES + 1, 100_000])
def test_processes_past_the_limit_are_refused_naming_the_flag(
    project: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    count: int,
) -> None:
    monkeypatch.chdir(project)
    monkeypatch.delenv("CONVEYOR_URL", raising=False)
    try:
        code = main(["worker", "--processes", str(count)])
    except SystemExit as exit:
        code = exit.code
    err = capsys.readouterr().err
    assert code == 2 and f"--processes: must be at most {MAX_PROCESSES}, got {count}" in err, err


def test_copies_stop_gracefully_when_their_supervisor_is_killed(project: Path) -> None:
    with _running(project, "--processes", "2") as supervisor:
        copies = _started(supervisor, 2)
        # Each copy says which queues it polls once its stop handlers are set up.
        assert supervisor.stderr is not None
        lines: list[str] = []
        reader = threading.Thread(target=lambda: lines.extend(supervisor.stderr), daemon=True)
        reader.start()
        deadline = time.monotonic() + 60
        while sum("provider=" in line for line in lines) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        supervisor.send_signal(signal.SIGKILL)
        supervisor.wait(timeout=10)
        deadline = time.monotonic() + 20
        while any(_alive(pid) for pid in copies) and time.monotonic() < deadline:
            time.sleep(0.1)
        left = [pid for pid in copies if _alive(pid)]
        for pid in left:  # not left behind by a failed check
            subprocess.run(["kill", "-9", str(pid)], check=False)
        # The copies wrote to the stderr they share with it: read to its end.
        reader.join(20)
        stderr = "".join(lines)
    assert not left, "copies ran on after their supervisor was killed"
    # The kernel may signal a copy more than once (once per thread of the dead
    # supervisor): it is one graceful stop however often.
    graceful = [line for line in stderr.splitlines() if "supervisor is gone, stopping" in line]
    assert len(graceful) == 2, stderr
    assert "at once" not in stderr, stderr


def test_only_a_copy_takes_sigusr2_which_others_leave_to_their_code() -> None:
    # A faulthandler registered on SIGUSR2 by an application's handlers is kept.
    from conveyor.shell.worker.signals import SUPERVISOR_GONE, StopSignals

    if SUPERVISOR_GONE is None:
        pytest.skip("no SIGUSR2 on this platform")
    kept = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    mine = signal.getsignal(SUPERVISOR_GONE)
    try:
        StopSignals().install()
        assert signal.getsignal(SUPERVISOR_GONE) is mine
        copy = StopSignals().install(supervised=True)
        assert signal.getsignal(SUPERVISOR_GONE) == copy._on_supervisor_gone
    finally:
        signal.signal(SUPERVISOR_GONE, mine)
        for signum, handler in kept.items():
            signal.signal(signum, handler)
