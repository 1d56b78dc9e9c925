"""Cases of a claim's last write: record and release in one fenced step (one job or
a batch, each fenced on its own), guarded by "still abandoned" when the lease keeper
writes it, for undecodable payloads too, and the dead letters listed and purged."""

from __future__ import annotations

import pickle
from datetime import timedelta
from uuid import UUID

import attrs

from ....core import Complete, ErrorInfo, JobStatus, Policies, Succeeded, decide, start
from ....core.decisions import dead_letter
from ....shell.ports import BadClaim
from ..case import case
from ..subject import BATCHING, CORRUPT, FINISHING, Subject
from ..support import LATER, T0, TICK, claim, claims, in_flight, make_job, queued


@case()
def dead_letters_list_and_purge(s: Subject) -> None:
    jobs = [make_job(queue=q, tenant_id=t) for q, t in (("a", "t1"), ("a", "t2"), ("c", "t1"))]
    for job in jobs:
        running = start(job, T0).unwrap()
        s.store.record(dead_letter(running, ErrorInfo("Boom", "no"), T0).job)
    done = start(make_job(), T0).unwrap()
    s.store.record(attrs.evolve(done, status=JobStatus.COMPLETED))
    assert [j.id for j in s.store.list_dead()] == [j.id for j in reversed(jobs)], "newest first"
    assert {j.id for j in s.store.list_dead(tenant_id="t1")} == {jobs[0].id, jobs[2].id}
    assert dict(s.store.count_dead()) == {"a": 2, "c": 1}
    assert dict(s.store.count_dead(tenant_id="t2")) == {"a": 1}
    # An empty name is no tenant's: it matches nothing, it is not "any tenant".
    assert s.store.list_dead(tenant_id="") == [] and dict(s.store.count_dead(tenant_id="")) == {}
    assert s.store.get(done.id).status is JobStatus.COMPLETED
    revived = attrs.evolve(s.store.get(jobs[1].id), status=JobStatus.PENDING)
    s.store.record(revived)  # recorded again, no longer dead: it leaves the dead letters
    assert dict(s.store.count_dead()) == {"a": 1, "c": 1}
    assert s.store.purge_dead(jobs[0].id) == 1
    assert s.store.purge_dead(jobs[0].id) == 0, "purged once"
    assert s.store.purge_dead(done.id) == 0 and s.store.purge_dead(revived.id) == 0, (
        "only dead letters are purged"
    )
    assert s.store.purge_dead() == 1
    assert s.store.list_dead() == [] and dict(s.store.count_dead()) == {}
    assert s.store.get(done.id) is not None, "purge leaves history alone"


@case()
def history_is_newest_first_and_filtered_by_status_and_tenant(s: Subject) -> None:
    """Records as written, newest first; a record written again replaces the old one
    and becomes the newest."""
    a = attrs.evolve(make_job(tenant_id="acme"), status=JobStatus.COMPLETED, finished_at=T0)
    b = attrs.evolve(make_job(), status=JobStatus.COMPLETED, finished_at=LATER)
    c = dead_letter(start(make_job(tenant_id="acme"), T0).unwrap(), ErrorInfo("X", "no"), T0).job
    for job in (a, b, c):
        s.store.record(job)
    assert s.store.list_history() == [c, b, a]
    assert s.store.list_history(limit=2) == [c, b]
    assert s.store.list_history(status=JobStatus.COMPLETED) == [b, a]
    assert s.store.list_history(tenant_id="acme") == [c, a]
    assert s.store.list_history(status=JobStatus.COMPLETED, tenant_id="acme") == [a]
    assert s.store.list_history(tenant_id="") == [], "an empty tenant name matches nothing"
    assert s.store.get(a.id) == a and s.store.get(make_job().id) is None
    again = attrs.evolve(c, status=JobStatus.COMPLETED)
    s.store.record(a)
    s.store.record(again)
    assert s.store.list_history() == [again, a, b], "one record per id, the latest newest"


@case(FINISHING)
def finish_records_and_releases_in_one_step(s: Subject) -> None:
    job = make_job()
    s.queue.enqueue(job)
    held = claim(s)
    done = decide(start(held.job, T0).unwrap(), Succeeded(1), T0, Policies(), 0.5).job
    stale = attrs.evolve(held, token="stale")
    assert s.queue.finish(stale, done) is False
    assert s.store.get(job.id) is None, "a lost claim writes nothing"
    assert in_flight(s) == 1
    assert s.queue.finish(held, done) is True
    assert s.store.get(job.id).status is JobStatus.COMPLETED
    assert in_flight(s) == 0
    assert s.queue.finish(held, done) is False, "only once"
    steps = s.executor(s.queue, s.store).plan(held, Complete(done))
    assert [(st.kind, st.name) for st in steps] == [("write", "finish")]


