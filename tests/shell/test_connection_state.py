"""How one process tells a server outage: one line when it starts, one when it ends."""

import logging

import pytest
import redis
from conveyor.shell import outage
from conveyor.shell.outage import ConnectionState


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(outage.time, "monotonic", fake)
    return fake


def told(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.levelname for r in caplog.records if r.levelno >= logging.INFO]


def test_a_call_that_was_in_flight_when_the_server_went_away_does_not_end_the_outage(
    clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="conveyor.outage")
    state = ConnectionState("PostgreSQL", "db")
    assert state.failed(ConnectionError("server closed the connection unexpectedly"))
    # Another thread's query, sent before the server stopped, answers just after.
    clock.now += 0.01
    state.ok()
    clock.now += 0.5
    assert state.failed(ConnectionError("no such file"))
    clock.now += 9.0
    state.ok()
    assert told(caplog) == ["WARNING", "INFO"]
    assert "back after 9.5 s" in caplog.records[-1].getMessage()


def test_a_success_after_the_in_flight_window_ends_a_short_outage(
    clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="conveyor.outage")
    state = ConnectionState("Redis", "redis://h")
    state.failed(ConnectionError("reset"))
    clock.now += outage.IN_FLIGHT_S
    state.ok()
    assert not state.down
    assert told(caplog) == ["WARNING", "INFO"]


@pytest.mark.parametrize(
    "answer",
    [
        redis.exceptions.ClusterDownError("The cluster is down"),
        redis.exceptions.TryAgainError("Multiple keys request during rehashing of slot"),
        redis.exceptions.SlotNotCoveredError("Slot 5449 is not covered by the cluster"),
    ],
)
def test_a_cluster_failing_over_is_an_outage_told_once(answer: Exception) -> None:
    # A master's failover answered these for a few seconds, and every idle worker
    # thread logged a traceback per poll ("waiting for work failed").
    from conveyor.shell.outage import is_outage

    assert is_outage(answer)


def test_an_outage_told_after_the_writes_retries_counts_them_in_its_length(
    clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    # A call retried for its budget (5 s) before it raised: "back after" counted from
    # the raise, not from the first failed try (a 6 s outage was told as 1.9 s).
    from conveyor.core import WriteRetryPolicy
    from conveyor.shell.retrying import Retrier

    caplog.set_level(logging.INFO, logger="conveyor.outage")
    budget = WriteRetryPolicy(initial_s=0.5, max_s=1.0, max_attempts=None, give_up_after_s=5.0)
    retrier = Retrier(budget, monotonic=clock)

    def down() -> None:
        raise redis.ConnectionError("Connection refused")

    def wait(seconds: float) -> None:
        clock.now += seconds

    state = ConnectionState("Redis", "redis://cache")
    with pytest.raises(redis.ConnectionError) as raised:
        retrier.call(down, sleep=wait)
    failing_for = clock.now - 1000.0
    assert failing_for >= 4.0, "the retries ran for the budget"
    assert state.failed(raised.value)
    clock.now += 1.0
    state.ok()
    assert f"back after {failing_for + 1.0:.1f} s" in caplog.records[-1].getMessage()
