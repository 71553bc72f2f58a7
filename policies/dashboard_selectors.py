"""Reads for the policy pages: lists, revision history, validation with positions, impact preview.

The impact preview replays the most recent recorded requests of a policy under a draft body with
the engine alone (no model call, no manifest stored) and compares each result with the manifest
that was sealed for that request: which items flip between included and excluded, which
assemblies become blocked, and how each budget partition moves. `impact_row` is one replay; the
dashboard runs them as a job (policies.services.impact_preview_run) that stores its rows.

A replay is compared at the recorded manifest's fence nonce. Every fenced block's token count
includes the nonce twice (prefix and footer), and the nonce is derived from the policy digest: any
draft gets a new 16-hex nonce that tokenizes into a few more or fewer tokens, which moved every
partition holding fenced items by that amount times its items, in partitions the draft never
named. `_at_recorded_nonce` takes that shift out, so a delta is one the draft's rules caused.

The assemblies a draft's `upgrades` records address (seed §8) are replayed first
(`addressed_jobs`, `addressed_row`); each such row says whether the failure its manifest records is
gone: not blocked any more (if it was), and none of its failed preservation assertions failing
again (`ctxeng.engine.upgrades.failure_gone`; None when the manifest records no failure).
"""

from __future__ import annotations

import difflib
import re
from collections import Counter
from dataclasses import dataclass
from datetime import date
from typing import Any

import yaml
from django.core.exceptions import ValidationError
from django.db.models import Count, Q, QuerySet

from ctxeng.accounts.models import Tenant
from ctxeng.engine import InvalidInput, assemble, parse_policy, policy_warnings
from ctxeng.engine.errors import compose_yaml_text
from ctxeng.engine.policy import policy_body
from ctxeng.engine.tokens import default_tokenizer
from ctxeng.engine.upgrades import failure_gone, recorded_failures, revocation_status
from ctxeng.server.params import BadParameter, whole_number

from . import assemblies
from .models import ImpactPreview, Policy, PolicyRevision, RevisionStatus

IMPACT_SAMPLE = 20
IMPACT_FLIPS_SHOWN = 500
# The impact region lists the rows that change a page at a time, each with its first flips (the
# export has every row and every flip kept): a 200-request preview stays a page of ~300 KB at most.
IMPACT_ROWS_PER_PAGE = 10
IMPACT_FLIPS_ON_PAGE = 40
IMPACT_EXPORT_COLUMNS = [
    "n", "run_id", "step_id", "assembly", "recorded_under_revision", "status_before", "status_after", "changed",
    "becomes_blocked", "becomes_ready", "flip_count", "flipped_item_ids", "partition_deltas", "blocked_reason_after",
    "addressed_by", "addressed_assembly_id", "failure_gone", "error",
]


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


def canonical_yaml(body: dict[str, Any]) -> str:
    """The body as YAML with its keys sorted: the same text whatever order the database keeps a
    JSON column's keys in (PostgreSQL's jsonb orders them by length), so two revisions' texts differ
    only where their bodies do."""
    return yaml.safe_dump(body, sort_keys=True, allow_unicode=True, width=100)


@dataclass(frozen=True)
class DiffLine:
    kind: str  # "add", "del", "hunk", "file" or "same"
    text: str


def text_diff(before: PolicyRevision, after: PolicyRevision, context: int = 3) -> list[DiffLine]:
    """A unified diff of two revisions' bodies as canonical YAML (`canonical_yaml`: the normalized
    body, keys sorted, so neither the texts' layout and comments nor the database's key order
    show), line by line."""
    kinds = {"+": "add", "-": "del", "@": "hunk", " ": "same"}
    lines = difflib.unified_diff(canonical_yaml(before.body).splitlines(), canonical_yaml(after.body).splitlines(),
                                 f"revision {before.revision}", f"revision {after.revision}", lineterm="", n=context)
    return [DiffLine("file" if line.startswith(("---", "+++")) and index < 2 else kinds.get(line[:1], "same"), line)
            for index, line in enumerate(lines)]


def revision_text(revision: PolicyRevision) -> str:
    """What the editor shows: the text last saved or imported (comments kept), else the body as YAML."""
    return revision.source_text or body_yaml(revision.body)


