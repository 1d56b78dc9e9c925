"""The tenant verdict: run a tenant job only inside a tenant that exists.

Safety first: a job whose tenant is gone fails explicitly and is never run
unscoped. The shell resolves the tenant; this function only judges.
"""

from __future__ import annotations

from .decisions import MissingTenant, TenantNotFound
from .job import Job


def tenant_verdict(
    job: Job, *, tenant_scoped: bool, tenant_exists: bool
) -> TenantNotFound | MissingTenant | None:
    """None means: run the handler. Otherwise the outcome to hand to `decide`."""
    if not tenant_scoped:
        if job.tenant_id is not None and not tenant_exists:
            return TenantNotFound()
        return None
    if job.tenant_id is None:
        return MissingTenant()
    if not tenant_exists:
        return TenantNotFound()
    return None
