"""Reviewer pages: runs and a run's item timeline (with its window by step and the compare
picker), the manifest inspector and its partials, the window tab, the payload view, search,
compare by run and step, and downloads (JSON documents; CSV and JSON rows, manifests.exports).

Views are thin: resolve the acting user's tenancy, call a dashboard selector, render. Objects
outside the user's tenants are 404. The manifest page is an inspector: an overview band, a list of
items (filters and the selected item live in the URL: `?q=&decision=&reason=&partition=&group=&page=`
and `?item=`; a value that is not allowed is dropped with a visible message) and the selected
item's whole story. For a manifest the service sealed, the page reads only `Manifest.sections`,
one page of ManifestItem rows and the selected item's rows (and the payload for an included
item), so it costs the same at 100 items and at 20,000; item bodies, transform excerpts and
later pages of tool pairs and transforms load on demand with their region.
"""

from __future__ import annotations

import re
from collections import Counter
from datetime import date
from types import SimpleNamespace
from typing import Any

from django.core.exceptions import BadRequest
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect, QueryDict
from django.shortcuts import render
from django.urls import reverse
from django.utils.cache import patch_vary_headers
from django.utils.http import url_has_allowed_host_and_scheme, urlencode
from django.views.decorators.http import require_GET, require_POST

from ctxeng.accounts.pages import SESSION_TENANT, act_in, dashboard_page, tenant_query, without_tenant_param
from ctxeng.engine.source_limits import expand_numbers
from ctxeng.engine.vocabulary import AcquisitionOutcome
from ctxeng.server.params import BadParameter, whole_number
from ctxeng.server.regions import render_region

from . import dashboard_selectors as sel
from . import exports
from .models import AssemblyJob, JobStatus, Origin, Verification
from .token_figures import token_figures

PAGE_SIZE = 100
RUN_ITEMS_PAGE_SIZE = 50
TRANSFORMS_PAGE_SIZE = sel.SECTION_HEADS["transforms"]
# The lower sections of the manifest page are overviews now that each item's story is in the
# inspector: tool pairs page 25 at a time, and the lineage overview names the first 20 trees.
TOOL_PAIRS_PAGE_SIZE = 25
LINEAGE_SHOWN = 20
def page_of(rows: Any, number: Any, per_page: int = PAGE_SIZE, *, name: str = "page"):
    """Page `number` of `rows`: the first when absent, the last when beyond it (a bookmarked page
    after rows went away); a 400 page naming `name` when it is not ASCII digits (Django's
    paginator would read `٣` as 3 and `banana` as 1)."""
    if number in (None, ""):
        number = 1
    elif isinstance(number, str):
        number = dashboard_int(number, name=name, minimum=1)
    return Paginator(rows, per_page).get_page(number)


def dashboard_int(value: str, *, name: str, minimum: int = 0) -> int:
    """A whole-number query parameter of a page (`ctxeng.server.params.whole_number`), or the 400
    page naming it."""
    try:
        return whole_number(value, name=name, minimum=minimum)
    except BadParameter as exc:
        raise BadRequest(str(exc)) from None


# --------------------------------------------------------------------------- tenancy


@require_POST
@dashboard_page
def tenant_switch(request: HttpRequest) -> HttpResponse:
    slug = request.POST.get("tenant", "")
    if not any(tenant.slug == slug for tenant in request.tenancy.tenants):
        raise Http404("no such tenant")
    request.session[SESSION_TENANT] = slug
    target = request.POST.get("next") or "/"
    if not url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()}):
        target = "/"
    target = without_tenant_param(target)  # the page it came from, now in the chosen tenant
    return HttpResponseRedirect(target)


# --------------------------------------------------------------------------- runs


def _date(value: str) -> date | None:
    try:
        return date.fromisoformat(value) if value else None
    except ValueError:
        return None


def _runs_filters(params: Any) -> tuple[dict[str, Any], list[str]]:
    """The runs list's filters from the URL; a value that is not allowed is dropped, and said so."""
    problems: list[str] = []
    status = params.get("status", "")
    if status and status not in JobStatus.values:
        problems.append(f"Unknown status “{status[:60]}” (expected one of {', '.join(JobStatus.values)}): the status filter is off.")
        status = ""
    verification = params.get("verification", "")
    if verification and verification not in Verification.values:
        problems.append(f"Unknown verification “{verification[:60]}” (expected one of {', '.join(Verification.values)}): "
                        "the verification filter is off.")
        verification = ""
    filters: dict[str, Any] = {"status": status, "policy": params.get("policy", "").strip(), "verification": verification,
                               "since": _date_filter(params.get("since", ""), "from", problems),
                               "until": _date_filter(params.get("until", ""), "to", problems)}
    return filters, problems


def _date_filter(text: str, label: str, problems: list[str]) -> str:
    """A date filter's text, or "" (and a problem said) when it is not a date."""
    text = text.strip()
    if text and _date(text) is None:
        problems.append(f"“{text[:60]}” is not a date (YYYY-MM-DD): the “{label}” filter is off.")
        return ""
    return text


@require_GET
@dashboard_page
def runs(request: HttpRequest) -> HttpResponse:
    tenant = request.tenancy.current
    filters, problems = _runs_filters(request.GET)
    if tenant is None:
        page, policies = page_of([], 1), []
    else:
        rows = sel.runs_list(tenant=tenant, status=filters["status"], policy=filters["policy"], verification=filters["verification"],
                             since=_date(filters["since"]), until=_date(filters["until"]))
        page, policies = page_of(rows, request.GET.get("page"), 50), sel.policy_ids_in(tenant)
    return render(request, "manifests/runs.html", {
        "page": page, "filters": filters, "statuses": JobStatus.values, "policies": policies, "problems": problems,
        "verifications": Verification.values,
    })


STEP_PAGE_SIZE = 50
MATRIX_STEPS_SHOWN = 20


def _run_or_404(request: HttpRequest, run_id: str):
    run = sel.run_get(tenant_ids=request.tenancy.tenant_ids, run_id=run_id, prefer_tenant=request.tenancy.current)
    if run is None:
        raise Http404("run not found")
    act_in(request, run.tenant_id)
    return run


def _token_story(job: AssemblyJob) -> None:
    """One token story per step (`manifests.token_figures`, the inspector's too): `used` is the
    payload (the items' tokens and the framing ctxeng adds), `free` is usable − used; a manifest
    sealed before payload tokens were counted uses its items' estimate."""
    sealed = hasattr(job, "manifest")
    figures = token_figures({"usable_input": int(job.usable_input) if job.usable_input not in (None, "") else None,
                             "payload_tokens": job.payload_tokens if sealed else None,
                             "estimated_used": job.manifest.estimated_input_tokens if sealed else None})
    job.usable, job.used, job.free, job.used_percent = figures.usable, figures.used, figures.free, figures.used_percent
    job.provider_cached = sel.cache_hit_percent(job.usage_cached, job.usage_input)
    job.cache_eligible = (100.0 * job.cache_eligible_tokens / job.payload_text_tokens
                          if job.payload_text_tokens and job.cache_eligible_tokens is not None else None)
    job.duration = (job.finished_at - job.claimed_at).total_seconds() if job.finished_at and job.claimed_at else None


_STEP_RANGE = re.compile(r"([0-9]{1,9})[-–]([0-9]{1,9})")


def _step_window(params: Any, total: int) -> tuple[int, int, list[str]]:
    """The steps the run page shows, (first, last) numbered from 1, at most STEP_PAGE_SIZE of
    them, and what was changed in the asking: `?steps=120-140`, `?steps=120` (from step 120 on)
    or `?from=120&to=140` (either end may be left out), `?steps_page=` (pages of STEP_PAGE_SIZE
    counted from the first step); with none of them, the last STEP_PAGE_SIZE steps (a long run's
    question is usually about its end). A value that is not ASCII numbers is a 400 naming the
    parameter."""
    notes: list[str] = []
    if total == 0:
        return 1, 0, notes
    text = params.get("steps", "").strip()
    if text:
        match = _STEP_RANGE.fullmatch(text)
        if match is not None:
            first, last = int(match[1]), int(match[2])
        else:  # one number: the window from that step on
            try:
                first = whole_number(text, name="steps", minimum=1)
            except BadParameter:
                raise BadRequest(f"steps: expected a step number or a range such as 120-140, got {text[:24]!r}") from None
            last = first + STEP_PAGE_SIZE - 1
    elif params.get("from") or params.get("to"):
        first = dashboard_int(params["from"], name="from", minimum=1) if params.get("from") else None
        last = dashboard_int(params["to"], name="to", minimum=1) if params.get("to") else None
        first = first if first is not None else max(1, last - STEP_PAGE_SIZE + 1)
        last = last if last is not None else first + STEP_PAGE_SIZE - 1
    elif params.get("steps_page"):
        page = page_of(range(1, total + 1), params["steps_page"], STEP_PAGE_SIZE, name="steps_page")
        return page.start_index(), page.end_index(), notes
    else:
        return max(1, total - STEP_PAGE_SIZE + 1), total, notes
    if first > last:
        first, last = last, first
    first, last = max(1, min(first, total)), max(1, min(last, total))
    if last - first + 1 > STEP_PAGE_SIZE:
        notes.append(f"At most {STEP_PAGE_SIZE} steps at a time: steps {first}–{first + STEP_PAGE_SIZE - 1} are shown.")
        last = first + STEP_PAGE_SIZE - 1
    return first, last, notes


