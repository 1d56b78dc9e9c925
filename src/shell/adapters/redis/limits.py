"""The Redis claim of a queue with limits: fair shares, caps and rates (`core.limits`).

Theory of operation. The decision is `core.limits.plan_claim`, here in Python as on
every backend; Redis stores, reads and fences. A claim is two scripts:

1. `limited_read.lua` promotes the queue's due parked jobs (as `claim_many`
   does) and returns the plan's inputs: the first `candidates_per_partition(want)`
   ready jobs of each partition, most urgent first; the running counts by (job type,
   partition), read from the queue's in-flight set and the jobs' hashes at that
   instant; and the queue's state hash `{prefix}:limits:<queue>` (buckets, passes
   and a version `v`).
2. `limited_take.lua` takes the planned jobs only while `v` is what the read
   saw and each job's hash still says ready in this queue under the seq, partition
   and type it was read with; it claims them as `claim_many` does (prefetched
   tokens, held set, receipt), writes the buckets and passes and moves `v`, all in
   one step. Otherwise it claims nothing and the claim reads and plans again (at
   most `_RETAKE`'s eight times).

Why optimistic concurrency rather than a lock: a script cannot call back into Python
mid-way, so a lock would be a key with a lease, taken and given back in two more
round trips per claim, and a claimer that died holding it would stall the queue for
the lease. Here the only claims that can invalidate a plan are other limited takes
of the same queue, and every one moves `v`: a finish, a cancel or a reclaim only
lowers the running counts, an enqueue only adds candidates, so a plan made just
before them is still within every cap and rate. A refused take costs one round trip,
and whoever made it refused has taken jobs, so the queue always progresses.

Reading candidates without walking the backlog: each ready job of a limited queue is
also in `{prefix}:pready:<queue>:<partition>` as "<job type>:<id>", scored by
priority rank * 1e15 + seq, and `{prefix}:parts:<queue>` names the partitions (see
`push_ready` in `common.lua`). A read is one ZRANGE per partition (the
candidates come from the index alone) plus one hash read per running job. Every path
that takes a ready job out removes its entry (the claim scripts, `unplace`, the
take); one left behind anyway (a hash deleted by hand) is caught by the take's check
of each planned job against its hash, which refuses the plan and drops the entry, so
it never yields a wrong claim. Ordinary queues pay one SISMEMBER per ready placement
(`{prefix}:limited`), nothing per claim or finish. A queue joins `{prefix}:limited`
the first time its limits are used; the jobs already ready then are indexed by
`limited_index.lua`, a chunked ZSCAN of the queue's ready_at set, before the first
read (see `ensure_indexed`).

Facts, not rules: a job's partition and job type are worked out in Python from the
core (`core.limits.partition_of`) and handed to the scripts with each placement; a
parked job keeps them in its hash for its promotion. A ready job found without them
(placed before its queue's limits were used, or by an earlier version) waits, as the
field `n:<id>` of the queue's state hash (`nofacts` counts them), until
`supply_facts` reads its body and hands them over; an in-flight one comes back with
the read as a body to count here.

Taking a job out of the middle of its priority list (LREM) would scan up to it, so
the take leaves its id there as a ghost copy, counted in
`{prefix}:ghosts:<queue>:<priority>`; whoever pops it drops it, the read pops the
ghosts that reach the head of a list, and `counts` subtracts them (see `index.lua`).

State hash fields: `b:<bucket key>` = "<tokens> <at_us>", `p:<partition>` = pass,
`v` = version, `indexed` = "1" once the upgrade is done (`scan`: its cursor meanwhile).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from ....core import WriteRetryPolicy
from ....core.limits import (
    Bucket,
    Candidate,
    ClaimPlan,
    QueueLimits,
    candidates_per_partition,
    plan_claim,
)
from ...retrying import Retrier
from .arguments import facts_of_body
from .client import text

#: Ready jobs the upgrade indexes per script call.
INDEX_BUDGET = 2000

#: An index entry's score is rank * RANK_SCALE + seq (see `ready_score` in
#: `index.lua`, which pads `seq` to `SEQ_DIGITS`, rendered from this).
RANK_SCALE = 10**15

BUCKET = "b:"
PASS = "p:"
VERSION = "v"

_Run = Callable[..., Any]


def _lines(value: bytes | str) -> list[str]:
    lines = text(value)
    return lines.split("\n") if lines else []


@attrs.frozen(slots=True)
class LimitRead:
    """One `limited_read.lua` answer, decoded."""

    candidates: tuple[Candidate, ...]
    running: Mapping[tuple[str, str], int]
    buckets: Mapping[str, Bucket]
    passes: Mapping[str, float]
    version: str
    ready: Mapping[str, int]

    @classmethod
    def of(cls, reply: Sequence[Any]) -> LimitRead:
        _, lines, counts, state, ready, unknown = reply
        candidates = []
        for line in _lines(lines):
            score, member, partition = line.split(" ", 2)
            job_type, job_id = member.split(":", 1)
            rank, seq = divmod(int(float(score)), RANK_SCALE)
            candidates.append(Candidate(job_id, rank, seq, job_type, partition))
        running: dict[tuple[str, str], int] = {}
        for line in _lines(counts):
            job_type, count, partition = line.split(" ", 2)
            running[job_type, partition] = int(count)
        for body in unknown:
            partition, job_type = facts_of_body(body)
            running[job_type, partition] = running.get((job_type, partition), 0) + 1
        buckets: dict[str, Bucket] = {}
        passes: dict[str, float] = {}
        version = "0"
        for raw_field, raw_value in zip(state[::2], state[1::2], strict=True):
            field, value = text(raw_field), text(raw_value)
            if field.startswith(BUCKET):
                tokens, at_us = value.split(" ")
                buckets[field[len(BUCKET) :]] = Bucket(float(tokens), int(at_us))
            elif field.startswith(PASS):
                passes[field[len(PASS) :]] = float(value)
            elif field == VERSION:
                version = value
        by_partition = {text(ready[i]): int(ready[i + 1]) for i in range(0, len(ready), 2)}
        return cls(tuple(candidates), running, buckets, passes, version, by_partition)


def state_writes(plan: ClaimPlan, read: LimitRead, fair: bool) -> tuple[list[str], list[str]]:
    """The state hash's fields to set (flat field, value) and to delete for `plan`."""
    puts: list[str] = []
    for key, bucket in sorted(plan.buckets.items()):
        puts += [BUCKET + key, f"{bucket.tokens!r} {bucket.at_us}"]
    drops = [BUCKET + key for key in sorted(plan.drop_buckets)]
    if fair:
        for partition, value in sorted(plan.passes.items()):
            puts += [PASS + partition, repr(value)]
        drops += [PASS + p for p in sorted(read.passes) if p not in plan.passes]
    return puts, drops


