"""Reads for the policy pages: lists, revision history, validation with positions, impact preview.

The impact preview replays the most recent recorded requests of a policy under a draft body with
the engine alone (no model call, no manifest stored) and compares each result with the manifest
that was sealed for that request: which items flip between included and excluded, which
assemblies become blocked, and how each budget partition moves. `impact_row` is one replay; the
dashboard runs them as a job (policies.services.impact_preview_run) that stores its rows.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import yaml
from django.core.exceptions import ValidationError
from django.db.models import Count, Q, QuerySet

from ctxeng.engine import InvalidInput, assemble
from manifests.dashboard_selectors import compare_sections, light_jobs, manifest_sections, request_of
from manifests.models import AssemblyJob, Tenant
from manifests.selectors import artifact_lookup, request_as_assembled

from .models import ImpactPreview, Policy, PolicyRevision, RevisionStatus

IMPACT_SAMPLE = 20
IMPACT_FLIPS_SHOWN = 500


def policies_list(*, tenant: Tenant) -> QuerySet[Policy]:
    return (
        Policy.objects.filter(tenant=tenant)
        .annotate(
            revisions_count=Count("revisions", distinct=True),
            drafts=Count("revisions", filter=Q(revisions__status=RevisionStatus.DRAFT), distinct=True),
        )
        .order_by("policy_id")
    )


def policy_get(*, tenant_ids: list[int], policy_id: str, prefer_tenant: Tenant | None) -> Policy | None:
    found = list(Policy.objects.filter(tenant_id__in=tenant_ids, policy_id=policy_id).select_related("tenant"))
    if not found:
        return None
    return next((p for p in found if prefer_tenant and p.tenant_id == prefer_tenant.id), found[0])


def revision_history(policy: Policy) -> list[PolicyRevision]:
    return list(
        PolicyRevision.objects.filter(policy=policy)
        .select_related("created_by", "published_by")
        .defer("body")
        .order_by("-revision")
    )


def revision_get(policy: Policy, revision: int) -> PolicyRevision | None:
    return PolicyRevision.objects.filter(policy=policy, revision=revision).select_related("policy__tenant").first()


def published_revision(policy: Policy) -> PolicyRevision | None:
    return PolicyRevision.objects.filter(policy=policy, status=RevisionStatus.PUBLISHED).first()


def body_yaml(body: dict[str, Any]) -> str:
    return yaml.safe_dump(body, sort_keys=False, allow_unicode=True, width=100)


# --------------------------------------------------------------------------- validation


@dataclass(frozen=True)
class FieldError:
    path: str
    message: str
    line: int | None  # 1-based line in the edited YAML, when the path can be found


_INDEX = re.compile(r"\[(\d+)\]")


def _split(path: str) -> list[str | int]:
    parts: list[str | int] = []
    for chunk in path.split("."):
        name, _, rest = chunk.partition("[")
        if name:
            parts.append(name)
        for index in _INDEX.findall("[" + rest if rest else ""):
            parts.append(int(index))
    return parts


def line_of(text: str, path: str) -> int | None:
    """The line of the deepest YAML node on `path` (the key itself when it exists)."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)  # nodes only: an alias is a shared node, never expanded
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        return mark.line + 1 if mark else None
    line = None
    for part in _split(path):
        if isinstance(node, yaml.MappingNode) and isinstance(part, str):
            match = next(((k, v) for k, v in node.value if getattr(k, "value", None) == part), None)
            if match is None:
                break
            line, node = match[0].start_mark.line + 1, match[1]
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            node = node.value[part]
            line = node.start_mark.line + 1
        else:
            break
    return line


def validate_yaml(text: str) -> tuple[Any | None, list[FieldError]]:
    """Parse a draft as a save would (the engine, bounded); on failure, each error with its path and YAML line."""
    from .services import policy_parse

    try:
        return policy_parse(text), []
    except InvalidInput as exc:
        return None, field_errors(text, exc.errors)


_LINE = re.compile(r"line (\d+): ")


