"""One model of the configuration: a file is structured straight into the public
classes, a value built in Python is held to the same rule as the key that gives it,
and a default the core decides with is the core's."""

from __future__ import annotations

import pytest
from conveyor.core import (
    LeasePolicy,
    RequeuePolicy,
    RetentionPolicy,
    RetryPolicy,
    ValidationError,
)
from conveyor.core.cron import CronEntry
from conveyor.shell.config import (
    Config,
    DashboardConfig,
    TenancyConfig,
    WorkersConfig,
    parse_config,
)


@pytest.mark.parametrize(
    ("build", "raw", "field", "key"),
    [
        (lambda: WorkersConfig(count=-1), {"workers": {"count": -1}}, "WorkersConfig.count",
         "workers.count"),
        (lambda: WorkersConfig(prefetch=0), {"workers": {"prefetch": 0}},
         "WorkersConfig.prefetch", "workers.prefetch"),
        (lambda: Config(lease_ms="soon"), {"lease_ms": "soon"}, "Config.lease_ms", "lease_ms"),
        (lambda: Config(provider="kafka"), {"provider": "kafka"}, "Config.provider", "provider"),
        (lambda: Config(url=""), {"url": ""}, "Config.url", "url"),
        (lambda: TenancyConfig(table=""), {"tenancy": {"table": ""}}, "TenancyConfig.table",
         "tenancy.table"),
        (lambda: DashboardConfig(port=70000), {"dashboard": {"port": 70000}},
         "DashboardConfig.port", "dashboard.port"),
        (lambda: DashboardConfig(basic_auth=":pw"), {"dashboard": {"basic_auth": ":pw"}},
         "DashboardConfig.basic_auth", "dashboard.basic_auth"),
        (lambda: DashboardConfig(allowed_hosts=("a:80",)), {"dashboard": {"allowed_hosts": ["a:80"]}},
         "DashboardConfig.allowed_hosts", "dashboard.allowed_hosts"),
    ],
)
def test_a_value_built_in_python_is_refused_for_the_reason_its_key_is(
    build, raw: dict, field: str, key: str
) -> None:
    with pytest.raises(ValidationError) as in_python:
        build()
    with pytest.raises(ValidationError) as in_file:
        parse_config(raw)
    assert in_python.value.fields == (field,) and in_file.value.fields == (key,)
    assert in_python.value.errors[0].reason == in_file.value.errors[0].reason


def test_the_defaults_the_core_decides_with_are_the_cores() -> None:
    config = parse_config({})
    assert (config.lease_ms, config.max_reclaims) == (
        LeasePolicy().lease_ms,
        LeasePolicy().max_reclaims,
    )
    assert config.retry == RetryPolicy() and config.requeue == RequeuePolicy()
    assert config.retention == RetentionPolicy()
    assert config == Config()


def test_a_file_is_structured_into_the_public_classes() -> None:
    config = parse_config(
        {
            "workers": {"count": 2, "queues": ["a"], "retry": {"max_delay_ms": 5}},
            "tenancy": {"strategy": "schema"},
            "retention": {"prune_interval_ms": 0},
            "cron": [{"name": "n", "schedule": "@daily", "job_type": "t", "priority": "high"}],
        }
    )
    assert type(config.workers) is WorkersConfig
    assert config.workers == WorkersConfig(count=2, queues=("a",))
    assert config.retry == RetryPolicy(max_delay_ms=5)
    assert config.tenancy == TenancyConfig(strategy="schema")
    assert config.retention == RetentionPolicy(interval_ms=0)
    (entry,) = config.cron
    assert type(entry) is CronEntry and entry.priority.value == "high"
    assert entry.args == {}


def test_a_rate_in_a_file_names_its_interval() -> None:
    with pytest.raises(ValidationError) as info:
        parse_config({"limits": {"q": {"rates": [{"starts": 5}]}}})
    assert str(info.value) == "limits.q.rates[0].per_seconds: is required"


def test_a_queue_listed_twice_is_refused_naming_the_second() -> None:
    # Twice would start two pools on one queue: twice the workers `count` says.
    with pytest.raises(ValidationError) as refused:
        parse_config({"workers": {"queues": ["mail", "reports", "mail"]}})
    assert [(e.field, e.reason) for e in refused.value.errors] == [
        ("workers.queues[2]", "'mail' is listed twice")
    ]
