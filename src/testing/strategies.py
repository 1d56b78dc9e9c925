"""Hypothesis strategies for Conveyor values."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import attrs
from hypothesis import strategies as st

from ..core import (
    MAX_ATTEMPTS_KEPT,
    Attempt,
    AttemptOutcome,
    ErrorInfo,
    FrozenMap,
    Job,
    JobStatus,
    Metadata,
    Priority,
    create_job,
    freeze,
)

names = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,20}", fullmatch=True)
json_scalars = st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=20)
json_values = st.recursive(
    json_scalars | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
trace_headers = st.dictionaries(
    st.sampled_from(["traceparent", "tracestate", "baggage"]), st.text(max_size=60), max_size=3
)
times = st.datetimes(
    min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(UTC)
)

errors = st.builds(
    ErrorInfo,
    st.text(max_size=10),
    st.text(max_size=30),
    st.booleans(),
    st.none() | st.text(max_size=60),
)
attempts = st.builds(
    Attempt,
    number=st.integers(0, 10_000),
    started_at=st.none() | times,
    finished_at=times,
    outcome=st.sampled_from(list(AttemptOutcome)),
    worker=st.none() | names,
    error=st.none() | errors,
)


@st.composite
def jobs(draw: Any) -> Job:
    """Any valid job, in any status, with any bookkeeping."""
    now = draw(times)
    job = create_job(
        id=draw(st.uuids()),
        job_type=draw(names),
        args=draw(st.dictionaries(st.text(max_size=8), json_values, max_size=4)),
        now=now,
        queue=draw(names),
        priority=draw(st.sampled_from(list(Priority))),
        max_retries=draw(st.integers(0, 10)),
        delay=draw(st.timedeltas(timedelta(0), timedelta(days=3))),
        tenant_id=draw(st.none() | names),
    ).unwrap()
    error = draw(st.none() | errors)
    meta = Metadata(
        first_missing_at=draw(st.none() | times),
        requeue_count=draw(st.integers(0, 100)),
        reclaim_count=draw(st.integers(0, 100)),
    )
    return attrs.evolve(
        job,
        status=draw(st.sampled_from(list(JobStatus))),
        retry_count=draw(st.integers(0, 10)),
        attempt=draw(st.integers(0, 20)),
        started_at=draw(st.none() | times),
        finished_at=draw(st.none() | times),
        last_error=error,
        result=freeze(draw(json_values)),
        metadata=meta,
        trace_context=draw(st.none() | st.builds(FrozenMap, trace_headers)),
        worker=draw(st.none() | names),
        attempts=tuple(draw(st.lists(attempts, max_size=MAX_ATTEMPTS_KEPT))),
    )