def next_draft_text(revision: PolicyRevision, number: int) -> str:
    """`revision`'s source text with `policy.revision` set to `number` on its own line, comments
    kept; empty (the editor then shows the body as YAML) when the text cannot be bumped that way
    or would not read back as the same body."""
    text = revision.source_text
    line = line_of(text, "policy.revision") if text else None
    if line is None:
        return ""
    lines = text.split("\n")
    bumped, count = re.subn(r"^(\s*revision:\s*)\d+", rf"\g<1>{number}", lines[line - 1])
    if count != 1:
        return ""
    lines[line - 1] = bumped
    candidate = "\n".join(lines)
    from .services import policy_parse

    try:
        old, new = policy_parse(text), policy_parse(candidate)
    except InvalidInput:
        return ""
    expected = old.model_copy(update={"policy": old.policy.model_copy(update={"revision": number, "digest": None})})
    return candidate if policy_body(new) == policy_body(expected) else ""


# --------------------------------------------------------------------------- validation


@dataclass(frozen=True)
class FieldError:
    path: str
    message: str
    line: int | None  # 1-based line in the edited YAML, when the path can be found


_INDEX = re.compile(r"\[([0-9]+)\]")


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
        node = compose_yaml_text(text)
    except InvalidInput:  # beyond the bounds: no line to find, and no parsing to spend on it
        return None
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


def validate_yaml(
    text: str, *, policy_id: str | None = None, revision: int | None = None
) -> tuple[Any | None, list[FieldError]]:
    """Parse a draft as a save would (the engine, bounded, the id and number of the revision it
    edits); on failure, each error with its path and YAML line."""
    from .services import policy_parse

    try:
        return policy_parse(text, policy_id=policy_id, revision=revision), []
    except InvalidInput as exc:
        return None, field_errors(text, exc.errors)


def validation_warnings(text: str, parsed: Any) -> list[FieldError]:
    """What a valid draft leaves unchecked (the engine's `policy_warnings`), located like errors."""
    return field_errors(text, policy_warnings(parsed)) if parsed is not None else []


_LINE = re.compile(r"line ([0-9]+): ")


_MARK = re.compile(r'\s*in "<[^>]*>", line ([0-9]+), column ([0-9]+)(?::\n[^\n]*\n\s*\^)?')


def _yaml_mark(text: str, message: str) -> tuple[int | None, str]:
    """A YAML syntax error's line: the parser's last mark (where it gave up; `line N, column M`,
    1-based), kept inside the text (a problem at the end of the stream names the line after the
    last); the message without the marks' `in "<unicode string>"` noise, each place said plainly."""
    marks = _MARK.findall(message)
    if not marks:
        return None, message
    last_line = max(1, len(text.rstrip("\n").split("\n")))
    line = min(int(marks[-1][0]), last_line)
    plain = _MARK.sub(lambda m: f" (line {m.group(1)}, column {m.group(2)})", message)
    return line, " ".join(plain.split())


def field_errors(text: str, messages: list[str]) -> list[FieldError]:
    """`path: message` lines (engine or service) as FieldErrors located in the YAML text."""
    errors = []
    for raw in messages:
        path, sep, message = raw.partition(": ")
        if not sep or " " in path:
            path, message = "", raw
        located = "" if path == "body" else path.removeprefix("body.")  # the whole text: no node to find
        # The YAML loader names the line itself (an alias, an anchor, too deep): no path to look up.
        stated = _LINE.match(message)
        line = int(stated.group(1)) if stated else (line_of(text, located) if located else None)
        if line is None:
            line, message = _yaml_mark(text, message)
        errors.append(FieldError(path=path, message=message, line=line))
    return errors


# --------------------------------------------------------------------------- impact preview


IMPACT_MAX = 200  # the most requests one preview replays, whatever the editor asks
IMPACT_RUNS_MAX = 20
SELECTION_FIELDS = ("runs", "since", "until", "limit")


def _policy_jobs(policy: Policy) -> QuerySet:
    """The policy's recorded steps in its tenant, newest first."""
    return (assemblies.records().light_jobs([policy.tenant_id]).filter(policy_revision__policy=policy)
            .order_by("-created_at"))


