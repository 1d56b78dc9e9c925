"""Enqueue through Django's own database connection, inside the caller's transaction.

Conveyor's SQL queue writes a job into an open transaction of a SQLAlchemy
`Connection` (`enqueue_in_tx`, docs/sql.md). Here that connection is a thin
SQLAlchemy wrapper around the DBAPI connection Django already holds for the alias:
the job's rows are written by the same connection, in the same transaction, as the
caller's own rows, so they commit or roll back together. No second connection, and
no `on_commit` gap in which one is committed without the other.

The wrapper lends SQLAlchemy the statements and keeps the rest: SQLAlchemy's commit,
rollback and close on it do nothing (the transaction and the connection stay
Django's), and it registers nothing on Django's connection (no SQL functions, no
notice handlers). SQLAlchemy reads what it needs of the server once per engine.

The write runs in `transaction.atomic(using=alias)`: inside the caller's atomic
block that is a savepoint, so a refused write leaves the caller's rows as they were;
outside one, it commits at once (Django's autocommit).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Connection, Engine, create_engine
from sqlalchemy.pool import NullPool

from .options import database_url


class _Borrowed:
    """Django's DBAPI connection as SQLAlchemy sees it: its cursors, not its life."""

    __slots__ = ("_raw",)

    def __init__(self, raw: Any) -> None:
        self._raw = raw

    def cursor(self, *args: Any, **kwargs: Any) -> Any:
        return self._raw.cursor(*args, **kwargs)

    def commit(self) -> None:
        """Django commits, when the caller's atomic block ends."""

    def rollback(self) -> None:
        """Django rolls back, when the caller's atomic block fails."""

    def close(self) -> None:
        """The connection is Django's to close."""

    def create_function(self, *args: Any, **kwargs: Any) -> None:
        """SQLAlchemy's SQLite `regexp` would replace Django's own."""

    def add_notice_handler(self, *args: Any, **kwargs: Any) -> None:
        """One handler per borrow would pile up on Django's connection."""

    def __getattr__(self, name: str) -> Any:
        return getattr(self._raw, name)


class DjangoConnections:
    """One SQLAlchemy engine per Django database alias whose connections are Django's."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._engines: dict[str, Engine] = {}
        self._lent = threading.local()

    def _borrow(self) -> _Borrowed:
        raw = getattr(self._lent, "raw", None)
        if raw is None:
            raise RuntimeError("a Django connection is lent only inside `connection()`")
        return _Borrowed(raw)

    def engine(self, alias: str) -> Engine:
        """The engine that lends Django's connection of `alias` to SQLAlchemy."""
        from django.db import connections

        with self._lock:
            found = self._engines.get(alias)
            if found is None:
                wrapper = connections[alias]
                driver = getattr(wrapper.Database, "__name__", "psycopg")
                url = database_url(wrapper.settings_dict, driver=driver, alias=alias)
                found = create_engine(
                    url,
                    creator=self._borrow,
                    poolclass=NullPool,
                    hide_parameters=True,
                    **({"use_native_hstore": False} if url.startswith("postgresql") else {}),
                )
                self._engines[alias] = found
            return found

    @contextmanager
    def connection(self, alias: str) -> Iterator[Connection]:
        """A SQLAlchemy connection on Django's connection of `alias`, in a transaction
        that is Django's: the caller's atomic block (as a savepoint), or one of its own."""
        from django.db import connections, transaction

        engine = self.engine(alias)
        with transaction.atomic(using=alias):
            wrapper = connections[alias]
            wrapper.ensure_connection()
            self._lent.raw = wrapper.connection
            try:
                with engine.connect() as conn:
                    # Marks the SQLAlchemy transaction begun; the DBAPI connection is
                    # already in Django's, so nothing is sent.
                    conn.begin()
                    yield conn
            finally:
                self._lent.raw = None

    def dispose(self) -> None:
        with self._lock:
            engines, self._engines = list(self._engines.values()), {}
        for engine in engines:
            engine.dispose()


#: This process's lenders, shared by every backend instance.
DJANGO_CONNECTIONS = DjangoConnections()
