"""Config validation: every bad key is named with the reason; env overrides apply."""

from __future__ import annotations

import pytest
from conveyor.core import ValidationError
from conveyor.shell.config import load_config, parse_config


def _fields(raw: dict) -> tuple[str, ...]:
    with pytest.raises(ValidationError) as info:
        parse_config(raw)
    return info.value.fields


def test_defaults_are_the_embedded_sqlite_and_one_worker_on_default() -> None:
    cfg = parse_config({})
    assert cfg.provider == "db" and cfg.url.startswith("sqlite:///")
    assert (cfg.workers.count, cfg.workers.queues) == (1, ("default",))
    assert cfg.retry.max_delay_ms == 60_000 and cfg.requeue.max_requeue_age_ms == 300_000


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ({"provider": "kafka"}, "provider"),
        ({"workers": {"count": -1}}, "workers.count"),
        ({"workers": {"count": "two"}}, "workers.count"),
        ({"workers": {"queues": "default"}}, "workers.queues"),
        ({"workers": {"queues": ["ok", "bad name"]}}, "workers.queues[1]"),
        ({"workers": {"retry": {"jitter": "yes"}}}, "workers.retry.jitter"),
        ({"workers": {"retry": {"max_delay_ms": -5}}}, "workers.retry.max_delay_ms"),
        ({"requeue": {"max_requeue_age_ms": 1.5}}, "requeue.max_requeue_age_ms"),
        ({"lease_ms": 0}, "lease_ms"),
        ({"workers": {"prefetch": 0}}, "workers.prefetch"),
        ({"handlers": ["no_colon_here"]}, "handlers[0]"),
        ({"redis": {"url": "http://x"}}, "redis.url"),
        ({"wrokers": {}}, "wrokers"),
        ({"workers": {"cuont": 1}}, "workers.cuont"),
    ],
)
def test_a_bad_key_is_named(raw: dict, field: str) -> None:
    assert field in _fields(raw)


def test_every_problem_is_reported_at_once() -> None:
    assert set(_fields({"provider": "x", "lease_ms": -1})) == {"provider", "lease_ms"}


def test_environment_overrides_the_file(tmp_path) -> None:
    path = tmp_path / "conveyor.toml"
    path.write_text('provider = "memory"\n[workers]\ncount = 3\n')
    cfg = load_config(
        path,
        env={"CONVEYOR_WORKERS": "0", "CONVEYOR_QUEUES": "a, b", "CONVEYOR_URL": "sqlite:///x.db"},
    )
    assert cfg.provider == "memory" and cfg.workers.count == 0
    assert cfg.workers.queues == ("a", "b") and cfg.url == "sqlite:///x.db"


def test_pyproject_tool_table_is_found(tmp_path, monkeypatch) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.conveyor]\nprovider = "memory"\n')
    monkeypatch.chdir(tmp_path)
    assert load_config(env={}).provider == "memory"


def test_a_bad_env_number_names_the_key() -> None:
    with pytest.raises(ValidationError) as info:
        load_config({}, env={"CONVEYOR_LEASE_MS": "soon"})
    assert info.value.fields == ("lease_ms",)


def test_max_reclaims_and_pool_size_default_to_3_and_10() -> None:
    cfg = parse_config({})
    assert (cfg.max_reclaims, cfg.pool_size) == (3, 10)


def test_max_reclaims_and_pool_size_come_from_the_file_and_the_environment() -> None:
    cfg = load_config({"max_reclaims": 0, "pool_size": 1}, env={})
    assert (cfg.max_reclaims, cfg.pool_size) == (0, 1)
    cfg = load_config(
        {"max_reclaims": 0}, env={"CONVEYOR_MAX_RECLAIMS": "7", "CONVEYOR_POOL_SIZE": "25"}
    )
    assert (cfg.max_reclaims, cfg.pool_size) == (7, 25)


@pytest.mark.parametrize(
    ("raw", "field", "reason"),
    [
        ({"max_reclaims": -1}, "max_reclaims", ">= 0"),
        ({"max_reclaims": "3"}, "max_reclaims", "integer"),
        ({"max_reclaims": True}, "max_reclaims", "integer"),
        ({"pool_size": 0}, "pool_size", ">= 1"),
        ({"pool_size": 2.5}, "pool_size", "integer"),
    ],
)
def test_a_bad_max_reclaims_or_pool_size_is_named_in_one_line(
    raw: dict, field: str, reason: str
) -> None:
    with pytest.raises(ValidationError) as info:
        parse_config(raw)
    assert info.value.fields == (field,)
    assert reason in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize("name", ["CONVEYOR_MAX_RECLAIMS", "CONVEYOR_POOL_SIZE"])