def changes_state(plan: ClaimPlan, read: LimitRead, fair: bool) -> bool:
    """True when `plan` takes jobs or changes the stored state (else no take is sent)."""
    if plan.take or plan.buckets or plan.drop_buckets:
        return True
    return fair and dict(plan.passes) != dict(read.passes)


class RedisLimitedClaim:
    """Limited claims and usage reads for one `RedisJobQueue` (its `_run` and scripts)."""

    def __init__(self, run: _Run, index: Any, read: Any, take: Any, facts: Any) -> None:
        self._run, self._index, self._read, self._take = run, index, read, take
        self._facts = facts

    def ensure_indexed(self, queue: str) -> None:
        """Index the ready jobs `queue` held before its limits were first used, one
        chunk per call, until done (a no-op round trip afterwards; callers ask only
        when a read says the queue is not indexed), then hand over the facts of those
        placed without them."""
        while not int(self._run(self._index, queue, INDEX_BUDGET)):
            pass
        self.supply_facts(queue)

    def supply_facts(self, queue: str) -> None:
        """Work out the partition and job type of each ready job of `queue` waiting for
        them (its body, read by `limited_facts.lua`, `INDEX_BUDGET` at a time) and hand
        them over, until none waits."""
        facts: list[object] = []
        while asked := self._run(self._facts, queue, INDEX_BUDGET, *facts):
            facts = []
            for at in range(0, len(asked), 3):
                job_id, seq, body = asked[at : at + 3]
                facts += [text(job_id), text(seq), *facts_of_body(body)]

    def read(self, queue: str, now_args: Sequence[object], want: int, *, claim: bool) -> LimitRead:
        """The plan's inputs for a claim of `want` (promoting due jobs when `claim`)."""
        per = candidates_per_partition(want)
        mode = "claim" if claim else "usage"
        args = (queue, *now_args, per, mode)
        reply = self._run(self._read, *args)
        while not int(reply[0]):
            self.ensure_indexed(queue)
            reply = self._run(self._read, *args)
        return LimitRead.of(reply)

    def claim(
        self,
        queue: str,
        now_args: Sequence[object],
        now_us: int,
        want: int,
        limits: QueueLimits,
        claim_args: tuple[str, int, int],
    ) -> tuple[list[Any], ClaimPlan | None]:
        """Plan and take up to `want` jobs of `queue`: the take's flat {id, body, ...}
        reply and the plan it carried out (None when every try was refused).
        `claim_args`: the batch's token base, its lock time in ms and the receipt's
        time to live in ms, as for `claim_many`."""
        token_base, locked_ms, receipt_ms = claim_args

        def attempt() -> tuple[list[Any], ClaimPlan]:
            read = self.read(queue, now_args, want, claim=True)
            plan = plan_claim(
                limits, read.candidates, read.running, read.buckets, read.passes, now_us, want
            )
            if not changes_state(plan, read, limits.fair):
                return [], plan
            planned = {c.id: c for c in read.candidates}
            jobs: list[object] = [len(plan.take)]
            for job_id in plan.take:
                c = planned[job_id]
                jobs += [job_id, c.seq, c.partition, c.job_type]
            puts, drops = state_writes(plan, read, limits.fair)
            reply = self._run(
                self._take,
                queue,
                token_base,
                read.version,
                locked_ms,
                receipt_ms,
                *jobs,
                len(puts) // 2,
                *puts,
                len(drops),
                *drops,
            )
            if not int(reply[0]):
                raise _Refused()
            return list(reply[1]), plan

        try:
            return _RETAKE.call(attempt)
        except _Refused:
            return [], None


class _Refused(Exception):
    """The take found the queue moved since the read (another claimer took jobs)."""


#: Reads and takes one claim may try before it gives up for this round (each refusal
#: means another claimer of the queue took jobs meanwhile); claimers refused together
#: would read and collide again together, so their waits are jittered.
_RETAKE = Retrier(
    WriteRetryPolicy(initial_s=0.001, max_s=0.008, jitter=True, max_attempts=8),
    transient=lambda exc: isinstance(exc, _Refused),
)
