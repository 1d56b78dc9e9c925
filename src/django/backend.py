"""`ConveyorBackend`: Django's tasks framework on Conveyor's SQL backend.

    TASKS = {
        "default": {
            "BACKEND": "conveyor.django.ConveyorBackend",
            "QUEUES": ["default"],
            "OPTIONS": {"DATABASE": "default"},
        }
    }

It defers (`run_after`), runs `async def` tasks, reads results from any process and
orders by priority. A task's call becomes a Conveyor job whose type is the task's
module path; its result is rebuilt from that job (`conveyor.django.results`).
With the tables in a Django database (`DATABASE`, the default), `enqueue` writes the
job through that alias's own connection, inside the caller's transaction
(`conveyor.django.outbox`); with `URL`, it writes to that database at once.
"""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Iterable, Mapping
from typing import Any

from asgiref.sync import sync_to_async

from ..core import ValidationError
from ..shell.migrate import SchemaNotCurrent
from ..shell.runtime import Runtime, build
from .compat import (
    BaseTaskBackend,
    InvalidTask,
    TaskResultDoesNotExist,
    normalize_json,
    task_backends,
    task_enqueued,
)
from .discovery import discover, known_task
from .options import (
    TEST_RUNNER,
    BackendOptions,
    config_problems,
    conveyor_config,
    database_options_problems,
    database_url,
    read_options,
)
from .outbox import DJANGO_CONNECTIONS
from .results import (
    aware,
    build_result,
    django_priority_order,
    pack_call,
    task_for,
)
from .task import ConveyorTask, task_options


def first_conveyor_alias() -> str:
    """The first `TASKS` alias whose backend is Conveyor's (the one `manage.py conveyor`
    and the worker take when told none)."""
    for alias in task_backends.settings:
        if isinstance(task_backends[alias], ConveyorBackend):
            return str(alias)
    raise LookupError("no TASKS entry uses conveyor.django.ConveyorBackend")