def test_a_bad_max_reclaims_or_pool_size_in_the_environment_names_the_key(name: str) -> None:
    with pytest.raises(ValidationError) as info:
        load_config({}, env={name: "many"})
    assert info.value.fields == ({"CONVEYOR_MAX_RECLAIMS": "max_reclaims"}.get(name, "pool_size"),)


def test_a_bare_file_path_as_url_says_how_to_write_it() -> None:
    with pytest.raises(ValidationError) as info:
        load_config({"provider": "db", "url": "jobs.db"})
    assert info.value.fields == ("url",)
    assert "sqlite:///jobs.db" in str(info.value)


def test_a_wrong_type_deep_in_a_table_names_its_full_dotted_key() -> None:
    with pytest.raises(ValidationError) as info:
        parse_config({"workers": {"retry": {"initial_delay_ms": "soon"}}})
    assert str(info.value) == "workers.retry.initial_delay_ms: must be an integer, got 'soon'"


def test_an_unknown_key_deep_in_a_table_is_named_with_the_known_keys() -> None:
    with pytest.raises(ValidationError) as info:
        parse_config({"workers": {"retry": {"jiter": False}}})
    assert info.value.fields == ("workers.retry.jiter",)
    assert "['initial_delay_ms', 'jitter', 'max_delay_ms']" in str(info.value)


def test_several_problems_in_several_tables_are_each_reported_in_one_line() -> None:
    with pytest.raises(ValidationError) as info:
        parse_config(
            {
                "wrokers": {},
                "lease_ms": "long",
                "workers": {"queues": ["a", "b c", 3], "retry": {"jitter": "yes"}},
                "retention": {"batch": 0},
                "tenancy": {"strategy": "pooled", "table": ""},
            }
        )
    assert set(info.value.fields) == {
        "wrokers",
        "lease_ms",
        "workers.queues[1]",
        "workers.queues[2]",
        "workers.retry.jitter",
        "retention.batch",
        "tenancy.strategy",
        "tenancy.table",
    }
    assert all("\n" not in str(error) for error in info.value.errors)


def test_a_section_that_is_not_a_table_is_named() -> None:
    with pytest.raises(ValidationError) as info:
        parse_config({"tenancy": ["shared"]})
    assert str(info.value) == "tenancy: must be a table, got list"


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ({"redis": {"host": 10}}, "redis.host"),
        ({"redis": {"prefix": 1}}, "redis.prefix"),
        ({"tenancy": {"schema_column": False}}, "tenancy.schema_column"),
        ({"tenancy": {"url": 5}}, "tenancy.url"),
    ],
)
def test_a_text_key_that_is_not_a_string_is_named(raw: dict, field: str) -> None:
    with pytest.raises(ValidationError) as info:
        parse_config(raw)
    assert info.value.fields == (field,)
    assert "must be a string, got" in str(info.value)


def test_a_key_tied_to_another_is_reported_with_the_other_problems() -> None:
    assert set(_fields({"provider": "memory", "tenancy": {}, "lease_ms": 0})) == {
        "tenancy.url",
        "lease_ms",
    }


def test_workers_retry_wins_over_the_top_level_retry_table() -> None:
    cfg = parse_config({"retry": {"max_delay_ms": 5}, "workers": {"retry": {"max_delay_ms": 7}}})
    assert cfg.retry.max_delay_ms == 7
    assert parse_config({"retry": {"max_delay_ms": 5}}).retry.max_delay_ms == 5


def test_redis_host_port_and_db_make_the_url() -> None:
    cfg = parse_config({"redis": {"host": "cache", "port": 7000, "db": 2, "prefix": "app"}})
    assert (cfg.redis_url, cfg.redis_prefix) == ("redis://cache:7000/2", "app")


