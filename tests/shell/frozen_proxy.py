"""A TCP proxy in front of a real server that can freeze: it keeps every connection
open and stops forwarding, in both directions, so a client's request is sent and its
reply never comes, with no error, as over a half-open connection. `thaw()` lets
what was held through."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable


class FrozenProxy:
    """Forwards each connection made to `listener` to a new one from `connect`."""

    def __init__(self, listener: socket.socket, connect: Callable[[], socket.socket]) -> None:
        self._connect = connect
        self._listener = listener
        self._flowing = threading.Event()
        self._flowing.set()
        self._closed = threading.Event()
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True, name="proxy-accept").start()

    @classmethod
    def tcp(cls, host: str, port: int) -> FrozenProxy:
        """On 127.0.0.1 (its `port`), in front of `host:port`."""
        return cls(
            socket.create_server(("127.0.0.1", 0)), lambda: socket.create_connection((host, port))
        )

    @classmethod
    def unix(cls, path: str, target: str) -> FrozenProxy:
        """On the Unix socket `path`, in front of the one at `target`."""
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(path)
        listener.listen()

        def connect() -> socket.socket:
            made = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            made.connect(target)
            return made

        return cls(listener, connect)

    @property
    def port(self) -> int:
        return int(self._listener.getsockname()[1])

    def freeze(self) -> None:
        """Stop forwarding: what is sent from now on is held, unanswered."""
        self._flowing.clear()

    def thaw(self) -> None:
        """Forward again, what was held first."""
        self._flowing.set()

    def close(self) -> None:
        self._closed.set()
        self._flowing.set()
        with self._lock:
            for sock in [self._listener, *self._sockets]:
                with contextlib.suppress(OSError):
                    sock.close()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                server = self._connect()
            except OSError:
                client.close()
                continue
            with self._lock:
                self._sockets += [client, server]
            for source, sink in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        while True:
            try:
                data = source.recv(65536)
            except OSError:
                data = b""
            # Frozen: hold what came until thawed (or closed), forwarding nothing.
            self._flowing.wait()
            if not data or self._closed.is_set():
                with contextlib.suppress(OSError):
                    sink.shutdown(socket.SHUT_WR)
                return
            try:
                sink.sendall(data)
            except OSError:
                return
