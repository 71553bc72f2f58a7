"""Reads for the reviewer dashboard: runs, manifests, item search, comparison.

Every function takes the tenant ids the acting user belongs to (`request.tenancy`, from
ctxeng.accounts.selectors.memberships_of), so an
object in any other tenant is simply not found (the view turns that into 404). A sealed manifest
can hold 20,000 items, so the manifest page's cost must not grow with it: a manifest sealed by
the service carries `Manifest.sections` (the small sections, counts, the first page of tool pairs
and transforms, the first lineage trees; see `page_sections`), and the inspector's item list is
paged in SQL from ManifestItem rows (the ItemDecision columns), each page's full records read
from the content store by their digests. The stored request (item bodies), the provider payload
and transform excerpts load only for the one item or region that asks. A manifest without
`sections` (written directly by a test) is read the old way: the sections it shows read from the
document's skeleton, named section by named section.

The window view ("what is eating the window") is GROUP BY queries over the same item rows: tokens
by source (tool, repository, URL host, read from the decision's source_ref), source type, kind and
partition, for one manifest or for every step of a run; the groups are the distinct sources, so
the query count never grows with the items.
"""

from __future__ import annotations

import json
import re
import uuid
from collections import Counter
from dataclasses import dataclass, field
from datetime import date
from typing import Any

from django.db.models import (
    BooleanField,
    Case,
    CharField,
    Count,
    F,
    IntegerField,
    JSONField,
    Max,
    Min,
    Q,
    QuerySet,
    Subquery,
    TextField,
    Value,
    When,
)
from django.db.models.aggregates import Avg, Sum
from django.db.models.expressions import ExpressionWrapper, Window
from django.db.models.fields import FloatField
from django.db.models.fields.json import KeyTextTransform, KeyTransform
from django.db.models.functions import Abs, Cast, NullIf, RowNumber

from ctxeng.accounts.models import Tenant
from ctxeng.content.store import content_read, content_read_many
from ctxeng.engine import parse_request
from ctxeng.engine.estimators import calibrate, estimate_for
from ctxeng.engine.hashing import sha256_text
from ctxeng.engine.models import BudgetCalibration, ModelSpec
from ctxeng.engine.render import EMPTY_USER, cite_id, split_fences
from ctxeng.engine.vocabulary import ExclusionReason

from .item_labels import candidate_label, request_labels
from .models import (
    AssemblyJob,
    Decision,
    ItemDecision,
    JobStatus,
    Manifest,
    ManifestItem,
    Origin,
    Run,
    UsageReport,
    Verification,
)
from .selectors import (
    CALIBRATION_WINDOW,
    artifact_content,
    artifact_for_ref,
    job_request,
    manifest_as_served,
    manifest_document,
    manifest_payload,
    usage_in_band,
)

# The sections a manifest page shows; candidate_items (the largest part) is never fetched.
PAGE_SECTIONS = (
    "assembly",
    "budget",
    "included",
    "excluded",
    "source_acquisition",
    "transforms",
    "tool_pairs",
    "summaries",
    "artifact_refs",
    "cache",
    "stages",
    "lifecycle_events",
)
REASON_ORDER = [reason.value for reason in ExclusionReason]
_HEAVY_JOB_FIELDS = ("request_packed", "manifest__document_packed", "manifest__payload_packed", "manifest__sections")
# What `Manifest.sections` keeps of the long lists: one page of each, and the first lineage trees.
SECTION_HEADS = {"tool_pairs": 100, "transforms": 20}
LINEAGE_LIMIT = 50
# Every transform record without its excerpts, for the inspector's selected item, while they are
# few enough to keep in `sections` (each is ~0.6 KB); beyond that the inspector reads the document.
TRANSFORM_BRIEFS_LIMIT = 500
# Transform excerpts are content: a content purge empties them in the document, so the page
# loads them from there on demand and `sections` never holds a copy.
TRANSFORM_BODY_FIELDS = ("before_excerpt", "after_excerpt")


# --------------------------------------------------------------------------- runs and jobs


def light_jobs(tenant_ids: list[int], *, with_sections: bool = False) -> QuerySet[AssemblyJob]:
    heavy = [name for name in _HEAVY_JOB_FIELDS if not (with_sections and name == "manifest__sections")]
    return (
        AssemblyJob.objects.filter(tenant_id__in=tenant_ids)
        .select_related("run", "tenant", "policy_revision__policy", "manifest", "manifest__usage")
        .defer(*heavy)
    )


def _blocked_reason() -> NullIf:
    """A job's blocked reason (None when it has none), from its manifest's column."""
    return NullIf(F("manifest__blocked_reason"), Value(""), output_field=TextField())


def runs_list(
    *, tenant: Tenant, status: str = "", policy: str = "", since: date | None = None, until: date | None = None,
    verification: str = "",
) -> QuerySet[Run]:
    """Runs of one tenant, newest first, with attempt counts (and of recorded steps, how many and
    how many diverged); filters match any of a run's jobs (`verification`: a recorded step in that state)."""
    runs = Run.objects.filter(tenant=tenant)
    if status:
        runs = runs.filter(jobs__status=status)
    if verification:
        runs = runs.filter(jobs__verification=verification)
    if policy:
        runs = runs.filter(jobs__policy_revision__policy__policy_id=policy)
    if since:
        runs = runs.filter(created_at__date__gte=since)
    if until:
        runs = runs.filter(created_at__date__lte=until)
    return (
        Run.objects.filter(pk__in=runs.values("pk"))
        .annotate(
            attempts=Count("jobs", distinct=True),
            ready=Count("jobs", filter=Q(jobs__status=JobStatus.READY), distinct=True),
            blocked=Count("jobs", filter=Q(jobs__status=JobStatus.BLOCKED), distinct=True),
            failed=Count("jobs", filter=Q(jobs__status=JobStatus.FAILED), distinct=True),
            recorded=Count("jobs", filter=Q(jobs__origin=Origin.RECORDED), distinct=True),
            diverged=Count("jobs", filter=Q(jobs__verification=Verification.DIVERGED), distinct=True),
            last_attempt_at=Max("jobs__created_at"),
        )
        .order_by("-created_at", "-id")
    )


def run_get(*, tenant_ids: list[int], run_id: str, prefer_tenant: Tenant | None) -> Run | None:
    runs = list(Run.objects.filter(tenant_id__in=tenant_ids, run_id=run_id).select_related("tenant"))
    if not runs:
        return None
    return next((run for run in runs if prefer_tenant and run.tenant_id == prefer_tenant.id), runs[0])


# A run page names each step's policy revision; decoding its body once per step (the select_related
# row) cost more than the rest of a 200-step run page together.
_RUN_REVISION_BODY = ("policy_revision__body", "policy_revision__source_text", "policy_revision__publish_note")


def run_step_index(run: Run) -> list[dict[str, Any]]:
    """Every attempt of a run in order, as a few columns (id, step_id, status, `sealed`: the
    manifest's id or None, the provider's reported `usage_input` and `usage_cached`, the sealed
    cache record's `cache_eligible_tokens` and `payload_text_tokens`): what the run page counts over
    the whole run, while it builds full rows for one page of steps only."""
    return list(AssemblyJob.objects.filter(tenant_id=run.tenant_id, run=run).order_by("created_at", "id")
                .values("id", "step_id", "status", "origin", "verification", sealed=F("manifest__id"), usage_input=F("manifest__usage__input_tokens"),
                        usage_cached=F("manifest__usage__cached_tokens"),
                        cache_eligible_tokens=cache_figure_of("cache_eligible_tokens"),
                        payload_text_tokens=cache_figure_of("payload_text_tokens"),
                        cache_compared_with=cache_text_of("previous_cache_from")))


def run_timeline(run: Run, ids: list[Any] | None = None) -> list[AssemblyJob]:
    """A run's attempts in order (only those `ids`, when given), with the manifest's budget figures
    pulled out of the document and the provider's reported usage (`usage_input`, `usage_cached`;
    None when no report), in the same query: a usage report belongs to one manifest, so to this
    run's tenant."""
    jobs = light_jobs([run.tenant_id]).filter(run=run)
    if ids is not None:
        jobs = jobs.filter(pk__in=ids)
    return list(
        jobs
        .defer(*_RUN_REVISION_BODY)
        .annotate(
            usable_input=F("manifest__usable_input"),
            blocked_reason=_blocked_reason(),
            usage_input=F("manifest__usage__input_tokens"),
            usage_cached=F("manifest__usage__cached_tokens"),
            payload_tokens=payload_tokens_of(),
            cache_eligible_tokens=cache_figure_of("cache_eligible_tokens"),
            payload_text_tokens=cache_figure_of("payload_text_tokens"),
            cache_compared_with=cache_text_of("previous_cache_from"),
        )
        .order_by("created_at", "id")
    )


def cache_hit_percent(cached: int | None, input_tokens: int | None) -> float | None:
    """The share of reported input tokens the provider served from its cache ("provider cached"),
    as a percentage; None when nothing was reported (or 0 input tokens, where no share exists)."""
    if cached is None or not input_tokens:
        return None
    return 100.0 * cached / input_tokens


def run_cache_hits(steps: list[AssemblyJob]) -> dict[str, Any]:
    """The run's overall provider-cached ratio (a percentage) over the steps with a usage report:
    their cached tokens over their input tokens (weighted by tokens, not a mean of the steps'
    ratios). `steps` counts the ready ones: a blocked assembly made no model call to report."""
    reported = [job for job in steps if job.status == JobStatus.READY and job.usage_input is not None]
    cached = sum(job.usage_cached for job in reported)
    input_tokens = sum(job.usage_input for job in reported)
    return {"percent": cache_hit_percent(cached, input_tokens) if reported else None, "cached": cached,
            "input_tokens": input_tokens, "reported": len(reported),
            "steps": sum(job.status == JobStatus.READY for job in steps)}


def run_cache_eligible(steps: list[AssemblyJob]) -> dict[str, Any]:
    """The run's cache-eligible share (a percentage): the manifests' `cache.cache_eligible_tokens`
    over their `cache.payload_text_tokens`, summed over the ready steps that record them (weighted
    by tokens, the same figure as each manifest's `cache_eligible_share`, over the run). Only ready
    steps count: a blocked one sent nothing (its zeros would read "2 of 1 ready step"). `claimed`:
    how many of those figures compare with the agent's own record of its previous step (recorded
    steps, manifests sealed before issue 51), not the service's (`cache.previous_cache_from`)."""
    counted = [job for job in steps if job.status == JobStatus.READY and job.payload_text_tokens is not None
               and job.cache_eligible_tokens is not None]
    eligible = sum(job.cache_eligible_tokens for job in counted)
    total = sum(job.payload_text_tokens for job in counted)
    return {"percent": 100.0 * eligible / total if total else None, "eligible": eligible, "tokens": total,
            "counted": len(counted), "steps": sum(job.status == JobStatus.READY for job in steps),
            "claimed": sum(job.cache_compared_with != "service" for job in counted)}


