"""Cases of the wire format: whatever a backend stores (a JSON document, or the record
itself), every field of a job comes back from a claim and from the store as it went
in.
"""

from __future__ import annotations

from datetime import timedelta

import attrs

from ....core import (
    Attempt,
    AttemptOutcome,
    ErrorInfo,
    FrozenMap,
    Metadata,
    Policies,
    Succeeded,
    decide,
    freeze,
    start,
)
from ....shell.ports import Claim
from ..case import case
from ..subject import Subject
from ..support import T0, make_job


@case()
def every_field_of_a_job_comes_back_from_a_claim_and_from_the_store(s: Subject) -> None:
    error = ErrorInfo("ValueError", "bad \u00e9", True, traceback="Traceback...\n  boom")
    earlier = Attempt(1, T0, T0 + timedelta(seconds=1), AttemptOutcome.RETRIED, "host:1:a", error)
    job = attrs.evolve(
        make_job(
            args={"text": "zo\u00eb \u2028", "n": [1, 2.5, None, True], "big": 10**30},
            tenant_id="acme",
            timeout=2.5,
            max_retries=5,
        ),
        retry_count=1,
        attempt=1,
        last_error=error,
        metadata=Metadata(first_missing_at=T0, requeue_count=2, reclaim_count=1),
        trace_context=FrozenMap({"traceparent": "00-0af7651916cd43dd8448eb211c80319c-01"}),
        worker="host:1:a",
        attempts=(earlier,),
        partition_key="acme-eu",
    )
    s.queue.enqueue(job)
    claim = s.queue.dequeue("default", T0)
    assert isinstance(claim, Claim)
    assert claim.job == job, [
        f.name
        for f in attrs.fields(type(job))
        if getattr(claim.job, f.name) != getattr(job, f.name)
    ]
    running = start(claim.job, T0, "host:2:b").unwrap()
    decision = decide(running, Succeeded({"ok": ["\u00e9", 1]}), T0, Policies(), 0.5)
    assert s.executor(s.queue, s.store).carry_out(claim, decision)
    done = decision.job
    assert s.store.get(job.id) == done
    assert done.result == freeze({"ok": ["\u00e9", 1]})


WIRE_CASES = (every_field_of_a_job_comes_back_from_a_claim_and_from_the_store,)
