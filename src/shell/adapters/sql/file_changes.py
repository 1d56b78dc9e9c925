"""Writes to a SQLite database's files, heard from the kernel (Linux inotify).

SQLite announces no commit to other processes, so the wake-up listener reads
`PRAGMA data_version` on a timer. Every commit reaches the files by `write()`: a
WAL database appends its frames to `<db>-wal`, a rollback-journal one writes `<db>`
itself. inotify reports such writes as they happen, so the listener can look at
`data_version` when a write lands instead of up to one timer tick later.

`FileChanges.open(path)` watches the directory holding `path` (the `-wal` file
comes and goes with checkpoints and connections) and keeps the events naming the
database's files. It returns None where inotify is missing (not Linux, no libc
symbol, the limit of watches reached): the listener keeps its timer, which it runs
in any case, so nothing depends on an event arriving.

A write event comes just before the commit it belongs to is visible: the WAL index
(`-shm`, mapped memory, which inotify cannot see) is updated right after the last
frame is written. The listener therefore looks again shortly after an event that
did not yet show a new `data_version`.
"""

from __future__ import annotations

import ctypes
import os
import select
import struct
from pathlib import Path

__all__ = ["FileChanges"]

_IN_MODIFY = 0x00000002
_IN_NONBLOCK = os.O_NONBLOCK
_IN_CLOEXEC = 0o2000000
_EVENT = struct.Struct("iIII")  # wd, mask, cookie, len; the name follows, NUL-padded
_READ_BYTES = 64 * 1024


class FileChanges:
    """The writes to one SQLite database's files, as a pollable inotify descriptor."""

    def __init__(self, fd: int, names: frozenset[bytes]) -> None:
        self._fd = fd
        self._names = names
        self._poll = select.poll()
        self._poll.register(fd, select.POLLIN)

    @classmethod
    def open(cls, database: str) -> FileChanges | None:
        """A watch of `database`'s files, or None where inotify cannot give one."""
        path = Path(database)
        if not database or database == ":memory:" or not path.is_file():
            return None
        try:
            libc = ctypes.CDLL(None, use_errno=True)  # the process's own libc
            init, add = libc.inotify_init1, libc.inotify_add_watch
        except (OSError, AttributeError):
            return None
        fd = init(_IN_NONBLOCK | _IN_CLOEXEC)
        if fd < 0:
            return None
        real = path.resolve()  # a symlinked database is written where it really is
        if add(fd, os.fsencode(real.parent), _IN_MODIFY) < 0:
            os.close(fd)
            return None
        base = os.fsencode(real.name)
        return cls(fd, frozenset({base, base + b"-wal", base + b"-journal"}))

    def wait(self, timeout_s: float) -> bool:
        """Block until a database file is written or `timeout_s` passes (rounded up to
        whole milliseconds). True when a write was heard."""
        if self._poll.poll(timeout_s * 1000):
            return self.written()
        return False

    def written(self) -> bool:
        """Without blocking: whether a database file was written since the last look."""
        heard = False
        while True:
            try:
                data = os.read(self._fd, _READ_BYTES)
            except BlockingIOError:
                return heard
            if not data:
                return heard
            heard = heard or self._names_a_database_file(data)

    def _names_a_database_file(self, data: bytes) -> bool:
        at = 0
        while at + _EVENT.size <= len(data):
            _, _, _, size = _EVENT.unpack_from(data, at)
            name = data[at + _EVENT.size : at + _EVENT.size + size].rstrip(b"\0")
            if name in self._names:
                return True
            at += _EVENT.size + size
        return False

    def close(self) -> None:
        os.close(self._fd)