def recent_jobs_for_policy(policy: Policy, selection: dict[str, Any] | None = None) -> list[Any]:
    """The requests an impact preview replays: the newest `limit` (IMPACT_SAMPLE by default) sealed
    steps of the policy in its tenant, of the `runs` named and sealed from `since` to `until`
    (dates, UTC, both included) when the selection says so. A purged request has no content left
    to replay."""
    selection = selection or {}
    jobs = _policy_jobs(policy).filter(manifest__isnull=False, manifest__content_purged_at__isnull=True)
    if selection.get("runs"):
        jobs = jobs.filter(run__run_id__in=selection["runs"])
    if selection.get("since"):
        jobs = jobs.filter(created_at__date__gte=date.fromisoformat(selection["since"]))
    if selection.get("until"):
        jobs = jobs.filter(created_at__date__lte=date.fromisoformat(selection["until"]))
    return list(jobs[: selection.get("limit") or IMPACT_SAMPLE])


def policy_run_ids(policy: Policy, limit: int = 50) -> list[str]:
    """The ids of the newest runs with a step under the policy (the preview form's suggestions)."""
    found: list[str] = []
    for run_id in _policy_jobs(policy).values_list("run__run_id", flat=True)[: limit * 20]:
        if run_id not in found:
            found.append(run_id)
            if len(found) == limit:
                break
    return found


def impact_selection(policy: Policy, params: Any) -> tuple[dict[str, Any], list[FieldError]]:
    """The requests an editor chose to replay, from the form's `runs` (ids, separated by commas or
    spaces), `since` and `until` (YYYY-MM-DD) and `limit` (1 to IMPACT_MAX): the selection to store
    (empty fields left out) and an error per field that is wrong, in words naming it. A run must
    have a step under this policy in the policy's tenant (another tenant's run is not found)."""
    errors: list[FieldError] = []
    selection: dict[str, Any] = {}
    runs = [r for r in re.split(r"[\s,]+", str(params.get("runs", "")).strip()) if r]
    if len(runs) > IMPACT_RUNS_MAX:
        errors.append(FieldError("runs", f"at most {IMPACT_RUNS_MAX} runs (you gave {len(runs)})", None))
    elif runs:
        known = set(_policy_jobs(policy).filter(run__run_id__in=runs).values_list("run__run_id", flat=True))
        unknown = [r for r in dict.fromkeys(runs) if r not in known]
        if unknown:
            errors.append(FieldError("runs", "no step under this policy in run " + ", ".join(f"“{r[:80]}”" for r in unknown[:5]), None))
        selection["runs"] = list(dict.fromkeys(runs))
    for name in ("since", "until"):
        text = str(params.get(name, "")).strip()
        if not text:
            continue
        try:
            selection[name] = date.fromisoformat(text).isoformat()
        except ValueError:
            errors.append(FieldError(name, f"“{text[:40]}” is not a date (YYYY-MM-DD)", None))
    if selection.get("since") and selection.get("until") and selection["since"] > selection["until"]:
        errors.append(FieldError("until", f"{selection['until']} is before since ({selection['since']})", None))
    text = str(params.get("limit", "")).strip()
    if text:
        try:
            selection["limit"] = whole_number(text, name="limit", minimum=1, maximum=IMPACT_MAX)
        except BadParameter:
            errors.append(FieldError("limit", f"“{text[:40]}” is not a whole number from 1 to {IMPACT_MAX}", None))
    return selection, errors


def selection_form(selection: dict[str, Any] | None) -> dict[str, str]:
    """A stored selection as the form's fields show it (the next run starts from the last one)."""
    selection = selection or {}
    return {"runs": ", ".join(selection.get("runs") or []), "since": selection.get("since") or "",
            "until": selection.get("until") or "", "limit": str(selection.get("limit") or "")}


def selection_text(selection: dict[str, Any] | None) -> str:
    """A preview's selection in words: "the latest 20 recorded requests", "the latest 50 of runs
    run-1, run-2 from 2026-01-01"."""
    selection = selection or {}
    text = f"the latest {selection.get('limit') or IMPACT_SAMPLE} recorded requests"
    if selection.get("runs"):
        text += " of run" + ("s " if len(selection["runs"]) > 1 else " ") + ", ".join(selection["runs"])
    if selection.get("since"):
        text += f" from {selection['since']}"
    if selection.get("until"):
        text += f" to {selection['until']}"
    return text


def _replay(job: Any, draft) -> Any:
    """The job's request under `draft`, the way a worker would assemble it now: the tenant's artifact
    store for re-injected items and the lifecycle events the records imply."""
    request, artifacts = assemblies.records().request_as_assembled(job=job, request=assemblies.records().request_of(job), policy=draft)
    return assemble(request, draft, artifacts=artifacts)


