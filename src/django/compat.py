"""Which tasks framework this process binds to, chosen once at import.

Django 6.0 and later ship the tasks framework as `django.tasks`; on Django 5.2 the
`django_tasks` backport provides the same interface under its own name (and names
two exceptions differently). Every other module of `conveyor.django` imports the
framework's names from here, so one `ConveyorBackend` class serves both.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any


def _framework() -> tuple[str, ModuleType]:
    try:
        return "django.tasks", importlib.import_module("django.tasks")
    except ImportError:
        pass
    try:
        return "django_tasks", importlib.import_module("django_tasks")
    except ImportError:
        raise ImportError(
            "conveyor.django needs Django's tasks framework: Django 6.0 or later "
            "(django.tasks), or Django 5.2 with the backport: "
            "pip install 'conveyor-jobs[django]'"
        ) from None


#: The module the backend binds to: "django.tasks" or "django_tasks".
FRAMEWORK, _tasks = _framework()
_base = importlib.import_module(f"{FRAMEWORK}.base")
_backends = importlib.import_module(f"{FRAMEWORK}.backends.base")
_signals = importlib.import_module(f"{FRAMEWORK}.signals")
_exceptions = importlib.import_module(f"{FRAMEWORK}.exceptions")

BaseTaskBackend: Any = _backends.BaseTaskBackend
Task: Any = _base.Task
TaskContext: Any = _base.TaskContext
TaskError: Any = _base.TaskError
TaskResult: Any = _base.TaskResult
TaskResultStatus: Any = _base.TaskResultStatus
DEFAULT_TASK_PRIORITY: int = _base.DEFAULT_TASK_PRIORITY
TASK_MIN_PRIORITY: int = _base.TASK_MIN_PRIORITY
TASK_MAX_PRIORITY: int = _base.TASK_MAX_PRIORITY
task_backends: Any = _tasks.task_backends
task_enqueued: Any = _signals.task_enqueued
task_started: Any = _signals.task_started
task_finished: Any = _signals.task_finished
#: `InvalidTask` in django.tasks, `InvalidTaskError` in the backport.
InvalidTask: type[Exception] = (
    _exceptions.InvalidTask if hasattr(_exceptions, "InvalidTask") else _exceptions.InvalidTaskError
)
TaskResultDoesNotExist: type[Exception] = _exceptions.TaskResultDoesNotExist
#: How a task's call is made JSON before it is stored: `TypeError` (or `ValueError`)
#: for what JSON cannot hold, as Django's own backends raise.
normalize_json: Any = getattr(_base, "normalize_json", None) or importlib.import_module(
    "django.utils.json" if FRAMEWORK == "django.tasks" else "django_tasks.utils"
).normalize_json
