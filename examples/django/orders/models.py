"""The shop's rows: orders, and a log of what the tasks did (one row per run)."""

from django.db import models


class Order(models.Model):
    item = models.CharField(max_length=100)
    receipt_sent = models.BooleanField(default=False)


class Run(models.Model):
    """One run of a task, written by the task itself: the tests count them."""

    label = models.CharField(max_length=100)
    at = models.DateTimeField(auto_now_add=True)
