"""The web dashboard, as `conveyor.dashboard` (it needs the `dashboard` extra).

    from conveyor.dashboard import BasicAuth, create_app
    app = create_app(runtime, auth=BasicAuth("ops", "s3cret"))

See `conveyor.shell.dashboard` and docs/dashboard.md.
"""

from __future__ import annotations

from .shell.dashboard import (
    CSRF_COOKIE,
    CSRF_FIELD,
    AuthHook,
    BasicAuth,
    HostCheck,
    LoginThrottle,
    create_app,
)

__all__ = [
    "CSRF_COOKIE",
    "CSRF_FIELD",
    "AuthHook",
    "BasicAuth",
    "HostCheck",
    "LoginThrottle",
    "create_app",
]
