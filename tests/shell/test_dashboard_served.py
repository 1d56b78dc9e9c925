"""`conveyor dashboard` as it serves, in a process of its own on SQLite: the Host
names it answers to (DNS rebinding), the client address its login throttle counts
(never one a request says it forwards for), and its errors for bad credentials."""

from __future__ import annotations

import base64
import http.client
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

CONVEYOR = [sys.executable, "-m", "conveyor.shell.cli"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONVEYOR_")}
    return {**env, **extra}


def _config(folder: Path) -> None:
    url = f"sqlite:///{folder / 'jobs.db'}"
    (folder / "conveyor.toml").write_text(f'provider = "db"\nurl = "{url}"\n')
    migrated = subprocess.run(
        [*CONVEYOR, "migrate"], cwd=folder, env=_env(), capture_output=True, text=True, timeout=60
    )
    assert migrated.returncode == 0, migrated.stderr


class Served:
    def __init__(self, port: int) -> None:
        self.port = port

    def get(self, host: str, **headers: str) -> tuple[int, str]:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            connection.putrequest("GET", "/", skip_host=True)
            connection.putheader("Host", host)
            for name, value in headers.items():
                connection.putheader(name.replace("_", "-"), value)
            connection.endheaders()
            answer = connection.getresponse()
            return answer.status, answer.read().decode()
        finally:
            connection.close()


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[object]:
    started: list[subprocess.Popen[str]] = []

    def start(*flags: str, **env: str) -> Served:
        port = _free_port()
        _config(tmp_path)
        process = subprocess.Popen(
            [*CONVEYOR, "dashboard", "--port", str(port), *flags],
            cwd=tmp_path,
            env=_env(**env),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        started.append(process)
        served, deadline = Served(port), time.monotonic() + 30
        while True:
            try:
                served.get(f"127.0.0.1:{port}")
                return served
            except OSError:
                assert process.poll() is None, "the dashboard exited"
                assert time.monotonic() < deadline, "the dashboard did not answer"
                time.sleep(0.2)

    yield start
    for process in started:
        process.terminate()
        process.wait(20)


def test_on_loopback_it_answers_the_loopback_names_and_no_other(serve: object) -> None:
    served = serve()  # type: ignore[operator]
    port = served.port
    assert served.get(f"127.0.0.1:{port}")[0] == 200
    assert served.get(f"localhost:{port}")[0] == 200
    status, body = served.get(f"rebind.attacker.example:{port}")
    assert status == 400
    assert "answers to 127.0.0.1, ::1, localhost only" in body


def test_allowed_hosts_name_the_names_it_answers_to(serve: object) -> None:
    served = serve("--allowed-host", "jobs.internal")  # type: ignore[operator]
    assert served.get(f"jobs.internal:{served.port}")[0] == 200
    assert served.get(f"127.0.0.1:{served.port}")[0] == 400


def _basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def test_a_forwarded_for_header_neither_dodges_the_login_throttle_nor_locks_out_another(
    serve: object,
) -> None:
    served = serve(CONVEYOR_DASHBOARD_BASIC_AUTH="ops:s3cret")  # type: ignore[operator]
    host = f"127.0.0.1:{served.port}"
    # A guesser naming a new address each time was never counted.
    for n in range(5):
        guessed = served.get(host, Authorization=_basic("ops", "guess"), X_Forwarded_For=f"10.0.0.{n}")
        assert guessed[0] == 401
    right = served.get(host, Authorization=_basic("ops", "s3cret"), X_Forwarded_For="10.0.0.99")
    assert right[0] == 429


def test_bad_credentials_in_the_environment_are_named_by_its_variable(tmp_path: Path) -> None:
    _config(tmp_path)
    ran = subprocess.run(
        [*CONVEYOR, "dashboard"],
        cwd=tmp_path,
        env=_env(CONVEYOR_DASHBOARD_BASIC_AUTH="no-colon"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ran.returncode == 2
    assert "CONVEYOR_DASHBOARD_BASIC_AUTH: must be USER:PASSWORD" in ran.stderr, ran.stderr
    assert "--basic-auth" not in ran.stderr
