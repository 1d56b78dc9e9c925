"""The claim policy of a limited queue: fair shares, caps and rates (`core.limits`)."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime

import attrs
import pytest
from conveyor.core import LeasePolicy, RequeuePolicy, RetryPolicy, ValidationError, create_job
from conveyor.core.claim_plan import KEEP_FULL_US
from conveyor.core.limits import (
    Bucket,
    Candidate,
    Cap,
    ClaimPlan,
    QueueLimits,
    Rate,
    bucket_key,
    check_partition,
    partition_of,
    plan_claim,
    refill,
)
from conveyor.core.prefetch import PrefetchPolicy
from conveyor.core.retention import RetentionPolicy
from hypothesis import given, settings
from hypothesis import strategies as st

NOW = datetime(2026, 1, 1, tzinfo=UTC)
SECOND = 1_000_000


def jobs(
    partition: str, n: int, *, start: int = 0, priority: int = 2, job_type: str = "t"
) -> list[Candidate]:
    """`n` candidates of one partition, FIFO from seq `start`, spaced so partitions interleave."""
    return [
        Candidate(f"{partition}{i}", priority, start + 10 * i, job_type, partition)
        for i in range(n)
    ]


def plan(limits: QueueLimits, candidates: list[Candidate], want: int, **state: object) -> ClaimPlan:
    return plan_claim(
        limits,
        candidates,
        state.get("running", {}),  # type: ignore[arg-type]
        state.get("buckets", {}),  # type: ignore[arg-type]
        state.get("passes", {}),  # type: ignore[arg-type]
        state.get("now_us", 0),  # type: ignore[arg-type]
        want,
    )


# ---- partitions ---------------------------------------------------------------


def make(**options: object) -> object:
    return create_job(id="00000000-0000-4000-8000-000000000001", job_type="t", now=NOW, **options)  # type: ignore[arg-type]


def test_a_jobs_partition_is_its_key_then_its_tenant_then_the_default() -> None:
    keyed = make(partition="p", tenant_id="acme").unwrap()  # type: ignore[attr-defined]
    tenant = make(tenant_id="acme").unwrap()  # type: ignore[attr-defined]
    plain = make().unwrap()  # type: ignore[attr-defined]
    assert [partition_of(keyed), partition_of(tenant), partition_of(plain)] == ["p", "acme", ""]


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("", "must not be empty"),
        ("x" * 201, "must be at most 200 characters"),
        ("a\nb", "must be one line"),
        (3, "must be a string, got int"),
    ],
)
def test_a_bad_partition_is_one_field_error_naming_it(value: object, reason: str) -> None:
    error = make(partition=value).failure()  # type: ignore[attr-defined]
    assert [(e.field, e.reason) for e in error.errors] == [("partition", reason)]
    assert check_partition(value) is not None


# ---- fair shares --------------------------------------------------------------


def test_without_fair_shares_the_oldest_job_goes_first() -> None:
    taken = plan(QueueLimits(), [*jobs("a", 5), *jobs("b", 2, start=100)], 4).take
    assert taken == ("a0", "a1", "a2", "a3")


def test_with_fair_shares_partitions_take_turns() -> None:
    taken = plan(QueueLimits(fair=True), [*jobs("a", 5), *jobs("b", 2, start=100)], 6).take
    assert taken == ("a0", "b0", "a1", "b1", "a2", "a3")


def test_weights_give_a_partition_that_many_turns() -> None:
    limits = QueueLimits(fair=True, weights={"a": 3})
    taken = plan(limits, [*jobs("a", 9), *jobs("b", 9, start=1)], 8).take
    assert "".join(t[0] for t in taken) == "abaabaaa"  # ties go to the older job
    assert Counter(t[0] for t in taken) == {"a": 6, "b": 2}


def test_a_more_urgent_job_goes_before_any_fair_turn() -> None:
    candidates = [*jobs("a", 3), *jobs("b", 1, start=500, priority=0)]
    assert plan(QueueLimits(fair=True), candidates, 2).take == ("b0", "a0")


def test_a_partition_back_from_idle_starts_level_with_the_busy_ones() -> None:
    # "a" has run a lot (pass 50); "b" arrives: it alternates, not 50 in a row.
    taken = plan(
        QueueLimits(fair=True), [*jobs("a", 5), *jobs("b", 5, start=1000)], 4, passes={"a": 50.0}
    ).take
    assert taken == ("a0", "b0", "a1", "b1")


def test_a_partition_without_ready_jobs_loses_its_stored_pass() -> None:
    stored = {"a": 0.0, "gone": -30.0}
    result = plan(QueueLimits(fair=True), jobs("a", 3), 1, passes=stored)
    assert set(result.passes) == {"a"}


def test_stored_passes_carry_the_turns_from_one_claim_to_the_next() -> None:
    limits, candidates = QueueLimits(fair=True), [*jobs("a", 4), *jobs("b", 4, start=1)]
    first = plan(limits, candidates, 1)
    rest = [c for c in candidates if c.id not in first.take]
    second = plan(limits, rest, 1, passes=first.passes)
    assert (first.take, second.take) == (("a0",), ("b0",))


# ---- caps ----------------------------------------------------------------------


def test_a_full_per_partition_cap_skips_only_that_partition() -> None:
    limits = QueueLimits(caps=(Cap(2, per_partition=True),))
    result = plan(limits, [*jobs("a", 3), *jobs("b", 3, start=1)], 4, running={("t", "a"): 2})
    assert result.take == ("b0", "b1")
    assert result.held_back > 0 and result.wait_until_us is None


def test_the_queue_cap_counts_every_running_job() -> None:
    limits = QueueLimits(max_running=3)
    running = {("t", "a"): 1, ("other", "b"): 1}
    assert plan(limits, jobs("a", 5), 5, running=running).take == ("a0",)


def test_a_job_type_cap_takes_one_charge_and_every_mail() -> None:
    limits = QueueLimits(caps=(Cap(1, job_type="charge"),))
    charges = [Candidate(f"c{i}", 2, i, "charge", "a") for i in range(3)]
    mails = [Candidate(f"m{i}", 2, 10 + i, "mail", "a") for i in range(2)]
    assert plan(limits, [*charges, *mails], 5).take == ("c0", "m0", "m1")


# ---- rates ---------------------------------------------------------------------


def test_a_rate_allows_its_burst_then_says_when_the_next_token_comes() -> None:
    limits = QueueLimits(rates=(Rate(2, 1.0),))
    result = plan(limits, jobs("a", 5), 5, now_us=10 * SECOND)
    assert result.take == ("a0", "a1")
    assert result.wait_until_us == 10 * SECOND + SECOND // 2


def test_a_bucket_refills_continuously_up_to_its_burst() -> None:
    rate = Rate(4, 2.0)  # 2 tokens a second
    assert refill(rate, Bucket(0.0, 0), SECOND // 4) == pytest.approx(0.5)
    assert refill(rate, Bucket(0.0, 0), 100 * SECOND) == 4.0
    assert refill(rate, None, 0) == 4.0


def test_a_throttled_claim_takes_the_next_token_when_it_comes() -> None:
    limits = QueueLimits(rates=(Rate(2, 1.0),))
    first = plan(limits, jobs("a", 5), 5, now_us=0)
    rest = [c for c in jobs("a", 5) if c.id not in first.take]
    second = plan(limits, rest, 5, buckets=first.buckets, now_us=first.wait_until_us)
    assert second.take == ("a2",)


def test_a_claim_that_comes_late_with_an_earlier_now_never_winds_a_bucket_back() -> None:
    rate = Rate(1, 1.0)
    key = bucket_key(0, rate, jobs("a", 1)[0])
    stored = {key: Bucket(1.0, 10 * SECOND)}  # written by a claimer whose now was later
    result = plan(QueueLimits(rates=(rate,)), jobs("a", 2), 2, buckets=stored, now_us=9 * SECOND)
    assert result.take == ("a0",)
    assert result.buckets[key] == Bucket(0.0, 10 * SECOND)


def test_a_per_partition_rate_keeps_one_bucket_per_partition() -> None:
    rate = Rate(1, 10.0, per_partition=True)
    result = plan(QueueLimits(rates=(rate,)), [*jobs("a", 2), *jobs("b", 2, start=1)], 4)
    assert result.take == ("a0", "b0")
    keys = {bucket_key(0, rate, c) for c in jobs("a", 1) + jobs("b", 1)}
    assert set(result.buckets) == keys


def test_a_bucket_full_again_is_dropped_from_the_state_once_it_has_stayed_full() -> None:
    rate = Rate(1, 1.0)
    key = bucket_key(0, rate, jobs("a", 1)[0])
    limits, stored = QueueLimits(rates=(rate,)), {key: Bucket(0.0, 0)}
    # Full again after 1 s; kept while a late claimer could still read the old time.
    kept = plan(limits, [], 1, buckets=stored, now_us=5 * SECOND)
    assert kept.drop_buckets == frozenset()
    later = plan(limits, [], 1, buckets=stored, now_us=SECOND + KEEP_FULL_US)
    assert later.drop_buckets == {key}


def test_wait_until_is_none_when_a_cap_holds_the_jobs() -> None:
    limits = QueueLimits(max_running=1, rates=(Rate(1, 1.0),))
    result = plan(limits, jobs("a", 2), 2, running={("t", "a"): 1})
    assert result.take == () and result.wait_until_us is None


def test_limits_reject_bad_numbers() -> None:
    with pytest.raises(ValueError, match="max_running"):
        Cap(0)
    with pytest.raises(ValueError, match="per_seconds"):
        Rate(1, 0)
    with pytest.raises(ValueError, match=r"weights\.a"):
        QueueLimits(weights={"a": -1})


@pytest.mark.parametrize(
    ("make", "field"),
    [
        (lambda flag: QueueLimits(fair=flag), "QueueLimits.fair"),
        (lambda flag: Cap(1, per_partition=flag), "Cap.per_partition"),
        (lambda flag: Rate(5, per_partition=flag), "Rate.per_partition"),
    ],
)
@pytest.mark.parametrize("flag", ["no", 1, 0, None])
def test_a_limit_s_switch_is_true_or_false_not_what_reads_as_one(
    make: object, field: str, flag: object
) -> None:
    # `fair="no"` turned fair shares on; `per_partition="no"` capped per partition.
    with pytest.raises(ValidationError) as refused:
        make(flag)  # type: ignore[operator]
    assert refused.value.fields == (field,)
    assert f"must be True or False, got {flag!r}" in str(refused.value)


# ---- properties ----------------------------------------------------------------

PARTITIONS = ["a", "b", "c"]
TYPES = ["x", "y"]

caps = st.builds(
    Cap,
    st.integers(1, 4),
    st.sampled_from([None, *TYPES]),
    st.booleans(),
)
rates = st.builds(
    Rate,
    st.integers(1, 4),
    st.sampled_from([0.5, 1.0, 2.0]),
    st.sampled_from([None, *TYPES]),
    st.booleans(),
)
weights = st.dictionaries(st.sampled_from(PARTITIONS), st.sampled_from([1, 2, 3]), max_size=2)
limits_st = st.booleans().flatmap(
    lambda fair: st.builds(
        QueueLimits,
        st.just(fair),
        weights if fair else st.just({}),  # weights apply only to fair shares
        st.none() | st.integers(1, 6),
        st.lists(caps, max_size=2).map(tuple),
        st.lists(rates, max_size=2).map(tuple),
    )
)


@st.composite
def candidate_lists(draw: st.DrawFn) -> list[Candidate]:
    n = draw(st.integers(0, 25))
    out = []
    for seq in range(n):
        out.append(
            Candidate(
                f"j{seq}",
                draw(st.integers(0, 3)),
                seq,
                draw(st.sampled_from(TYPES)),
                draw(st.sampled_from(PARTITIONS)),
            )
        )
    return out


running_st = st.dictionaries(
    st.tuples(st.sampled_from(TYPES), st.sampled_from(PARTITIONS)), st.integers(0, 3), max_size=4
)


def cap_usage(cap: Cap, counts: Counter[tuple[str, str]], partition: str) -> int:
    return sum(
        n
        for (job_type, part), n in counts.items()
        if cap.applies(job_type) and (not cap.per_partition or part == partition)
    )


@settings(max_examples=300, deadline=None)
@given(limits_st, candidate_lists(), running_st, st.integers(1, 12))
def test_property_no_cap_is_exceeded_by_a_claim(
    limits: QueueLimits, candidates: list[Candidate], running: dict[tuple[str, str], int], want: int
) -> None:
    result = plan(limits, candidates, want, running=running)
    by_id = {c.id: c for c in candidates}
    after = Counter(running)
    for job_id in result.take:
        c = by_id[job_id]
        for cap in limits.all_caps:
            if cap.applies(c.job_type):
                # Taking it was allowed only while its cap had room.
                assert cap_usage(cap, after, c.partition) < cap.max_running
        after[(c.job_type, c.partition)] += 1
    assert len(result.take) <= want
    assert len(set(result.take)) == len(result.take)


def test_a_bucket_refilled_to_full_is_kept_while_a_late_claimer_could_still_use_it() -> None:
    # One start per 2 s. Claimers read their clocks, then take turns: one that read an
    # earlier time may come after one that read a later time.
    limits = QueueLimits(rates=[Rate(1, 2.0)])
    job = Candidate("j", 0, 0, "x", "a")
    buckets: dict[str, Bucket] = {}
    taken = 0
    # The second claim finds nothing to take: the bucket it reads is full again by then.
    for n, (jobs, now) in enumerate([(1, 0), (0, 2 * SECOND), (1, 0), (1, 2 * SECOND)]):
        ready = [attrs.evolve(job, id=f"j{n}")][:jobs]
        result = plan(limits, ready, 1, buckets=buckets, now_us=now)
        for key in result.drop_buckets:
            buckets.pop(key, None)
        buckets.update(result.buckets)
        taken += len(result.take)
    assert taken == 2, "one start at 0 and one refilled by 2 s: never a third"


@settings(max_examples=200, deadline=None)
@given(
    limits_st,
    st.lists(st.tuples(candidate_lists(), st.integers(0, 3 * SECOND)), min_size=1, max_size=6),
    st.integers(1, 6),
)
def test_property_no_rate_is_exceeded_over_many_claims(
    limits: QueueLimits, rounds: list[tuple[list[Candidate], int]], want: int
) -> None:
    # Claims come at any order of `now`: a claimer may read its clock, then wait its
    # turn behind one that read a later time.
    buckets: dict[str, Bucket] = {}
    started: Counter[tuple[int, str]] = Counter()
    for n, (candidates, now) in enumerate(rounds):
        unique = [attrs.evolve(c, id=f"{n}-{c.id}") for c in candidates]
        result = plan(limits, unique, want, buckets=buckets, now_us=now)
        for key in result.drop_buckets:
            buckets.pop(key, None)
        buckets.update(result.buckets)
        by_id = {c.id: c for c in unique}
        for job_id in result.take:
            c = by_id[job_id]
            for i, rate in enumerate(limits.rates):
                if rate.applies(c.job_type):
                    started[(i, c.partition if rate.per_partition else "*")] += 1
    span = max(now for _, now in rounds) - min(now for _, now in rounds)
    for (i, _), count in started.items():
        rate = limits.rates[i]
        assert count <= rate.starts + rate.starts * span / (rate.per_seconds * SECOND) + 1e-9


@settings(max_examples=300, deadline=None)
@given(limits_st, candidate_lists(), running_st, st.integers(1, 12))
def test_property_priorities_are_taken_most_urgent_first(
    limits: QueueLimits, candidates: list[Candidate], running: dict[tuple[str, str], int], want: int
) -> None:
    by_id = {c.id: c for c in candidates}
    ranks = [by_id[t].priority for t in plan(limits, candidates, want, running=running).take]
    assert ranks == sorted(ranks)


@settings(max_examples=300, deadline=None)
@given(limits_st, candidate_lists(), running_st, st.integers(1, 12))
def test_property_each_partition_and_priority_is_taken_in_fifo_order(
    limits: QueueLimits, candidates: list[Candidate], running: dict[tuple[str, str], int], want: int
) -> None:
    by_id = {c.id: c for c in candidates}
    taken = [by_id[t] for t in plan(limits, candidates, want, running=running).take]
    for key in {(c.partition, c.priority) for c in taken}:
        seqs = [c.seq for c in taken if (c.partition, c.priority) == key]
        assert seqs == sorted(seqs)


@settings(max_examples=300, deadline=None)
@given(candidate_lists(), st.integers(1, 30))
def test_property_without_limits_fifo_takes_a_prefix_of_each_partition(
    candidates: list[Candidate], want: int
) -> None:
    taken = set(plan(QueueLimits(fair=True), candidates, want).take)
    for key in {(c.partition, c.priority) for c in candidates}:
        lane = [
            c.id in taken
            for c in sorted(candidates, key=lambda c: c.seq)
            if (c.partition, c.priority) == key
        ]
        assert lane == sorted(lane, reverse=True)  # taken ones first, then the rest


@settings(max_examples=300, deadline=None)
@given(candidate_lists(), st.integers(1, 8))
def test_property_equal_weights_keep_partitions_within_one_job_of_each_other(
    candidates: list[Candidate], want: int
) -> None:
    # One priority, claims of `want` one after another with the passes stored between.
    same = [attrs.evolve(c, priority=2) for c in candidates]
    left, passes, order = list(same), {}, []
    while left:
        result = plan(QueueLimits(fair=True), left, want, passes=passes)
        passes = dict(result.passes)
        order.extend(result.take)
        left = [c for c in left if c.id not in result.take]
    by_id = {c.id: c for c in same}
    total = Counter(c.partition for c in same)
    done: Counter[str] = Counter()
    for job_id in order:
        done[by_id[job_id].partition] += 1
        busy = [p for p in total if done[p] < total[p]]  # partitions that still have work
        for p in busy:
            for q in busy:
                assert done[p] - done[q] <= 1


@pytest.mark.parametrize(
    ("make", "field", "reason"),
    [
        (lambda: Cap(0), "Cap.max_running", "must be >= 1, got 0"),
        (lambda: Cap(1.5), "Cap.max_running", "must be an integer, got 1.5"),
        (lambda: Cap(2, job_type=""), "Cap.job_type", "must be a non-empty string, got ''"),
        (lambda: Rate(starts=0), "Rate.starts", "must be >= 1, got 0"),
        (lambda: Rate(1, 0), "Rate.per_seconds", "must be a number of seconds > 0 and below 1e9 (31 years), got 0"),
        (lambda: QueueLimits(max_running=-1), "QueueLimits.max_running", "must be >= 1, got -1"),
        (lambda: QueueLimits(weights={"a": -1}), "QueueLimits.weights.a", "must be a number > 0 and below 1e9"),
        # Weights without fair shares were taken, and did nothing.
        (lambda: QueueLimits(weights={"a": 2}), "QueueLimits.weights", "apply only to fair"),
        (lambda: QueueLimits(caps=(3,)), "QueueLimits.caps[0]", "must be a Cap, got 3"),
        (lambda: QueueLimits(rates=[Cap(1)]), "QueueLimits.rates[0]", "must be a Rate, got"),
    ],
)
def test_a_bad_limit_in_python_is_a_validation_error_naming_its_path(
    make: object, field: str, reason: str
) -> None:
    """The same error type and form as a bad config key or enqueue option."""
    with pytest.raises(ValidationError) as bad:
        make()  # type: ignore[operator]
    assert bad.value.fields == (field,)
    assert bad.value.errors[0].reason.startswith(reason)
    assert str(bad.value).startswith(f"{field}: {reason}")


@pytest.mark.parametrize(
    ("make", "field"),
    [
        (lambda: RetryPolicy(initial_delay_ms=-1), "RetryPolicy.initial_delay_ms"),
        (lambda: RequeuePolicy(max_requeues=-5), "RequeuePolicy.max_requeues"),
        (lambda: LeasePolicy(lease_ms=0), "LeasePolicy.lease_ms"),
        (lambda: RetentionPolicy(batch=-1), "RetentionPolicy.batch"),
        (lambda: PrefetchPolicy(max_batch=0), "PrefetchPolicy.max_batch"),
    ],
)
def test_a_bad_policy_in_python_is_a_validation_error_naming_its_path(
    make: object, field: str
) -> None:
    with pytest.raises(ValidationError) as bad:
        make()  # type: ignore[operator]
    assert bad.value.fields == (field,)
