"""The Django app `conveyor.django`: it brings the `manage.py conveyor` command."""

from __future__ import annotations

from django.apps import AppConfig


class ConveyorConfig(AppConfig):  # type: ignore[misc]
    """Conveyor's Django app (label `conveyor`); it has no models."""

    name = "conveyor.django"
    label = "conveyor"
    verbose_name = "Conveyor"
