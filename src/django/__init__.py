"""Conveyor as a Django tasks backend (`django.tasks` on Django 6, the `django_tasks`
backport on Django 5.2), and the `manage.py conveyor` command.

    INSTALLED_APPS = [..., "conveyor.django"]
    TASKS = {"default": {"BACKEND": "conveyor.django.ConveyorBackend"}}

See docs/django.md. Names are loaded on first use, so listing the app imports
neither the tasks framework nor SQLAlchemy before Django is set up.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .backend import ConveyorBackend
    from .task import ConveyorTask

__all__ = ["ConveyorBackend", "ConveyorTask"]


def __getattr__(name: str) -> Any:
    if name == "ConveyorBackend":
        from .backend import ConveyorBackend

        return ConveyorBackend
    if name == "ConveyorTask":
        from .task import ConveyorTask

        return ConveyorTask
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
