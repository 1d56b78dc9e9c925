"""One run of the example shop against a database, as a user would drive it: migrate,
enqueue in transactions, start `manage.py conveyor worker`, read results, stop the
worker with SIGTERM. Prints what it saw as one JSON object (the tests assert on it).

Run from examples/django with `SHOP_DATABASE_URL` set; the interpreter may be any one
with Django (5.2 and the backport, or 6.x) and Conveyor installed.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

HERE = Path.cwd()
sys.path.insert(0, str(HERE))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "shop.settings")

import django  # noqa: E402

django.setup()

import shop_probes  # noqa: E402
from conveyor.django.compat import (  # noqa: E402
    FRAMEWORK,
    TaskResultDoesNotExist,
    task_backends,
    task_enqueued,
)
from conveyor.shell.adapters.sql.schema import SCHEMA  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection, transaction  # noqa: E402
from django.utils import timezone  # noqa: E402
from orders import tasks  # noqa: E402
from orders.models import Order, Run  # noqa: E402

backend = task_backends["default"]
JOB_TABLE = SCHEMA.job_queue.fullname
seen: dict[str, object] = {"framework": FRAMEWORK, "django": django.get_version()}


def status(result_id: str) -> str:
    return str(backend.get_result(result_id).status)


def wait_for(result_id: str, wanted: set[str], timeout: float = 20.0) -> str:
    end = time.monotonic() + timeout
    found = status(result_id)
    while found not in wanted and time.monotonic() < end:
        time.sleep(0.02)
        found = status(result_id)
    return found


def described(result_id: str) -> dict[str, object]:
    r = backend.get_result(result_id)
    return {
        "status": str(r.status),
        "errors": [e.exception_class_path for e in r.errors],
        "tracebacks": [e.traceback for e in r.errors],
        "worker_ids": list(r.worker_ids),
        "attempts": r.attempts,
        "return_value": r.return_value if str(r.status) == "SUCCESSFUL" else None,
        "args": r.args,
        "kwargs": r.kwargs,
        "task": r.task.module_path,
        "priority": r.task.priority,
        "run_after": None if r.task.run_after is None else r.task.run_after.isoformat(),
        "enqueued_at": r.enqueued_at.isoformat() if r.enqueued_at else None,
        "started_at": r.started_at.isoformat() if r.started_at else None,
        "last_attempted_at": r.last_attempted_at.isoformat() if r.last_attempted_at else None,
        "finished_at": r.finished_at.isoformat() if r.finished_at else None,
    }


enqueued: list[str] = []
task_enqueued.connect(
    lambda sender, task_result, **kwargs: enqueued.append(task_result.id), weak=False
)


def refusal(make) -> str:
    try:
        make()
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return "accepted"


call_command("migrate", verbosity=0)
seen["checks_before_migrate"] = [m.id for m in backend.check()]
seen["enqueue_before_migrate"] = refusal(lambda: tasks.record.enqueue("too early"))
call_command("conveyor", "migrate")
seen["checks_after_migrate"] = [m.id for m in backend.check()]

# Rolled back: neither the order nor the job.
try:
    with transaction.atomic():
        order = Order.objects.create(item="lost")
        lost = tasks.send_receipt.enqueue(order.pk)
        raise RuntimeError("the caller changes its mind")
except RuntimeError:
    pass
try:
    backend.get_result(lost.id)
    seen["rolled_back"] = "found"
except TaskResultDoesNotExist:
    seen["rolled_back"] = "absent"
seen["orders_after_rollback"] = Order.objects.count()

# Committed: inside the transaction only the caller's own connection sees the job.
with transaction.atomic():
    order = Order.objects.create(item="book")
    kept = tasks.send_receipt.enqueue(order.pk)
    seen["visible_to_others_before_commit"] = backend.runtime.get(kept.id) is not None
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT count(*) FROM {JOB_TABLE} WHERE id = %s", [kept.id])
        seen["visible_to_own_connection_before_commit"] = cursor.fetchone()[0] == 1

# A backend whose tables live elsewhere (OPTIONS["URL"]) is not transactional.
separate = task_backends["separate"]
call_command("conveyor", "--backend", "separate", "migrate")
try:
    with transaction.atomic():
        elsewhere = tasks.record.using(backend="separate").enqueue("elsewhere")
        raise RuntimeError("rolled back, but the job was written elsewhere")
except RuntimeError:
    pass
seen["separate_after_rollback"] = str(separate.get_result(elsewhere.id).status)
seen["visible_after_commit"] = status(kept.id)

# Priorities, enqueued before any worker runs, in no particular order.
ranked = [tasks.record.using(priority=p).enqueue(f"p{p}") for p in (0, -20, 80, 20)]
failing = tasks.refuse.enqueue("no stamps")
summed = tasks.total.enqueue([1, 2, 3], label="async")
flaky = tasks.flaky.enqueue("flaky")
run_after = timezone.now() + timedelta(seconds=2)
later = tasks.record.using(run_after=run_after).enqueue("later")
seen["queued"] = described(summed.id)
probes = [shop_probes.previous_connection_closed.enqueue() for _ in range(3)]
seen["refused"] = [
    refusal(lambda: tasks.record.using(retries=-1)),
    refusal(lambda: tasks.record.using(queue_name="nowhere")),
    refusal(lambda: tasks.record.using(priority=101)),
]
awaited = asyncio.run(tasks.total.aenqueue([4, 5], label="aenqueue"))
seen["aenqueued"] = str(asyncio.run(backend.aget_result(awaited.id)).status)

# Conveyor's options: on the task (`@task(retries=...)`, `.using(...)`) or from OPTIONS.
first = tasks.record.using(unique_key="nightly", partition="tenant-7", timeout=5).enqueue("u")
again = tasks.record.using(unique_key="nightly").enqueue("u")
stored = {r.id: backend.runtime.get(r.id).job for r in (first, flaky, summed)}
seen["options"] = {
    "unique_same_id": first.id == again.id,
    "partition": stored[first.id].partition_key,
    "timeout_ms": [stored[first.id].timeout_ms, stored[summed.id].timeout_ms],
    "max_retries": [stored[flaky.id].max_retries, stored[summed.id].max_retries],
}
seen["scheduled"] = status(later.id)

made = [
    lost,
    kept,
    elsewhere,
    *ranked,
    failing,
    summed,
    flaky,
    later,
    first,
    again,
    *probes,
    awaited,
]
seen["enqueue_signals"] = [
    len(enqueued),
    len(made),
    sorted(enqueued) == sorted(r.id for r in made),
]

log_path = Path(os.environ.get("SCENARIO_WORKER_LOG", HERE / "worker.log"))
worker = subprocess.Popen(
    [sys.executable, "manage.py", "conveyor", "worker", "--concurrency", "1"],
    stdout=log_path.open("w"),
    stderr=subprocess.STDOUT,
    cwd=HERE,
)
try:
    slow = tasks.slow.enqueue(1.0, "slow")
    seen["running"] = wait_for(slow.id, {"RUNNING", "SUCCESSFUL", "FAILED"})
    for name, result in [
        ("committed", kept),
        ("failed", failing),
        ("async", summed),
        ("context", flaky),
        ("later", later),
        ("slow", slow),
    ]:
        wait_for(result.id, {"SUCCESSFUL", "FAILED"})
        seen[name] = described(result.id)
    wait_for(awaited.id, {"SUCCESSFUL", "FAILED"})
    seen["aenqueued_after"] = described(awaited.id)
    seen["probes"] = [
        backend.get_result(p.id).return_value
        for p in probes
        if wait_for(p.id, {"SUCCESSFUL", "FAILED"}) == "SUCCESSFUL"
    ]
    for result in ranked:
        wait_for(result.id, {"SUCCESSFUL", "FAILED"})
    seen["run_after_due"] = run_after.isoformat()
    seen["receipt_sent"] = Order.objects.get(pk=order.pk).receipt_sent
    labels = list(Run.objects.order_by("id").values_list("label", flat=True))
    seen["runs"] = labels
    # Stop while a task runs: it finishes, then the worker exits.
    draining = tasks.slow.enqueue(1.0, "drain")
    seen["drain_running"] = wait_for(draining.id, {"RUNNING", "SUCCESSFUL", "FAILED"})
    worker.send_signal(signal.SIGTERM)
    seen["worker_exit"] = worker.wait(timeout=30)
    seen["drain"] = described(draining.id)
    seen["drain_rows"] = Run.objects.filter(label="drain").count()
finally:
    if worker.poll() is None:
        worker.kill()
        worker.wait()
seen["worker_log"] = log_path.read_text()
backend.close()
print(json.dumps(seen))