class ConveyorBackend(BaseTaskBackend):  # type: ignore[misc]
    """A Django task backend that stores and runs tasks with Conveyor."""

    task_class = ConveyorTask
    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True
    #: The queue names a task may name (Django's attribute, set to Conveyor's reading).
    queues: set[str]

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        # Django makes a set of `QUEUES` as it is: of a string its letters, and of a
        # list holding a list (or of None) a TypeError before any check could name it.
        # It is given the names alone; Conveyor reads `QUEUES` as given.
        given = params.get("QUEUES", _NOT_GIVEN)
        names = [q for q in given if isinstance(q, str)] if _listed(given) else []
        super().__init__(alias, params if given is _NOT_GIVEN else {**params, "QUEUES": names})
        #: `QUEUES` and `OPTIONS`, checked (`conveyor.django.options`).
        queues = self.queues if given is _NOT_GIVEN else given
        self.settings: BackendOptions = read_options(queues, self.options)
        # Django's own check of a task's queue then agrees with Conveyor's reading; a bad
        # QUEUES is reported once, by the system checks.
        self.queues = set(self.settings.queues)

    # ---- configuration ----------------------------------------------------------

    def database_url(self) -> str:
        """The URL of the database that holds Conveyor's tables."""
        if self.settings.url is not None:
            return self.settings.url
        from django.db import connections

        alias = self.settings.database or "default"
        wrapper = connections[alias]
        # Conveyor's own connections use psycopg 3 whatever Django's use.
        return database_url(wrapper.settings_dict, alias=alias)

    def database_problems(self) -> list[Any]:
        """What in the `DATABASES` entry of Conveyor's tables Conveyor's own
        connections cannot carry (`FieldError`s); none with `URL` or an unknown alias
        (the database URL's own error tells that)."""
        from django.conf import settings

        alias = self.settings.database
        entry = settings.DATABASES.get(alias) if alias and self.settings.url is None else None
        return database_options_problems(alias or "", entry) if entry else []

    def conveyor_config(self) -> dict[str, Any]:
        """The Conveyor config this backend runs on (`manage.py conveyor` writes it)."""
        from django.core.exceptions import ImproperlyConfigured

        self._refuse_problems()
        try:
            url = self.database_url()
        except ValueError as exc:  # an in-memory SQLite, an OPTIONS entry it cannot carry
            raise ImproperlyConfigured(f"TASKS[{self.alias!r}]: {exc}") from exc
        config = conveyor_config(self.settings, url)
        problems = config_problems(config)
        if problems:
            raise ImproperlyConfigured(f"TASKS[{self.alias!r}]: " + "; ".join(map(str, problems)))
        return config

    @property
    def runtime(self) -> Runtime:
        """The Conveyor runtime this process enqueues and reads with, built on first use
        and shared by every instance of the backend with the same config (Django makes
        one instance per thread). It runs no workers: `manage.py conveyor worker` does."""
        from django.core.exceptions import ImproperlyConfigured

        config = self.conveyor_config()
        config["workers"] = {**config["workers"], "count": 0}
        try:
            return RUNTIMES.get(json.dumps(config, sort_keys=True, default=str), config)
        except SchemaNotCurrent as exc:
            # The same problem, with the command a Django project runs.
            wording = str(exc).replace('"conveyor migrate', f'"python {self.migrate_command()}')
            if _in_a_test_run():  # that command would migrate the real database
                wording += f"; in `manage.py test`, set TEST_RUNNER = {TEST_RUNNER!r}"
            raise ImproperlyConfigured(f"TASKS[{self.alias!r}]: {wording}") from exc

    def migrate_command(self) -> str:
        """`manage.py conveyor migrate` for this backend's tables: with `--backend`
        unless this is the backend the command picks when told none (the first on
        Conveyor in `TASKS`)."""
        try:
            first = first_conveyor_alias()
        except Exception:  # no TASKS to read (a backend made outside a project)
            first = self.alias
        backend = "" if first == self.alias else f"--backend {self.alias} "
        return f"manage.py conveyor {backend}migrate"

    def close(self) -> None:
        """Release the connections of every runtime this process built (each is built
        again on next use)."""
        RUNTIMES.close()

    def _refuse_problems(self) -> None:
        from django.core.exceptions import ImproperlyConfigured

        if self.settings.problems:
            raise ImproperlyConfigured(
                f"TASKS[{self.alias!r}]: " + "; ".join(f"{p}" for p in self.settings.problems)
            )

    # ---- tasks ------------------------------------------------------------------

    def validate_task(self, task: Any) -> None:
        """Django's checks, and Conveyor's options on the task (retries, timeout,
        unique key, partition); the error names the task, since Django declares tasks
        as their module is imported, where nothing else would say which one."""
        try:
            self._validate_task(task)
        except InvalidTask as exc:
            raise InvalidTask(f"task {task.module_path!r}: {exc}") from None

    def _validate_task(self, task: Any) -> None:
        if self.queues and task.queue_name not in self.queues:
            listed = ", ".join(sorted(self.queues))
            raise InvalidTask(
                f"queue_name {task.queue_name!r} is not one of the backend's QUEUES ({listed})"
            )
        super().validate_task(task)
        options = task_options(task)
        retries, timeout = options["retries"], options["timeout"]
        if retries is not None and (
            isinstance(retries, bool) or not isinstance(retries, int) or retries < 0
        ):
            raise InvalidTask(f"retries must be a whole number >= 0, got {retries!r}.")
        if timeout is not None and (
            isinstance(timeout, bool)
            or not isinstance(timeout, int | float)
            or not math.isfinite(timeout)
            or timeout <= 0
        ):
            raise InvalidTask(f"timeout must be a number of seconds > 0, got {timeout!r}.")
        for name in ("unique_key", "partition"):
            if options[name] is not None and not isinstance(options[name], str):
                raise InvalidTask(f"{name} must be a string, got {options[name]!r}.")

    def enqueue(self, task: Any, args: Any, kwargs: Any) -> Any:
        """Store one call of `task` as a Conveyor job and return its READY result.
        With the tables in a Django database, the job commits or rolls back with the
        caller's transaction on that database."""
        self.validate_task(task)
        self._check_loaded_by_workers(task)
        # As Django's own backends do: bytes read as text, anything else JSON cannot
        # hold a TypeError; then as stored (keys as text), as a database backend's.
        args, kwargs = json.loads(json.dumps([_as_json(args, "args"), _as_json(kwargs, "kwargs")]))
        options = task_options(task)
        retries = self.settings.retries if options["retries"] is None else options["retries"]
        timeout = self.settings.timeout if options["timeout"] is None else options["timeout"]
        call = pack_call(
            args, kwargs, priority=task.priority, backend=self.alias, run_after=task.run_after
        )
        enqueue_options: dict[str, Any] = {
            "queue": task.queue_name,
            "priority": django_priority_order(task.priority),
            "max_retries": retries,
            "run_at": aware(task.run_after),
            "timeout": timeout,
            "unique_key": options["unique_key"],
            "partition": options["partition"],
        }
        runtime = self.runtime
        try:
            if self.settings.transactional:
                with DJANGO_CONNECTIONS.connection(self.settings.database or "default") as conn:
                    job = runtime.enqueue_in_tx(conn, task.module_path, call, **enqueue_options)
            else:
                job = runtime.enqueue(task.module_path, call, **enqueue_options)
        except ValidationError as exc:
            raise InvalidTask(str(exc)) from exc
        result = build_result(job, job.status, task, backend=self.alias)
        task_enqueued.send(type(self), task_result=result)
        return result

    def _check_loaded_by_workers(self, task: Any) -> None:
        """`InvalidTask` for a task no worker would find: one defined outside every
        installed app's `tasks` module and `MODULES`. Its job would wait for a worker
        that has it, then be dead-lettered as no-handler."""
        from django.apps import apps

        if not apps.ready:  # a backend used outside a set-up project: nothing to look in
            return
        where = f"TASKS[{self.alias!r}]"
        if task.module_path in discover(type(self), self.settings.modules, where=where):
            return
        module = task.module_path.rpartition(".")[0]
        raise InvalidTask(
            f"{task.module_path!r} is defined where no worker looks for tasks: workers load "
            f"each installed app's `tasks` module and {where}['OPTIONS']['MODULES']; "
            f"add {module!r} to MODULES"
        )

    async def aenqueue(self, task: Any, args: Any, kwargs: Any) -> Any:
        """`enqueue` for async code: run in the thread that holds Django's connection
        for this context, as Django's ORM does, so it joins the same transaction."""
        return await sync_to_async(self.enqueue, thread_sensitive=True)(task, args, kwargs)

    # ---- results ----------------------------------------------------------------

    def get_result(self, result_id: str) -> Any:
        """The result of the job `result_id`, as it stands now, read from Conveyor's
        tables (so any process sees it); `TaskResultDoesNotExist` for an unknown id."""
        try:
            view = self.runtime.get(result_id)
        except ValidationError:
            view = None
        if view is None or view.job is None:
            raise TaskResultDoesNotExist(result_id)
        try:
            task = task_for(view.job, self._known_task)
        except LookupError as exc:
            # Still a job (renamed or removed since it was enqueued): say where it is, so
            # that "does not exist" is not read as "never was" (`conveyor job show`).
            raise TaskResultDoesNotExist(
                f"{result_id}: its task {view.job.job_type!r} is not a task here ({exc}); "
                f"the job is {'' if view.state.is_terminal else 'still '}{view.state.value}"
            ) from None
        if task.backend != self.alias:
            raise TaskResultDoesNotExist(f"{result_id}: a result of backend {task.backend!r}")
        return build_result(view.job, view.state, task, backend=self.alias)

    def _known_task(self, path: str) -> Any:
        where = f"TASKS[{self.alias!r}]"
        return known_task(path, ConveyorBackend, self.settings.modules, where=where)

    async def aget_result(self, result_id: str) -> Any:
        """`get_result` for async code."""
        return await sync_to_async(self.get_result, thread_sensitive=True)(result_id)

    # ---- checks -----------------------------------------------------------------

    def check(self, **kwargs: Any) -> Iterable[Any]:
        """System checks: bad `OPTIONS` or `QUEUES` (errors), a Conveyor `CONFIG` that
        polls a queue `QUEUES` does not name, and Conveyor's tables missing or from
        another version (warnings: `manage.py conveyor migrate` fixes them)."""
        from .checks import backend_checks

        return backend_checks(self)


