"""Which keys each provider reads: one rule for the URL, and no key set in vain.

The URL: the top-level `url` is the provider's server, whichever it is: a database
URL for `db`, a Redis URL for `redis` (the quick start's `url = ...` works for both).
`[redis] url` (or `host`, `port`, `db`) says the same for Redis; given beside a
top-level `url`, the two must agree, and a URL of the wrong kind for the provider is
refused naming `url`, never used for something else or replaced by a default.

Keys the chosen provider does not read (`[redis]` with provider `db`, `url` with
`memory`, `pool_size` with `redis`, `redis.host` beside a Redis URL ...) are warned
about by name: they are often a sign that the provider is not the one
meant, and a config that switches provider through `CONVEYOR_PROVIDER` may keep
them on purpose, so they are not refused.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from typing import Any

from ..core import FieldError
from .redact import mask_url

log = logging.getLogger("conveyor.config")

REDIS_SCHEMES = ("redis://", "rediss://", "unix://")
#: The keys of `[redis]` that a Redis URL replaces.
REDIS_PARTS = ("host", "port", "db")
#: Top-level keys only SQL reads.
SQL_ONLY = ("pool_size", "auto_migrate")

def _table(raw: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = raw.get(key)
    return value if isinstance(value, Mapping) else {}


def url_problems(raw: Mapping[str, Any]) -> Iterator[FieldError]:
    """A URL of the wrong kind for the provider, or two Redis URLs that disagree."""
    provider, url = raw.get("provider", "db"), raw.get("url")
    if not isinstance(url, str) or not url:
        return
    if provider == "redis":
        if not url.startswith(REDIS_SCHEMES):
            yield FieldError(
                "url",
                f"with provider 'redis' must be a Redis URL (redis://, rediss:// or "
                f"unix://), got {mask_url(url)!r}",
            )
            return
        other = _table(raw, "redis").get("url")
        if isinstance(other, str) and other != url:
            yield FieldError(
                "redis.url",
                f"is {mask_url(other)!r} but url is {mask_url(url)!r}: give the Redis "
                "server once, as url or as redis.url",
            )
    elif provider == "db" and url.startswith(REDIS_SCHEMES):
        yield FieldError(
            "url",
            f"{mask_url(url)!r} is a Redis URL, but provider is 'db' (a SQL database): "
            'set provider = "redis", or give a database URL such as sqlite:///jobs.db',
        )


def redis_url(raw: Mapping[str, Any], table_url: str | None, from_parts: str) -> str:
    """The Redis server: the top-level `url` under provider `redis`, else `[redis]
    url`, else the URL built from `[redis]` host, port and db."""
    url = raw.get("url")
    if raw.get("provider", "db") == "redis" and isinstance(url, str) and url:
        return url
    return table_url or from_parts


def unused_keys(raw: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(key, why) for each key set that the provider does not read."""
    provider = raw.get("provider", "db")
    redis = _table(raw, "redis")
    found: list[tuple[str, str]] = []
    if provider != "redis" and "redis" in raw:
        found.append(("redis", f"only provider 'redis' reads it (provider is {provider!r})"))
    if provider == "memory" and "url" in raw:
        found.append(("url", "provider 'memory' keeps jobs in this process and has no URL"))
    if provider != "db":
        found += [
            (key, f"only provider 'db' reads it (provider is {provider!r})")
            for key in SQL_ONLY
            if key in raw
        ]
    if provider == "redis":
        given = "url" if isinstance(raw.get("url"), str) else "redis.url"
        if given == "url" or "url" in redis:
            found += [
                (f"redis.{part}", f"{given} gives the Redis server")
                for part in REDIS_PARTS
                if part in redis
            ]
    return found


def warn_unused(raw: Mapping[str, Any]) -> None:
    """One WARNING per key set in vain, each time such a config is read."""
    for key, why in unused_keys(raw):
        log.warning("config key %r is set but not used: %s", key, why)
