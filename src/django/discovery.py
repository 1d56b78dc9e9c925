"""Which tasks the Django project defines: the `Task` objects of each installed app's
`tasks` module and of the backend's `MODULES`, on a Conveyor backend, by module path.

Only these run in a worker, and only these (or a task whose module this process has
already imported) are rebuilt by `get_result`: a job type read from the database
never makes this process import a module.

A `MODULES` entry that cannot be imported is a configuration error, named by its
index, and so is an installed app's `tasks` module, named by its path:
`conveyor.E001` in the checks (`module_problems`, `app_module_problems`),
`ImproperlyConfigured` where the tasks are looked up (an enqueue, a worker,
`get_result`).
"""

from __future__ import annotations

import importlib
import sys
import threading
from typing import Any

from django.core.exceptions import ImproperlyConfigured

from ..core import FieldError
from .compat import Task, task_backends

_lock = threading.Lock()
_found: dict[tuple[type, tuple[str, ...]], dict[str, Any]] = {}


def discover(
    backend_class: type, modules: tuple[str, ...] = (), *, where: str = ""
) -> dict[str, Any]:
    """The project's tasks on backends of `backend_class` (Conveyor's), by module path:
    those of each installed app's `tasks` module, and of `modules` (the `MODULES` of
    the `TASKS` entry `where` names, for the error of one that cannot be imported).
    Looked up once per process."""
    key = (backend_class, modules)
    with _lock:
        found = _found.get(key)
        if found is None:
            found = _found[key] = _discover(backend_class, modules, where)
        return found


def module_problems(modules: tuple[str, ...]) -> list[FieldError]:
    """Why each `MODULES` entry that cannot be imported cannot. Imports them: they are
    the project's own task modules, as safe to import as its apps' modules."""
    problems = []
    for index, name in enumerate(modules):
        try:
            importlib.import_module(name)
        except Exception as exc:
            problems.append(_cannot_import(index, name, exc))
    return problems


def app_module_problems() -> list[FieldError]:
    """Why each installed app's `tasks` module that cannot be imported cannot (a
    missing import, a task Django refuses as it is declared). Imports them, as every
    enqueue, worker and `get_result` does."""
    from django.apps import apps

    if not apps.ready:  # a backend built outside a set-up project has no apps yet
        return []
    problems = []
    for name in _app_task_modules():
        try:
            importlib.import_module(name)
        except Exception as exc:
            problems.append(_app_cannot_import(name, exc))
    return problems


def _app_task_modules() -> list[str]:
    from django.apps import apps
    from django.utils.module_loading import module_has_submodule

    return [
        f"{config.name}.tasks"
        for config in apps.get_app_configs()
        if module_has_submodule(config.module, "tasks")
    ]


def _app_cannot_import(name: str, exc: Exception) -> FieldError:
    return FieldError("INSTALLED_APPS", f"{name!r} cannot be imported: {type(exc).__name__}: {exc}")


def _cannot_import(index: int, name: str, exc: Exception) -> FieldError:
    why = f"{name!r} cannot be imported: {type(exc).__name__}: {exc}"
    return FieldError(f"OPTIONS['MODULES'][{index}]", why)


def _discover(backend_class: type, modules: tuple[str, ...], where: str) -> dict[str, Any]:
    imported = []
    for name in _app_task_modules():
        try:
            imported.append(importlib.import_module(name))
        except Exception as exc:
            problem = _app_cannot_import(name, exc)
            raise ImproperlyConfigured(f"{where}: {problem}" if where else str(problem)) from exc
    for index, name in enumerate(modules):
        try:
            imported.append(importlib.import_module(name))
        except Exception as exc:
            problem = _cannot_import(index, name, exc)
            raise ImproperlyConfigured(f"{where}: {problem}" if where else str(problem)) from exc
    found: dict[str, Any] = {}
    for module in dict.fromkeys(imported):
        for value in vars(module).values():
            if isinstance(value, Task) and isinstance(task_backends[value.backend], backend_class):
                found.setdefault(value.module_path, value)
    return found


def known_task(
    path: str, backend_class: type, modules: tuple[str, ...] = (), *, where: str = ""
) -> Any:
    """The task a job type names: one the project defines, or one in a module this
    process has imported already; `LookupError` otherwise."""
    found = discover(backend_class, modules, where=where).get(path)
    if found is not None:
        return found
    module_name, _, name = path.rpartition(".")
    module = sys.modules.get(module_name)
    value = getattr(module, name, None) if module is not None else None
    if isinstance(value, Task) and value.module_path == path:
        return value
    raise LookupError(f"{path!r} is not a task this project defines")