class SharedRuntimes:
    """This process's runtimes, one per config."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._built: dict[str, Runtime] = {}

    def get(self, key: str, config: dict[str, Any]) -> Runtime:
        with self._lock:
            found = self._built.get(key)
            if found is None:
                # One try: a request fails at once, as Django's own query would, rather
                # than waiting out a worker's start-up timeout with every other thread
                # that enqueues queued behind this lock. The next enqueue tries again.
                found = self._built[key] = build(config, startup_timeout_s=0)
            return found

    def close(self) -> None:
        with self._lock:
            built, self._built = list(self._built.values()), {}
        for runtime in built:
            runtime.close()


RUNTIMES = SharedRuntimes()

_NOT_GIVEN = object()


def _listed(value: Any) -> bool:
    return isinstance(value, list | tuple | set | frozenset)


def _in_a_test_run() -> bool:
    """Whether Django's test environment is set up (`manage.py test`): it gives
    `django.core.mail` an outbox, and takes it away at the end."""
    from django.core import mail

    return hasattr(mail, "outbox")


def _as_json(value: Any, where: str) -> Any:
    """`normalize_json(value)`; its `TypeError` names where in the call the value
    JSON cannot hold is (`args[1]['tags'][0]`), which Django's own message does not."""
    try:
        return normalize_json(value)
    except TypeError as exc:
        raise TypeError(f"{_unsupported_at(value, where)}: {exc}") from None


def _unsupported_at(value: Any, path: str) -> str:
    if isinstance(value, Mapping):
        items: Iterable[tuple[str, Any]] = ((f"[{k!r}]", v) for k, v in value.items())
    elif isinstance(value, (list, tuple)):
        items = ((f"[{n}]", v) for n, v in enumerate(value))
    else:
        return path
    for step, item in items:
        try:
            normalize_json(item)
        except TypeError:
            return _unsupported_at(item, path + step)
    return path