def policy_ids_in(tenant: Tenant) -> list[str]:
    from policies.models import Policy

    return list(Policy.objects.filter(tenant=tenant).values_list("policy_id", flat=True).order_by("policy_id"))


def recent_jobs(*, tenant: Tenant, status: str = "", limit: int = 10) -> list[AssemblyJob]:
    jobs = light_jobs([tenant.id])
    if status:
        jobs = jobs.filter(status=status)
    return list(
        jobs.annotate(blocked_reason=_blocked_reason()).order_by("-created_at")[:limit]
    )


def assembly_get(*, tenant_ids: list[int], job_id: str) -> AssemblyJob | None:
    try:
        key = uuid.UUID(str(job_id))
    except ValueError:
        return None
    return light_jobs(tenant_ids, with_sections=True).filter(id=key).first()


# --------------------------------------------------------------------------- manifest sections


def manifest_sections(manifest_id: int, sections: tuple[str, ...] = PAGE_SECTIONS) -> dict[str, Any]:
    """The named top-level sections of a sealed manifest, read from the content store alone
    (candidate_items, the largest part, is never fetched unless named)."""
    document = manifest_document(Manifest(pk=manifest_id), sections=sections)
    return {name: document.get(name) for name in sections}


def page_sections(document: dict[str, Any]) -> dict[str, Any]:
    """What the manifest page shows of a sealed manifest, bounded whatever its item count.

    Derived once when the manifest is sealed (and by migration 0004 for older manifests) and
    stored in `Manifest.sections`: the header sections, the item counts, one page of tool pairs
    and of transforms (without their excerpts), the unresolved calls and the first lineage trees;
    and, up to TRANSFORM_BRIEFS_LIMIT of them, every transform without its excerpts, so the
    inspector shows an item's transforms and assertions without reading the document.
    """
    included = document.get("included") or []
    excluded = document.get("excluded") or []
    tool_pairs = document.get("tool_pairs") or []
    transforms = document.get("transforms") or []
    summaries = document.get("summaries") or []
    with_lineage = [row for row in included if row.get("source_lineage")]
    return {
        **{name: document.get(name) for name in ("assembly", "budget", "stages", "source_acquisition", "lifecycle_events")},
        # The payload prefix hashes are for the next step's comparison, not for the page (one per message).
        "cache": {k: v for k, v in (document.get("cache") or {}).items() if k != "payload_prefix_hashes"} if document.get("cache") else document.get("cache"),
        "included_total": len(included),
        "excluded_total": len(excluded),
        "reason_counts": reason_counts(excluded),
        "tool_pairs": tool_pairs[: SECTION_HEADS["tool_pairs"]],
        "tool_pairs_total": len(tool_pairs),
        "unresolved": [pair for pair in tool_pairs if pair.get("decision") == "unresolved"],
        "transforms": [
            {k: v for k, v in record.items() if k not in TRANSFORM_BODY_FIELDS}
            for record in transforms[: SECTION_HEADS["transforms"]]
        ],
        "transforms_total": len(transforms),
        **({"transform_briefs": [{k: v for k, v in record.items() if k not in TRANSFORM_BODY_FIELDS} for record in transforms]}
           if len(transforms) <= TRANSFORM_BRIEFS_LIMIT else {}),
        "lineage_items": [
            {"item_id": row["item_id"], "source_lineage": row["source_lineage"]} for row in with_lineage[:LINEAGE_LIMIT]
        ],
        "lineage_total": len(with_lineage),
        "summaries": summaries[:LINEAGE_LIMIT],
        "summaries_total": len(summaries),
    }


def item_record(*, manifest_id: int, item_id: str) -> tuple[str, dict[str, Any]] | None:
    """(decision, full record) of one item of a sealed manifest: one indexed query, one blob read."""
    row = _rows_of_items(manifest_id, [item_id]).values_list("decision", "record_digest", "entry__tenant_id").first()
    if row is None:
        return None
    return row[0], content_read_many(tenant_id=row[2], digests=[row[1]])[row[1]]