def _step_number(value: str, attempts: list[Any]) -> int:
    """The number (from 1) of the step `?step=` names: a number (the last when beyond it), or a step
    id (its latest attempt); a 400 naming `step` when it names none of the run's."""
    if value.isascii() and value.isdigit():
        return min(dashboard_int(value, name="step", minimum=1), max(1, len(attempts)))
    found = [number for number, row in enumerate(attempts, start=1) if row.step_id == value]
    if not found:
        raise BadRequest(f"step: no step of this run is numbered or named {value[:60]!r}")
    return found[-1]


def _window_links(request: HttpRequest, first: int, last: int, total: int) -> dict[str, str | None]:
    """The queries (`?steps=`) of the first and last windows and of those before and after this
    one, each STEP_PAGE_SIZE steps; None where there is nothing that way."""
    ranges = {"first_url": f"1-{min(total, STEP_PAGE_SIZE)}" if first > 1 else None,
              "earlier": f"{max(1, first - STEP_PAGE_SIZE)}-{first - 1}" if first > 1 else None,
              "later": f"{last + 1}-{min(total, last + STEP_PAGE_SIZE)}" if last < total else None,
              "latest": f"{max(1, total - STEP_PAGE_SIZE + 1)}-{total}" if last < total else None}
    return {name: f"?{_tenant_and(request, steps=value)}#steps" if value else None for name, value in ranges.items()}