# The nonce-bearing fence manifests recorded before issue 37 were sealed with; today's fences carry
# no nonce, so the engine no longer has these strings and they are kept here, frozen, for old records.
_OLD_FENCE = "<<<ctxeng:"


def _fence_tokens(nonce: str) -> int:
    tokenizer = default_tokenizer()
    return tokenizer.count(f"{_OLD_FENCE}block nonce={nonce}") + tokenizer.count(f"{_OLD_FENCE}end nonce={nonce}>>>")


def _at_recorded_nonce(replayed: dict[str, Any], recorded: dict[str, Any]) -> dict[str, Any]:
    """The replayed manifest's included items and partition use as if fenced with the recorded
    manifest's nonce (see the module docstring). Control-zone items are not fenced. Only manifests
    that both carry a nonce (sealed before fences lost it) can differ so; any other pair is returned
    as it is."""
    nonce_a = (recorded.get("assembly") or {}).get("data_fence_nonce")
    nonce_b = (replayed.get("assembly") or {}).get("data_fence_nonce")
    if not nonce_a or not nonce_b or nonce_a == nonce_b:
        return replayed
    shift = _fence_tokens(nonce_a) - _fence_tokens(nonce_b)
    if not shift:
        return replayed
    fenced_per_partition: Counter[str] = Counter()
    included = []
    for item in replayed.get("included") or []:
        if item.get("zone") != "control" and isinstance(item.get("tokens"), int):
            fenced_per_partition[item.get("partition") or ""] += 1
            item = {**item, "tokens": item["tokens"] + shift}
        included.append(item)
    budget = dict(replayed.get("budget") or {})
    budget["partitions"] = {
        name: ({**part, "used": part["used"] + shift * fenced_per_partition[name]}
               if isinstance(part, dict) and isinstance(part.get("used"), int) else part)
        for name, part in (budget.get("partitions") or {}).items()
    }
    return {**replayed, "included": included, "budget": budget}


def _partition_changed(row: dict[str, Any]) -> bool:
    return bool(row["delta"]) or any(row[f"{k}_a"] != row[f"{k}_b"] for k in ("items", "minimum", "maximum"))


def addressed_jobs(policy: Policy, draft) -> list[tuple[str, list[str], Any]]:
    """The assemblies `draft`'s upgrade records address (seed §8), in the order the records name
    them: (assembly id, the mechanisms that address it, its newest replayable job of the policy's
    tenant, or None when there is none: deleted, purged, or never the tenant's)."""
    mechanisms: dict[str, list[str]] = {}
    for record in draft.upgrades:
        for assembly_id in record.addresses:
            mechanisms.setdefault(assembly_id, []).append(record.mechanism)
    if not mechanisms:
        return []
    jobs: dict[str, Any] = {}
    for job in (assemblies.records().light_jobs([policy.tenant_id]).filter(manifest__assembly_id__in=list(mechanisms),
                                                      manifest__content_purged_at__isnull=True)
                .order_by("-created_at")):
        jobs.setdefault(job.manifest.assembly_id, job)
    return [(a, names, jobs.get(a)) for a, names in mechanisms.items()]


def addressed_row(assembly_id: str, mechanisms: list[str], job: Any, draft) -> dict[str, Any]:
    """`impact_row` of an assembly an upgrade addresses, with whether its recorded failure is gone
    under `draft` (ctxeng.engine.upgrades.failure_gone)."""
    about = {"assembly_id": assembly_id, "mechanisms": mechanisms}
    if job is None:
        return {"job": None, "error": f"assembly {assembly_id} has no replayable record (deleted or purged)",
                "comparison": None, "addressed": {**about, "failure_gone": None, "recorded_failures": []}}
    return impact_row(job, draft, addressed=about)