def records_of(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`rows` (dicts with `record_digest` and `tenant_id`) with each one's full `record` added."""
    by_tenant: dict[int, list[str]] = {}
    for row in rows:
        by_tenant.setdefault(row["tenant_id"], []).append(row["record_digest"])
    records: dict[str, Any] = {}
    for tenant_id, digests in by_tenant.items():
        records.update(content_read_many(tenant_id=tenant_id, digests=sorted(set(digests))))
    for row in rows:
        row["record"] = records[row["record_digest"]]
    return rows


def provider_input(manifest_id: int) -> Any:
    return manifest_payload(Manifest(pk=manifest_id))


def reason_counts(excluded: list[dict[str, Any]]) -> list[tuple[str, int]]:
    counts = Counter(row.get("reason") for row in excluded)
    return [(name, counts[name]) for name in REASON_ORDER if counts.get(name)]


@dataclass
class ItemBody:
    """An item's submitted content (what the gates saw), bounded for display."""

    content: str | None
    truncated: bool
    total_chars: int
    from_artifact: str | None = None
    candidate: dict[str, Any] = field(default_factory=dict)
    label: str = ""  # manifests.item_labels.candidate_label: a tool result's call, a message's first words


BODY_LIMIT = 20_000


def _submitted(job: AssemblyJob, item_id: str) -> tuple[dict[str, Any], str | None, str | None] | None:
    """(the candidate, its whole content, the artifact it was re-injected from) as submitted; the
    candidate carries its label (`label`, from the request's tool calls) beside its own fields."""
    raw = job_request(job)
    candidate = next((c for c in raw.get("candidates", []) if c.get("item_id") == item_id), None)
    if candidate is None:
        return None
    calls = {str(c.get("call_id")): c for c in raw.get("tool_calls") or [] if isinstance(c, dict)}
    candidate = {**candidate, "label": candidate_label(candidate, calls)}
    content = candidate.get("content")
    from_artifact = None
    if content is None and candidate.get("artifact_ref"):
        ref = candidate["artifact_ref"]
        artifact = artifact_for_ref(tenant=job.tenant, artifact_id=ref.get("artifact_id"), revision=ref.get("revision"))
        from_artifact = f"{ref.get('artifact_id')}@{ref.get('revision')}"
        content = artifact_content(artifact) if artifact else None
    return candidate, content, from_artifact


def item_body(job: AssemblyJob, item_id: str) -> ItemBody | None:
    """The candidate as the agent submitted it (one query for the stored request)."""
    submitted = _submitted(job, item_id)
    if submitted is None:
        return None
    candidate, content, from_artifact = submitted
    total = len(content or "")
    shown = (content or "")[:BODY_LIMIT] if content is not None else None
    meta = {k: v for k, v in candidate.items() if k not in ("content", "label")}
    return ItemBody(content=shown, truncated=total > BODY_LIMIT, total_chars=total, from_artifact=from_artifact,
                    candidate=meta, label=candidate["label"])


LINE_CONTEXT = 2  # lines shown before and after each kept line
MAX_KEPT_LINES_SHOWN = 60


def kept_lines_in_context(job: AssemblyJob, item_id: str, numbers: list[int],
                          around: int = LINE_CONTEXT) -> list[list[dict[str, Any]]] | None:
    """The submitted item's lines `numbers` (1-based) each with `around` lines either side, as
    windows of {number, text, kept} (overlapping windows merged); None when the content is gone."""
    submitted = _submitted(job, item_id)
    if submitted is None or submitted[1] is None:
        return None
    lines = submitted[1].split("\n")
    kept = {n for n in numbers[:MAX_KEPT_LINES_SHOWN] if 1 <= n <= len(lines)}
    windows: list[list[dict[str, Any]]] = []
    last = 0
    for number in sorted(kept):
        start, end = max(1, number - around), min(len(lines), number + around)
        if windows and start <= last + 1:
            start = last + 1
        else:
            windows.append([])
        windows[-1].extend({"number": n, "text": lines[n - 1], "kept": n in kept} for n in range(start, end + 1))
        last = max(last, end)
    return windows


LABEL_REQUESTS = 10  # at most this many submitted requests read for one page's labels
# A request with more items than this is not read for labels (its page shows the labels the
# decisions' source refs give): the inspector of a 20,000-item manifest never reads every body.
LABEL_ITEMS_MAX = 400


def item_labels_of(jobs: list[AssemblyJob]) -> dict[str, str]:
    """item_id -> label (`manifests.item_labels.request_labels`) from the submitted requests of
    `jobs`, a later job's label winning: for pages about one run or one pair of steps, whose
    item ids name one item each. Pages whose rows span tenants use `item_labels_by_job`."""
    labels: dict[str, str] = {}
    for per_job in item_labels_by_job(jobs).values():
        labels.update(per_job)
    return labels


def item_labels_by_job(jobs: list[AssemblyJob]) -> dict[Any, dict[str, str]]:
    """job pk -> (item_id -> label) from the submitted requests of `jobs` (the first
    LABEL_REQUESTS distinct ones, one read each), skipping a step of more than LABEL_ITEMS_MAX
    items (one COUNT per job). The jobs were found in the user's tenants; each request is read
    from its own tenant's store, and its labels name only that job's items (two tenants may hold
    the same item id)."""
    labels: dict[Any, dict[str, str]] = {}
    for job in jobs:
        if job is None or job.pk in labels or len(labels) >= LABEL_REQUESTS:
            continue
        labels[job.pk] = {}
        if ManifestItem.bare.filter(manifest__job_id=job.pk).count() <= LABEL_ITEMS_MAX:
            labels[job.pk] = request_labels(job_request(job, keys=("candidates", "tool_calls")))
    return labels


def jobs_by_ids(tenant_ids: list[int], job_ids: list[Any]) -> list[AssemblyJob]:
    """The jobs `job_ids` names in the user's tenants, in that order (newest first on /why/), each
    once, without the manifest; one query."""
    wanted = list(dict.fromkeys(job_ids))[:LABEL_REQUESTS]
    found = {job.pk: job for job in AssemblyJob.objects.filter(pk__in=wanted, tenant_id__in=tenant_ids)}
    return [found[pk] for pk in reversed(wanted) if pk in found]  # the newest last: its label wins


def request_of(job: AssemblyJob):
    """The stored request parsed by the engine (used by replays)."""
    return parse_request(job_request(job))


# --------------------------------------------------------------------------- "why excluded?"


def item_search(
    *, tenant_ids: list[int], q: str = "", reason: str = "", decision: str = "excluded", run: str = "",
    step: str = "", since: date | None = None, until: date | None = None,
) -> QuerySet[ManifestItem]:
    """Item decisions across manifests. `q` matches part of the item id, or text of its source ref
    (tool, path, URL), its kind or its decision's detail (the words a reviewer remembers: "is at
    revision 4", "budget"); `run` and `step` name a run and a step id exactly; `since` and `until`
    bound the day the manifest was sealed (UTC, inclusive)."""
    rows = ManifestItem.objects.filter(entry__tenant_id__in=tenant_ids)
    if decision:
        rows = rows.filter(decision=decision)
    if reason:
        rows = rows.filter(reason=reason)
    if q:
        rows = rows.filter(Q(item_id__icontains=q) | Q(source_ref__icontains=q) | Q(detail__icontains=q)
                           | Q(kind__icontains=q))
    if run:
        rows = rows.filter(manifest__job__run__run_id=run)
    if step:
        rows = rows.filter(manifest__job__step_id=step)
    if since:
        rows = rows.filter(manifest__created_at__date__gte=since)
    if until:
        rows = rows.filter(manifest__created_at__date__lte=until)
    return (
        rows.select_related("manifest__job__run", "manifest__job__tenant")
        .defer("manifest__document_packed", "manifest__payload_packed", "manifest__job__request_packed", "manifest__sections")
        .order_by("-manifest__created_at", "id")
    )


def item_search_groups(rows: QuerySet[ManifestItem]) -> QuerySet:
    """`item_search` rows grouped: one group per run, item, decision and reason, with how many
    steps it holds and when the first and last were sealed; the newest first. One query (paged by
    the caller); `group_steps` names each group's first and last step."""
    return (rows.order_by().values("item_id", "decision", "reason", run_pk=F("manifest__job__run_id"))
            .annotate(steps=Count("id"), first_at=Min("manifest__created_at"), last_at=Max("manifest__created_at"))
            .order_by("-last_at", "item_id", "decision", "reason"))


def group_steps(rows: QuerySet[ManifestItem], groups: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each group of a page of `item_search_groups` with its run, its first and last step (job id,
    step id) and the last step's gate and detail: one query over the page's runs and items."""
    if not groups:
        return groups
    found = (rows.order_by().filter(manifest__job__run_id__in={g["run_pk"] for g in groups},
                                    item_id__in={g["item_id"] for g in groups})
             .values("item_id", "decision", "reason", "hard_gate", "detail", "source_ref", "kind", "source_type",
                     run_pk=F("manifest__job__run_id"), run_id=F("manifest__job__run__run_id"),
                     tenant=F("manifest__job__tenant__slug"), job_id=F("manifest__job_id"),
                     step_id=F("manifest__job__step_id"), sealed_at=F("manifest__created_at"))
             .order_by("manifest__created_at", "manifest__job_id"))
    ends: dict[tuple, dict[str, Any]] = {}
    for row in found:
        key = (row["run_pk"], row["item_id"], row["decision"], row["reason"])
        end = ends.setdefault(key, {"first": row})
        end["last"] = row
    for group in groups:
        end = ends.get((group["run_pk"], group["item_id"], group["decision"], group["reason"])) or {}
        group["first"], group["last"] = end.get("first"), end.get("last")
    return groups


# --------------------------------------------------------------------------- compare


def _decisions(sections: dict[str, Any]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for row in sections.get("included") or []:
        out[row["item_id"]] = {"decision": "included", "reason": row.get("admission_reason"), "partition": row.get("partition"),
                               "tokens": row.get("tokens"), "kind": row.get("kind"), "source_ref": row.get("source_ref")}
    for row in sections.get("excluded") or []:
        out[row["item_id"]] = {"decision": "excluded", "reason": row.get("reason"), "hard_gate": row.get("hard_gate"),
                               "detail": row.get("detail"), "partition": row.get("partition"), "tokens": row.get("tokens"),
                               "kind": row.get("kind"), "source_ref": row.get("source_ref")}
    return out


def partition_deltas(budget_a: dict[str, Any] | None, budget_b: dict[str, Any] | None) -> list[dict[str, Any]]:
    parts_a = (budget_a or {}).get("partitions") or {}
    parts_b = (budget_b or {}).get("partitions") or {}
    names = list(parts_a) + [name for name in parts_b if name not in parts_a]
    rows = []
    for name in names:
        a, b = parts_a.get(name) or {}, parts_b.get(name) or {}
        used_a, used_b = a.get("used"), b.get("used")
        rows.append({
            "name": name,
            "used_a": used_a,
            "used_b": used_b,
            # what the partition took beyond its maximum share from a minimum another left unused
            # (PartitionUsage.borrowed): "used 23208, max 13200" reads as an error without it
            "borrowed_a": a.get("borrowed") or 0,
            "borrowed_b": b.get("borrowed") or 0,
            "delta": (used_b or 0) - (used_a or 0),
            "items_a": a.get("items"),
            "items_b": b.get("items"),
            "minimum_a": a.get("minimum"),
            "minimum_b": b.get("minimum"),
            "maximum_a": a.get("maximum"),
            "maximum_b": b.get("maximum"),
        })
    return rows


def compare_sections(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """What changed from manifest a to manifest b: flips, items on one side only, partitions, status."""
    da, db = _decisions(a), _decisions(b)
    flips, changed_reason = [], []
    for item_id, before in da.items():
        after = db.get(item_id)
        if after is None:
            continue
        if before["decision"] != after["decision"]:
            flips.append({"item_id": item_id, "before": before, "after": after})
        elif before["reason"] != after["reason"] or before.get("partition") != after.get("partition"):
            changed_reason.append({"item_id": item_id, "before": before, "after": after})
    assembly_a, assembly_b = a.get("assembly") or {}, b.get("assembly") or {}
    return {
        "flips": flips,
        "to_excluded": [f for f in flips if f["after"]["decision"] == "excluded"],
        "to_included": [f for f in flips if f["after"]["decision"] == "included"],
        "changed_reason": changed_reason,
        "only_a": [{"item_id": k, **v} for k, v in da.items() if k not in db],
        "only_b": [{"item_id": k, **v} for k, v in db.items() if k not in da],
        "partitions": partition_deltas(a.get("budget"), b.get("budget")),
        "status_a": assembly_a.get("status"),
        "status_b": assembly_b.get("status"),
        "blocked_reason_a": assembly_a.get("blocked_reason"),
        "blocked_reason_b": assembly_b.get("blocked_reason"),
        "used_a": (a.get("budget") or {}).get("estimated_used"),
        "used_b": (b.get("budget") or {}).get("estimated_used"),
    }


# --------------------------------------------------------------------------- serialized input

UNTRUSTED_ZONES = ("untrusted_data", "derived_context")
# The fence header's trust word -> the zone the dashboard badges (ctxeng.engine.render.TRUST_WORD).
_ZONE_OF_TRUST = {"task": "task", "state": "state", "derived": "derived_context", "untrusted": "untrusted_data"}


def _segments(text: str, item_of: dict[str, str] | None = None, tool_item: str | None = None,
              hashes: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """Split one content string into plain text and fenced item blocks (with what their header says).

    The engine's own reader (`render.split_fences`, linear in the text) finds the blocks; a block's
    `item_id` is the item its citable id names (`item_of`: cite id -> item id, from the manifest),
    or, for a tool result in its tool message, `tool_item`; else the citable id as written. Its
    `content_hash` is the manifest's (`hashes`: item id -> content hash); the fence carries none."""
    out: list[dict[str, Any]] = []
    for piece, header in split_fences(text):
        if header is None:
            if piece.strip():
                out.append({"text": piece, "block": None, "untrusted": False})
            continue
        zone = _ZONE_OF_TRUST.get(header["trust"], header["trust"])
        cite = header["cite"]
        item_id = tool_item if cite is None else (item_of or {}).get(cite, cite)
        out.append({"text": piece, "block": {**header, "item_id": item_id, "zone": zone,
                                              "content_hash": (hashes or {}).get(item_id or "")}, "zone": zone,
                    "untrusted": zone in UNTRUSTED_ZONES})
    return out


def _content_segments(content: Any, item_of: dict[str, str] | None = None, result_of: dict[str, str] | None = None,
                      call_id: str | None = None, hashes: dict[str, str] | None = None) -> list[dict[str, Any]]:
    if content is None:
        return []
    if isinstance(content, str):
        return _segments(content, item_of, (result_of or {}).get(call_id or ""), hashes)
    if isinstance(content, list):
        out: list[dict[str, Any]] = []
        for part in content:
            if not isinstance(part, dict):
                out.append({"text": json.dumps(part), "block": None, "untrusted": False})
            elif part.get("type") in ("text", "input_text", "output_text"):
                out += _segments(part.get("text") or "", item_of, None, hashes)
            elif part.get("type") == "tool_use":
                out.append({"text": json.dumps(part.get("input"), sort_keys=True), "block": None, "untrusted": False,
                            "tool": f"tool_use {part.get('name')} id={part.get('id')}"})
            elif part.get("type") == "tool_result":
                for seg in _content_segments(part.get("content"), item_of, result_of, part.get("tool_use_id"), hashes):
                    seg["tool"] = f"tool_result for {part.get('tool_use_id')}"
                    out.append(seg)
            else:
                out.append({"text": json.dumps(part, sort_keys=True), "block": None, "untrusted": False})
        return out
    return [{"text": json.dumps(content, sort_keys=True), "block": None, "untrusted": False}]


def input_messages(payload: Any, manifest: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """The provider payload as messages by role, each split into segments; untrusted blocks flagged.
    `manifest`: its document, to name each block's item (a block names it by its citable id, a tool
    result by the call its tool message answers) and each message's items (`message_items`)."""
    if not isinstance(payload, dict):
        return []
    item_of = {cite_id(r["item_id"]): r["item_id"] for r in (manifest or {}).get("included") or []}
    result_of = {p["serialized_call_id"]: p["result_item_id"] for p in (manifest or {}).get("tool_pairs") or []
                 if p.get("result_item_id")}
    hashes = {r["item_id"]: r.get("content_hash") for r in (manifest or {}).get("included") or []}
    messages: list[dict[str, Any]] = []
    system = payload.get("system") or payload.get("instructions")
    if system:
        messages.append({"role": "system", "segments": _content_segments(system), "extra": [], "calls": []})
    for message in payload.get("messages") or payload.get("input") or []:
        extra, calls = [], []
        for call in message.get("tool_calls") or []:
            function = call.get("function") or {}
            extra.append(f"tool call {call.get('id')}: {function.get('name')}({function.get('arguments')})")
            calls.append(call.get("id"))
        call_id = message.get("tool_call_id") or (message.get("call_id") if message.get("type") == "function_call_output" else None)
        if message.get("type") == "function_call":
            extra.append(f"tool call {message.get('call_id')}: {message.get('name')}({message.get('arguments')})")
            calls.append(message.get("call_id"))
        if call_id:
            extra.append(f"result for tool call {call_id}")
        content = message.get("output") if message.get("type") == "function_call_output" else message.get("content")
        calls += [part.get("id") for part in content if isinstance(part, dict) and part.get("type") == "tool_use"] \
            if isinstance(content, list) else []
        role = message.get("role") or ("tool" if call_id else "assistant")
        messages.append({"role": role, "segments": _content_segments(content, item_of, result_of, call_id, hashes),
                         "extra": extra, "calls": calls})
    message_items(messages, manifest)
    return messages


_NATIVE_ROLE = {"user": "task_intent", "assistant": "derived_context"}  # render.is_native


def message_items(messages: list[dict[str, Any]], manifest: dict[str, Any] | None) -> None:
    """Set each message's `items`, the items its text came from ({"item_id", "as"}), and `framing`,
    what ctxeng added that is no item's, from the manifest's records (render's layout):

    - the system text: the control items (then ctxeng's data-boundary notice);
    - a fenced block: the item its citable id names; a tool message: its pair's result item;
    - an assistant message's tool calls: each pair's result item (the call and its result are one pair);
    - a user or assistant turn's plain text: the native turn whose content hash is the text's
      (`sha256_text`), or, for an assistant turn of several items joined into one text, the
      turns of that speaker not matched otherwise, in turn order;
    - the empty-user placeholder: no item (framing)."""
    included = (manifest or {}).get("included") or []
    if not included:
        for message in messages:
            message["items"], message["framing"] = [], ""
        return
    pairs = {p.get("serialized_call_id"): p for p in (manifest or {}).get("tool_pairs") or []}
    native = [r for r in included if isinstance(r.get("turn"), dict)
              and r.get("intended_role") == _NATIVE_ROLE.get(r["turn"].get("speaker"))]
    by_hash = {r.get("content_hash"): r["item_id"] for r in native}
    matched: set[str] = set()
    unmatched: list[tuple[dict[str, Any], dict[str, Any]]] = []  # (message, segment) of plain turn text
    for message in messages:
        items: list[dict[str, Any]] = []
        message["framing"] = ""
        if message["role"] == "system":
            items += [{"item_id": r["item_id"], "as": "control text"} for r in included if r.get("zone") == "control"]
            message["framing"] = "ctxeng's data-boundary notice"
        for call in message.get("calls") or []:
            pair = pairs.get(call) or {}
            if pair.get("result_item_id"):
                items.append({"item_id": pair["result_item_id"], "as": f"call {pair.get('tool_name') or call}"})
        for segment in message["segments"]:
            block = segment.get("block")
            if block is not None:
                if block.get("item_id"):
                    result = message["role"] == "tool" or str(segment.get("tool") or "").startswith("tool_result")
                    items.append({"item_id": block["item_id"], "as": "tool result" if result else "fenced block"})
            elif segment.get("tool") is None and message["role"] in _NATIVE_ROLE and segment["text"].strip():
                if segment["text"] == EMPTY_USER:
                    message["framing"] = "ctxeng's placeholder: no user-side context was admitted"
                elif by_hash.get(sha256_text(segment["text"])):
                    item_id = by_hash[sha256_text(segment["text"])]
                    matched.add(item_id)
                    items.append({"item_id": item_id, "as": f"{message['role']} turn"})
                else:
                    unmatched.append((message, segment))
        message["items"] = items
    for message, _ in unmatched:
        speaker = message["role"]
        rest = sorted((r for r in native if r["item_id"] not in matched and r["turn"].get("speaker") == speaker),
                      key=lambda r: r["turn"].get("index", 0))
        turn = rest[0]["turn"].get("index") if rest else None
        for record in (r for r in rest if r["turn"].get("index") == turn):
            matched.add(record["item_id"])
            message["items"].append({"item_id": record["item_id"], "as": f"{speaker} turn"})
    for message in messages:  # an item named twice in one message (a tool call and its result) is listed once
        seen: set[str] = set()
        message["items"] = [i for i in message["items"] if not (i["item_id"] in seen or seen.add(i["item_id"]))]


# --------------------------------------------------------------------------- the item inspector

ZONE_ORDER = ("control", "task", "state", "untrusted_data")
ITEM_GROUPS = ("reason", "partition", "zone", "none")
ITEM_DECISIONS = ("included", "excluded")


ITEM_SORTS = ("", "tokens")


@dataclass(frozen=True)
class ItemFilter:
    """The inspector list's filters, as the URL states them (already validated by the view).

    `kind`, `source_type` and `source` (a `source_key`: `repo:…`, `host:…`, `tool:…` or `none`)
    are the window view's rows; `sort="tokens"` lists the largest items first, ungrouped."""

    decision: str = ""
    reason: str = ""
    partition: str = ""
    q: str = ""
    group: str = "reason"
    kind: str = ""
    source_type: str = ""
    source: str = ""
    sort: str = ""

    @property
    def narrows_counts(self) -> bool:
        """True when the count is not one of the totals `Manifest.sections` already holds."""
        return bool(self.q or self.partition or self.kind or self.source_type or self.source
                    or (self.reason and self.decision == "included"))


def _zone_rank() -> Case:
    return Case(*(When(zone=name, then=Value(rank)) for rank, name in enumerate(ZONE_ORDER)),
                default=Value(len(ZONE_ORDER)), output_field=IntegerField())


def _filtered_items(manifest_id: int, item_filter: ItemFilter) -> QuerySet[ManifestItem]:
    rows = ManifestItem.objects.filter(manifest_id=manifest_id)
    if item_filter.decision:
        rows = rows.filter(decision=item_filter.decision)
    if item_filter.reason:
        rows = rows.filter(reason=item_filter.reason)
    if item_filter.partition:
        rows = rows.filter(partition=item_filter.partition)
    if item_filter.kind:
        rows = rows.filter(kind=item_filter.kind)
    if item_filter.source_type:
        rows = rows.filter(source_type=item_filter.source_type)
    if item_filter.source:
        rows = rows.annotate(**_REF_KEYS).filter(_source_q(item_filter.source))
    if item_filter.q:
        q = item_filter.q
        rows = rows.filter(Q(item_id__icontains=q) | Q(kind__icontains=q) | Q(source_ref__icontains=q)
                           | Q(reason__icontains=q) | Q(hard_gate__icontains=q))
    return rows


def reason_rank(decision: str, reason: str) -> int:
    """The default list's group rank: included first, then REASON_ORDER, then anything else."""
    if decision == Decision.INCLUDED:
        return -1
    return REASON_ORDER.index(reason) if reason in REASON_ORDER else len(REASON_ORDER)


def _ordered_items(rows: QuerySet[ManifestItem], group: str, sort: str = "") -> QuerySet[ManifestItem]:
    """Rows in display order with a `group_label` annotation (and, grouped by partition or zone, a
    `sort_key`: the group's rank).

    A manifest's rows are written in the default list's order (reason rank, then document
    position), so that list is in `id` order and pages by the index alone; the other groupings
    order within a group by `position`, the item's place in the sealed document. Sorted by tokens,
    the list is one group, largest first (an item never counted last), ties in document order."""
    if sort == "tokens":
        return rows.annotate(group_label=Value("", output_field=CharField())).order_by(
            F("tokens").desc(nulls_last=True), "position")
    if group == "partition":
        return rows.annotate(sort_key=Case(When(partition="", then=Value(1)), default=Value(0), output_field=IntegerField()),
                             group_label=F("partition")).order_by("sort_key", "partition", "position")
    if group == "zone":
        return rows.annotate(sort_key=_zone_rank(), group_label=F("zone")).order_by("sort_key", "position")
    if group == "none":
        return rows.annotate(group_label=F("decision")).order_by("position")
    label = Case(When(decision=Decision.INCLUDED, then=Value("included")), default=F("reason"), output_field=CharField())
    return rows.annotate(group_label=label).order_by("id")


class InspectorItems:
    """The inspector's item list over ManifestItem rows, as a sequence Django's Paginator pages.

    A slice is two indexed queries (the page's row ids with their group, then their records);
    the count comes from `Manifest.sections` unless the filter narrows it (then one COUNT).
    """

    def __init__(self, *, manifest_id: int, item_filter: ItemFilter, known_total: int | None,
                 sections: dict[str, Any] | None = None) -> None:
        self.manifest_id, self.item_filter, self.known_total = manifest_id, item_filter, known_total
        self.sections = sections or {}
        self._total: int | None = known_total

    def queryset(self) -> QuerySet[ManifestItem]:
        return _ordered_items(_filtered_items(self.manifest_id, self.item_filter), self.item_filter.group,
                              self.item_filter.sort)

    def count(self) -> int:
        if self._total is None:
            self._total = _filtered_items(self.manifest_id, self.item_filter).count()
        return self._total

    def __len__(self) -> int:
        return self.count()

    def _default_offset(self) -> int | None:
        """Where the filtered list starts in the manifest's rows (written in the default list's
        order), when it is one run of them whose place `sections` counts tell: the default
        grouping filtered by decision or by an exclusion reason at most. None otherwise."""
        f, sections = self.item_filter, self.sections
        if f.group != "reason" or f.sort or f.narrows_counts or "reason_counts" not in sections:
            return None
        if f.reason and f.reason not in REASON_ORDER:
            return None
        if not f.reason:
            return (sections.get("included_total") or 0) if f.decision == Decision.EXCLUDED else 0
        own = REASON_ORDER.index(f.reason)
        return (sections.get("included_total") or 0) + sum(
            count for name, count in sections["reason_counts"] if name in REASON_ORDER and REASON_ORDER.index(name) < own)

    def __getitem__(self, index: slice) -> list[dict[str, Any]]:
        if not isinstance(index, slice):
            raise TypeError("InspectorItems pages by slice")
        offset = self._default_offset()
        columns = ("decision", "reason", "record_digest", "label")
        if offset is not None:
            # One run of the manifest's rows in id order: the index pages it, no join filters it.
            start, stop = offset + (index.start or 0), offset + min(index.stop or self.count(), self.count())
            heads = list(ManifestItem.objects.filter(manifest_id=self.manifest_id).order_by("id")
                         .values(*columns, tenant_id=F("entry__tenant_id"))[start:stop])
            for row in heads:
                row["group_label"] = "included" if row["decision"] == Decision.INCLUDED else row["reason"]
        else:
            heads = list(self.queryset().values(*columns, "group_label", tenant_id=F("entry__tenant_id"))[index])
        # The label stored at seal rides on the record, where the item_label filter reads it.
        return [{"decision": row["decision"], "group": row["group_label"] or "",
                 "record": {**row["record"], "label": row["label"]} if row["label"] else row["record"]}
                for row in records_of(heads)]

    def locate(self, selected: dict[str, Any]) -> int | None:
        """The 0-based index of the selected row (as `item_rows_by_id` gives it) in this list, or
        None when the filter leaves it out; one aggregate query, which also counts the list."""
        group, decision = self.item_filter.group, selected["decision"]
        record = selected.get("record") or {}
        offset = self._default_offset()
        if offset is not None and (decision == Decision.INCLUDED or selected["reason"] in REASON_ORDER):
            return self._locate_by_counts(selected, offset)
        if self.item_filter.sort == "tokens":
            tokens = record.get("tokens")
            if tokens is None:
                earlier = Q(tokens__isnull=False) | Q(tokens__isnull=True, position__lt=selected["position"])
            else:
                earlier = Q(tokens__gt=tokens) | Q(tokens=tokens, position__lt=selected["position"])
        elif group == "partition":
            partition = selected.get("partition") or ""
            key = 0 if partition else 1
            earlier = (Q(sort_key__lt=key) | Q(sort_key=key, partition__lt=partition)
                       | Q(sort_key=key, partition=partition, position__lt=selected["position"]))
        elif group == "none":
            earlier = Q(position__lt=selected["position"])
        elif group == "zone":
            key = ZONE_ORDER.index(record["zone"]) if record.get("zone") in ZONE_ORDER else len(ZONE_ORDER)
            earlier = Q(sort_key__lt=key) | Q(sort_key=key, position__lt=selected["position"])
        else:
            earlier = Q(id__lt=selected["id"])  # the default list is in id order
        found = self.queryset().order_by().aggregate(
            before=Count("id", filter=earlier), listed=Count("id", filter=Q(id=selected["id"])), total=Count("id"))
        if self._total is None:
            self._total = found["total"]
        return found["before"] if found["listed"] else None


    def _locate_by_counts(self, selected: dict[str, Any], offset: int) -> int | None:
        """`locate` for the default list (decision and reason groups, no search): the manifest's
        rows before it (one indexed count; they are in the list's order) less where the filtered
        run starts."""
        f, decision, reason = self.item_filter, selected["decision"], selected["reason"]
        if (f.decision and f.decision != decision) or (f.reason and (decision != Decision.EXCLUDED or reason != f.reason)):
            return None
        return ManifestItem.bare.filter(manifest_id=self.manifest_id, id__lt=selected["id"]).count() - offset


def document_items_filtered(sections: dict[str, Any], item_filter: ItemFilter) -> list[dict[str, Any]]:
    """The same list for a manifest without item rows, from the document's included/excluded lists."""
    rows = [{"decision": "included", "record": r} for r in sections.get("included") or []]
    rows += [{"decision": "excluded", "record": r} for r in sections.get("excluded") or []]
    f, q = item_filter, item_filter.q.lower()

    def reason(row: dict[str, Any]) -> str:
        record = row["record"]
        return record.get("admission_reason") if row["decision"] == "included" else record.get("reason")

    def keep(row: dict[str, Any]) -> bool:
        record = row["record"]
        if f.decision and row["decision"] != f.decision:
            return False
        if f.reason and reason(row) != f.reason:
            return False
        if f.partition and (record.get("partition") or "") != f.partition:
            return False
        if (f.kind and record.get("kind") != f.kind) or (f.source_type and record.get("source_type") != f.source_type):
            return False
        if f.source and source_key_of(record.get("source_ref"))[0] != f.source:
            return False
        if q:
            text = " ".join(str(v) for v in (record.get("item_id"), record.get("kind"), json.dumps(record.get("source_ref")),
                                             reason(row), record.get("hard_gate") or ""))
            return q in text.lower()
        return True

    kept = [row for row in rows if keep(row)]
    reason_rank = {name: i for i, name in enumerate(REASON_ORDER)}
    zone_rank = {name: i for i, name in enumerate(ZONE_ORDER)}
    for index, row in enumerate(kept):
        record = row["record"]
        if f.sort == "tokens":
            row["group"] = ""
            row["_key"] = (record.get("tokens") is None, -(record.get("tokens") or 0), index)
        elif f.group == "partition":
            row["group"] = record.get("partition") or ""
            row["_key"] = (0 if row["group"] else 1, row["group"], index)
        elif f.group == "zone":
            row["group"] = record.get("zone") or ""
            row["_key"] = (zone_rank.get(row["group"], len(zone_rank)), index)
        elif f.group == "none":
            row["group"] = row["decision"]
            row["_key"] = (0 if row["decision"] == "included" else 1, index)
        else:
            row["group"] = "included" if row["decision"] == "included" else reason(row)
            row["_key"] = (-1 if row["decision"] == "included" else reason_rank.get(reason(row), len(reason_rank)), index)
    return sorted(kept, key=lambda row: row["_key"])


def inspector_document_parts(manifest_id: int, *, sections: tuple[str, ...], with_payload: bool) -> dict[str, Any]:
    """What the selected item's story needs that `sections` does not hold, in one query: the named
    sections of the sealed document (each one a parse of the whole document on SQLite, so only
    when needed) and, for a ready manifest, the payload."""
    if not sections and not with_payload:
        return {}
    found = Manifest.objects.filter(pk=manifest_id).values_list("document_packed", "payload_packed", "job__tenant_id").first()
    if found is None:
        return {}
    document_packed, payload_packed, tenant_id = found
    parts: dict[str, Any] = {}
    if sections:
        document = content_read(tenant_id=tenant_id, skeleton=document_packed, keys=sections)
        parts.update((name, document.get(name)) for name in sections)
    if with_payload:
        parts["payload"] = None if payload_packed is None else content_read(tenant_id=tenant_id, skeleton=payload_packed)
    return parts


def _rows_of_items(manifest_id: int, item_ids: list[str]) -> QuerySet[ManifestItem]:
    """The manifest's rows of the named items: their decisions first (by tenant and item id), then
    the rows by (manifest, decision), both indexed, whatever the manifest's size."""
    tenant = Manifest.objects.filter(pk=manifest_id).values("job__tenant_id")[:1]
    entries = ItemDecision.objects.filter(tenant_id=Subquery(tenant), item_id__in=item_ids).values("id")
    return ManifestItem.objects.filter(manifest_id=manifest_id, entry__in=entries)


def item_rows_by_id(manifest_id: int, item_ids: set[str]) -> dict[str, dict[str, Any]]:
    """decision, reason and record of each named item of one manifest (one indexed query)."""
    rows = _rows_of_items(manifest_id, sorted(item_ids))
    found = records_of(list(rows.values("id", "position", "item_id", "decision", "reason", "partition", "record_digest",
                                        tenant_id=F("entry__tenant_id"))))
    return {row["item_id"]: row for row in found}


# --------------------------------------------------------------------------- run timeline


RUN_ITEM_SORTS = {"": "item id", "changed": "changed most", "excluded": "most excluded"}


def run_item_ids(run: Run, *, steps: int, changed_only: bool = False, q: str = "", reason: str = "",
                 sort: str = "") -> QuerySet:
    """The distinct item ids of a run's manifests (one query, paged by the caller).

    `changed_only` keeps the items whose decision or reason differs between steps, or that are
    missing from some step; `q` matches the item id or text of the source ref; `reason` keeps the
    items excluded for it at some step. Sorted by item id, or by how often the item changed (its
    distinct decisions and reasons, and whether it is missing from a step), or by the number of
    steps that excluded it (`sort`), the item id breaking ties."""
    rows = ManifestItem.objects.filter(manifest__job__run=run)
    if q:
        rows = rows.filter(Q(item_id__icontains=q) | Q(source_ref__icontains=q))
    rows = rows.values("item_id").annotate(
        decisions=Count("decision", distinct=True), reasons=Count("reason", distinct=True),
        steps=Count("manifest", distinct=True), excluded_steps=Count("id", filter=Q(decision=Decision.EXCLUDED)))
    if changed_only:
        rows = rows.filter(Q(decisions__gt=1) | Q(reasons__gt=1) | Q(steps__lt=steps))
    if reason:
        rows = rows.annotate(with_reason=Count("id", filter=Q(decision=Decision.EXCLUDED, reason=reason))).filter(
            with_reason__gt=0)
    if sort == "changed":
        rows = rows.annotate(variety=F("decisions") + F("reasons") + Case(
            When(steps__lt=steps, then=Value(1)), default=Value(0), output_field=IntegerField())).order_by(
            "-variety", "-excluded_steps", "item_id")
    elif sort == "excluded":
        rows = rows.order_by("-excluded_steps", "item_id")
    else:
        rows = rows.order_by("item_id")
    return rows.values_list("item_id", flat=True)


def run_item_cells(run: Run, item_ids: list[str], job_ids: list[Any] | None = None) -> dict[tuple[str, str], dict[str, Any]]:
    """(item_id, job id) -> that step's decision for one page of items (and of steps, `job_ids`):
    one query, of the columns the matrix shows (decision, reason, partition) and names its rows by
    (`item_label`: label, kind, source_ref)."""
    rows = ManifestItem.objects.filter(manifest__job__run=run, item_id__in=item_ids)
    if job_ids is not None:
        rows = rows.filter(manifest__job_id__in=job_ids)
    rows = rows.values("item_id", "decision", "reason", "partition", "kind", "source_ref", "label",
                       job_id=F("manifest__job_id"))
    return {(row["item_id"], str(row["job_id"])): row for row in rows}


# --------------------------------------------------------------------------- search within a run

RUN_SEARCH_HITS = 20  # items listed for one search
RUN_SEARCH_REQUESTS = 20  # distinct submitted requests whose item text is read, the newest first
RUN_SEARCH_SNIPPET = 60  # characters either side of the match


@dataclass
class RunSearchHit:
    """One item a search within a run found: where the words were found (`found_in`: "text",
    "label", "item id", "source ref", "detail" or "kind"), the words around them, and the step
    where it matters: where the item's latest decision began (the step a correction arrived, or
    the one that first excluded an item still excluded), with that decision."""

    item_id: str
    found_in: str
    snippet: str
    label: str = ""
    job_id: Any = None
    step_id: str = ""
    decision: str = ""
    reason: str = ""
    steps: int = 0


def _snippet(text: str, at: int, length: int) -> str:
    """The words around `text[at:at + length]`, on one line, "…" where cut."""
    start, end = max(0, at - RUN_SEARCH_SNIPPET), min(len(text), at + length + RUN_SEARCH_SNIPPET)
    return ("…" if start else "") + " ".join(text[start:end].split()) + ("…" if end < len(text) else "")


def _found(text: Any, words: str) -> int:
    return str(text).casefold().find(words) if text not in (None, "") else -1


def run_item_search(run: Run, q: str, *, limit: int = RUN_SEARCH_HITS) -> tuple[list[RunSearchHit], dict[str, int]]:
    """The items of `run` whose label or text (or id, source ref, decision detail, kind) holds
    `q` (case-insensitive), at most `limit`, each with the step where it matters.

    Bounded whatever the run's length: the decisions are matched in one query; the item text and
    labels of the newest RUN_SEARCH_REQUESTS distinct submitted requests are read (an item no
    later request carries is found by its decision's columns only); one more query finds each
    hit's steps. The run was found in the user's tenants and every read names it, so a search
    never reaches another tenant's items. Returns (hits, what was searched)."""
    words = q.casefold()
    hits: dict[str, RunSearchHit] = {}
    jobs = list(AssemblyJob.objects.filter(run=run).order_by("-created_at", "-id").values_list("id", "request_digest"))
    newest: dict[Any, Any] = {}  # request digest -> the newest job that submitted it
    for job_id, digest in jobs:
        if len(newest) < RUN_SEARCH_REQUESTS:
            newest.setdefault(digest, job_id)
    to_read = AssemblyJob.objects.filter(pk__in=list(newest.values())).only("id", "tenant_id", "request_packed")
    order = {job_id: n for n, job_id in enumerate(newest.values())}
    for job in sorted(to_read, key=lambda j: order[j.pk]):
        request = job_request(job, keys=("candidates", "tool_calls"))
        calls = {str(c.get("call_id")): c for c in request.get("tool_calls") or [] if isinstance(c, dict)}
        for candidate in request.get("candidates") or []:
            item_id = str(candidate.get("item_id") or "") if isinstance(candidate, dict) else ""
            if not item_id or item_id in hits or len(hits) >= limit:
                continue
            label = candidate_label(candidate, calls)
            content = candidate.get("content") if isinstance(candidate.get("content"), str) else ""
            for found_in, text in (("text", content), ("label", label)):
                at = _found(text, words)
                if at >= 0:
                    hits[item_id] = RunSearchHit(item_id, found_in, _snippet(text, at, len(q)), label)
                    break
    if len(hits) < limit:
        columns = ("item_id", "source_ref", "detail", "kind")
        rows = (ManifestItem.objects.filter(manifest__job__run=run)
                .filter(Q(item_id__icontains=q) | Q(source_ref__icontains=q) | Q(detail__icontains=q) | Q(kind__icontains=q))
                .exclude(item_id__in=list(hits)).order_by("item_id").values_list(*columns).distinct()[: 4 * limit])
        for row in rows:
            if row[0] in hits or len(hits) >= limit:
                continue
            for found_in, value in zip(("item id", "source ref", "detail", "kind"), row, strict=True):
                text = json.dumps(value, ensure_ascii=False, sort_keys=True) if isinstance(value, dict) else str(value or "")
                at = _found(text, words)
                if at >= 0:
                    hits[row[0]] = RunSearchHit(row[0], found_in, _snippet(text, at, len(q)))
                    break
    _where_it_matters(run, hits)
    found = [hit for hit in hits.values() if hit.job_id is not None]  # an item no sealed step decided is not listed
    return found, {"requests": len(newest), "steps": len(jobs)}


def _where_it_matters(run: Run, hits: dict[str, RunSearchHit]) -> None:
    """Each hit's step where it matters: the step its latest decision and reason began at, the
    last step its decision changed (one query over the hits' rows in the run, in step order)."""
    if not hits:
        return
    rows = (ManifestItem.objects.filter(manifest__job__run=run, item_id__in=list(hits))
            .values_list("item_id", "decision", "reason", "manifest__job_id", "manifest__job__step_id")
            .order_by("manifest__created_at", "manifest__job_id"))
    last: dict[str, tuple[str, str]] = {}
    for item_id, decision, reason, job_id, step_id in rows:
        hit = hits[item_id]
        hit.steps += 1
        if last.get(item_id) != (decision, reason):
            hit.job_id, hit.step_id, hit.decision, hit.reason = job_id, step_id, decision, reason
            last[item_id] = (decision, reason)


# --------------------------------------------------------------------------- token estimates vs provider usage


def _assembly_model(column: str) -> NullIf:
    """The reported manifest's model provider or name (None when unknown), from its column."""
    return NullIf(F(f"manifest__{column}"), Value(""), output_field=TextField())


def _usage_reports(tenant: Tenant) -> QuerySet[UsageReport]:
    """One tenant's usage reports, each with its model and its error: `error` is the estimate
    minus the provider's count (positive: the engine over-estimated), `error_pct` that as a
    percentage of the provider's count (None when the provider reported 0 input tokens), `in_band`
    whether calibration reads it (selectors.usage_in_band; an outlier is shown, never calibrated on)."""
    error = ExpressionWrapper(F("estimated_input_tokens") - F("input_tokens"), output_field=IntegerField())
    in_band = Case(When(usage_in_band(), then=Value(True)), default=Value(False), output_field=BooleanField())
    return (
        UsageReport.objects.filter(manifest__job__tenant=tenant)
        .annotate(provider=_assembly_model("model_provider"), model_name=_assembly_model("model_name"), error=error,
                  in_band=in_band)
        .annotate(error_pct=ExpressionWrapper(
            Cast(F("error"), FloatField()) * Value(100.0) / Cast(NullIf(F("input_tokens"), Value(0)), FloatField()),
            output_field=FloatField()))
    )


def usage_by_model(*, tenant: Tenant) -> list[dict[str, Any]]:
    """Estimate vs provider-reported input tokens per model (provider and name), most reported first.

    Two queries whatever the number of reports: the figures grouped in SQL, then each model's
    worst over- and under-estimate (the reports ranking first by error, either way, within their
    model). Means of percentages are per report (a report with 0 actual tokens has none).
    """
    reports = _usage_reports(tenant)
    rows = list(
        reports.values("provider", "model_name")
        .annotate(
            calls=Count("id"),
            estimated_sum=Sum("estimated_input_tokens"),
            actual_sum=Sum("input_tokens"),
            estimated_mean=Avg("estimated_input_tokens"),
            actual_mean=Avg("input_tokens"),
            error_mean=Avg("error"),
            error_pct_mean=Avg("error_pct"),
            abs_error_pct_mean=Avg(Abs("error_pct")),
            last_reported_at=Max("reported_at"),
        )
        .order_by("-calls", F("provider").asc(nulls_last=True), F("model_name").asc(nulls_last=True))
    )
    if not rows:
        return rows
    by_model = [F("provider"), F("model_name")]
    extremes = (
        reports.annotate(
            over_rank=Window(RowNumber(), partition_by=by_model, order_by=[F("error").desc(), F("id").desc()]),
            under_rank=Window(RowNumber(), partition_by=by_model, order_by=[F("error").asc(), F("id").desc()]),
        )
        .filter(Q(over_rank=1) | Q(under_rank=1))
        .values("provider", "model_name", "error", "error_pct", "estimated_input_tokens", "input_tokens",
                "over_rank", "under_rank", job_id=F("manifest__job_id"))
    )
    worst: dict[tuple[Any, Any], dict[str, Any]] = {}
    for row in extremes:
        found = worst.setdefault((row["provider"], row["model_name"]), {})
        if row["over_rank"] == 1 and row["error"] > 0:
            found["worst_over"] = row
        if row["under_rank"] == 1 and row["error"] < 0:
            found["worst_under"] = row
    for row in rows:
        found = worst.get((row["provider"], row["model_name"]), {})
        row["worst_over"], row["worst_under"] = found.get("worst_over"), found.get("worst_under")
    calibrated = usage_calibration(tenant=tenant)
    for row in rows:
        row["calibration"] = calibrated.get((row["provider"], row["model_name"]))
    return rows


def usage_calibration(*, tenant: Tenant, clause: BudgetCalibration | None = None) -> dict[tuple[Any, Any], dict[str, Any]]:
    """Per model (provider, name): its counter, the calibration factor its newest reports give
    under `clause` (default: the documented defaults, as a policy without the clause has) and
    the estimate error before and after that factor over those reports. One query: the newest
    CALIBRATION_WINDOW reports of every model within the plausible band, as the worker reads them
    (`usage_ratios`); `outliers`: how many of the newest reports outside the band were left out.

    After calibration the estimate is `estimated × factor`; an exact counter's factor is 1, so
    its figures do not move. `under_*`: the share of calls whose estimate was below the actual
    count, the error the budget must not make."""
    clause = clause or BudgetCalibration()
    by_model = [F("provider"), F("model_name")]
    rows = (
        _usage_reports(tenant)
        .annotate(newest=Window(RowNumber(), partition_by=[*by_model, F("in_band")],
                                order_by=[F("reported_at").desc(), F("id").desc()]))
        .filter(newest__lte=CALIBRATION_WINDOW)
        .values_list("provider", "model_name", "input_tokens", "estimated_input_tokens", "in_band")
    )
    reports: dict[tuple[Any, Any], list[tuple[int, int]]] = {}
    outliers: Counter[tuple[Any, Any]] = Counter()
    for provider, name, actual, estimated, in_band in rows:
        if in_band:
            reports.setdefault((provider, name), []).append((actual, estimated))
        else:
            outliers[(provider, name)] += 1
    for model in outliers:
        reports.setdefault(model, [])
    out = {}
    for (provider, name), pairs in reports.items():
        estimate = estimate_for(ModelSpec(provider=provider or "?", name=name or "?", context_limit=1))
        ratios = [actual / estimated for actual, estimated in pairs if estimated > 0]
        cal = None if estimate.exact else calibrate(name or "?", ratios, clause)
        factor = 1.0 if cal is None else cal.factor
        counted = [(actual, estimated) for actual, estimated in pairs if actual > 0]

        def pct(scale: float, counted=counted) -> float | None:
            return sum(100.0 * (e * scale - a) / a for a, e in counted) / len(counted) if counted else None

        out[(provider, name)] = {
            "encoding": estimate.encoding, "exact": estimate.exact, "basis": estimate.basis,
            "factor": factor, "calibration_basis": "exact count" if cal is None else cal.basis,
            "reports_used": 0 if cal is None else cal.reports_used, "window": len(pairs),
            "outliers": outliers[(provider, name)],
            "error_pct_before": pct(1.0), "error_pct_after": pct(factor),
            "under_before": sum(e < a for a, e in pairs) / len(pairs) if pairs else None,
            "under_after": sum(e * factor < a for a, e in pairs) / len(pairs) if pairs else None,
        }
    return out


def usage_reports_latest(*, tenant: Tenant) -> QuerySet[UsageReport]:
    """One tenant's usage reports, most recently reported first, as display rows (for paging)."""
    return (
        _usage_reports(tenant)
        .order_by("-reported_at", "-id")
        .values("provider", "model_name", "estimated_input_tokens", "input_tokens", "cached_tokens", "output_tokens",
                "error", "error_pct", "in_band", "reported_at", job_id=F("manifest__job_id"),
                run_id=F("manifest__job__run__run_id"), step_id=F("manifest__job__step_id"))
    )


# --------------------------------------------------------------------------- what is eating the window

# An item's *source*, read from its source_ref: the tool that produced it (`tool_name`, as the SDK
# writes it, or `tool`), else the repository it came from (`repo`), else the host of its `url`
# (`tool:`, `repo:`, `host:`), or `none` when it names none of these. The SQL filter (`_source_q`) and the Python reading (`source_key_of`) agree on it, the
# host included: the regular expressions below are the same on both sides (SQLite's REGEXP is
# Python's `re`; PostgreSQL's `~*` reads them alike).
SOURCE_KINDS = {"tool": "tool", "repo": "repository", "host": "URL host"}
_URL_HOST = re.compile(r"^[a-z][a-z0-9+.-]*://(?:[^/?#@]*@)?([^/?#:@]+)", re.IGNORECASE)
_URL_WITH_HOST_SQL = r"^[a-z][a-z0-9+.-]*://([^/?#@]*@)?[^/?#:@]+"
# As text columns: a bare key transform would compare as JSON (`= 'pi'` is not JSON on SQLite).
_REF_KEYS = {f"ref_{key}": Cast(KeyTextTransform(key, "entry__source_ref"), TextField())
             for key in ("tool_name", "tool", "repo", "url")}
_REF_COLUMNS = tuple(_REF_KEYS)
WINDOW_DIMENSIONS = {"source": "source", "source_type": "source type", "kind": "kind", "partition": "partition"}
LARGEST_SHOWN = 20
RUN_WINDOW_ROWS = 20


def source_key(tool_name: Any, tool: Any, repo: Any, url: Any) -> str:
    """`tool:<name>`, `repo:<name>`, `host:<host>` or `none`, from the source_ref fields."""
    if tool_name not in (None, ""):
        return f"tool:{tool_name}"
    if tool not in (None, ""):
        return f"tool:{tool}"
    if repo not in (None, ""):
        return f"repo:{repo}"
    found = _URL_HOST.match(url) if isinstance(url, str) else None
    return f"host:{found.group(1).lower()}" if found else "none"


def source_key_of(source_ref: Any) -> tuple[str, str]:
    """(key, label) of a source_ref dict (see `source_key`)."""
    ref = source_ref if isinstance(source_ref, dict) else {}
    key = source_key(*(ref.get(name) for name in ("tool_name", "tool", "repo", "url")))
    return key, source_label(key)


def source_label(key: str) -> str:
    kind, _, name = key.partition(":")
    return f"{SOURCE_KINDS[kind]} {name}" if kind in SOURCE_KINDS and name else "no repository, URL or tool"


def source_key_valid(key: str) -> bool:
    kind, _, name = key.partition(":")
    return key == "none" or (kind in SOURCE_KINDS and bool(name))


def _absent(name: str) -> Q:
    return Q(**{f"{name}__isnull": True}) | Q(**{name: ""})


def _source_q(key: str) -> Q:
    """The rows (annotated with `_REF_KEYS`) whose `source_key` is `key`."""
    kind, _, name = key.partition(":")
    no_tool = _absent("ref_tool_name") & _absent("ref_tool")
    if kind == "tool":
        return Q(ref_tool_name=name) | (_absent("ref_tool_name") & Q(ref_tool=name))
    if kind == "repo":
        return no_tool & Q(ref_repo=name)
    no_tool_or_repo = no_tool & _absent("ref_repo")
    if kind == "host":
        return no_tool_or_repo & Q(ref_url__iregex=rf"^[a-z][a-z0-9+.-]*://([^/?#@]*@)?{re.escape(name)}([:/?#@]|$)")
    return no_tool_or_repo & (Q(ref_url__isnull=True) | ~Q(ref_url__iregex=_URL_WITH_HOST_SQL))


@dataclass
class WindowRow:
    """One row of the window view: a source, source type, kind or partition with what it holds."""

    key: str
    label: str
    tokens: int = 0  # in the window: the included items' tokens
    items_in: int = 0
    items_out: int = 0
    tokens_out: int = 0  # the excluded items' counted tokens (what was kept out)
    share: float = 0.0  # percent of the window's item tokens


def _window_rollup(groups: list[tuple[dict[str, Any], int, int]]) -> dict[str, list[WindowRow]]:
    """Each dimension's rows, largest in the window first, from (columns, tokens, items) groups.

    `columns` carries decision, source_type, kind, partition and the source key; the same rollup
    serves SQL groups (a manifest with item rows) and single records (one read from the document)."""
    tables: dict[str, dict[str, WindowRow]] = {name: {} for name in WINDOW_DIMENSIONS}
    window_tokens = 0
    for columns, tokens, items in groups:
        included = columns["decision"] == Decision.INCLUDED
        window_tokens += tokens if included else 0
        for name in WINDOW_DIMENSIONS:
            key = columns[name] or ""
            label = source_label(key) if name == "source" else (key or "no partition")
            row = tables[name].setdefault(key, WindowRow(key=key, label=label))
            if included:
                row.tokens += tokens
                row.items_in += items
            else:
                row.tokens_out += tokens
                row.items_out += items
    out = {}
    for name, rows in tables.items():
        for row in rows.values():
            row.share = 100.0 * row.tokens / window_tokens if window_tokens else 0.0
        out[name] = sorted(rows.values(), key=lambda r: (-r.tokens, -r.items_in, -r.tokens_out, r.key))
    return out


def window_of(manifest_id: int) -> dict[str, list[WindowRow]]:
    """Tokens by source, source type, kind and partition of one manifest: one GROUP BY query over
    its item rows (the groups are the distinct sources, not the items), rolled up here."""
    groups = (
        ManifestItem.objects.filter(manifest_id=manifest_id).annotate(**_REF_KEYS)
        .values("decision", "source_type", "kind", "partition", *_REF_COLUMNS)
        .annotate(token_sum=Sum("tokens"), items=Count("id")).order_by()
    )
    return _window_rollup([
        ({**row, "source": source_key(*(row[name] for name in _REF_COLUMNS))}, row["token_sum"] or 0, row["items"])
        for row in groups
    ])


def window_of_document(sections: dict[str, Any]) -> dict[str, list[WindowRow]]:
    """`window_of` for a manifest without item rows, from its included and excluded lists."""
    groups = []
    for decision in (Decision.INCLUDED, Decision.EXCLUDED):
        for record in sections.get(decision.value) or []:
            columns = {"decision": decision, "source_type": record.get("source_type"), "kind": record.get("kind"),
                       "partition": record.get("partition") or "", "source": source_key_of(record.get("source_ref"))[0]}
            groups.append((columns, record.get("tokens") or 0, 1))
    return _window_rollup(groups)


def largest_items(manifest_id: int, limit: int = LARGEST_SHOWN) -> list[dict[str, Any]]:
    """The included items with the most tokens, largest first (one query, item columns only)."""
    rows = list(
        ManifestItem.objects.filter(manifest_id=manifest_id, decision=Decision.INCLUDED).annotate(**_REF_KEYS)
        .order_by(F("tokens").desc(nulls_last=True), "position")
        .values("item_id", "kind", "source_type", "partition", "tokens", *_REF_COLUMNS)[:limit]
    )
    for row in rows:
        row["source"] = source_label(source_key(*(row[name] for name in _REF_COLUMNS)))
    return rows


def largest_items_of_document(sections: dict[str, Any], limit: int = LARGEST_SHOWN) -> list[dict[str, Any]]:
    included = sections.get("included") or []
    ranked = sorted(range(len(included)), key=lambda i: (included[i].get("tokens") is None, -(included[i].get("tokens") or 0), i))
    return [{"item_id": r.get("item_id"), "kind": r.get("kind"), "source_type": r.get("source_type"),
             "partition": r.get("partition"), "tokens": r.get("tokens"), "source": source_key_of(r.get("source_ref"))[1]}
            for r in (included[i] for i in ranked[:limit])]


@dataclass
class RunWindowRow:
    """One source (or source type, kind, partition) across a run's steps: tokens in each step's window."""

    key: str
    label: str
    tokens: list[int | None]  # one per step, None where the step included nothing of it
    growth: int = 0  # the last step's tokens less the first step's (absent = 0)
    latest: int = 0


RUN_WINDOW_SORTS = {"latest": "largest at the last step", "growth": "grew most"}


def run_window(steps: list[AssemblyJob], *, dimension: str, sort: str,
               limit: int = RUN_WINDOW_ROWS) -> tuple[list[RunWindowRow], int]:
    """Per step of a run (the jobs with a manifest, in order), the included tokens of each source,
    source type, kind or partition: one GROUP BY query over the steps' item rows. Returns the
    first `limit` rows (largest at the last step, or most grown from the first step to the last)
    and how many there were."""
    if not steps:
        return [], 0
    columns = ("source_type", "kind", "partition", *_REF_COLUMNS)
    groups = (
        ManifestItem.objects.filter(manifest__job__run_id=steps[0].run_id, decision=Decision.INCLUDED)
        .annotate(**_REF_KEYS).values("manifest__job_id", *columns)
        .annotate(token_sum=Sum("tokens")).order_by()
    )
    column_of = {job.pk: index for index, job in enumerate(steps)}
    rows: dict[str, RunWindowRow] = {}
    for group in groups:
        key = (source_key(*(group[name] for name in _REF_COLUMNS)) if dimension == "source"
               else group[dimension] or "")
        label = source_label(key) if dimension == "source" else (key or "no partition")
        row = rows.setdefault(key, RunWindowRow(key=key, label=label, tokens=[None] * len(steps)))
        index = column_of[group["manifest__job_id"]]
        row.tokens[index] = (row.tokens[index] or 0) + (group["token_sum"] or 0)
    for row in rows.values():
        row.latest = row.tokens[-1] or 0
        row.growth = row.latest - (row.tokens[0] or 0)
    if sort == "growth":
        ordered = sorted(rows.values(), key=lambda r: (-r.growth, -r.latest, r.key))
    else:
        ordered = sorted(rows.values(), key=lambda r: (-r.latest, -max(t or 0 for t in r.tokens), r.key))
    return ordered[:limit], len(ordered)


# --------------------------------------------------------------------------- steps told apart, compare by run and step


def label_attempts(jobs: list[AssemblyJob]) -> None:
    """Give each of a run's jobs (in submission order) `step_attempt` (its 1-based number among the
    jobs with the same step id) and `step_attempts` (how many there are): two submissions of
    `step-19` read "step-19 · attempt 1 of 2" and "… 2 of 2"."""
    counts = Counter(job.step_id for job in jobs)
    seen: Counter[str] = Counter()
    for job in jobs:
        seen[job.step_id] += 1
        job.step_attempt, job.step_attempts = seen[job.step_id], counts[job.step_id]


def run_steps(run: Run) -> list[AssemblyJob]:
    """A run's jobs in submission order, each labelled with its attempt (`label_attempts`)."""
    jobs = list(light_jobs([run.tenant_id]).filter(run=run).order_by("created_at", "id"))
    label_attempts(jobs)
    return jobs


def recent_run_ids(tenant_ids: list[int], limit: int = 50) -> list[str]:
    """The newest runs' ids in the user's tenants, for the compare form's suggestions."""
    return list(Run.objects.filter(tenant_id__in=tenant_ids).order_by("-created_at", "-id")
                .values_list("run_id", flat=True)[:limit])


def step_in_run(steps: list[AssemblyJob], ref: str) -> tuple[AssemblyJob | None, str]:
    """The job `ref` names among a run's labelled steps: its id, a step id with one attempt, or
    `step-id#N` (the Nth attempt). (job, "") or (None, why not)."""
    ref = ref.strip()
    by_id = {str(job.id): job for job in steps}
    if ref in by_id:
        return by_id[ref], ""
    same = [job for job in steps if job.step_id == ref]
    if len(same) == 1:
        return same[0], ""
    if len(same) > 1:
        return None, f"step “{ref[:80]}” was submitted {len(same)} times: pick one attempt"
    step_id, _, number = ref.rpartition("#")
    if number.isascii() and number.isdigit():  # `²` is a digit to isdigit() and no number to int()
        attempts = [job for job in steps if job.step_id == step_id]
        if 1 <= int(number) <= len(attempts):
            return attempts[int(number) - 1], ""
    return None, f"this run has no step “{ref[:80]}”"


# --------------------------------------------------------------------------- run against run


ALIGNED_CHANGES_SHOWN = 8  # changed items listed per step on the page (the export has every one)


def _decisions_by_step(run: Run) -> dict[Any, dict[str, tuple[str, str]]]:
    """job id -> {item_id: (decision, reason)} for every sealed step of `run`: one query."""
    found: dict[Any, dict[str, tuple[str, str]]] = {}
    rows = ManifestItem.objects.filter(manifest__job__run=run).values_list("manifest__job_id", "item_id", "decision", "reason")
    for job_id, item_id, decision, reason in rows.iterator(chunk_size=2000):
        found.setdefault(job_id, {})[item_id] = (decision, reason)
    return found


def step_changes(a: dict[str, tuple[str, str]], b: dict[str, tuple[str, str]]) -> list[dict[str, Any]]:
    """The items whose decision or reason differs between two steps' decisions, or that only one
    holds, in item id order: {item_id, change (flipped, reason, only_a, only_b), decision_a,
    reason_a, decision_b, reason_b}."""
    changes = []
    for item_id in sorted(a.keys() | b.keys()):
        before, after = a.get(item_id), b.get(item_id)
        if before == after:
            continue
        if before is None:
            change = "only_b"
        elif after is None:
            change = "only_a"
        else:
            change = "flipped" if before[0] != after[0] else "reason"
        changes.append({"item_id": item_id, "change": change,
                        "decision_a": before[0] if before else None, "reason_a": before[1] if before else None,
                        "decision_b": after[0] if after else None, "reason_b": after[1] if after else None})
    return changes


def runs_aligned(run_a: Run, steps_a: list[AssemblyJob], run_b: Run, steps_b: list[AssemblyJob]) -> list[dict[str, Any]]:
    """Two runs lined up by step: the Nth step (submission order, attempts counted) of A beside
    the Nth of B, with the items that changed between them; a step only one run has is marked
    (`a` or `b` None). Two queries, whatever the runs' lengths."""
    decisions_a = _decisions_by_step(run_a)
    decisions_b = decisions_a if run_b.pk == run_a.pk else _decisions_by_step(run_b)
    aligned = []
    for index in range(max(len(steps_a), len(steps_b))):
        a = steps_a[index] if index < len(steps_a) else None
        b = steps_b[index] if index < len(steps_b) else None
        # items are compared only between two sealed steps: one still queued or failed has no decisions
        sealed = a is not None and b is not None and hasattr(a, "manifest") and hasattr(b, "manifest")
        changes = step_changes(decisions_a.get(a.pk, {}), decisions_b.get(b.pk, {})) if sealed else []
        aligned.append({"number": index + 1, "a": a, "b": b, "changes": changes,
                        "status_changed": bool(a and b and a.status != b.status),
                        "only": "" if a and b else ("a" if a else "b")})
    return aligned


# --------------------------------------------------------------------------- exports


def run_timeline_cells(run: Run) -> QuerySet:
    """Every item decision of a run's steps, step by step (submission order) and in document order
    within a step: one query, iterated (an export streams it)."""
    return (
        ManifestItem.objects.filter(manifest__job__run=run)
        .order_by("manifest__job__created_at", "manifest__job_id", "position")
        .values("item_id", "decision", "reason", "hard_gate", "partition", "tokens", "kind", "source_type",
                job_id=F("manifest__job_id"))
    )


def manifest_download(manifest_id: int) -> dict[str, Any]:
    """The sealed manifest as the API serves it (with the provider's reported input tokens)."""
    return manifest_as_served(Manifest(pk=manifest_id))


# --------------------------------------------------------------------------- the run's step table


@dataclass
class StepFacts:
    """One step of a run's step table: its decision counts and what changed from the step before."""

    included: int = 0
    excluded: int = 0
    reasons: list[tuple[str, int]] = field(default_factory=list)  # exclusion reason, count (REASON_ORDER)
    added: int = 0  # items that were not candidates at the step before
    removed: int = 0  # candidates of the step before that are not candidates here
    flipped: int = 0  # included there and excluded here, or the other way round
    reason_changed: int = 0  # excluded at both steps, for another reason
    compared: bool = False  # there was a step before with a manifest


def payload_tokens_of() -> Cast:
    """The sealed budget's payload tokens (items + framing), read in SQL from `Manifest.sections`
    (a text column holding JSON) so the step table reads no document."""
    return Cast(KeyTextTransform("payload_tokens", KeyTransform("budget", Cast("manifest__sections", JSONField()))),
                IntegerField())


def cache_figure_of(name: str) -> Cast:
    """A number of the sealed `cache` record (`cache_eligible_tokens`, `payload_text_tokens`), read
    in SQL from `Manifest.sections`; None for a blocked step or a manifest sealed before it existed."""
    return Cast(KeyTextTransform(name, KeyTransform("cache", Cast("manifest__sections", JSONField()))), IntegerField())


def cache_text_of(name: str) -> KeyTextTransform:
    """A string of the sealed `cache` record (`previous_cache_from`), read in SQL from
    `Manifest.sections`; None for a manifest sealed before it existed."""
    return KeyTextTransform(name, KeyTransform("cache", Cast("manifest__sections", JSONField())))


def run_step_facts(steps: list[AssemblyJob], previous: AssemblyJob | None) -> dict[Any, StepFacts]:
    """StepFacts of `steps` (a page of a run's steps with a manifest, in order; `previous` is the
    step with a manifest before the first of them, or None): two queries whatever the page size —
    the decision counts grouped by step and reason, and each step's (item, decision, reason), set
    against the step before."""
    if not steps:
        return {}
    ids = [job.pk for job in steps]
    facts = {job.pk: StepFacts() for job in steps}
    counts = (ManifestItem.objects.filter(manifest__job_id__in=ids).values("manifest__job_id", "decision", "reason")
              .annotate(n=Count("id")).order_by())
    reasons: dict[Any, Counter[str]] = {pk: Counter() for pk in ids}
    for row in counts:
        fact = facts[row["manifest__job_id"]]
        if row["decision"] == Decision.INCLUDED:
            fact.included += row["n"]
        else:
            fact.excluded += row["n"]
            reasons[row["manifest__job_id"]][row["reason"]] += row["n"]
    for pk, counter in reasons.items():
        facts[pk].reasons = [(name, counter[name]) for name in REASON_ORDER if counter.get(name)] + sorted(
            (name, n) for name, n in counter.items() if name not in REASON_ORDER)
    chain = ([previous] if previous is not None else []) + list(steps)
    decisions: dict[Any, dict[str, tuple[str, str]]] = {job.pk: {} for job in chain}
    rows = ManifestItem.objects.filter(manifest__job_id__in=[job.pk for job in chain]).values_list(
        "manifest__job_id", "item_id", "decision", "reason")
    for job_id, item_id, decision, reason in rows:
        decisions[job_id][item_id] = (decision, reason)
    for before, after in zip(chain, chain[1:], strict=False):  # each step with the one before it
        fact, old, new = facts[after.pk], decisions[before.pk], decisions[after.pk]
        fact.compared = True
        fact.added = sum(1 for item_id in new if item_id not in old)
        fact.removed = sum(1 for item_id in old if item_id not in new)
        for item_id, (decision, reason) in new.items():
            if item_id in old:
                was_decision, was_reason = old[item_id]
                if was_decision != decision:
                    fact.flipped += 1
                elif decision == Decision.EXCLUDED and was_reason != reason:
                    fact.reason_changed += 1
    return facts


def step_neighbours(job: AssemblyJob) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """The steps with a manifest just before and after `job` in its run (id, step_id, attempt
    told apart by number), for the inspector's previous / next step links: one query of the run's
    (id, step id) pairs in submission order, whatever the run's length."""
    rows = list(AssemblyJob.objects.filter(run_id=job.run_id, manifest__isnull=False).order_by("created_at", "id")
                .values_list("id", "step_id"))
    index = next((n for n, (pk, _) in enumerate(rows) if pk == job.pk), None)
    if index is None:
        return None, None

    def named(n: int) -> dict[str, Any] | None:
        return {"id": rows[n][0], "step_id": rows[n][1], "number": n + 1} if 0 <= n < len(rows) else None

    return named(index - 1), named(index + 1)
