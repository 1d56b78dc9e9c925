"""`QUEUES` that is not a list of queue names: one system check error naming it,
however Django itself would read the value. The settings tests' small project
(test_django_settings.py), in subprocesses."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_django_settings import ADD_TASK, _check_errors, _project, _sqlite


@pytest.mark.parametrize(
    ("queues", "error"),
    [
        # Django reads a string as the set of its letters: the first error told of a
        # task's queue 'default' not among them (a, d, e, f, l, t, u).
        ("default", "QUEUES: must be a list of queue names, not a string"),
        # Sorting the names raised a TypeError that broke every command.
        (["default", 3], "QUEUES: must hold queue names, got 3"),
        # Django's own set of them raised one, before any check.
        (["default", ["x"]], "QUEUES: must hold queue names, got ['x']"),
        (None, "QUEUES: must be a list of queue names, got NoneType"),
    ],
)
def test_queues_that_are_not_a_list_of_names_fail_the_checks_once_naming_queues(
    tmp_path: Path, queues: Any, error: str
) -> None:
    run = _project(tmp_path, _sqlite(tmp_path), {"probe": ADD_TASK}, QUEUES=queues)
    errors = _check_errors(run)
    assert len(errors) == 1, errors
    assert f"TASKS['default']: {error}" in errors[0]
