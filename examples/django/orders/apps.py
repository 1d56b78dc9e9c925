import logging

from django.apps import AppConfig

log = logging.getLogger("orders")


class OrdersConfig(AppConfig):
    name = "orders"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        try:
            from django.tasks.signals import task_finished, task_started
        except ImportError:
            from django_tasks.signals import task_finished, task_started

        task_started.connect(_started, dispatch_uid="orders-started")
        task_finished.connect(_finished, dispatch_uid="orders-finished")


def _started(sender, task_result, **kwargs):
    log.info("orders: %s started (attempt %d)", task_result.task.name, task_result.attempts)


def _finished(sender, task_result, **kwargs):
    log.info("orders: %s finished %s", task_result.task.name, task_result.status)