def impact_row(job: Any, draft, *, addressed: dict[str, Any] | None = None) -> dict[str, Any]:
    """One recorded request replayed under `draft` and compared with its sealed manifest, as JSON
    (an ImpactPreview stores the rows). At most IMPACT_FLIPS_SHOWN flips are kept, with the count.
    For an assembly an upgrade addresses (`addressed`), the row also says whether the failures its
    manifest records are gone in the replay."""
    head = {"id": str(job.id), "run_id": job.run.run_id, "step_id": job.step_id,
            "revision": job.policy_revision.revision}
    sections = ("assembly", "budget", "included", "excluded") + (("transforms",) if addressed is not None else ())
    recorded = assemblies.records().manifest_sections(job.manifest.pk, sections)
    try:
        result = _replay(job, draft)
    except Exception as exc:  # noqa: BLE001 - one unreplayable request must not hide the others
        row = {"job": head, "error": f"{type(exc).__name__}: {exc}", "comparison": None}
        if addressed is not None:
            row["addressed"] = {**addressed, "failure_gone": None, "recorded_failures": recorded_failures(recorded)}
        return row
    replayed = result.manifest_dict()
    extra: dict[str, Any] = {}
    if addressed is not None:
        extra["addressed"] = {
            **addressed,
            "failure_gone": failure_gone(recorded, replayed),
            "recorded_failures": recorded_failures(recorded),
            "replayed_failures": recorded_failures(replayed),
        }
    full = assemblies.records().compare_sections(recorded, _at_recorded_nonce(replayed, recorded))
    partitions = [p for p in full["partitions"] if _partition_changed(p)]
    comparison = {
        "flips": full["flips"][:IMPACT_FLIPS_SHOWN], "flip_count": len(full["flips"]),
        # Every flipped id (not only the flips shown): the summary counts an item once across assemblies.
        "flipped_item_ids": [flip["item_id"] for flip in full["flips"]],
        "partitions": partitions, "partitions_unchanged": len(full["partitions"]) - len(partitions),
        "status_a": full["status_a"], "status_b": full["status_b"],
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
        # A new minimum or maximum that moves nothing is in the policy diff, not an impact.
        "changed": bool(full["flips"] or full["status_a"] != full["status_b"]
                        or any(p["delta"] or p["items_a"] != p["items_b"] for p in partitions)),
        **extra,
    }


def _flipped_ids(comparison: dict[str, Any]) -> list[str]:
    """The ids of the items that flipped; a row stored before the full list was kept has only the shown flips."""
    return comparison.get("flipped_item_ids") or [flip["item_id"] for flip in comparison["flips"]]


