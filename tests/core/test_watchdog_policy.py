"""The watchdog's rule: a worker loop is stalled after N leases without progress,
counted from its last progress, its start, or the end of a wait it chose; a process
is live while no loop is stalled and ready while it claims."""

from __future__ import annotations

import pytest
from conveyor.core import (
    DEFAULT_STALL_LEASES,
    LoopMarks,
    StallPolicy,
    ValidationError,
    assess,
    stall_reason,
)
from hypothesis import given
from hypothesis import strategies as st

POLICY = StallPolicy(lease_ms=2000, stall_leases=3)  # stalled after 6 s


def test_the_default_is_three_leases() -> None:
    assert StallPolicy(lease_ms=60_000).stall_leases == DEFAULT_STALL_LEASES == 3
    assert StallPolicy(lease_ms=60_000).limit_s == 180.0


def test_a_loop_is_stalled_once_the_limit_passed_since_its_last_progress() -> None:
    marks = LoopMarks(started_s=100.0, progressed_s=110.0)
    assert stall_reason(POLICY, marks, 116.0) is None
    reason = stall_reason(POLICY, marks, 117.0)
    assert reason is not None
    assert "no progress for 7 s" in reason and "3 leases of 2 s" in reason


def test_a_loop_that_never_reached_the_server_is_stalled_from_its_start() -> None:
    marks = LoopMarks(started_s=100.0)
    assert stall_reason(POLICY, marks, 105.0) is None
    reason = stall_reason(POLICY, marks, 107.5)
    assert reason is not None and "no answer from the server in 8 s" in reason


def test_a_planned_wait_is_not_a_stall_until_it_should_have_ended() -> None:
    # An idle loop with a poll interval longer than the limit: waiting is not stalling.
    marks = LoopMarks(started_s=0.0, progressed_s=10.0, waiting_until_s=60.0)
    assert stall_reason(POLICY, marks, 65.0) is None
    assert stall_reason(POLICY, marks, 66.5) is not None


def test_zero_leases_turns_the_watchdog_off() -> None:
    off = StallPolicy(lease_ms=1000, stall_leases=0)
    assert not off.enabled
    assert stall_reason(off, LoopMarks(started_s=0.0), 10.0**9) is None


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"lease_ms": 0}, "StallPolicy.lease_ms"),
        ({"lease_ms": 1000, "stall_leases": -1}, "StallPolicy.stall_leases"),
        ({"lease_ms": 1000, "stall_leases": 1.5}, "StallPolicy.stall_leases"),
    ],
)
def test_a_bad_policy_is_refused_naming_the_field(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(ValidationError) as caught:
        StallPolicy(**kwargs)  # type: ignore[arg-type]
    assert field in str(caught.value)


def test_a_process_that_claims_is_live_and_ready() -> None:
    loops = [LoopMarks(0.0, 1.0), LoopMarks(0.0, 2.0)]
    health = assess(POLICY, loops, 3.0, server_down=False)
    assert (health.live, health.ready, health.reason) == (True, True, "claiming")


def test_one_stalled_loop_makes_the_process_not_live_and_names_it() -> None:
    loops = [LoopMarks(0.0, 20.0), LoopMarks(0.0, 5.0)]
    health = assess(POLICY, loops, 20.0, server_down=True)
    assert not health.live and not health.ready
    assert health.reason.startswith("stalled: worker loop 1: no progress for 15 s")


@pytest.mark.parametrize(
    ("loops", "server_down", "said"),
    [
        ([], False, "no worker loop"),
        ([LoopMarks(0.0, 1.0, stopping=True), LoopMarks(0.0, 1.0)], False, "stopping"),
        ([LoopMarks(0.0, 1.0), LoopMarks(0.0)], False, "starting"),
        ([LoopMarks(0.0, 1.0)], True, "unreachable"),
    ],
    ids=["not-started", "draining", "not-yet-connected", "server-away"],
)
def test_a_live_process_is_not_ready_while_it_cannot_claim(
    loops: list[LoopMarks], server_down: bool, said: str
) -> None:
    health = assess(POLICY, loops, 2.0, server_down=server_down)
    assert health.live and not health.ready
    assert said in health.reason


# Whole seconds: sums stay exact, so the boundary is tested, not float rounding.
times = st.integers(0, 10_000).map(float)


@given(
    leases=st.integers(0, 10),
    lease_ms=st.integers(1, 120_000),
    started=times,
    progressed=st.none() | times,
    waiting=st.none() | times,
    later=st.integers(0, 20_000).map(float),
)
def test_stalled_exactly_when_the_limit_passed_since_the_latest_mark(
    leases: int,
    lease_ms: int,
    started: float,
    progressed: float | None,
    waiting: float | None,
    later: float,
) -> None:
    policy = StallPolicy(lease_ms=lease_ms, stall_leases=leases)
    marks = LoopMarks(started, progressed, waiting)
    latest = max(m for m in (started, progressed, waiting) if m is not None)
    now = latest + later
    stalled = stall_reason(policy, marks, now) is not None
    assert stalled == (leases > 0 and later > leases * lease_ms / 1000)
    health = assess(policy, [marks], now, server_down=False)
    assert health.live == (not stalled)
    assert health.ready == (not stalled and progressed is not None)
