"""Rules across keys: one rule for the URL, keys tied to one another, and no key
set in vain. Each reads the raw mapping, so its problems join the per-key ones of
the converter in one report.

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

Keys tied to one another (`tied_problems`): a bare file path as a `db` URL, a
`tenancy.url` missing where the job database is not SQL, two `[[cron]]` entries of
one name.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import urlsplit

from ...core import FieldError
from ...core.shards import ShardMap
from ..redact import mask_url
from .checks import REDIS_SCHEMES
from .model import DEFAULT_PROVIDER, DEFAULT_URL

log = logging.getLogger("conveyor.config")

#: The keys of `[redis]` that a Redis URL replaces.
REDIS_PARTS = ("host", "port", "db")
#: Top-level keys only SQL reads.
SQL_ONLY = ("pool_size", "auto_migrate", "sqlite_synchronous")


def table(raw: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    """The table at `key`, or an empty one when `key` holds no table."""
    value = raw.get(key)
    return value if isinstance(value, Mapping) else {}


def tied_problems(raw: Mapping[str, Any]) -> Iterator[FieldError]:
    """Rules that tie one key to another. A hook sees one value, not its neighbours,
    and checking the raw mapping lets these join the per-key problems in one report
    even when some other key is wrong."""
    provider, url = raw.get("provider", DEFAULT_PROVIDER), raw.get("url", DEFAULT_URL)
    if isinstance(url, str) and url and "://" not in url and provider == "db":
        # A bare path is the usual slip: say what it should have been.
        yield FieldError("url", f"{url!r} is not a database URL; a SQLite file is sqlite:///{url}")
    yield from url_problems(raw)
    yield from cluster_problems(raw)
    yield from shard_problems(raw)
    tenancy = raw.get("tenancy")
    if isinstance(tenancy, Mapping) and tenancy.get("url") is None and provider != "db":
        yield FieldError(
            "tenancy.url", "is required unless provider is 'db' (then the job database is used)"
        )
    # Slot ids derive from the entry's name: two entries of one name would share slots.
    entries = raw.get("cron")
    seen: dict[object, int] = {}
    for n, entry in enumerate(entries if isinstance(entries, list | tuple) else ()):
        name = entry.get("name") if isinstance(entry, Mapping) else None
        if isinstance(name, str) and name in seen:
            yield FieldError(f"cron[{n}].name", f"{name!r} is already cron[{seen[name]}]'s name")
        seen.setdefault(name, n)


def url_problems(raw: Mapping[str, Any]) -> Iterator[FieldError]:
    """A URL of the wrong kind for the provider, or two Redis URLs that disagree."""
    provider, url = raw.get("provider", DEFAULT_PROVIDER), raw.get("url")
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
        other = table(raw, "redis").get("url")
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


def cluster_problems(raw: Mapping[str, Any]) -> Iterator[FieldError]:
    """Seed nodes without cluster mode, or a cluster named by what it cannot take (a
    Unix socket, a database number: a cluster has database 0 only)."""
    redis = table(raw, "redis")
    if redis.get("cluster") is not True:
        if "urls" in redis:
            yield FieldError(
                "redis.urls",
                "lists a Redis Cluster's seed nodes: set redis.cluster = true, or give one "
                "server as redis.url",
            )
        return
    for key, value in (("url", raw.get("url")), ("redis.url", redis.get("url"))):
        if not isinstance(value, str):
            continue
        parts = urlsplit(value)
        if parts.scheme == "unix":
            yield FieldError(
                key, "a Redis Cluster is reached over redis:// or rediss://, not unix://"
            )
        elif parts.path.strip("/") not in ("", "0"):
            yield FieldError(key, f"a Redis Cluster has database 0 only, got {parts.path!r}")
    if "db" in redis and redis["db"] != 0:
        yield FieldError("redis.db", "a Redis Cluster has database 0 only")


def shard_problems(raw: Mapping[str, Any]) -> Iterator[FieldError]:
    """Pins to shards the deployment does not have (`core.shards.ShardMap.problems`)."""
    redis = table(raw, "redis")
    count, pins = redis.get("shards", 1), redis.get("queue_shards")
    if not isinstance(count, int) or isinstance(count, bool) or not isinstance(pins, Mapping):
        return  # each key's own hook tells what is wrong with it
    valid = {q: s for q, s in pins.items() if isinstance(s, int) and not isinstance(s, bool)}
    for field, reason in ShardMap(max(count, 1), valid).problems():
        yield FieldError(field, reason)


def redis_url(raw: Mapping[str, Any], from_table: str) -> str:
    """The Redis server: the top-level `url` under provider `redis`, else the one
    `[redis]` names (its url, or its host, port and db). A top-level `url` that is
    no Redis URL is `url_problems`' to report."""
    url = raw.get("url")
    if raw.get("provider", DEFAULT_PROVIDER) == "redis" and isinstance(url, str):
        return url if url.startswith(REDIS_SCHEMES) else from_table
    return from_table


def unused_keys(raw: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(key, why) for each key set that the provider does not read."""
    provider = raw.get("provider", DEFAULT_PROVIDER)
    redis = table(raw, "redis")
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
