"""The limit report (`conveyor.core.limit_report.describe`): what an operator is told
about a limited queue's shares, caps and rates, and that it tells the truth about
the claim policy it explains."""

from __future__ import annotations

from conveyor.core.limit_report import describe
from conveyor.core.limits import Bucket, Candidate, Cap, QueueLimits, Rate, plan_claim
from hypothesis import given, settings
from hypothesis import strategies as st

NOW = 1_000_000_000_000


def _report(limits: QueueLimits, **inputs: object):  # type: ignore[no-untyped-def]
    base: dict[str, object] = {"running": {}, "ready": {}, "candidates": [], "buckets": {}}
    return describe("q", limits, now_us=NOW, **{**base, **inputs})  # type: ignore[arg-type]


def test_shares_follow_the_weights_of_the_partitions_with_ready_work() -> None:
    limits = QueueLimits(fair=True, weights={"gold": 3})
    report = _report(limits, ready={"gold": 10, "free": 50, "idle": 0}, running={("t", "idle"): 1})
    shares = {p.partition: p.share for p in report.partitions}
    assert shares == {"free": 0.25, "gold": 0.75, "idle": None}


def test_a_queue_without_fair_shares_shows_no_share() -> None:
    report = _report(QueueLimits(max_running=5), ready={"a": 1})
    assert [p.share for p in report.partitions] == [None]


def test_caps_count_the_running_jobs_they_cover() -> None:
    limits = QueueLimits(max_running=10, caps=(Cap(3, "charge", per_partition=True),))
    running = {("charge", "acme"): 3, ("mail", "acme"): 2, ("charge", "globex"): 1}
    report = _report(limits, running=running)
    uses = {(c.label, c.partition): (c.in_use, c.full) for c in report.caps}
    assert uses == {
        ("charge per partition", "acme"): (3, True),
        ("charge per partition", "globex"): (1, False),
        ("the queue", None): (6, False),
    }
    assert report.running == 6


def test_a_partition_behind_a_full_cap_says_so_and_its_ready_jobs_are_throttled() -> None:
    limits = QueueLimits(caps=(Cap(1, "charge", per_partition=True),))
    report = _report(
        limits,
        running={("charge", "acme"): 1},
        ready={"acme": 7, "globex": 2},
        candidates=[Candidate("1", 2, 1, "charge", "acme"), Candidate("2", 2, 2, "mail", "globex")],
    )
    waits = {p.partition: p.waits for p in report.partitions}
    assert waits == {"acme": "cap charge per partition full (1/1)", "globex": None}
    assert report.throttled == 7


def test_a_partition_whose_next_job_is_capped_but_whose_others_can_start_is_not_throttled() -> None:
    limits = QueueLimits(caps=(Cap(1, "charge", per_partition=True),))
    lane = [Candidate("c", 2, 1, "charge", "acme")]
    lane += [Candidate(f"m{n}", 2, 2 + n, "mail", "acme") for n in range(3)]
    report = _report(limits, running={("charge", "acme"): 1}, ready={"acme": 101}, candidates=lane)
    assert [p.waits for p in report.partitions] == [None]
    assert report.throttled == 0


def test_a_rate_reports_its_tokens_refilled_to_now_and_the_wait_for_the_next() -> None:
    limits = QueueLimits(rates=(Rate(10, 1.0),))
    # Empty 50 ms ago: half a token back, the next whole one in 50 ms.
    buckets = {"0:*:*": Bucket(0.0, NOW - 50_000)}
    report = _report(
        limits, buckets=buckets, ready={"": 4}, candidates=[Candidate("1", 2, 1, "t", "")]
    )
    [rate] = report.rates
    assert (rate.label, rate.partition) == ("all types: 10 per 1s", None)
    assert abs(rate.tokens - 0.5) < 1e-9 and rate.empty
    assert rate.next_token_s == 0.05
    [default] = report.partitions
    assert (default.label, default.waits) == (
        "(default)",
        "rate all types: 10 per 1s: next start in 0.1s",
    )


