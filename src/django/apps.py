"""The Django app `conveyor.django`: it brings the `manage.py conveyor` command."""

from __future__ import annotations

from django.apps import AppConfig


class ConveyorConfig(AppConfig):  # type: ignore[misc]
    """Conveyor's Django app (label `conveyor`); it has no models."""

    name = "conveyor.django"
    label = "conveyor"
    verbose_name = "Conveyor"

    def ready(self) -> None:
        # Django 6 registers the tasks checks (each backend's `check()`) when
        # `django.tasks` is first imported, which a project need not do before
        # `manage.py check` runs; the backport registers them in its own app.
        from . import compat  # noqa: F401
