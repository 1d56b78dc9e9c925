"""The shop's tasks. `manage.py conveyor worker` finds them here (each installed
app's `tasks` module) and runs them by their module path."""

import asyncio
import time

try:
    from django.tasks import task  # Django 6
except ImportError:
    from django_tasks import task  # Django 5.2 and the backport

from .models import Order, Run


class ReceiptRefused(Exception):
    """The mail server said no."""


@task(queue_name="emails")
def send_receipt(order_id):
    order = Order.objects.get(pk=order_id)
    order.receipt_sent = True
    order.save(update_fields=["receipt_sent"])
    Run.objects.create(label=f"receipt:{order_id}")
    return {"order": order.pk, "item": order.item}


@task()
def refuse(reason):
    raise ReceiptRefused(reason)


@task()
async def total(numbers, label="total"):
    await asyncio.sleep(0)
    await Run.objects.acreate(label=label)
    return sum(numbers)


# `retries` is Conveyor's: the backend's task class takes it (and timeout,
# unique_key, partition).
@task(takes_context=True, retries=1)
def flaky(context, label):
    Run.objects.create(label=f"{label}:{context.attempt}")
    if context.attempt < 2:
        raise ReceiptRefused("the first attempt always fails")
    return context.attempt


@task()
def record(label):
    Run.objects.create(label=label)
    return label


@task()
def slow(seconds, label):
    time.sleep(seconds)
    Run.objects.create(label=label)
    return label
