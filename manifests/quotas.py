"""Per-tenant quotas: what one tenant may submit and store (settings CTXENG_QUOTA_*; 0: no limit).

- jobs per minute (`CTXENG_QUOTA_JOBS_PER_MINUTE`) and new runs per day
  (`CTXENG_QUOTA_RUNS_PER_DAY`): rates over a sliding window of the rows' `created_at`; beyond
  them a submit is a 429 whose Retry-After is when the oldest row in the window leaves it.
- artifact bytes (`CTXENG_QUOTA_ARTIFACT_BYTES`): the bytes of the distinct bodies the tenant's
  artifacts refer to; stored content bytes (`CTXENG_QUOTA_CONTENT_BYTES`): every blob of the
  tenant (requests, manifests, payloads, artifacts) in the content store. A write that would
  store bytes beyond either is a 413 and stores nothing; a write that adds no new bytes (the same
  content again) passes.

Every check runs inside the write's transaction, after the tenant's row is locked (PostgreSQL;
SQLite holds its write lock already), so concurrent writes of one tenant count one after the
other and never pass a limit together. An idempotent replay is answered before any check.
`tenant_usage` is what the people page shows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.db.models import Min, Sum
from django.utils import timezone

from ctxeng.accounts.models import Tenant
from ctxeng.content.models import Content
from ctxeng.server.errors import QuotaExceeded

from .models import Artifact, AssemblyJob, Run

MINUTE, DAY = timedelta(minutes=1), timedelta(days=1)


@dataclass(frozen=True)
class QuotaUsage:
    name: str
    setting: str
    used: int
    limit: int  # 0: no limit
    unit: str  # "bytes" or a count's noun

    @property
    def share(self) -> int | None:
        """Percent of the limit used (None without a limit), for the page's meter."""
        return min(100, math.floor(100 * self.used / self.limit)) if self.limit else None


def lock_tenant(tenant: Tenant) -> None:
    """Serialize this tenant's quota-checked writes until the transaction ends.

    FOR NO KEY UPDATE, not FOR UPDATE: every row a write inserts that refers to the tenant (content,
    job, run) takes a KEY SHARE lock on its row, which FOR UPDATE waits for, so two submits that had
    each inserted a row deadlocked on PostgreSQL; NO KEY UPDATE still excludes the other lockers."""
    Tenant.objects.select_for_update(no_key=True).filter(pk=tenant.pk).values_list("pk", flat=True).first()


def _window(rows, span: timedelta, now) -> tuple[int, float]:
    """(rows in the window, seconds until the oldest of them leaves it)."""
    since = now - span
    in_window = rows.filter(created_at__gt=since)
    oldest = in_window.aggregate(oldest=Min("created_at"))["oldest"]
    wait = (oldest - since).total_seconds() if oldest is not None else 0.0
    return in_window.count(), wait


def _rate(name: str, setting: str, rows, span: timedelta, per: str) -> None:
    limit = getattr(settings, setting)
    if not limit:
        return
    count, wait = _window(rows, span, timezone.now())
    if count >= limit:
        raise QuotaExceeded(
            f"quota: {name}: {count} in the last {per}, the limit is {limit} ({setting}); retry in {math.ceil(wait)} s",
            status_code=429, retry_after=max(1, math.ceil(wait)))


def check_submit(*, tenant: Tenant, new_run: bool) -> None:
    """Before a job (and maybe a run) is created: the job and run rates."""
    _rate("jobs per minute", "CTXENG_QUOTA_JOBS_PER_MINUTE", AssemblyJob.objects.filter(tenant=tenant), MINUTE,
          "minute")
    if new_run:
        _rate("runs per day", "CTXENG_QUOTA_RUNS_PER_DAY", Run.objects.filter(tenant=tenant), DAY, "24 hours")


def content_bytes(tenant: Tenant) -> int:
    return Content.objects.filter(tenant=tenant).aggregate(total=Sum("size"))["total"] or 0


def artifact_bytes(tenant: Tenant) -> int:
    digests = Artifact.objects.filter(tenant=tenant).values("content_hash")
    return Content.objects.filter(tenant=tenant, digest__in=digests).aggregate(total=Sum("size"))["total"] or 0


def _storage(name: str, setting: str, used: int) -> None:
    limit = getattr(settings, setting)
    if limit and used > limit:
        raise QuotaExceeded(
            f"quota: {name}: this write would store {used} bytes, more than the limit {limit} ({setting}); "
            "nothing was stored", status_code=413)


def check_stored(*, tenant: Tenant, added: int, new_artifact_body: bool = False) -> None:
    """After the write's blobs (and artifact row) are in, before commit: raising rolls them back.
    `added`: the bytes this write newly stored (0: nothing new for the content quota);
    `new_artifact_body`: the artifact's body is one no other artifact of the tenant had."""
    if added:
        _storage("stored content bytes", "CTXENG_QUOTA_CONTENT_BYTES", content_bytes(tenant))
    if new_artifact_body:
        _storage("artifact bytes", "CTXENG_QUOTA_ARTIFACT_BYTES", artifact_bytes(tenant))


def tenant_usage(tenant: Tenant) -> list[QuotaUsage]:
    now = timezone.now()
    jobs, _ = _window(AssemblyJob.objects.filter(tenant=tenant), MINUTE, now)
    runs, _ = _window(Run.objects.filter(tenant=tenant), DAY, now)
    return [
        QuotaUsage("jobs per minute", "CTXENG_QUOTA_JOBS_PER_MINUTE", jobs, settings.CTXENG_QUOTA_JOBS_PER_MINUTE,
                   "jobs"),
        QuotaUsage("new runs per day", "CTXENG_QUOTA_RUNS_PER_DAY", runs, settings.CTXENG_QUOTA_RUNS_PER_DAY, "runs"),
        QuotaUsage("artifact bytes", "CTXENG_QUOTA_ARTIFACT_BYTES", artifact_bytes(tenant),
                   settings.CTXENG_QUOTA_ARTIFACT_BYTES, "bytes"),
        QuotaUsage("stored content bytes", "CTXENG_QUOTA_CONTENT_BYTES", content_bytes(tenant),
                   settings.CTXENG_QUOTA_CONTENT_BYTES, "bytes"),
    ]