@require_GET
@dashboard_page
def run_detail(request: HttpRequest, run_id: str) -> HttpResponse:
    """A run as a step table, STEP_PAGE_SIZE steps at a time, opening on its last steps
    (`_step_window`: `?steps=120-140`, `?from=&to=`; `?step=137` or `?step=step-137`, a step id,
    redirects to the window around that step, anchored on its row): per attempt its status,
    tokens used of usable, included and excluded by reason (each a link to that step's inspector
    filtered to it), what changed from the step before (a link to compare them) and how long it
    took. Its queries do not grow with the steps or items: every attempt as a few columns in one query, the window's steps in full in
    another, their counts and changes in two more. The window summary and the item × step matrix
    are regions that load when scrolled to (`runs/<id>/window/`, `runs/<id>/matrix/`)."""
    run = _run_or_404(request, run_id)
    # Every attempt as a few columns (numbering, attempts, totals); full rows for the window only.
    attempts = [SimpleNamespace(**row) for row in sel.run_step_index(run)]
    if request.GET.get("step"):
        wanted = _step_number(request.GET["step"].strip(), attempts)
        first = max(1, wanted - STEP_PAGE_SIZE // 2)
        last = min(len(attempts), first + STEP_PAGE_SIZE - 1)
        return HttpResponseRedirect(f"{reverse('run', args=[run.run_id])}?{_tenant_and(request, steps=f'{first}-{last}')}"
                                    f"#step-{wanted}")
    sel.label_attempts(attempts)
    first, last, notes = _step_window(request.GET, len(attempts))
    on_page = attempts[first - 1: last]
    full = {job.pk: job for job in sel.run_timeline(run, [row.id for row in on_page])}
    shown = [full[row.id] for row in on_page]
    for row, job in zip(on_page, shown, strict=True):
        job.step_attempt, job.step_attempts = row.step_attempt, row.step_attempts
    before = [row for row in attempts[: first - 1] if row.sealed is not None] if shown else []
    previous = AssemblyJob(id=before[-1].id) if before else None  # only its id is read (its decisions)
    facts = sel.run_step_facts([job for job in shown if hasattr(job, "manifest")], previous)
    for index, job in enumerate(shown):
        _token_story(job)
        job.number = first + index
        job.facts = facts.get(job.pk)
        job.previous_id = previous.pk if previous is not None else None
        job.url = reverse("assembly", args=[job.pk])  # each row links its step several times
        job.policy_url = (f"{reverse('policy', args=[job.policy_revision.policy.policy_id])}{tenant_query(request)}"
                          f"#rev-{job.policy_revision.revision}")
        if hasattr(job, "manifest"):
            previous = job
    steps = [row for row in attempts if row.sealed is not None]
    return render(request, "manifests/run.html", {"run": run, "jobs": shown, "steps_total": len(steps),
                                                  "window": {"first": first, "last": first + len(shown) - 1,
                                                             "notes": notes, **_window_links(request, first, last, len(attempts))},
                                                  "recorded": _recorded_summary(attempts),
                                                  "attempts_total": len(attempts), "cache_hits": sel.run_cache_hits(steps),
                                                  "cache_eligible": sel.run_cache_eligible(steps),
                                                  "compare_url": reverse("compare")})


def _tenant_and(request: HttpRequest, **params: str) -> str:
    """`params` as a query string, with the page's `?tenant=` when it has one."""
    tenant = tenant_query(request)
    return (f"{tenant[1:]}&" if tenant else "") + urlencode(params)


def _recorded_summary(attempts: list[Any]) -> dict[str, Any]:
    """The run's recorded steps: how many, how many in each verification state, the first diverged."""
    recorded = [row for row in attempts if row.origin == Origin.RECORDED]
    counts = Counter(row.verification for row in recorded)
    diverged = next((row.id for row in recorded if row.verification == Verification.DIVERGED), None)
    return {"total": len(recorded), "counts": [(name, counts[name]) for name in Verification.values if counts[name]],
            "first_diverged": diverged}


def _run_steps_with_manifest(run) -> list[AssemblyJob]:
    jobs = sel.run_timeline(run)
    sel.label_attempts(jobs)
    return [job for job in jobs if hasattr(job, "manifest")]


@require_GET
@dashboard_page
def run_matrix(request: HttpRequest, run_id: str) -> HttpResponse:
    """The run's item × step matrix (a region of the run page, or a page): per item, one cell per
    step (in with its partition, out with its reason, — absent), each a link to that step's
    inspector on the item. Items a page at a time (`?page=`), steps MATRIX_STEPS_SHOWN at a time
    (`?steps=`, the first step's number; the last ones without it), searched by id or source ref (`?q=`), filtered to an
    exclusion reason (`?reason=`) or to items that changed (`?changed=1`), sorted by id, by most
    changes or by most excluded steps (`?sort=`)."""
    run = _run_or_404(request, run_id)
    steps = _run_steps_with_manifest(run)
    problems: list[str] = []
    reason = request.GET.get("reason", "")
    if reason and reason not in sel.REASON_ORDER:
        problems.append(f"Unknown exclusion reason “{reason[:60]}”: the reason filter is off.")
        reason = ""
    order = request.GET.get("sort", "")
    if order not in sel.RUN_ITEM_SORTS:
        problems.append(f"Unknown order “{order[:60]}”: sorted by item id.")
        order = ""
    q = request.GET.get("q", "").strip()[:MAX_QUERY]
    changed_only = request.GET.get("changed") == "1"
    # Without `?steps=`, the last MATRIX_STEPS_SHOWN steps, as the run page opens on its last steps.
    opening = str(max(1, len(steps) - MATRIX_STEPS_SHOWN + 1))
    first = max(1, min(dashboard_int(request.GET.get("steps") or opening, name="steps", minimum=1), max(1, len(steps))))
    shown = steps[first - 1: first - 1 + MATRIX_STEPS_SHOWN]
    for before, job in zip([None, *shown], shown, strict=False):  # a revision's badge once, where its stretch of columns starts
        job.revision_starts = before is None or before.policy_revision_id != job.policy_revision_id
    item_ids = sel.run_item_ids(run, steps=len(steps), changed_only=changed_only, q=q, reason=reason,
                                sort=order) if steps else []
    page = page_of(item_ids, request.GET.get("page"), RUN_ITEMS_PAGE_SIZE)
    cells = sel.run_item_cells(run, list(page.object_list), [job.pk for job in shown]) if steps else {}
    grid = []
    for item_id in page.object_list:
        row_cells = [{"job": job, "row": cells.get((item_id, str(job.id)))} for job in shown]
        decided = [cell["row"] for cell in row_cells if cell["row"]]
        known = next((row for row in decided if row["label"]), decided[0] if decided else None)
        grid.append({"item_id": item_id, "row": known, "cells": row_cells})
    context = {"run": run, "steps": shown, "steps_total": len(steps), "first": first, "grid": grid, "page": page,
               # each row's label is the one its decision stored at seal (a message's first words, a
               # call); reading the steps' requests here would cost the matrix 4 queries more than its bound
               "labels": {},
               "last_shown": first + len(shown) - 1, "changed_only": changed_only, "q": q, "reason": reason, "sort": order, "reasons": sel.REASON_ORDER,
               "sorts": sel.RUN_ITEM_SORTS, "problems": problems,
               "earlier": max(1, first - MATRIX_STEPS_SHOWN) if first > 1 else None,
               "later": first + MATRIX_STEPS_SHOWN if first - 1 + MATRIX_STEPS_SHOWN < len(steps) else None}
    return render_region(request, "manifests/partials/run_matrix.html", context, title=f"Items across the steps of run {run.run_id}",
                         back_url=reverse("run", args=[run.run_id]) + tenant_query(request), back_label=f"run {run.run_id}")


@require_GET
@dashboard_page
def run_search(request: HttpRequest, run_id: str) -> HttpResponse:
    """Search within a run (a region of the run page, or a page): the items whose label or text
    (or id, source ref, decision detail, kind) holds `?q=`, each linked to the inspector on it at
    the step where it matters (`sel.run_item_search`, bounded whatever the run's length)."""
    run = _run_or_404(request, run_id)
    q = " ".join(request.GET.get("q", "").split())
    if len(q) > MAX_QUERY:
        raise BadRequest(f"q: at most {MAX_QUERY} characters, got {len(q)}")
    hits, searched = sel.run_item_search(run, q) if q else ([], {})
    return render_region(request, "manifests/partials/run_search.html",
                         {"run": run, "q": q, "hits": hits, "searched": searched, "limit": sel.RUN_SEARCH_HITS},
                         title=f"Find in run {run.run_id}", back_url=reverse("run", args=[run.run_id]) + tenant_query(request),
                         back_label=f"run {run.run_id}")


@require_GET
@dashboard_page
def run_window_region(request: HttpRequest, run_id: str) -> HttpResponse:
    """The run's window summary (a region of the run page, or a page): each source's (`?window=`
    source, source_type, kind or partition) included tokens at every step, largest at the last step
    or grown most (`?window_sort=`)."""
    run = _run_or_404(request, run_id)
    steps = _run_steps_with_manifest(run)
    return render_region(request, "manifests/partials/run_window.html", {"run": run, "steps": steps,
                                                                           "window": _run_window(request, steps)},
                         title=f"What is eating the window, run {run.run_id}",
                         back_url=reverse("run", args=[run.run_id]) + tenant_query(request),
                         back_label=f"run {run.run_id}")


def _run_window(request: HttpRequest, steps: list[AssemblyJob]) -> dict[str, Any]:
    """The run's window summary: each source's (`?window=` source, source_type, kind or
    partition) included tokens at every step, largest at the last step or grown most (`?window_sort=`)."""
    dimension = request.GET.get("window", "source")
    dimension = dimension if dimension in sel.WINDOW_DIMENSIONS else "source"
    order = request.GET.get("window_sort", "latest")
    order = order if order in sel.RUN_WINDOW_SORTS else "latest"
    rows, total = sel.run_window(steps, dimension=dimension, sort=order)
    return {"dimension": dimension, "sort": order, "rows": rows, "total": total, "dimensions": sel.WINDOW_DIMENSIONS,
            "sorts": sel.RUN_WINDOW_SORTS, "last": steps[-1] if steps else None}


# --------------------------------------------------------------------------- the manifest page


def _job_or_404(request: HttpRequest, job_id: str) -> AssemblyJob:
    job = sel.assembly_get(tenant_ids=request.tenancy.tenant_ids, job_id=job_id)
    if job is None:
        raise Http404("assembly not found")
    act_in(request, job.tenant_id)
    return job


def _manifest_of(job: AssemblyJob):
    return getattr(job, "manifest", None) if hasattr(job, "manifest") else None


def _page_number_of(rows: list[dict[str, Any]], item_id: str, per_page: int = PAGE_SIZE) -> int | None:
    for index, row in enumerate(rows):
        if row.get("item_id") == item_id:
            return index // per_page + 1
    return None


def _section_context(sections: dict[str, Any], params: Any) -> dict[str, Any]:
    """A page of tool pairs or transforms (with their excerpts) from the sealed document."""
    tool_pairs = sections.get("tool_pairs") or []
    return {
        "tool_pairs_page": page_of(tool_pairs, params.get("tool_pairs_page"), TOOL_PAIRS_PAGE_SIZE, name="tool_pairs_page"),
        "transforms_page": page_of(sections.get("transforms") or [], params.get("transforms_page"),
                                   TRANSFORMS_PAGE_SIZE, name="transforms_page"),
        "unresolved": [p for p in tool_pairs if p.get("decision") == "unresolved"],
    }


def _acquisition(rows: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    missing = (AcquisitionOutcome.NOT_RETRIEVED.value, AcquisitionOutcome.RETRIEVAL_FAILED.value)
    return {
        "problems": [row for row in rows if row.get("outcome") in missing],
        "retrieved": [row for row in rows if row.get("outcome") not in missing],
    }


def _lineage(sections: dict[str, Any], limit: int = LINEAGE_SHOWN) -> dict[str, Any]:
    """Items whose content derives from other objects (excerpts, summaries), with their node trees."""
    items = [row for row in sections.get("included") or [] if row.get("source_lineage")]
    summaries = sections.get("summaries") or []
    return _lineage_of(items[:limit], len(items), summaries[:limit], len(summaries), limit)


def _lineage_of(items: list[dict[str, Any]], items_total: int, summaries: list[dict[str, Any]],
                summaries_total: int, limit: int = LINEAGE_SHOWN) -> dict[str, Any]:
    trees = [{"item_id": row["item_id"], "roots": lineage_tree(row["source_lineage"])} for row in items[:limit]]
    return {"trees": trees, "more": max(0, items_total - limit), "summaries": summaries[:limit],
            "more_summaries": max(0, summaries_total - limit)}


def lineage_tree(nodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Nest lineage nodes: each node's children are the nodes it was derived from (input_node_ids)."""
    by_id = {node["node_id"]: node for node in nodes}
    used_as_input = {i for node in nodes for i in node.get("input_node_ids") or []}

    def build(node: dict[str, Any], seen: frozenset[str]) -> dict[str, Any]:
        inputs = [by_id[i] for i in node.get("input_node_ids") or [] if i in by_id and i not in seen]
        return {**node, "children": [build(child, seen | {child["node_id"]}) for child in inputs],
                "unknown_inputs": [i for i in node.get("input_node_ids") or [] if i not in by_id]}

    roots = [node for node in nodes if node["node_id"] not in used_as_input] or nodes[-1:]
    return [build(root, frozenset({root["node_id"]})) for root in roots]


# The objective of the source-limit reduction that keeps a log's failure lines (engine/source_limits.py).
LOG_REDUCTION = "keep_failures_and_artifact_ref"
INSPECTOR_PAGE_SIZE = 50
PAYLOAD_PAGE_SIZE = 60
MAX_QUERY = 200
GROUP_LABELS = {"reason": "decision and reason", "partition": "partition", "zone": "zone", "none": "no grouping"}


def _inspector_filter(params: Any, partitions: dict[str, Any]) -> tuple[sel.ItemFilter, list[str]]:
    """The list's filters from the URL; a value that is not allowed is dropped with a message."""
    problems: list[str] = []
    decision = params.get("decision", "")
    if decision not in ("", *sel.ITEM_DECISIONS):
        problems.append(f"Unknown decision “{decision[:60]}”: showing included and excluded items.")
        decision = ""
    reason = params.get("reason", "")
    if reason and reason not in sel.REASON_ORDER:
        problems.append(f"Unknown exclusion reason “{reason[:60]}”: the reason filter is off.")
        reason = ""
    if reason and not decision:
        decision = "excluded"
    partition = params.get("partition", "")
    if partition and partition not in partitions:
        problems.append(f"This manifest has no partition “{partition[:60]}”: the partition filter is off.")
        partition = ""
    group = params.get("group", "reason")
    if group not in sel.ITEM_GROUPS:
        problems.append(f"Unknown grouping “{group[:60]}”: grouped by decision and reason.")
        group = "reason"
    q = params.get("q", "").strip()
    if len(q) > MAX_QUERY:
        problems.append(f"The search text was cut to its first {MAX_QUERY} characters.")
        q = q[:MAX_QUERY]
    source = params.get("source", "")
    if source and not sel.source_key_valid(source):
        problems.append(f"Unknown source “{source[:60]}” (expected repo:…, host:…, tool:… or none): the source filter is off.")
        source = ""
    sort = params.get("sort", "")
    if sort not in sel.ITEM_SORTS:
        problems.append(f"Unknown sort “{sort[:60]}”: listed in document order.")
        sort = ""
    return sel.ItemFilter(decision=decision, reason=reason, partition=partition, q=q, group=group,
                          kind=params.get("kind", "")[:MAX_QUERY], source_type=params.get("source_type", "")[:MAX_QUERY],
                          source=source[:MAX_QUERY], sort=sort), problems


def _known_total(sealed: dict[str, Any], item_filter: sel.ItemFilter) -> int | None:
    """The list's length from `Manifest.sections` when the filter is one it already counts."""
    if item_filter.narrows_counts:
        return None
    if item_filter.reason:
        return dict(tuple(pair) for pair in sealed.get("reason_counts") or []).get(item_filter.reason, 0)
    included, excluded = sealed.get("included_total") or 0, sealed.get("excluded_total") or 0
    return {"included": included, "excluded": excluded}.get(item_filter.decision, included + excluded)


def _item_list_page(manifest: Any, sections: dict[str, Any], item_filter: sel.ItemFilter, params: Any,
                    selected: dict[str, Any] | None) -> Any:
    """One page of the inspector's list; with `?item=` and no `?page=`, the page that lists it."""
    number = params.get("page")
    if manifest.sections is not None:
        rows: Any = sel.InspectorItems(manifest_id=manifest.pk, item_filter=item_filter,
                                       known_total=_known_total(manifest.sections, item_filter), sections=manifest.sections)
        if selected and not number:
            position = rows.locate(selected["row"])
            number = position // INSPECTOR_PAGE_SIZE + 1 if position is not None else None
    else:
        rows = sel.document_items_filtered(sections, item_filter)
        if selected and not number:
            number = _page_number_of([r["record"] for r in rows], selected["item_id"], INSPECTOR_PAGE_SIZE)
    return page_of(rows, number, INSPECTOR_PAGE_SIZE)


def _acquisition_counts(rows: list[dict[str, Any]]) -> list[tuple[str, int]]:
    counts: dict[str, int] = {}
    for row in rows:
        counts[row.get("outcome")] = counts.get(row.get("outcome"), 0) + 1
    return [(outcome.value, counts[outcome.value]) for outcome in AcquisitionOutcome if counts.get(outcome.value)]


def payload_rows(payload: Any, manifest_id: int | None = None) -> list[dict[str, Any]]:
    """The provider payload as display rows, one per segment, each knowing its message (and, with
    the manifest, each block its item: a fence names it by its citable id or its tool call; and
    each message the items its text came from, `sel.message_items`)."""
    rows = []
    document = sel.manifest_sections(manifest_id, ("included", "tool_pairs")) if manifest_id is not None and payload else None
    for index, message in enumerate(sel.input_messages(payload, document)):
        segments = message["segments"] or [{"text": "", "block": None, "untrusted": False}]
        for position, segment in enumerate(segments):
            rows.append({"index": index + 1, "role": message["role"], "first": position == 0, "position": position + 1,
                         "blocks": len(segments), "extra": message["extra"] if position == 0 else [], "segment": segment,
                         "items": message["items"], "framing": message["framing"]})
    return rows


def _payload_place(rows: list[dict[str, Any]], item_id: str, pair: dict[str, Any] | None) -> dict[str, Any]:
    """Where an item sits in the serialized payload: the first message its text is in (and as
    what), its fenced block, and a tool pair's call and result."""
    place: dict[str, Any] = {"block": None, "call": None, "result": None, "message": None}
    for number, row in enumerate(rows):
        if place["message"] is None and row["first"] and any(i["item_id"] == item_id for i in row["items"]):
            place["message"] = {**row, "page": number // PAYLOAD_PAGE_SIZE + 1,
                                "as": next(i["as"] for i in row["items"] if i["item_id"] == item_id)}
        block = row["segment"].get("block") or {}
        if block.get("item_id") == item_id and place["block"] is None:
            place["block"] = {**row, "page": number // PAYLOAD_PAGE_SIZE + 1}
    if pair is not None:
        call_id = pair.get("serialized_call_id") or pair.get("call_id")
        for number, row in enumerate(rows):
            extra = " ".join(row["extra"])
            tool = row["segment"].get("tool") or ""
            if place["call"] is None and (f"tool call {call_id}:" in extra or tool.endswith(f" id={call_id}")):
                place["call"] = {**row, "page": number // PAYLOAD_PAGE_SIZE + 1,
                                 "text": next((e for e in row["extra"] if e.startswith(f"tool call {call_id}:")),
                                              row["segment"].get("text"))}
            if place["result"] is None and (f"result for tool call {call_id}" in extra or tool == f"tool_result for {call_id}"):
                place["result"] = {**row, "page": number // PAYLOAD_PAGE_SIZE + 1}
    return place


def _lineage_node(node: dict[str, Any], item_id: str, rows: dict[str, dict[str, Any]]) -> dict[str, Any]:
    linked = rows.get(node["node_id"])
    return {**node, "is_item": node["node_id"] == item_id, "item": linked,
            "children": [_lineage_node(child, item_id, rows) for child in node.get("children") or []]}


def _item_lineage(item_id: str, record: dict[str, Any], transforms: list[dict[str, Any]],
                  rows: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The item's full derivation: its source lineage, and for a summary (or any transform whose
    output it is) the input items with their own decisions and lineage; plus what consumed it."""
    source_nodes = lineage_tree(record.get("source_lineage") or [])
    inputs: list[str] = []
    for t in transforms:
        if t.get("output_item_id") == item_id:
            inputs += [i for i in t.get("input_item_ids") or [] if i != item_id and i not in inputs]
    trees = [_lineage_node(node, item_id, rows) for node in source_nodes]
    if inputs:
        children = []
        for input_id in inputs:
            linked = rows.get(input_id)
            nested = lineage_tree(((linked or {}).get("record") or {}).get("source_lineage") or [])
            children.append({"node_id": input_id, "type": "input item", "item": linked, "is_item": False,
                             "in_manifest": linked is not None,
                             "children": [_lineage_node(n, input_id, rows) for n in nested]})
        root = {"node_id": item_id, "type": record.get("kind") or "item", "item": rows.get(item_id), "is_item": True,
                "children": children}
        trees = [root] + [tree for tree in trees if tree["node_id"] != item_id]
    consumers = [t.get("output_item_id") for t in transforms
                 if item_id in (t.get("input_item_ids") or []) and t.get("output_item_id") != item_id]
    return {"trees": trees, "consumers": [{"item_id": c, "item": rows.get(c)} for c in consumers if c]}


def _selected_item(manifest: Any, sections: dict[str, Any], budget: dict[str, Any], item_id: str) -> dict[str, Any] | None:
    """Everything the inspector's right panel shows about one item (bounded: two queries)."""
    ready = manifest.status == "ready"
    if manifest.sections is not None:
        # `sections` holds the transforms (without excerpts) and the first tool pairs; the document
        # is read only for what they leave out. The payload comes along for an included item.
        briefs = sections.get("transform_briefs")
        pairs_head = sections.get("tool_pairs") or []
        pairs_complete = len(pairs_head) >= (sections.get("tool_pairs_total") or 0)
        listed_pair = any(p.get("result_item_id") == item_id for p in pairs_head)
        from_document = (("transforms",) if briefs is None else ()) + (() if pairs_complete or listed_pair else ("tool_pairs",))
        parts = {"transforms": briefs, "tool_pairs": pairs_head}
        parts.update(sel.inspector_document_parts(manifest.pk, sections=from_document, with_payload=False))
    else:
        parts = dict(sections)
    transforms = [t for t in parts.get("transforms") or []
                  if t.get("output_item_id") == item_id or item_id in (t.get("input_item_ids") or [])]
    related = {item_id} | {i for t in transforms for i in (t.get("input_item_ids") or [])}
    related |= {t.get("output_item_id") for t in transforms if t.get("output_item_id")}
    if manifest.sections is not None:
        rows = sel.item_rows_by_id(manifest.pk, related)
    else:
        rows = {r["item_id"]: {"item_id": r["item_id"], "decision": d, "reason": r.get("reason") or r.get("admission_reason"),
                               "record": r}
                for d in ("included", "excluded") for r in sections.get(d) or [] if r.get("item_id") in related}
    found = rows.get(item_id)
    if found is None or not found.get("record"):
        return None
    record, decision = found["record"], found["decision"]
    transforms = [t for t in transforms if t.get("output_item_id") == item_id or item_id in (t.get("input_item_ids") or [])
                  or t.get("record_id") == record.get("transform_record_id")]
    partition = record.get("partition")
    part = (budget.get("partitions") or {}).get(partition) or {}
    tokens = record.get("tokens")
    share = round(100 * tokens / part["used"]) if tokens and part.get("used") else None
    pair = next((p for p in parts.get("tool_pairs") or [] if p.get("result_item_id") == item_id), None)
    made_by, ranges = _made_by(record) if decision == "excluded" else ([], [])
    if made_by:
        if manifest.sections is not None:
            rows = {**rows, **sel.item_rows_by_id(manifest.pk, set(made_by) - set(rows))}
        else:
            rows = {**rows, **{r["item_id"]: {"item_id": r["item_id"], "decision": d, "reason": r.get("reason") or r.get("admission_reason"), "record": r}
                               for d in ("included", "excluded") for r in sections.get(d) or [] if r.get("item_id") in made_by}}
    return {
        "item_id": item_id, "row": found, "record": record, "decision": decision, "partition": partition, "part": part,
        "tokens": tokens, "share": share, "transforms": transforms, "lineage": _item_lineage(item_id, record, transforms, rows),
        "excerpts_on_demand": manifest.sections is not None,
        "pair": pair, "in_payload": ready and decision == "included",
        "made_by": [{"item_id": i, "item": rows.get(i)} for i in made_by], "ranges": ranges,
        "stale_event": stale_event(record.get("detail")) if record.get("reason") == "stale_revision" else "",
    }


# The items a stale or duplicate detail names (`by item 'result-8b5c'`, `item 'x' read ... again`),
# and the ranges it states (`(lines 1-200)`, `(any range)`, `this item's lines 1-80`).
_NAMED_ITEM = re.compile(r"\bitems? (?:'([^']+)'|\"([^\"]+)\")")
_RANGE = re.compile(r"\((lines [0-9,\- ]+|any range|the whole)[,)]|this item's (lines [0-9,\-]+|the whole)")


# What made a reading stale, in the words the engine's detail starts each event with
# (ctxeng.engine.versions.judge): the inspector names the event before the item that caused it.
_STALE_EVENTS = (("stale: a write of ", "a later write of the object by"),
                 ("stale: a reading of ", "a reading at a newer revision:"),
                 ("changed after this reading", "a later reading that differs where they overlap:"))


def stale_event(detail: Any) -> str:
    """The words naming the event a stale detail records first ("" when it names none)."""
    text = str(detail or "")
    found = [(text.find(marker), words) for marker, words in _STALE_EVENTS if marker in text]
    return min(found)[1] if found else ""


def _made_by(record: dict[str, Any]) -> tuple[list[str], list[str]]:
    """For a stale or duplicate exclusion: the items its detail names as what made it so, and the
    ranges it states (the engine writes both into the detail; the manifest has no other field)."""
    if record.get("reason") not in ("stale_revision", "duplicate"):
        return [], []
    detail = str(record.get("detail") or "")
    own = record.get("item_id")
    ids = [a or b for a, b in _NAMED_ITEM.findall(detail)]
    ranges = [a or b for a, b in _RANGE.findall(detail)]
    return list(dict.fromkeys(i for i in ids if i != own)), list(dict.fromkeys(ranges))


@require_GET
@dashboard_page
def assembly_detail(request: HttpRequest, job_id: str) -> HttpResponse:
    """The manifest inspector: overview band, the item list (left) and the selected item (right)."""
    job = _job_or_404(request, job_id)
    manifest = _manifest_of(job)
    selected_id = request.GET.get("item", "")
    context: dict[str, Any] = {"job": job, "manifest": manifest, "focus": selected_id}
    if manifest is None:
        return render(request, "manifests/manifest.html", context)
    context["previous_step"], context["next_step"] = sel.step_neighbours(job)
    if manifest.sections is not None:
        sealed = manifest.sections
        context.update({
            "lineage": _lineage_of(sealed.get("lineage_items") or [], sealed.get("lineage_total") or 0,
                                   sealed.get("summaries") or [], sealed.get("summaries_total") or 0),
            "included_total": sealed.get("included_total") or 0,
            "excluded_total": sealed.get("excluded_total") or 0,
            "reason_counts": [tuple(pair) for pair in sealed.get("reason_counts") or []],
            "transforms_total": sealed.get("transforms_total") or 0,
            "tool_pairs_total": sealed.get("tool_pairs_total") or 0,
            "unresolved": sealed.get("unresolved") or [],
        })
    else:
        sealed = sel.manifest_sections(manifest.pk)
        context.update({
            "lineage": _lineage(sealed),
            "included_total": len(sealed.get("included") or []),
            "excluded_total": len(sealed.get("excluded") or []),
            "reason_counts": sel.reason_counts(sealed.get("excluded") or []),
            "transforms_total": len(sealed.get("transforms") or []),
            "tool_pairs_total": len(sealed.get("tool_pairs") or []),
            "unresolved": [p for p in sealed.get("tool_pairs") or [] if p.get("decision") == "unresolved"],
        })
    budget = sealed.get("budget") or {}
    item_filter, problems = _inspector_filter(request.GET, budget.get("partitions") or {})
    acquisition_rows = sealed.get("source_acquisition") or []
    outcome = request.GET.get("outcome", "")
    if outcome and outcome not in {o.value for o in AcquisitionOutcome}:
        problems.append(f"Unknown acquisition outcome “{outcome[:60]}”: showing every source request.")
        outcome = ""
    selected = _selected_item(manifest, sealed, budget, selected_id) if selected_id else None
    if selected_id and selected is None:
        problems.append(f"This manifest has no item “{selected_id[:120]}”.")
    context.update({
        "assembly": sealed.get("assembly") or {},
        "budget": budget,
        "cache": sealed.get("cache") or {},
        "stages": sealed.get("stages") or [],
        "lifecycle_events": sealed.get("lifecycle_events") or [],
        "acquisition": _acquisition(acquisition_rows),
        "acquisition_counts": _acquisition_counts(acquisition_rows),
        "outcome": outcome,
        "outcome_rows": [row for row in acquisition_rows if row.get("outcome") == outcome] if outcome else [],
        "usage": getattr(manifest, "usage", None) if hasattr(manifest, "usage") else None,
        "item_filter": item_filter,
        "filtered": bool(item_filter.decision or item_filter.reason or item_filter.partition or item_filter.q
                         or item_filter.kind or item_filter.source_type or item_filter.source),
        "source_label": sel.source_label(item_filter.source) if item_filter.source else "",
        "groups": GROUP_LABELS,
        "problems": problems,
        "items_page": _item_list_page(manifest, sealed, item_filter, request.GET, selected),
        "selected": selected,
        # the labels the decisions stored at seal (a message's first words, a call), else the ones
        # their source refs give: the list reads no request (its queries stay the same at 100 and
        # 20,000 items)
        "labels": {},
    })
    if context["usage"] is not None:
        context["usage_delta"] = context["usage"].input_tokens - int(budget.get("estimated_used") or 0)
    return render(request, "manifests/manifest.html", context)


_SECTION_PARTIALS = {
    "tool_pairs": "manifests/partials/tool_pairs.html",
    "transforms": "manifests/partials/transforms.html",
}


@require_GET
@dashboard_page
def assembly_section(request: HttpRequest, job_id: str, section: str) -> HttpResponse:
    """One paginated region of the manifest page (htmx swaps it; it is also a plain page).

    The included and excluded tables became the inspector's list: their old URLs redirect to it.
    """
    if section in sel.ITEM_DECISIONS:
        job = _job_or_404(request, job_id)
        params = QueryDict(mutable=True)
        params["decision"] = section
        for name in ("reason", "page"):
            if request.GET.get(name):
                params[name] = request.GET[name]
        return HttpResponseRedirect(f"{reverse('assembly', args=[job.id])}?{params.urlencode()}")
    if section not in _SECTION_PARTIALS:
        raise Http404("no such section")
    job = _job_or_404(request, job_id)
    manifest = _manifest_of(job)
    if manifest is None:
        raise Http404("not sealed yet")
    params = request.GET.copy()
    params[f"{section}_page"] = str(dashboard_int(request.GET.get("page") or "1", name="page", minimum=1))
    # Tool pairs and transforms (with their excerpts) come from the document: this region asked.
    sections = sel.manifest_sections(manifest.pk, (section,))
    context = {"job": job, "manifest": manifest, **_section_context(sections, params)}
    return render_region(request, _SECTION_PARTIALS[section], context,
                         title=f"{section.replace('_', ' ').capitalize()} of {_step_label(job)}",
                         back_url=f"{reverse('assembly', args=[job.id])}#{section.replace('_', '-')}",
                         back_label="the manifest")


def _step_label(job: AssemblyJob) -> str:
    return f"{job.run.run_id} / {job.step_id}"


def _item_region(request: HttpRequest, job: AssemblyJob, item_id: str, template: str, context: dict[str, Any],
                 what: str) -> HttpResponse:
    """One of an item's regions of the inspector; opened directly, a page that links back to the item."""
    return render_region(request, template, context, title=f"{item_id}: {what} ({_step_label(job)})",
                         back_url=f"{reverse('assembly', args=[job.id])}?{QueryDict.fromkeys(['item'], item_id).urlencode()}",
                         back_label="the item in the inspector")


@require_GET
@dashboard_page
def assembly_item(request: HttpRequest, job_id: str) -> HttpResponse:
    """One item's submitted content with its identity (the inspector loads it when asked); with
    `part=excerpts`, the before/after excerpts of the transforms that touched it; with
    `part=payload`, where it sits in the serialized payload."""
    job = _job_or_404(request, job_id)
    manifest = _manifest_of(job)
    item_id = request.GET.get("item_id", "")
    if manifest is None or not item_id:
        raise Http404("no such item")
    if request.GET.get("part") == "payload":
        return _item_payload(request, job, manifest, item_id)
    if request.GET.get("part") == "excerpts":
        transforms = [t for t in sel.manifest_sections(manifest.pk, ("transforms",)).get("transforms") or []
                      if t.get("output_item_id") == item_id or item_id in (t.get("input_item_ids") or [])]
        transforms = [{**t, "kept_context": _kept_lines_context(job, manifest, t)} for t in transforms]
        return _item_region(request, job, item_id, "manifests/partials/item_excerpts.html",
                            {"job": job, "manifest": manifest, "transforms": transforms}, "before and after its transforms")
    found = sel.item_record(manifest_id=manifest.pk, item_id=item_id) if manifest.sections is not None else None
    if found is not None:
        record = found[1]
    else:
        sections = sel.manifest_sections(manifest.pk, ("included", "excluded"))
        record = next((r for d in ("included", "excluded") for r in sections.get(d) or [] if r.get("item_id") == item_id), None)
    if record is None:
        raise Http404("no such item")
    return _item_region(request, job, item_id, "manifests/partials/item_detail.html",
                        {"job": job, "record": record, "body": sel.item_body(job, item_id)}, "the content as submitted")


def _kept_lines_context(job: AssemblyJob, manifest: Any, transform: dict[str, Any]) -> list[list[dict[str, Any]]] | None:
    """For a log cut to its failure lines: each kept line of the submitted log with the lines
    around it and their numbers (the output's `source_ref.lines` names them), so a reviewer sees
    what each failure line sat in. None for any other transform, or when the content is gone."""
    inputs = transform.get("input_item_ids") or []
    if not str(transform.get("objective") or "").startswith(LOG_REDUCTION) or len(inputs) != 1:
        return None
    output_id = transform.get("output_item_id") or ""
    if manifest.sections is not None:
        found = sel.item_record(manifest_id=manifest.pk, item_id=output_id)
        record = found[1] if found else None
    else:
        sections = sel.manifest_sections(manifest.pk, ("included", "excluded"))
        record = next((r for d in ("included", "excluded") for r in sections.get(d) or [] if r.get("item_id") == output_id), None)
    numbers = expand_numbers(str(((record or {}).get("source_ref") or {}).get("lines") or "none"))
    return sel.kept_lines_in_context(job, inputs[0], numbers) if numbers else None


def _item_payload(request: HttpRequest, job: AssemblyJob, manifest: Any, item_id: str) -> HttpResponse:
    """The item's place in the payload: the payload (a read of its own) and, for a tool result, its pair."""
    found = sel.item_record(manifest_id=manifest.pk, item_id=item_id) if manifest.sections is not None else None
    sections = manifest.sections if found is not None else sel.manifest_sections(manifest.pk, ("included", "tool_pairs"))
    record = found[1] if found is not None else next(
        (r for r in sections.get("included") or [] if r.get("item_id") == item_id), None)
    if record is None or manifest.status != "ready" or (found is not None and found[0] != "included"):
        raise Http404("not in the payload")
    pairs = sections.get("tool_pairs") or []
    if found is not None and len(pairs) < (sections.get("tool_pairs_total") or 0):
        pairs = sel.manifest_sections(manifest.pk, ("tool_pairs",)).get("tool_pairs") or []
    pair = next((p for p in pairs if p.get("result_item_id") == item_id), None)
    place = _payload_place(payload_rows(sel.provider_input(manifest.pk), manifest.pk), item_id, pair)
    return _item_region(request, job, item_id, "manifests/partials/item_payload.html",
                        {"job": job, "item_id": item_id, "zone": record.get("zone"), "place": place}, "its place in the payload")


@require_GET
@dashboard_page
def assembly_input(request: HttpRequest, job_id: str) -> HttpResponse:
    """The payload view: the serialized model input as messages, each fenced block linked to its
    item; paged by segment. htmx loads it into the manifest page; opened directly it is a page."""
    job = _job_or_404(request, job_id)
    manifest = _manifest_of(job)
    if manifest is None:
        raise Http404("not sealed yet")
    rows = payload_rows(sel.provider_input(manifest.pk) if manifest.status == "ready" else None, manifest.pk)
    context = {
        "job": job, "manifest": manifest, "page": page_of(rows, request.GET.get("page"), PAYLOAD_PAGE_SIZE),
        "untrusted_count": sum(1 for row in rows if row["segment"]["untrusted"]),
        "focus": request.GET.get("item", ""),
    }
    htmx = bool(request.headers.get("HX-Request"))
    response = render(request, "manifests/partials/serialized_input.html" if htmx else "manifests/payload.html", context)
    patch_vary_headers(response, ("HX-Request",))
    return response


# --------------------------------------------------------------------------- why excluded? / compare


@require_GET
@dashboard_page
def why(request: HttpRequest) -> HttpResponse:
    """Why excluded? Item decisions across the user's tenants, searched by item, source ref, kind
    or detail text (`q`), reason, decision, run, step and the day sealed. Repeated decisions are
    grouped by default — one row per run, item, decision and reason naming its first and last
    step ("step-3 … step-46, 44 steps") — `?group=none` lists every step's row."""
    query = _why_query(request)
    problems = query.pop("problems")
    grouped = request.GET.get("group", "") != "none"
    searched = any(query[name] for name in ("q", "reason", "run", "step", "since", "until"))
    rows = sel.item_search(tenant_ids=request.tenancy.tenant_ids, **_search_args(query)) if searched else None
    decisions_total = 0
    if rows is None:
        page = page_of([], 1)
    elif grouped:
        decisions_total = rows.count()
        page = page_of(sel.item_search_groups(rows), request.GET.get("page"), 50)
        sel.group_steps(rows, list(page.object_list))
    else:
        page = page_of(rows, request.GET.get("page"), 50)
    shown_jobs = [g["last"]["job_id"] for g in page.object_list if g.get("last")] if grouped else [
        row.manifest.job_id for row in page.object_list]
    # The rows span the user's tenants, which may hold the same item id: each row's label comes
    # from its own step's request.
    labels = sel.item_labels_by_job(sel.jobs_by_ids(request.tenancy.tenant_ids, shown_jobs))
    for row in page.object_list:
        if grouped and row.get("last"):
            row["last"]["label"] = labels.get(row["last"]["job_id"], {}).get(row["item_id"], "")
        elif not grouped:
            row.label = labels.get(row.manifest.job_id, {}).get(row.item_id, "")
    return render(request, "manifests/why.html", {
        **query, "searched": searched, "problems": problems, "grouped": grouped, "page": page,
        "decisions_total": decisions_total,
        "reasons": sel.REASON_ORDER, "recent_runs": sel.recent_run_ids(request.tenancy.tenant_ids),
    })


def _search_args(query: dict[str, Any]) -> dict[str, Any]:
    """item_search's arguments from /why/'s query (its dates parsed; a bad one was dropped)."""
    return {**query, "since": _date(query["since"]), "until": _date(query["until"])}


def _compare_side(request: HttpRequest, name: str, run_text: str, ref: str) -> dict[str, Any]:
    """One side of /compare/: the run (by its id, in the user's tenants) with its steps told apart,
    and the assembly `ref` names (its id, or a step of that run: `step-19`, `step-19#2`).
    `problem` says what is missing or wrong, in words; `missing` marks a named thing not found, `bad`
    a reference no step can have (an attempt number not in ASCII digits)."""
    side: dict[str, Any] = {"name": name, "run_text": run_text, "ref": ref, "run": None, "steps": [], "job": None,
                            "problem": "", "missing": False, "bad": False}
    if run_text:
        side["run"] = sel.run_get(tenant_ids=request.tenancy.tenant_ids, run_id=run_text, prefer_tenant=request.tenancy.current)
        if side["run"] is None:
            side.update(problem=f"{name}: no run “{run_text[:80]}” in your tenants.", missing=True)
            return side
        side["steps"] = sel.run_steps(side["run"])
    if not ref:
        return side
    job = sel.assembly_get(tenant_ids=request.tenancy.tenant_ids, job_id=ref)
    if job is None and side["run"] is not None:
        job, why_not = sel.step_in_run(side["steps"], ref)
        attempt = ref.rpartition("#")[2] if "#" in ref else ""
        if job is None and attempt.isnumeric() and not (attempt.isascii() and attempt.isdigit()):
            # `step-19#²`: an attempt number, mistyped (isdigit() says yes to `²`): the field is wrong
            side.update(problem=f"{name.lower()}: the attempt number after “#” is written with the digits 0-9, "
                                f"got “{ref[:80]}”.", bad=True)
            return side
        if job is None:
            side.update(problem=f"{name}: {why_not}.", missing=True)
            return side
    if job is None:
        side.update(problem=f"{name}: no assembly “{ref[:80]}” in your tenants (give its run to pick a step by its id).",
                    missing=True)
        return side
    if side["run"] is None or side["run"].pk != job.run_id:  # an assembly id names its own run
        side["run"], side["run_text"] = job.run, job.run.run_id
        side["steps"] = sel.run_steps(job.run)
    side["job"] = next((step for step in side["steps"] if step.pk == job.pk), job)
    if _manifest_of(job) is None:
        side["problem"] = f"{name}: {job.run.run_id}/{job.step_id} has no sealed manifest yet (status {job.status})."
    return side


@require_GET
@dashboard_page
def compare(request: HttpRequest) -> HttpResponse:
    """Any two assemblies: picked on a run page (`?pick=<id>&pick=<id>`, two columns of the item
    timeline, the earlier one as A) or chosen here by run and step (`?run=&a=&run_b=&b=`; a step
    is named by its id, `step-19#2` for the second attempt, or picked from the run's steps, each
    labelled with its attempt number and time). A half-filled or wrong form answers this page with
    the form and a message saying what is missing (404 when a named run or assembly is not found)."""
    if request.GET.get("by") == "step":
        return _compare_runs(request)
    run_a, ref_a = request.GET.get("run", "").strip(), request.GET.get("a", "").strip()
    run_b, ref_b = request.GET.get("run_b", "").strip(), request.GET.get("b", "").strip()
    picks = [value.strip() for value in request.GET.getlist("pick") if value.strip()]
    problems: list[str] = []
    if "pick" in request.GET:
        if len(picks) == 2:
            ref_a, ref_b = picks
        else:
            problems.append(f"Pick exactly two steps of the timeline to compare (you picked {len(picks)}).")
    side_a = _compare_side(request, "A", run_a, ref_a)
    side_b = _compare_side(request, "B", run_b or side_a["run_text"], ref_b)
    if len(picks) == 2 and side_a["job"] and side_b["job"] and (side_b["job"].created_at, str(side_b["job"].pk)) < (
            side_a["job"].created_at, str(side_a["job"].pk)):  # the earlier step is A
        side_a, side_b = _compare_side(request, "A", "", ref_b), _compare_side(request, "B", "", ref_a)
    problems += [side["problem"] for side in (side_a, side_b) if side["problem"]]
    # Both sides in one tenant (picked by assembly id, in any of the user's tenants): the page acts
    # in it, so its header and its links name that tenant.
    shown = {side["run"].tenant_id for side in (side_a, side_b) if side["run"] is not None}
    if len(shown) == 1:
        act_in(request, shown.pop())
    if not problems and (side_a["job"] is None) != (side_b["job"] is None):
        problems.append(f"Pick {'B' if side_b['job'] is None else 'A'} too: a comparison needs two steps.")
    elif not problems and side_a["job"] is None and (side_a["run"] or side_b["run"]):
        problems.append("Pick the two steps to compare: A and B.")
    context: dict[str, Any] = {"sides": [side_a, side_b], "problems": problems, "result": None,
                               # the runs a typed run id opens here: the tenant the page acts in
                               "recent_runs": sel.recent_run_ids([request.tenancy.current.id] if request.tenancy.current else [])}
    if not problems and side_a["job"] is not None and side_b["job"] is not None:
        job_a, job_b = side_a["job"], side_b["job"]
        wanted = ("assembly", "budget", "included", "excluded")
        context.update({
            "job_a": job_a, "job_b": job_b, "labels": sel.item_labels_of([job_a, job_b]),
            "result": sel.compare_sections(sel.manifest_sections(job_a.manifest.pk, wanted),
                                           sel.manifest_sections(job_b.manifest.pk, wanted)),
        })
    status = 400 if side_a["bad"] or side_b["bad"] else 404 if side_a["missing"] or side_b["missing"] else 200
    return render(request, "manifests/compare.html", context, status=status)


ALIGNED_PAGE_SIZE = 50


def _runs_to_align(request: HttpRequest) -> tuple[list[dict[str, Any]], list[str], bool]:
    """Both sides of a run-against-run comparison (`?by=step&run=&run_b=`; B's run defaults to
    A's), each resolved in the user's tenants: (sides, problems, a named run not found)."""
    run_a = request.GET.get("run", "").strip()
    run_b = request.GET.get("run_b", "").strip() or run_a
    if not run_a:
        return [_compare_side(request, "A", "", ""), _compare_side(request, "B", run_b, "")], [
            "A: give the run to compare step by step (and B's run, or B compares A with itself)."], False
    sides = [_compare_side(request, "A", run_a, ""), _compare_side(request, "B", run_b, "")]
    problems = [side["problem"] for side in sides if side["problem"]]
    return sides, problems, any(side["missing"] for side in sides)


def _compare_runs(request: HttpRequest) -> HttpResponse:
    """Two runs lined up by step (`sel.runs_aligned`): step N of A beside step N of B, the items
    that changed between them (each a link to that step's inspector on the item), the steps only
    one run has; a page of ALIGNED_PAGE_SIZE steps, the whole comparison as CSV or JSON."""
    sides, problems, missing = _runs_to_align(request)
    if not problems and len(tenants := {side["run"].tenant_id for side in sides}) == 1:
        act_in(request, tenants.pop())  # two runs of one tenant: the page, its header and links act there
    context: dict[str, Any] = {"sides": sides, "problems": problems, "result": None, "by_step": True,
                               "recent_runs": sel.recent_run_ids([request.tenancy.current.id] if request.tenancy.current else [])}
    if not problems:
        side_a, side_b = sides
        aligned = sel.runs_aligned(side_a["run"], side_a["steps"], side_b["run"], side_b["steps"])
        page = page_of(aligned, request.GET.get("page"), ALIGNED_PAGE_SIZE)
        context.update({
            "run_a": side_a["run"], "run_b": side_b["run"], "aligned": page,
            "changes_shown": sel.ALIGNED_CHANGES_SHOWN,
            "export_query": urlencode({"run": side_a["run"].run_id, "run_b": side_b["run"].run_id}),
            # the page's last step names the items (one request read): a label, not the decision
            "labels": sel.item_labels_of([row["b"] or row["a"] for row in list(page.object_list)[-1:]]),
            "aligned_summary": {
                "policies_a": _run_policies(side_a["steps"]), "policies_b": _run_policies(side_b["steps"]),
                "steps": len(aligned), "paired": sum(1 for row in aligned if not row["only"]),
                "changed_steps": sum(1 for row in aligned if row["changes"] or row["status_changed"]),
                "status_changed": sum(1 for row in aligned if row["status_changed"]),
                "only_a": sum(1 for row in aligned if row["only"] == "a"),
                "only_b": sum(1 for row in aligned if row["only"] == "b"),
            },
        })
    return render(request, "manifests/compare.html", context, status=404 if missing else 200)


ALIGNED_COLUMNS = ["step", "step_a", "attempt_a", "assembly_a", "status_a", "policy_a", "step_b", "attempt_b", "assembly_b",
                   "status_b", "policy_b", "item_id", "change", "decision_a", "reason_a", "decision_b", "reason_b"]


def policy_label(job: AssemblyJob | None) -> str | None:
    """The policy revision a step ran under, `source-research r3`."""
    if job is None:
        return None
    return f"{job.policy_revision.policy.policy_id} r{job.policy_revision.revision}"


def _run_policies(steps: list[AssemblyJob]) -> list[str]:
    """The policy revisions a run's steps ran under, in the order first used."""
    return list(dict.fromkeys(policy_label(job) for job in steps))


@require_GET
@dashboard_page
def compare_export(request: HttpRequest, fmt: str) -> HttpResponse:
    """A run-against-run comparison (`?run=&run_b=`) as CSV or JSON: per step (with the policy
    revision each side ran under, `policy_a`, `policy_b`), one row per changed item (`change`: flipped, reason, only_a, only_b), `unchanged` for a step with none,
    `step_only_a` / `step_only_b` for a step one run lacks. From the user's tenants only."""
    if fmt not in exports.EXPORT_FORMATS:
        raise Http404("no such format")
    sides, problems, missing = _runs_to_align(request)
    if missing:
        raise Http404("run not found")
    if problems:
        return HttpResponse("\n".join(problems) + "\n", status=400, content_type="text/plain; charset=utf-8")
    side_a, side_b = sides

    def rows():
        for row in sel.runs_aligned(side_a["run"], side_a["steps"], side_b["run"], side_b["steps"]):
            a, b = row["a"], row["b"]
            head = {"step": row["number"],
                    "step_a": a.step_id if a else None, "attempt_a": a.step_attempt if a else None,
                    "assembly_a": str(a.id) if a else None, "status_a": a.status if a else None, "policy_a": policy_label(a),
                    "step_b": b.step_id if b else None, "attempt_b": b.step_attempt if b else None,
                    "assembly_b": str(b.id) if b else None, "status_b": b.status if b else None, "policy_b": policy_label(b)}
            if row["only"]:
                yield {**head, "change": f"step_only_{row['only']}"}
            elif not row["changes"]:
                yield {**head, "change": "unchanged"}
            for change in row["changes"]:
                yield {**head, **change}

    run_a, run_b = side_a["run"], side_b["run"]
    return exports.rows_response(fmt, filename=exports.safe_filename("compare", run_a.run_id, run_b.run_id),
                                 columns=ALIGNED_COLUMNS, rows=rows(),
                                 head={"run_a": run_a.run_id, "run_b": run_b.run_id, "aligned_by": "step number",
                                       "policies_a": _run_policies(side_a["steps"]), "policies_b": _run_policies(side_b["steps"])})


# --------------------------------------------------------------------------- token estimates vs provider usage

USAGE_PAGE_SIZE = 50


@require_GET
@dashboard_page
def usage(request: HttpRequest) -> HttpResponse:
    """The engine's input-token estimates against what providers reported (`usage/`), for the
    current tenant: per model, then the latest reports a page at a time."""
    tenant = request.tenancy.current
    if tenant is None:
        models, page = [], page_of([], 1)
    else:
        models = sel.usage_by_model(tenant=tenant)
        page = page_of(sel.usage_reports_latest(tenant=tenant) if models else [], request.GET.get("page"), USAGE_PAGE_SIZE)
    return render(request, "manifests/usage.html", {"models": models, "page": page, "tenant": tenant})


# --------------------------------------------------------------------------- what is eating the window


@require_GET
@dashboard_page
def assembly_window(request: HttpRequest, job_id: str) -> HttpResponse:
    """The manifest page's window tab: the included items' tokens by source (tool, repository, URL
    host), source type, kind and partition, largest first, each row a link to the item list
    filtered to it and sorted by tokens; and the largest items. Two aggregate queries over the
    item rows beside the job's, whatever the item count."""
    job = _job_or_404(request, job_id)
    manifest = _manifest_of(job)
    if manifest is None:
        raise Http404("not sealed yet")
    if manifest.sections is not None:
        sealed = manifest.sections
        tables, largest = sel.window_of(manifest.pk), sel.largest_items(manifest.pk)
    else:
        sealed = sel.manifest_sections(manifest.pk, ("assembly", "budget", "included", "excluded"))
        tables, largest = sel.window_of_document(sealed), sel.largest_items_of_document(sealed)
    budget = sealed.get("budget") or {}
    return render(request, "manifests/window.html", {
        "job": job, "manifest": manifest, "assembly": sealed.get("assembly") or {}, "budget": budget,
        "tables": [{"name": name, "title": title, "rows": tables[name]} for name, title in sel.WINDOW_DIMENSIONS.items()],
        "largest": largest, "window_tokens": sum(row.tokens for row in tables["partition"]),
    })


# --------------------------------------------------------------------------- exports (tenant-scoped like the pages)

EXPORT_DOCUMENTS = ("manifest", "payload", "request")


@require_GET
@dashboard_page
def assembly_export(request: HttpRequest, job_id: str, document: str) -> HttpResponse:
    """A download of the sealed manifest (as the API serves it), the provider payload or the
    request as submitted, as a JSON file named after the run and step."""
    if document not in EXPORT_DOCUMENTS:
        raise Http404("no such document")
    job = _job_or_404(request, job_id)
    manifest = _manifest_of(job)
    if document == "request":
        body = sel.job_request(job)
    elif manifest is None:
        raise Http404("not sealed yet")
    elif document == "manifest":
        body = sel.manifest_download(manifest.pk)
    else:
        body = sel.provider_input(manifest.pk)
        if body is None:
            raise Http404("no payload: the assembly was blocked or its content purged")
    name = exports.safe_filename(job.run.run_id, job.step_id, str(job.id)[:8], document)
    return exports.document_response(body, filename=f"{name}.json")


WHY_COLUMNS = ["item_id", "decision", "reason", "hard_gate", "detail", "partition", "tokens", "kind", "source_type",
               "source_ref", "tenant", "run_id", "step_id", "assembly", "manifest_status", "sealed_at"]


def _why_query(request: HttpRequest) -> dict[str, Any]:
    """/why/'s search as its form states it (the page and its exports read it alike). Every decision
    by default: a reviewer asking "why" about an item does not yet know it was excluded. `problems`:
    what of the query was not understood, in words."""
    decision, problems = request.GET.get("decision", ""), []
    if decision not in ("included", "excluded", ""):
        problems.append(f"Unknown decision “{decision[:60]}”: showing included and excluded items.")
        decision = ""
    return {"q": request.GET.get("q", "").strip(), "reason": request.GET.get("reason", "").strip(),
            "decision": decision, "run": request.GET.get("run", "").strip(), "step": request.GET.get("step", "").strip(),
            "since": _date_filter(request.GET.get("since", ""), "from", problems),
            "until": _date_filter(request.GET.get("until", ""), "to", problems), "problems": problems}


@require_GET
@dashboard_page
def why_export(request: HttpRequest, fmt: str) -> HttpResponse:
    """Every result of a /why/ search (all pages) as CSV or JSON, from the user's tenants only."""
    if fmt not in exports.EXPORT_FORMATS:
        raise Http404("no such format")
    query = _why_query(request)
    del query["problems"]  # an export names its query in its head; an unknown decision reads as every decision
    if not any(query[name] for name in ("q", "reason", "run", "step", "since", "until")):
        return HttpResponse("Search first: give q (item id or source ref text), reason, run, step, since or until.\n",
                            status=400, content_type="text/plain; charset=utf-8")
    found = sel.item_search(tenant_ids=request.tenancy.tenant_ids, **_search_args(query))
    rows = ({"item_id": row.item_id, "decision": row.decision, "reason": row.reason, "hard_gate": row.hard_gate or None,
             "detail": row.detail or None, "partition": row.partition or None, "tokens": row.tokens, "kind": row.kind,
             "source_type": row.source_type, "source_ref": row.source_ref, "tenant": row.manifest.job.tenant.slug,
             "run_id": row.manifest.job.run.run_id, "step_id": row.manifest.job.step_id,
             "assembly": str(row.manifest.job_id), "manifest_status": row.manifest.status,
             "sealed_at": row.manifest.created_at}
            for row in found.iterator(chunk_size=500))
    named = query["q"] or query["reason"] or query["run"] or query["step"] or "search"
    head = {name: value for name, value in query.items() if value or name in ("q", "reason", "decision")}
    return exports.rows_response(fmt, filename=exports.safe_filename("why", named),
                                 columns=WHY_COLUMNS, rows=rows, head={"query": head})


TIMELINE_COLUMNS = ["run_id", "step_id", "attempt", "assembly", "step_status", "submitted_at", "policy_id",
                    "policy_revision", "policy_revision_status", "item_id", "decision", "reason", "hard_gate", "partition",
                    "tokens", "kind", "source_type"]


@require_GET
@dashboard_page
def run_timeline_export(request: HttpRequest, run_id: str, fmt: str) -> HttpResponse:
    """A run's item timeline, every step and every item (not a page of it), as CSV or JSON: one
    row per item per step, steps told apart by attempt number and submission time."""
    if fmt not in exports.EXPORT_FORMATS:
        raise Http404("no such format")
    run = sel.run_get(tenant_ids=request.tenancy.tenant_ids, run_id=run_id, prefer_tenant=request.tenancy.current)
    if run is None:
        raise Http404("run not found")
    steps = {str(job.id): job for job in sel.run_steps(run)}

    def rows():
        for cell in sel.run_timeline_cells(run).iterator(chunk_size=1000):
            job = steps[str(cell["job_id"])]
            revision = job.policy_revision
            yield {"run_id": run.run_id, "step_id": job.step_id, "attempt": job.step_attempt, "assembly": str(job.id),
                   "step_status": job.status, "submitted_at": job.created_at, "policy_id": revision.policy.policy_id,
                   "policy_revision": revision.revision, "policy_revision_status": revision.status, **cell}

    return exports.rows_response(fmt, filename=exports.safe_filename(run.run_id, "timeline"), columns=TIMELINE_COLUMNS,
                                 rows=rows(), head={"run_id": run.run_id, "tenant": run.tenant.slug})


@require_GET
@dashboard_page
def home(request: HttpRequest) -> HttpResponse:
    """The dashboard's home page: the tenant's recent runs and blocked assemblies."""
    tenant = request.tenancy.current
    context = {"recent_runs": [], "blocked": []}
    if tenant is not None:
        context = {
            "recent_runs": list(sel.runs_list(tenant=tenant)[:10]),
            "blocked": sel.recent_jobs(tenant=tenant, status=JobStatus.BLOCKED, limit=10),
        }
    return render(request, "ctxeng/home.html", context)