def test_redis_cluster_keys_give_the_seeds_and_the_replica_wait() -> None:
    cfg = parse_config(
        {
            "provider": "redis",
            "url": "redis://10.0.0.1:7000",
            "redis": {
                "cluster": True,
                "urls": ["redis://10.0.0.2:7000"],
                "replica_wait": 1,
                "replica_wait_timeout_ms": 250,
            },
        }
    )
    assert (cfg.redis_cluster, cfg.redis_url, cfg.redis_urls) == (
        True,
        "redis://10.0.0.1:7000",
        ("redis://10.0.0.2:7000",),
    )
    assert (cfg.redis_replica_wait, cfg.redis_replica_wait_timeout_ms) == (1, 250)
    plain = parse_config({"provider": "redis"})
    assert (plain.redis_cluster, plain.redis_urls, plain.redis_replica_wait) == (False, (), 0)


def test_redis_shards_and_pins_are_read_in_name_order() -> None:
    cfg = parse_config(
        {"provider": "redis", "redis": {"shards": 3, "queue_shards": {"mail": 2, "billing": 0}}}
    )
    assert cfg.redis_shards == 3
    assert cfg.redis_queue_shards == (("billing", 0), ("mail", 2))
    plain = parse_config({"provider": "redis"})
    assert (plain.redis_shards, plain.redis_queue_shards) == (1, ())


def test_a_pin_to_a_shard_that_does_not_exist_is_refused_naming_the_queue() -> None:
    redis = {"shards": 2, "queue_shards": {"mail": 2}}
    assert _fields({"provider": "redis", "redis": redis}) == ("redis.queue_shards.mail",)
    assert "redis.shards" in _fields({"provider": "redis", "redis": {"shards": 0}})
    bad = {"provider": "redis", "redis": {"queue_shards": {"mail": "one"}}}
    assert _fields(bad) == ("redis.queue_shards",)


def test_redis_cluster_keys_are_refused_where_a_cluster_cannot_take_them() -> None:
    assert _fields({"provider": "redis", "redis": {"urls": ["redis://a:1"]}}) == ("redis.urls",)
    assert _fields({"provider": "redis", "url": "redis://a:1/3", "redis": {"cluster": True}}) == (
        "url",
    )
    assert _fields(
        {"provider": "redis", "redis": {"cluster": True, "url": "unix:///tmp/redis.sock"}}
    ) == ("redis.url",)
    bad = {"cluster": "yes", "replica_wait": -1, "replica_wait_timeout_ms": 0, "urls": ["x"]}
    assert set(_fields({"provider": "redis", "redis": bad})) >= {
        "redis.cluster",
        "redis.replica_wait",
        "redis.replica_wait_timeout_ms",
        "redis.urls[0]",
    }


@pytest.mark.parametrize(
    "field", ["completed_ms", "dead_ms", "prune_interval_ms", "remember_pruned_ms"]
)
@pytest.mark.parametrize(
    ("value", "shown"), [("1d", "'1d'"), (None, "None"), (1.5, "1.5"), ("100", "'100'")]
)
def test_every_retention_duration_is_a_whole_number_of_ms_named_when_not(
    field: str, value: object, shown: str
) -> None:
    # remember_pruned_ms was read with int(): "1d" raised a bare ValueError, and 1.5
    # and "100" were taken as 1 and 100.
    with pytest.raises(ValidationError) as info:
        parse_config({"retention": {field: value}})
    assert str(info.value) == f"retention.{field}: must be an integer, got {shown}"


@pytest.mark.parametrize(
    ("config", "env", "count"),
    [
        ({"provider": "db", "url": "postgresql+psycopg://app@db/jobs"}, {}, 2),
        ({"url": "postgresql://app@db/jobs"}, {}, 2),  # provider db is the default
        ({}, {"CONVEYOR_URL": "postgresql://app@db/jobs"}, 2),
        ({"url": "postgresql://app@db/jobs", "workers": {"count": 1}}, {}, 1),
        ({"url": "postgresql://app@db/jobs"}, {"CONVEYOR_WORKERS": "3"}, 3),
        ({"provider": "db", "url": "sqlite:///jobs.db"}, {}, 1),
        ({"provider": "redis"}, {}, 1),
        ({"provider": "memory"}, {}, 1),
    ],
)
def test_workers_count_defaults_to_two_threads_on_postgresql_and_one_elsewhere(
    config: dict, env: dict, count: int
) -> None:
    # On PostgreSQL one thread waits on the server a third of a short job; a second
    # overlaps the waits (docs/workers.md). What a config or variable says wins.
    assert load_config(config, env=env).workers.count == count
