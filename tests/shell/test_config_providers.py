"""One rule for the URL of every provider: the top-level `url` serves Redis too, two
Redis URLs that disagree are refused, a URL of the wrong kind is named, and a key the
provider does not read is warned about by name. Against a real Redis server on a port
of its own, so a fall-back to the default 127.0.0.1:6379 cannot pass for success."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator

import conveyor
import pytest
from conveyor.core import ValidationError
from conveyor.shell.config import load_config, parse_config
from conveyor.shell.endpoints import backend_url


@pytest.fixture(scope="module")
def redis_server() -> Iterator[str]:
    from conveyor.testing.redis_server import RedisServer

    server = RedisServer().start()
    try:
        yield server.url
    finally:
        server.kill()


def _fields(raw: dict) -> tuple[str, ...]:
    with pytest.raises(ValidationError) as info:
        parse_config(raw)
    return info.value.fields


def test_the_top_level_url_is_the_redis_server_of_provider_redis(redis_server: str) -> None:
    assert not redis_server.endswith(":6379/0")
    prefix = f"url-{uuid.uuid4().hex[:8]}"
    sender = conveyor.build(
        {"provider": "redis", "url": redis_server, "redis": {"prefix": prefix}},
        startup_timeout_s=0,
    )
    try:
        job = sender.enqueue("x", {})
    finally:
        sender.close()
    # Read back through the [redis] table's own key: the job is on that server.
    reader = conveyor.build({"provider": "redis", "redis": {"url": redis_server, "prefix": prefix}})
    try:
        view = reader.get(job.id)
        assert view is not None and view.job.id == job.id
    finally:
        reader.close()


def test_url_and_redis_url_may_both_be_given_when_they_agree() -> None:
    cfg = parse_config(
        {"provider": "redis", "url": "redis://h:1/2", "redis": {"url": "redis://h:1/2"}}
    )
    assert cfg.redis_url == "redis://h:1/2"


def test_url_and_redis_url_that_disagree_are_refused_naming_both() -> None:
    with pytest.raises(ValidationError) as info:
        parse_config(
            {"provider": "redis", "url": "redis://a:1/0", "redis": {"url": "redis://b:1/0"}}
        )
    assert info.value.fields == ("redis.url",)
    assert "url" in str(info.value) and "redis://a:1/0" in str(info.value)


def test_a_database_url_with_provider_redis_is_refused_naming_url() -> None:
    assert _fields({"provider": "redis", "url": "sqlite:///jobs.db"}) == ("url",)


def test_a_redis_url_with_provider_db_is_refused_naming_url() -> None:
    with pytest.raises(ValidationError) as info:
        parse_config({"provider": "db", "url": "redis://h:6379/0"})
    assert info.value.fields == ("url",) and 'provider = "redis"' in str(info.value)


def test_the_passwords_of_a_refused_url_are_not_repeated() -> None:
    with pytest.raises(ValidationError) as info:
        parse_config({"provider": "redis", "url": "postgresql://u:s3cr3t@h/db"})
    assert "s3cr3t" not in str(info.value)


def test_an_unreachable_server_names_the_key_the_url_came_from() -> None:
    cfg = parse_config({"provider": "redis", "url": "redis://h:1/0"})
    assert backend_url(cfg) == ("url", "redis://h:1/0")
    cfg = parse_config({"provider": "redis", "redis": {"url": "redis://h:1/0"}})
    assert backend_url(cfg) == ("redis.url", "redis://h:1/0")


@pytest.mark.parametrize(
    ("raw", "key"),
    [
        ({"provider": "db", "redis": {"prefix": "p"}}, "redis"),
        ({"provider": "memory", "url": "sqlite:///j.db"}, "url"),
        ({"provider": "memory", "redis": {"url": "redis://h:1/0"}}, "redis"),
        ({"provider": "redis", "pool_size": 5}, "pool_size"),
        ({"provider": "redis", "auto_migrate": True}, "auto_migrate"),
        ({"provider": "redis", "url": "redis://h:1/0", "redis": {"host": "x"}}, "redis.host"),
        ({"provider": "redis", "redis": {"url": "redis://h:1/0", "port": 7000}}, "redis.port"),
    ],
)
def test_a_key_the_provider_does_not_read_is_warned_about_by_name(
    raw: dict, key: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="conveyor.config"):
        parse_config(raw)
    lines = [r.getMessage() for r in caplog.records if r.name == "conveyor.config"]
    assert any(f"config key {key!r} is set but not used" in line for line in lines), lines


def test_keys_the_provider_reads_bring_no_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="conveyor.config"):
        parse_config({"provider": "redis", "url": "redis://h:1/0", "redis": {"prefix": "p"}})
        parse_config({"provider": "db", "url": "sqlite:///j.db", "pool_size": 3})
        load_config({"provider": "redis", "redis": {"host": "h", "port": 1, "db": 2}}, env={})
    assert [r for r in caplog.records if r.name == "conveyor.config"] == []
