"""Results leave the library as plain JSON, and a result's size is capped, on every
backend."""

from __future__ import annotations

import json
from typing import Any

from backends import Backend
from conveyor.core import RESULT_TOO_LARGE, FrozenMap
from conveyor.shell.config import Config
from conveyor.shell.registry import Registry
from conveyor.shell.runtime import Runtime

NESTED = {"rows": [1, {"a": None, "b": [True, 2.5]}], "name": "é", "empty": {}}


def runtime_on(backend: Backend, handlers: dict[str, Any], **config: Any) -> Runtime:
    return Runtime(Config(**config), backend.queue, backend.store, Registry(handlers))


def _plain(value: Any) -> bool:
    """True when `value` is made of dict, list, str, int, float, bool and None only."""
    if isinstance(value, dict):
        return type(value) is dict and all(_plain(v) for v in value.values())
    if isinstance(value, list):
        return all(_plain(v) for v in value)
    return value is None or type(value) in (str, int, float, bool)


def test_to_dict_gives_the_result_as_plain_json_values(backend: Backend) -> None:
    runtime = runtime_on(backend, {"work": lambda args: NESTED})
    job_id = runtime.enqueue("work", {"k": [1, 2]}).id
    runtime.drain(timeout_s=20)
    view = runtime.get(job_id)
    assert view is not None and isinstance(view.job.result, FrozenMap)
    data = view.to_dict(show_args=True, show_result=True)
    assert _plain(data["result"]) and _plain(data["args"])
    assert data["result"] == NESTED and data["args"] == {"k": [1, 2]}
    # Strict: no `default=` fallback that would turn a FrozenMap into its repr.
    assert json.loads(json.dumps(data))["result"] == NESTED


def test_a_result_over_the_configured_cap_dead_letters_the_job_naming_it(
    backend: Backend,
) -> None:
    runtime = runtime_on(
        backend, {"big": lambda args: "x" * 200, "small": lambda args: "y"}, max_result_bytes=100
    )
    big, small = runtime.enqueue("big", {}).id, runtime.enqueue("small", {}).id
    runtime.drain(timeout_s=20)
    dead = runtime.get(big)
    assert dead is not None and dead.dead
    error = dead.job.last_error
    assert error.type == RESULT_TOO_LARGE and not error.retryable
    assert str(big) in error.message and "202 bytes" in error.message
    assert dead.job.result is None and dead.job.retry_count == 0
    done = runtime.get(small)
    assert done is not None and done.job.result == "y"


def test_the_cap_is_read_from_the_config_and_its_environment_variable() -> None:
    from conveyor.shell.config import load_config

    assert load_config({"max_result_bytes": 4096}, env={}).max_result_bytes == 4096
    env = {"CONVEYOR_MAX_RESULT_BYTES": "2048"}
    assert load_config({}, env=env).max_result_bytes == 2048
    assert load_config({}, env={}).max_result_bytes == 1_048_576


def test_a_cap_below_one_byte_is_refused_naming_the_key() -> None:
    import pytest
    from conveyor.core import ValidationError
    from conveyor.shell.config import load_config

    with pytest.raises(ValidationError, match="max_result_bytes"):
        load_config({"max_result_bytes": 0}, env={})
