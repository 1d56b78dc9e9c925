"""Every contract case, by area, gathered into `CASES` (name -> `Case`)."""

from __future__ import annotations

from collections.abc import Mapping

from ..case import Case
from .asyncio_writes import ASYNCIO_CASES
from .cancel import CANCEL_CASES
from .claims import CLAIM_CASES
from .cron import CRON_CASES
from .dashboard_store import DASHBOARD_STORE_CASES
from .facts import FACT_CASES
from .finishing import FINISHING_CASES
from .lease import LEASE_CASES
from .limit_usage import LIMIT_USAGE_CASES
from .limits import LIMIT_CASES
from .operations import OPERATION_CASES
from .order import ORDER_CASES
from .prefetch import PREFETCH_CASES
from .promotion import PROMOTION_CASES
from .revive import REVIVE_CASES
from .timeouts import TIMEOUT_CASES
from .unique import UNIQUE_CASES
from .wire import WIRE_CASES
from .workflow_records import WORKFLOW_RECORD_CASES
from .workflows import WORKFLOW_CASES
from .write_before_ack import WRITE_BEFORE_ACK_CASES

AREAS: Mapping[str, tuple[Case, ...]] = {
    "order": ORDER_CASES,
    "promotion": PROMOTION_CASES,
    "claims": CLAIM_CASES,
    "finishing": FINISHING_CASES,
    "write_before_ack": WRITE_BEFORE_ACK_CASES,
    "prefetch": PREFETCH_CASES,
    "revive": REVIVE_CASES,
    "lease": LEASE_CASES,
    "operations": OPERATION_CASES,
    "unique": UNIQUE_CASES,
    "cancel": CANCEL_CASES,
    "timeouts": TIMEOUT_CASES,
    "cron": CRON_CASES,
    "asyncio": ASYNCIO_CASES,
    "dashboard_store": DASHBOARD_STORE_CASES,
    "limits": LIMIT_CASES,
    "limit_usage": LIMIT_USAGE_CASES,
    "facts": FACT_CASES,
    "wire": WIRE_CASES,
    "workflows": WORKFLOW_CASES,
    "workflow_records": WORKFLOW_RECORD_CASES,
}


def _by_name() -> dict[str, Case]:
    found: dict[str, Case] = {}
    for area in AREAS.values():
        for item in area:
            if item.name in found:
                raise ValueError(f"two contract cases are named {item.name}")
            found[item.name] = item
    return found


#: Every case of the contract, by name, in the order of `AREAS`.
CASES: Mapping[str, Case] = _by_name()

__all__ = ["AREAS", "CASES"]
