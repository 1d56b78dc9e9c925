"""The web dashboard: an ASGI app over a `Runtime` (`pip install 'conveyor-jobs[dashboard]'`).

`conveyor dashboard` serves it; `create_app(runtime)` gives it to mount in another
ASGI app. See docs/dashboard.md.
"""

from __future__ import annotations

from .app import CSRF_COOKIE, CSRF_FIELD, AuthHook, BasicAuth, LoginThrottle, create_app
from .hosts import HostCheck

__all__ = [
    "CSRF_COOKIE",
    "CSRF_FIELD",
    "AuthHook",
    "BasicAuth",
    "HostCheck",
    "LoginThrottle",
    "create_app",
]