def field_errors(text: str, messages: list[str]) -> list[FieldError]:
    """`path: message` lines (engine or service) as FieldErrors located in the YAML text."""
    errors = []
    for raw in messages:
        path, sep, message = raw.partition(": ")
        if not sep or " " in path:
            path, message = "", raw
        located = path.removeprefix("body.")
        # The YAML loader names the line itself (an alias, an anchor, too deep): no path to look up.
        stated = _LINE.match(message)
        line = int(stated.group(1)) if stated else (line_of(text, located) if located else None)
        errors.append(FieldError(path=path, message=message, line=line))
    return errors


# --------------------------------------------------------------------------- impact preview


def recent_jobs_for_policy(policy: Policy, limit: int = IMPACT_SAMPLE) -> list[AssemblyJob]:
    return list(
        # A purged request has no content left to replay.
        light_jobs([policy.tenant_id]).filter(policy_revision__policy=policy, manifest__isnull=False,
                                              manifest__content_purged_at__isnull=True)
        .order_by("-created_at")[:limit]
    )


def _replay(job: AssemblyJob, draft) -> Any:
    """The job's request under `draft`, the way a worker would assemble it now: the tenant's artifact
    store for re-injected items and the lifecycle events the records imply."""
    request = request_as_assembled(job=job, request=request_of(job), policy=draft)
    return assemble(request, draft, artifacts=artifact_lookup(job.tenant))


def impact_row(job: AssemblyJob, draft) -> dict[str, Any]:
    """One recorded request replayed under `draft` and compared with its sealed manifest, as JSON
    (an ImpactPreview stores the rows). At most IMPACT_FLIPS_SHOWN flips are kept, with the count."""
    head = {"id": str(job.id), "run_id": job.run.run_id, "step_id": job.step_id,
            "revision": job.policy_revision.revision}
    recorded = manifest_sections(job.manifest.pk, ("assembly", "budget", "included", "excluded"))
    try:
        result = _replay(job, draft)
    except Exception as exc:  # noqa: BLE001 - one unreplayable request must not hide the others
        return {"job": head, "error": f"{type(exc).__name__}: {exc}", "comparison": None}
    replayed = result.manifest_dict()
    full = compare_sections(recorded, replayed)
    comparison = {
        "flips": full["flips"][:IMPACT_FLIPS_SHOWN], "flip_count": len(full["flips"]),
        "partitions": full["partitions"], "status_a": full["status_a"], "status_b": full["status_b"],
        "blocked_reason_b": full["blocked_reason_b"],
    }
    return {
        "job": head,
        "error": "",
        "comparison": comparison,
        "becomes_blocked": full["status_a"] != "blocked" and full["status_b"] == "blocked",
        "becomes_ready": full["status_a"] == "blocked" and full["status_b"] == "ready",
        "missing": (replayed.get("assembly") or {}).get("missing") or [],
        "blocked_detail": (replayed.get("assembly") or {}).get("blocked_detail") or [],
        "changed": bool(full["flips"] or full["status_a"] != full["status_b"]
                        or any(p["delta"] for p in full["partitions"])),
    }


def impact_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "rows": rows,
        "replayed": len(rows),
        "flipped_items": sum(r["comparison"]["flip_count"] for r in rows if r["comparison"]),
        "becoming_blocked": sum(1 for r in rows if r.get("becomes_blocked")),
        "becoming_ready": sum(1 for r in rows if r.get("becomes_ready")),
        "errors": sum(1 for r in rows if r["error"]),
        "unchanged": sum(1 for r in rows if r["comparison"] and not r["changed"]),
    }


def impact_preview(policy: Policy, draft) -> dict[str, Any]:
    """Replay the policy's last IMPACT_SAMPLE recorded requests under `draft` (a parsed ContextPolicy),
    all at once. The dashboard runs the same rows as a job (policies.services.impact_preview_run)."""
    return impact_summary([impact_row(job, draft) for job in recent_jobs_for_policy(policy)])


def latest_preview(revision: PolicyRevision) -> ImpactPreview | None:
    return ImpactPreview.objects.filter(revision=revision).select_related("requested_by").first()


def preview_get(revision: PolicyRevision, preview_id: Any) -> ImpactPreview | None:
    try:
        return ImpactPreview.objects.filter(revision=revision, id=preview_id).select_related("requested_by").first()
    except ValidationError:  # not a UUID
        return None
