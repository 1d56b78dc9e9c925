"""Who may use the dashboard: HTTP basic auth, and a brake on guessing passwords.

`BasicAuth` checks one user name and password. `LoginThrottle` counts, per client
address, the requests whose credentials an auth hook refused: after `limit` of them
within `window_s` seconds the client is answered 429 (with `Retry-After`) until the
oldest of those failures is `window_s` old, whatever it sends, the right password
included, so a guesser learns nothing while it waits. That holds a guesser to
`limit` tries a window (5 a minute by default) instead of hundreds a second. A
success clears the client's count.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import logging
import threading
import time
from collections import deque
from collections.abc import Callable

from starlette.requests import Request

from ...core import FieldError, ValidationError

log = logging.getLogger("conveyor.dashboard")

#: A callable that decides whether a request may see the dashboard at all.
AuthHook = Callable[[Request], bool]


class BasicAuth:
    """HTTP basic authentication against one user name and password: the simple
    `auth` hook. A refused request gets 401 and the browser's login prompt."""

    #: The `WWW-Authenticate` value a refusal carries.
    challenge = 'Basic realm="conveyor", charset="UTF-8"'

    def __init__(self, username: str, password: str) -> None:
        self._expected = f"{username}:{password}".encode()

    @classmethod
    def parse(cls, text: str, field: str = "--basic-auth") -> BasicAuth | FieldError:
        """`user:password` as a `BasicAuth`, or why it is not one."""
        username, colon, password = text.partition(":")
        if not colon or not username or not password:
            return FieldError(field, "must be USER:PASSWORD, both non-empty")
        return cls(username, password)

    def __call__(self, request: Request) -> bool:
        scheme, _, encoded = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "basic":
            return False
        try:
            given = base64.b64decode(encoded.strip(), validate=True)
        except (binascii.Error, ValueError):
            return False
        return hmac.compare_digest(given, self._expected)


class LoginThrottle:
    """Failed logins per client address, and how long each must wait (thread-safe).

    At most `max_clients` addresses are remembered; past that the ones whose
    failures have all left the window go first, then the longest remembered."""

    def __init__(
        self,
        limit: int = 5,
        window_s: float = 60.0,
        *,
        clock: Callable[[], float] = time.monotonic,
        max_clients: int = 10_000,
    ) -> None:
        for field, bad in (
            ("limit", limit < 1),
            ("window_s", window_s <= 0),
            ("max_clients", max_clients < 1),
        ):
            if bad:
                raise ValidationError.of(field, "must be > 0")
        self.limit, self.window_s = limit, window_s
        self._clock = clock
        self._max_clients = max_clients
        self._lock = threading.Lock()
        self._failures: dict[str, deque[float]] = {}

    def wait_s(self, client: str) -> float:
        """Seconds until `client` may try again; 0 when it may now."""
        now = self._clock()
        with self._lock:
            times = self._failures.get(client)
            if times is None:
                return 0.0
            while times and times[0] <= now - self.window_s:
                times.popleft()
            if not times:
                del self._failures[client]
                return 0.0
            if len(times) < self.limit:
                return 0.0
            return max(0.0, times[-self.limit] + self.window_s - now)

    def failed(self, client: str) -> None:
        """Note a refused login from `client`."""
        now = self._clock()
        with self._lock:
            times = self._failures.pop(client, None) or deque(maxlen=self.limit)
            times.append(now)
            self._failures[client] = times  # last in the dict: the most recent
            if len(times) == self.limit:
                log.warning(
                    "dashboard: %d failed logins from %s within %g s; refusing it for a while",
                    self.limit,
                    client,
                    self.window_s,
                )
            if len(self._failures) > self._max_clients:
                self._forget(now)

    def succeeded(self, client: str) -> None:
        """A login from `client` passed: its count starts again."""
        with self._lock:
            self._failures.pop(client, None)

    def _forget(self, now: float) -> None:
        stale = [c for c, t in self._failures.items() if not t or t[-1] <= now - self.window_s]
        for client in stale:
            del self._failures[client]
        while len(self._failures) > self._max_clients:
            del self._failures[next(iter(self._failures))]
