"""Whether a SQLite database's path still names the file this process opened.

SQLite keeps a file that was deleted (or replaced by another moved onto its path)
open for the processes that had it, and goes on reading and writing it. A worker
left on such a file claims from a database no one else can see: everything
enqueued since, into the new file at the path, waits for ever while the worker
looks healthy. `DatabaseFile.lost` tells it, from the file's identity (device and
inode) when first seen against the path's now.
"""

from __future__ import annotations

import os

__all__ = ["DatabaseFile", "DatabaseFileLost"]


class DatabaseFileLost(RuntimeError):
    """A job was about to be written into a SQLite file no longer at its path: no
    other process would ever see it. The message says how the file was lost."""


class DatabaseFile:
    """The file at a SQLite database's path, as first seen."""

    def __init__(self, path: str) -> None:
        self.path = os.path.abspath(path)
        self._seen: tuple[int, int] | None = None
        self.lost()

    @classmethod
    def of(cls, database: str | None) -> DatabaseFile | None:
        """The file of a SQLite URL's database part; None for a database in memory
        (nothing to lose) and for a `file:` URI (its path is the driver's to read)."""
        if not database or database == ":memory:" or database.startswith("file:"):
            return None
        return cls(database)

    def opened(self) -> None:
        """A connection has just opened the file: it is the one first seen, unless one
        was seen before (`Database` calls this from the engine's connect event, so a
        file made after this object, by the first migration, is known from then on)."""
        if self._seen is None:
            self.lost()

    def lost(self) -> str | None:
        """Why the path no longer names the file first seen there, or None. A path
        with no file yet is not lost: its file is known once seen."""
        try:
            stat = os.stat(self.path)
        except FileNotFoundError:
            return None if self._seen is None else f"the SQLite database {self.path} was deleted"
        except OSError:
            return None  # unreadable for a moment is no proof of anything
        now = (stat.st_dev, stat.st_ino)
        if self._seen is None:
            self._seen = now
        elif now != self._seen:
            # SQLite finds a file's write-ahead log by its path: a file moved in while
            # this one was open shares the old log (docs/sql.md says how to replace one).
            return (
                f"the SQLite database {self.path} was replaced while in use (its -wal "
                "and -shm files are the old one's: stop every process before replacing it)"
            )
        return None

    def refuse_if_lost(self) -> None:
        """Raise `DatabaseFileLost` when the path no longer names the file first seen:
        this process's connections are still on the old one."""
        why = self.lost()
        if why is not None:
            raise DatabaseFileLost(
                f"{why}, and this process still has the old file open: a job written "
                "there would reach no worker. Nothing was written; start the process "
                "again to open the database now at the path"
            )
