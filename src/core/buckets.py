"""Token buckets: how a rate's stored bucket refills, and when it next holds a token.

A `Rate` of `starts` per `per_seconds` is a bucket of `starts` tokens (the burst),
refilled continuously at `starts / per_seconds` tokens a second; each claim it
applies to takes one. Times are microseconds, as `plan_claim` takes `now`.
"""

from __future__ import annotations

import math

import attrs

from .queue_limits import Rate


@attrs.frozen(slots=True)
class Bucket:
    """A rate's token bucket as stored: `tokens` left at `at_us` (microseconds)."""

    tokens: float
    at_us: int


def refill(rate: Rate, bucket: Bucket | None, now_us: int) -> float:
    """The tokens of `bucket` at `now_us` (a full bucket when there is none)."""
    if bucket is None:
        return float(rate.starts)
    gained = max(0, now_us - bucket.at_us) * rate.starts / (rate.per_seconds * 1_000_000)
    return min(float(rate.starts), bucket.tokens + gained)


def next_token_at(rate: Rate, tokens: float, now_us: int) -> int:
    """When a bucket holding `tokens` at `now_us` next holds one whole token."""
    missing = max(0.0, 1.0 - tokens)
    return now_us + math.ceil(missing * rate.per_seconds * 1_000_000 / rate.starts)