def test_a_bucket_absent_from_storage_is_full() -> None:
    limits = QueueLimits(rates=(Rate(5, 2.0, per_partition=True),))
    report = _report(limits, ready={"a": 1}, candidates=[Candidate("1", 2, 1, "t", "a")])
    [rate] = report.rates
    assert (rate.partition, rate.tokens, rate.next_token_s) == ("a", 5.0, None)
    assert report.partitions[0].waits is None


def test_per_partition_rows_are_shown_only_for_partitions_they_hold_back_or_count() -> None:
    # `status --json` listed `charge per partition / initech 0/1` and a full `mail`
    # bucket for every partition, though none of them ran such a job.
    limits = QueueLimits(
        caps=(Cap(1, "charge", per_partition=True),),
        rates=(Rate(2, 1.0, "mail", per_partition=True),),
    )
    report = _report(
        limits,
        running={("charge", "acme"): 1},
        ready={"acme": 1, "globex": 1, "initech": 1},
        buckets={"0:mail:globex": Bucket(0.0, NOW)},
    )
    assert len(report.caps) == 3 and len(report.rates) == 3, "every row is still worked out"
    assert [(c.partition, c.in_use) for c in report.shown_caps] == [("acme", 1)]
    assert [(r.partition, r.tokens) for r in report.shown_rates] == [("globex", 0.0)]


_names = st.sampled_from(["a", "b", "c"])
_types = st.sampled_from(["charge", "mail"])


@st.composite
def _states(
    draw: st.DrawFn,
) -> tuple[QueueLimits, dict[tuple[str, str], int], list[Candidate], dict[str, Bucket]]:
    caps = draw(
        st.lists(
            st.builds(
                Cap,
                st.integers(1, 3),
                st.one_of(st.none(), _types),
                st.booleans(),
            ),
            max_size=2,
        )
    )
    rates = draw(
        st.lists(
            st.builds(
                Rate,
                st.integers(1, 3),
                st.sampled_from([0.5, 1.0, 10.0]),
                st.one_of(st.none(), _types),
                st.booleans(),
            ),
            max_size=2,
        )
    )
    limits = QueueLimits(fair=draw(st.booleans()), caps=caps, rates=rates)
    running = draw(st.dictionaries(st.tuples(_types, _names), st.integers(1, 3), max_size=4))
    lanes = draw(st.dictionaries(_names, st.lists(_types, min_size=1, max_size=3), min_size=1))
    candidates = [
        Candidate(f"{p}-{n}", 2, 10 * i + n, t, p)
        for i, (p, types) in enumerate(sorted(lanes.items()))
        for n, t in enumerate(types)
    ]
    buckets = {}
    for index, rate in enumerate(limits.rates):
        for p in ["a", "b", "c"] if rate.per_partition else ["*"]:
            if draw(st.booleans()):
                key = f"{index}:{rate.job_type or '*'}:{p}"
                tokens = draw(st.floats(0.0, float(rate.starts)))
                buckets[key] = Bucket(tokens, NOW - draw(st.integers(0, 2_000_000)))
    return limits, running, candidates, buckets


@settings(max_examples=300, deadline=None)
@given(_states())
def test_a_partition_said_to_be_able_to_start_is_the_one_a_claim_would_take(state) -> None:  # type: ignore[no-untyped-def]
    """The report and the claim policy agree: a partition's work is reported as
    waiting exactly when a claim of one job among its candidates alone takes none."""
    limits, running, candidates, buckets = state
    ready = {c.partition: 1 for c in candidates}
    report = _report(limits, running=running, ready=ready, candidates=candidates, buckets=buckets)
    for partition in report.partitions:
        lane = [c for c in candidates if c.partition == partition.partition]
        if not lane:
            continue
        plan = plan_claim(limits, lane, running, buckets, {}, NOW, 1)
        assert bool(plan.take) == (partition.waits is None), partition