def impact_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Totals over the replayed rows. An item that flips in two assemblies is one item flipping in
    two assemblies: `flipped_items` counts distinct item ids, `flip_assemblies` the assemblies with
    a flip (`flipped_items_at_least` when an old row kept only the flips it shows)."""
    addressed = [r["addressed"] for r in rows if r.get("addressed")]
    compared = [r["comparison"] for r in rows if r["comparison"]]
    flipped = {item_id for c in compared for item_id in _flipped_ids(c)}
    return {
        "rows": rows,
        "addressed": len(addressed),
        "failures_gone": sum(1 for a in addressed if a["failure_gone"] is True),
        "failures_remaining": sum(1 for a in addressed if a["failure_gone"] is False),
        "replayed": len(rows),
        "flipped_items": len(flipped),
        "flipped_items_at_least": any(len(_flipped_ids(c)) < c["flip_count"] for c in compared),
        "flip_assemblies": sum(1 for c in compared if c["flip_count"]),
        "becoming_blocked": sum(1 for r in rows if r.get("becomes_blocked")),
        "becoming_ready": sum(1 for r in rows if r.get("becomes_ready")),
        "errors": sum(1 for r in rows if r["error"]),
        "unchanged": sum(1 for r in rows if r["comparison"] and not r["changed"]),
    }


def _listed_first(row: dict[str, Any]) -> int:
    """Where a row goes in the listing: an assembly an upgrade addresses (the verdict the editor
    asked for), then what would become blocked, what could not be replayed, and what else changes."""
    if row.get("addressed"):
        return 0
    if row.get("becomes_blocked"):
        return 1
    return 2 if row["error"] else 3


def impact_listing(rows: list[dict[str, Any]], page: int) -> dict[str, Any]:
    """Page `page` (from 1) of a preview's rows as the impact region lists them: the rows that
    change (and every addressed or unreplayable one) first by `_listed_first`, then in replay
    order, IMPACT_ROWS_PER_PAGE a page, each with `n` (its place in the replay, as in the export)
    and at most IMPACT_FLIPS_ON_PAGE flips; the rows with no change are counted, not listed. A
    page past the last is the last."""
    listed = sorted(
        ({**row, "n": n} for n, row in enumerate(rows, 1)
         if row.get("addressed") or row["error"] or row.get("changed")),
        key=_listed_first)
    pages = max(1, -(-len(listed) // IMPACT_ROWS_PER_PAGE))
    page = min(page, pages)
    shown = listed[(page - 1) * IMPACT_ROWS_PER_PAGE: page * IMPACT_ROWS_PER_PAGE]
    for row in shown:
        if row["comparison"]:
            row["comparison"] = {**row["comparison"], "flips": row["comparison"]["flips"][:IMPACT_FLIPS_ON_PAGE]}
    return {"rows": shown, "page": page, "pages": pages, "listed": len(listed),
            "first": (page - 1) * IMPACT_ROWS_PER_PAGE + 1, "last": (page - 1) * IMPACT_ROWS_PER_PAGE + len(shown),
            "no_change": len(rows) - len(listed)}


def impact_export_rows(rows: list[dict[str, Any]]) -> Any:
    """A preview's rows, in replay order, as the export's flat records (IMPACT_EXPORT_COLUMNS):
    every row, the unchanged ones included, with every flipped item id it kept."""
    for n, row in enumerate(rows, 1):
        job, comparison, addressed = row.get("job") or {}, row.get("comparison") or {}, row.get("addressed") or {}
        yield {
            "n": n, "run_id": job.get("run_id"), "step_id": job.get("step_id"), "assembly": job.get("id"),
            "recorded_under_revision": job.get("revision"),
            "status_before": comparison.get("status_a"), "status_after": comparison.get("status_b"),
            "changed": bool(row.get("changed")), "becomes_blocked": bool(row.get("becomes_blocked")),
            "becomes_ready": bool(row.get("becomes_ready")), "flip_count": comparison.get("flip_count", 0),
            "flipped_item_ids": _flipped_ids(comparison) if comparison else [],
            "partition_deltas": {p["name"]: p["delta"] for p in comparison.get("partitions") or []},
            "blocked_reason_after": comparison.get("blocked_reason_b") or "",
            "addressed_by": addressed.get("mechanisms") or [], "addressed_assembly_id": addressed.get("assembly_id") or "",
            "failure_gone": addressed.get("failure_gone"), "error": row.get("error") or "",
        }


def impact_preview(policy: Policy, draft) -> dict[str, Any]:
    """Replay the policy's last IMPACT_SAMPLE recorded requests under `draft` (a parsed ContextPolicy),
    all at once, after the assemblies its upgrades address. The dashboard runs the same rows as a job
    (policies.services.impact_preview_run)."""
    addressed = addressed_jobs(policy, draft)
    seen = {str(job.id) for _, _, job in addressed if job is not None}
    rows = [addressed_row(a, names, job, draft) for a, names, job in addressed]
    rows += [impact_row(job, draft) for job in recent_jobs_for_policy(policy) if str(job.id) not in seen]
    return impact_summary(rows)


def latest_preview(revision: PolicyRevision) -> ImpactPreview | None:
    return ImpactPreview.objects.filter(revision=revision).select_related("requested_by").first()


def preview_get(revision: PolicyRevision, preview_id: Any) -> ImpactPreview | None:
    try:
        return ImpactPreview.objects.filter(revision=revision, id=preview_id).select_related("requested_by").first()
    except ValidationError:  # not a UUID
        return None


def upgrade_revocations(*, revision: PolicyRevision) -> list[dict]:
    """For each `upgrades` record of `revision`, its `revoke_when` evaluated over the newest sealed
    manifests assembled under the policy, whatever their revision (seed §8: the condition for taking
    a mechanism back out is the product's to evaluate and show; on a draft it says where the
    condition stands today): `{"mechanism", "condition", "met", "showing", "read"}`."""
    try:
        records = parse_policy(revision.body).upgrades
    except InvalidInput:  # a stored body that no longer parses: its own page says why
        return []
    if not records:
        return []
    newest = max(r.revoke_when.of_last for r in records)
    documents = assemblies.records().newest_documents(policy=revision.policy, count=newest,
                                           sections=("assembly", "transforms", "excluded"))
    return [{"mechanism": r.mechanism, "condition": r.revoke_when.model_dump(), **revocation_status(r.revoke_when, documents)}
            for r in records]
