"""Which server a config names, told without its password.

Messages about the backend (an unreachable server, a URL a driver refused, the
dashboard's "did not answer") name the config key to fix and the server's masked
URL. These read them from the settings that say where the backend is: a `Config`
is one, and nothing here needs more of it than `BackendSettings` names.
"""

from __future__ import annotations

from typing import Protocol

from .outage import DIALECTS, Endpoint
from .redact import mask_url, url_secrets


class _HasUrl(Protocol):
    @property
    def url(self) -> str | None: ...


class BackendSettings(Protocol):
    """Where the queue's backend is and how to reach it: the part of a `Config` the
    backend's builders and messages read."""

    @property
    def provider(self) -> str: ...

    @property
    def url(self) -> str: ...

    @property
    def redis_url(self) -> str: ...

    @property
    def redis_prefix(self) -> str: ...

    @property
    def redis_cluster(self) -> bool: ...

    @property
    def redis_urls(self) -> tuple[str, ...]: ...

    @property
    def redis_replica_wait(self) -> int: ...

    @property
    def redis_replica_wait_timeout_ms(self) -> int: ...

    @property
    def redis_shards(self) -> int: ...

    @property
    def redis_queue_shards(self) -> tuple[tuple[str, int], ...]: ...

    @property
    def pool_size(self) -> int: ...

    @property
    def sqlite_synchronous(self) -> str: ...

    @property
    def lease_ms(self) -> int: ...

    @property
    def tenancy(self) -> _HasUrl | None: ...


def retry_budget_s(settings: BackendSettings) -> float:
    """How long an adapter may retry one storage call: a quarter of the lease, so a
    retried write lands while the claim it writes for is still live."""
    return settings.lease_ms / 4000


def backend_url(settings: BackendSettings) -> tuple[str, str | None]:
    """The config key and URL the provider's queue and store are built on."""
    if settings.provider == "redis":
        # The top-level `url` serves Redis too (see config_rules): name the key used.
        key = "url" if settings.url == settings.redis_url else "redis.url"
        return key, settings.redis_url
    if settings.provider == "db":
        return "url", settings.url
    return "provider", None


def tenancy_url(settings: BackendSettings) -> tuple[str, str | None]:
    """The config key and URL the tenant resolver is built on."""
    if settings.tenancy is None:
        return "tenancy", None
    if settings.tenancy.url is not None:
        return "tenancy.url", settings.tenancy.url
    return "url", settings.url


def config_secrets(settings: BackendSettings) -> frozenset[str]:
    """Every password in the URLs of the settings."""
    tenancy = settings.tenancy.url if settings.tenancy is not None else None
    return url_secrets(settings.url, settings.redis_url, tenancy)


def backend_label(settings: BackendSettings) -> tuple[str, str]:
    """The backend's name and its masked URL."""
    _, url = backend_url(settings)
    if settings.provider == "redis":
        return "Redis", str(mask_url(url))
    scheme = (url or "").split(":", 1)[0].split("+", 1)[0]
    return DIALECTS.get(scheme, scheme or settings.provider), str(mask_url(url))


def endpoint(settings: BackendSettings) -> Endpoint:
    """The backend's server as messages name it (see `outage.Endpoint`)."""
    backend, where = backend_label(settings)
    return Endpoint(backend, where, backend_url(settings)[0], config_secrets(settings))


def sqlite_refusal(settings: BackendSettings, exc: BaseException) -> str | None:
    """What an operator reads when a SQLite file refused a write past its retries
    (read-only to this process, or locked by another writer too long), naming the file
    rather than the statement; None for any other error."""
    import sqlite3

    orig = getattr(exc, "orig", exc)
    _, url = backend_url(settings)
    if not isinstance(orig, sqlite3.OperationalError) or not (url or "").startswith("sqlite"):
        return None
    from sqlalchemy.engine import make_url

    path = make_url(url or "").database or ":memory:"
    message = str(orig).lower()
    if "readonly" in message:
        return (
            f"the SQLite database {path} is read-only to this process ({orig}): the user "
            "running conveyor must be able to write the file and its folder, where SQLite "
            "keeps its -wal and -shm files"
        )
    if "locked" in message or "busy" in message:
        return (
            f"the SQLite database {path} stayed locked by another writer for "
            f"{retry_budget_s(settings):g} s, the longest a write waits (a quarter of "
            "lease_ms): a long transaction in another process holds it, or the file is on "
            "a file system without working locks (a network share)"
        )
    return None