@case(FINISHING)
def a_guarded_finish_loses_to_a_holder_that_renewed(s: Subject) -> None:
    """The lease keeper's write (`abandoned_before`) is refused once the holder renewed
    at or after that instant, inside the same write; before it, it lands once."""
    s.queue.enqueue(make_job())
    held = claim(s)
    assert s.queue.extend(held, LATER)
    running = start(held.job, T0).unwrap()
    record = dead_letter(running, ErrorInfo("lease-expired", "abandoned", False), LATER).job
    assert s.queue.finish(held, record, abandoned_before=LATER) is False
    assert s.store.get(held.job.id) is None
    assert in_flight(s, now=LATER) == 1
    assert s.queue.finish(held, record, abandoned_before=LATER + TICK) is True
    assert s.store.get(held.job.id) == record
    assert s.store.list_dead() == [record]
    assert queued(s, LATER) == 0


@case(FINISHING, CORRUPT)
def an_undecodable_claim_is_dead_lettered_by_a_guarded_finish(s: Subject) -> None:
    """`abandoned` reads an undecodable in-flight payload as a `BadClaim` and changes
    nothing; the lease keeper's placeholder record then lands once, guarded."""
    assert s.corrupt is not None
    job = make_job()
    s.queue.enqueue(job)
    held = claim(s)
    s.corrupt(job, pickle.dumps({"evil": True}, protocol=0).decode("ascii"))
    [bad] = s.queue.abandoned(T0 + timedelta(seconds=1))
    assert isinstance(bad, BadClaim) and (bad.job_id, bad.token) == (str(job.id), held.token)
    [again] = s.queue.abandoned(T0 + timedelta(seconds=1))
    assert isinstance(again, BadClaim) and again.token == held.token, "the read changed it"
    placeholder = attrs.evolve(job, id=UUID(bad.job_id), status=JobStatus.FAILED, finished_at=T0)
    assert s.queue.finish(bad, placeholder, abandoned_before=T0) is False, "locked at T0"
    assert s.queue.finish(bad, placeholder, abandoned_before=T0 + TICK) is True
    assert s.store.get(job.id) == placeholder
    assert queued(s) == 0
    assert s.queue.finish(bad, placeholder, abandoned_before=T0 + TICK) is False, "fenced"


@case(BATCHING)
def claims_in_batches_with_their_own_tokens(s: Subject) -> None:
    jobs = [make_job(priority=p) for p in ("low", "high", "normal", "critical", "high")]
    for job in jobs:
        s.queue.enqueue(job)
    got = claims(s.queue.dequeue_many("default", T0, 3))
    in_order = sorted(jobs, key=lambda j: (j.priority.rank, jobs.index(j)))
    assert [c.job.id for c in got] == [j.id for j in in_order[:3]]
    assert len({c.token for c in got}) == 3
    assert in_flight(s) == 3
    done = [
        (c, decide(start(c.job, T0).unwrap(), Succeeded(1), T0, Policies(), 0.5).job) for c in got
    ]
    done[1] = (attrs.evolve(done[1][0], token="stale"), done[1][1])
    assert list(s.queue.finish_many(done)) == [True, False, True], "each job fenced on its own"
    assert s.store.get(got[1].job.id) is None
    assert in_flight(s) == 1
    assert s.queue.ack(got[1]) is True
    rest = claims(s.queue.dequeue_many("default", T0, 10))
    assert [c.job.id for c in rest] == [j.id for j in in_order[3:]]


AWKWARD_TEXT = 'quote " backslash \\ nul \x00 newline \n tab \t emoji \U0001f600 ünïcode \\u0000'


@case(BATCHING)
def batches_carry_any_text_unchanged(s: Subject) -> None:
    jobs = [make_job(args={"s": AWKWARD_TEXT, AWKWARD_TEXT: [i]}) for i in range(3)]
    s.queue.enqueue_many(jobs)
    got = claims(s.queue.dequeue_many("default", T0, 10))
    assert [c.job.args for c in got] == [j.args for j in jobs]
    records = [
        (c, decide(start(c.job, T0).unwrap(), Succeeded(1), T0, Policies(), 0.5).job) for c in got
    ]
    assert list(s.queue.finish_many(records)) == [True] * 3
    for job in jobs:
        recorded = s.store.get(job.id)
        assert recorded is not None and recorded.args == job.args


FINISHING_CASES = (
    dead_letters_list_and_purge,
    history_is_newest_first_and_filtered_by_status_and_tenant,
    finish_records_and_releases_in_one_step,
    a_guarded_finish_loses_to_a_holder_that_renewed,
    an_undecodable_claim_is_dead_lettered_by_a_guarded_finish,
    claims_in_batches_with_their_own_tokens,
    batches_carry_any_text_unchanged,
)
