"""Settings of the example shop: Django's tasks on Conveyor, in the shop's own database.

`SHOP_DATABASE_URL` picks the database (default: `shop.sqlite3` beside this
project): `sqlite:////abs/path.db`, or `postgresql://user:pass@host:port/name`
(`?host=/socket/dir` for a Unix socket).
"""

import os
from pathlib import Path

import django
from sqlalchemy.engine import make_url

BASE_DIR = Path(__file__).resolve().parent.parent
SECRET_KEY = "example-only-not-secret"
DEBUG = True
USE_TZ = True
TIME_ZONE = "UTC"
ROOT_URLCONF = None
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

INSTALLED_APPS = ["conveyor.django", "orders"]
if django.VERSION < (6, 0):
    INSTALLED_APPS.append("django_tasks")  # the backport, which Django 6 has built in


def _database(url: str) -> dict:
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        return {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": parsed.database,
            # Take the write lock at BEGIN: a transaction that reads, then writes while a
            # worker commits in between, would fail with "database is locked".
            "OPTIONS": {"transaction_mode": "IMMEDIATE", "timeout": 10},
        }
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": parsed.database,
        "USER": parsed.username or "",
        "PASSWORD": parsed.password or "",
        "HOST": parsed.host or parsed.query.get("host", ""),
        "PORT": str(parsed.port or ""),
    }


DATABASES = {
    "default": _database(
        os.environ.get("SHOP_DATABASE_URL", f"sqlite:///{BASE_DIR / 'shop.sqlite3'}")
    )
}

TASKS = {
    "default": {
        "BACKEND": "conveyor.django.ConveyorBackend",
        "QUEUES": ["default", "emails"],
        "OPTIONS": {
            # Conveyor's tables live in DATABASES["default"]: enqueueing joins the
            # caller's transaction there.
            "DATABASE": "default",
            "TIMEOUT": 60,
            # Modules holding tasks besides each app's `tasks` (a comma-separated list
            # in SHOP_TASK_MODULES; the tests add one of their own).
            "MODULES": [m for m in os.environ.get("SHOP_TASK_MODULES", "").split(",") if m],
            "CONFIG": {
                "workers": {"count": 2, "poll_interval_ms": 200},
                "retry": {"initial_delay_ms": 100, "jitter": False},
            },
        },
    }
}

# A second backend whose tables live in a database of their own (set
# SHOP_SEPARATE_URL): its enqueues are written there at once, not in the caller's
# transaction on DATABASES["default"]. `manage.py conveyor --backend separate ...`.
if os.environ.get("SHOP_SEPARATE_URL"):
    TASKS["separate"] = {
        "BACKEND": "conveyor.django.ConveyorBackend",
        "QUEUES": ["default", "emails"],
        "OPTIONS": {"URL": os.environ["SHOP_SEPARATE_URL"]},
    }

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"orders": {"handlers": ["console"], "level": "INFO", "propagate": False}},
}
