"""Policy pages: list, revision history, draft editor, diff, impact preview, publish.

Reading needs a membership in the policy's tenant; writing (saving a draft, starting one,
publishing, running or canceling an impact preview) needs the policy_editor role there (403
otherwise, nothing changes). The impact page only shows a preview's stored result; replaying is
a job started by POST (policies.services.impact_preview_start), of the saved draft or of the
editor's unsaved text; its rows are listed a page at a time (`?page=`), the changes first, and
exported whole as CSV or JSON (streamed). Publishing also needs a note, and says what it did. Validation errors come
from the engine's parser and are shown with their field path and the line of the YAML they point
at; an htmx request gets them with status 422, which base.html tells htmx to swap in.
The editor saves the text it posted beside the normalized body, so comments survive a save.
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.core.exceptions import BadRequest, PermissionDenied
from django.db import transaction
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from ctxeng.accounts.models import Role
from ctxeng.accounts.pages import act_in, dashboard_page, tenant_query
from ctxeng.audit.selectors import audit_events_for_policy
from ctxeng.engine import InvalidInput, parse_policy
from ctxeng.engine.limits import MAX_INT32
from ctxeng.engine.policy import policy_body
from ctxeng.engine.upgrades import missing_records, registry_rows
from ctxeng.server import exports
from ctxeng.server.errors import Immutable, ServiceError
from ctxeng.server.params import BadParameter, whole_number
from ctxeng.server.regions import render_region

from . import dashboard_selectors as sel
from . import services
from .diffing import diff
from .models import ImpactPreview, Policy, PolicyRevision, PreviewStatus, RevisionStatus
from .selectors import upgrade_records_missing


def _policy_or_404(request: HttpRequest, policy_id: str) -> Policy:
    policy = sel.policy_get(tenant_ids=request.tenancy.tenant_ids, policy_id=policy_id,
                            prefer_tenant=request.tenancy.current)
    if policy is None:
        raise Http404("policy not found")
    act_in(request, policy.tenant_id)
    return policy


def _revision_or_404(policy: Policy, number: int) -> PolicyRevision:
    revision = sel.revision_get(policy, number)
    if revision is None:
        raise Http404("revision not found")
    return revision


def _require_editor(request: HttpRequest, policy: Policy) -> None:
    if not request.tenancy.has_role(policy.tenant, Role.POLICY_EDITOR):
        raise PermissionDenied("the policy_editor role is required")


def _can_edit(request: HttpRequest, policy: Policy) -> bool:
    return request.tenancy.has_role(policy.tenant, Role.POLICY_EDITOR)


@require_GET
@dashboard_page
def policy_list(request: HttpRequest) -> HttpResponse:
    tenant = request.tenancy.current
    policies = list(sel.policies_list(tenant=tenant)) if tenant else []
    for policy in policies:
        policy.current = sel.published_revision(policy)
    return render(request, "policies/list.html", {"policies": policies})


@require_GET
@dashboard_page
def policy_detail(request: HttpRequest, policy_id: str) -> HttpResponse:
    policy = _policy_or_404(request, policy_id)
    revisions = sel.revision_history(policy)
    published = next((r for r in revisions if r.status == RevisionStatus.PUBLISHED), None)
    return render(request, "policies/detail.html", {
        "policy": policy, "revisions": revisions, "published": published, "can_edit": _can_edit(request, policy),
        "recent_jobs": sel.recent_jobs_for_policy(policy, {"limit": 10}),
        "audit_events": audit_events_for_policy(policy),
    })


@require_POST
@dashboard_page
def revision_new(request: HttpRequest, policy_id: str) -> HttpResponse:
    """Start a draft with the next number: a copy of the newest revision, or of revision N
    (`from=N`: "restore revision N as a draft", a rollback that is reviewed and published like any
    other draft)."""
    policy = _policy_or_404(request, policy_id)
    _require_editor(request, policy)
    with transaction.atomic():
        latest = PolicyRevision.objects.filter(policy=policy).order_by("-revision").first()
        if latest is None:
            raise Http404("policy has no revision to start from")
        source = latest
        if request.POST.get("from"):
            try:
                number = whole_number(request.POST["from"], name="from", minimum=1, maximum=MAX_INT32)
            except BadParameter as exc:
                raise BadRequest(str(exc)) from None
            source = _revision_or_404(policy, number)
        body = dict(source.body)
        body["policy"] = {**body.get("policy", {}), "revision": latest.revision + 1}
        body["policy"].pop("digest", None)
        draft = services.policy_revision_create(tenant=policy.tenant, body=body, user=request.user,
                                                policy_id=policy.policy_id,
                                                source_text=sel.next_draft_text(source, latest.revision + 1))
    if source is not latest:
        messages.success(request, f"Revision {draft.revision} is a new draft restored from revision {source.revision}: "
                                  "review it, preview its impact and publish it to roll back.")
    return HttpResponseRedirect(reverse("policy-revision-edit", args=[policy.policy_id, draft.revision])
                                + tenant_query(request))


@require_http_methods(["GET", "POST"])
@dashboard_page
def revision_edit(request: HttpRequest, policy_id: str, revision: int) -> HttpResponse:
    policy = _policy_or_404(request, policy_id)
    rev = _revision_or_404(policy, revision)
    text = sel.revision_text(rev)
    errors: list[sel.FieldError] = []
    saved = False
    parsed = None
    if request.method == "POST":
        _require_editor(request, policy)
        text = _posted_text(request)
        parsed, errors = sel.validate_yaml(text, policy_id=policy.policy_id, revision=rev.revision)
        if parsed is not None and rev.status == RevisionStatus.DRAFT:
            # Seed §8: a mechanism added over the published revision needs its upgrades entry;
            # the editor says so at the clause's line, and saves nothing until it has one.
            errors = sel.field_errors(text, upgrade_records_missing(revision=rev, policy=parsed))
        if parsed is not None and not errors and request.POST.get("action") != "validate":
            if rev.status != RevisionStatus.DRAFT:
                errors = [sel.FieldError(path="", line=None,
                                         message=f"revision {rev.revision} is {rev.status} and immutable; start a new draft")]
            else:
                try:
                    rev = services.policy_revision_update(revision=rev, body=policy_body(parsed), user=request.user,
                                                          source_text=text)
                    saved = True
                except (InvalidInput, ServiceError, Immutable) as exc:
                    errors = sel.field_errors(text, getattr(exc, "errors", None) or [str(exc)])
    context: dict[str, Any] = {
        "policy": policy, "revision": rev, "text": text, "errors": errors, "saved": saved,
        "validated": request.method == "POST" and not errors,
        "can_edit": _can_edit(request, policy) and rev.status == RevisionStatus.DRAFT,
        "lines": text.splitlines(),
        "error_lines": {e.line for e in errors if e.line},
        "warnings": sel.validation_warnings(text, parsed) if not errors else [],
        **_impact_context(request, policy, rev, sel.latest_preview(rev), from_editor=True),
    }
    if request.htmx and request.method == "POST":
        return render(request, "policies/partials/validation.html", context, status=200 if not errors else 422)
    return render(request, "policies/edit.html", context, status=200 if not errors else 422)


def _posted_text(request: HttpRequest) -> str:
    """The editor's text as typed: browsers post a textarea with CRLF line ends."""
    return request.POST.get("body", "").replace("\r\n", "\n")


def _revision_param(request: HttpRequest, name: str) -> int | None:
    """`?from=` / `?to=`: a revision number, None when absent; a 400 page naming it otherwise."""
    value = request.GET.get(name)
    if not value:
        return None
    try:
        return whole_number(value, name=name, minimum=1, maximum=MAX_INT32)
    except BadParameter as exc:
        raise BadRequest(str(exc)) from None


@require_GET
@dashboard_page
def revision_diff(request: HttpRequest, policy_id: str) -> HttpResponse:
    policy = _policy_or_404(request, policy_id)
    revisions = sel.revision_history(policy)
    numbers = sorted(r.revision for r in revisions)
    if not numbers:
        raise Http404("no revisions")
    # By default the newest revision against the one before it (previous -> current).
    to_number = _revision_param(request, "to") or numbers[-1]
    earlier = [n for n in numbers if n < to_number]
    from_number = _revision_param(request, "from") or (earlier[-1] if earlier else to_number)
    rev_from, rev_to = _revision_or_404(policy, from_number), _revision_or_404(policy, to_number)
    return render(request, "policies/diff.html", {
        "policy": policy, "revisions": revisions, "rev_from": rev_from, "rev_to": rev_to,
        "changes": diff(rev_from.body, rev_to.body), "text_diff": sel.text_diff(rev_from, rev_to),
        "upgrades_revision": rev_to, "upgrades_missing": _missing_records(rev_from.body, rev_to.body),
        "upgrades_revocation": _revocations(rev_to), "upgrade_mechanisms": registry_rows(),
    })


def _revocations(rev: PolicyRevision) -> dict[str, dict]:
    """Each upgrade record's revocation condition, evaluated from the revision's manifests, by mechanism."""
    return {r["mechanism"]: r for r in sel.upgrade_revocations(revision=rev)}


def _missing_records(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """The mechanisms `after` adds over `before` without an upgrades entry (seed §8), for display;
    none when a stored body no longer parses (its own page says why)."""
    try:
        return missing_records(parse_policy(before), parse_policy(after))
    except InvalidInput:
        return []


def _page_param(request: HttpRequest) -> int:
    """`?page=`: which page of the impact rows (1 when absent); a 400 page naming it otherwise."""
    value = request.GET.get("page")
    if not value:
        return 1
    try:
        return whole_number(value, name="page", minimum=1, maximum=MAX_INT32)
    except BadParameter as exc:
        raise BadRequest(str(exc)) from None


def _impact_context(request: HttpRequest, policy: Policy, rev: PolicyRevision,
                    preview: ImpactPreview | None, *, from_editor: bool = False,
                    draft_errors: list[sel.FieldError] | None = None) -> dict[str, Any]:
    """What the impact region shows: a preview's stored rows (never a replay), and whether this
    user may run one. In the editor (`from_editor`) a run replays the editor's current text."""
    return {
        "policy": policy, "revision": rev, "preview": preview, "sample": sel.IMPACT_SAMPLE, "impact_max": sel.IMPACT_MAX,
        "selection_form": sel.selection_form(preview.selection if preview else None),
        "selection_text": sel.selection_text(preview.selection if preview else None),
        "run_ids": sel.policy_run_ids(policy) if _can_edit(request, policy) else [],
        "selection_errors": {},
        "impact": sel.impact_summary(preview.rows) if preview else None,
        "listing": sel.impact_listing(preview.rows, _page_param(request)) if preview else None,
        "stale": preview is not None and not preview.unsaved and preview.digest != rev.digest,
        "can_run": _can_edit(request, policy) and (not from_editor or rev.status == RevisionStatus.DRAFT),
        "from_editor": from_editor, "draft_errors": draft_errors or [],
    }


def _impact_page(request: HttpRequest, policy: Policy, rev: PolicyRevision, *, status: int = 200,
                 note_error: str = "") -> HttpResponse:
    published = sel.published_revision(policy)
    parsed, errors = sel.validate_yaml(sel.revision_text(rev), policy_id=policy.policy_id, revision=rev.revision)
    preview = sel.latest_preview(rev)
    # A preview counts when it finished on this revision's saved text (not an older text, not the
    # editor's unsaved one): publishing without one is allowed, and said plainly beside the button.
    previewed = (preview is not None and preview.status == PreviewStatus.DONE and not preview.unsaved
                 and preview.digest == rev.digest)
    return render(request, "policies/impact.html", {
        **_impact_context(request, policy, rev, preview), "previewed": previewed,
        "published": published, "errors": errors, "note_error": note_error,
        "changes": diff(published.body, rev.body) if published and published.pk != rev.pk else [],
        "can_publish": _can_edit(request, policy) and rev.status == RevisionStatus.DRAFT,
        "upgrades_revision": rev,
        "upgrades_revocation": _revocations(rev), "upgrade_mechanisms": registry_rows(),
        "upgrades_missing": _missing_records(published.body, rev.body)
        if published and published.pk != rev.pk and rev.status == RevisionStatus.DRAFT else [],
    }, status=status)


@require_GET
@dashboard_page
def revision_impact(request: HttpRequest, policy_id: str, revision: int) -> HttpResponse:
    """The diff against the published revision, publishing, and the latest impact preview's result."""
    policy = _policy_or_404(request, policy_id)
    return _impact_page(request, policy, _revision_or_404(policy, revision))


def _from_editor(request: HttpRequest) -> bool:
    return (request.POST if request.method == "POST" else request.GET).get("editor") == "1"


def _impact_region(request: HttpRequest, policy: Policy, rev: PolicyRevision, preview: ImpactPreview | None,
                   *, draft_errors: list[sel.FieldError] | None = None) -> HttpResponse:
    from_editor = _from_editor(request)
    if request.htmx:
        return render(request, "policies/partials/impact_preview.html",
                      _impact_context(request, policy, rev, preview, from_editor=from_editor,
                                      draft_errors=draft_errors),
                      status=422 if draft_errors else 200)
    page = "policy-revision-edit" if from_editor else "policy-revision-impact"
    return HttpResponseRedirect(reverse(page, args=[policy.policy_id, rev.revision]) + tenant_query(request) + "#impact")


@require_POST
@dashboard_page
def revision_impact_run(request: HttpRequest, policy_id: str, revision: int) -> HttpResponse:
    """Start an impact preview (policy_editor): a job that replays the recent requests under the
    saved draft, or under `body` when the editor posts its current, unsaved text."""
    policy = _policy_or_404(request, policy_id)
    _require_editor(request, policy)
    rev = _revision_or_404(policy, revision)
    selection, selection_errors = sel.impact_selection(policy, request.POST)
    if selection_errors:
        context = _impact_context(request, policy, rev, sel.latest_preview(rev), from_editor=_from_editor(request))
        context.update(selection_form={name: request.POST.get(name, "") for name in sel.SELECTION_FIELDS},
                       selection_errors={e.path: e.message for e in selection_errors})
        if request.htmx:
            return render(request, "policies/partials/impact_preview.html", context, status=422)
        return render_region(request, "policies/partials/impact_preview.html", context, status=400,
                             title=f"Impact preview of {policy.policy_id} revision {rev.revision}",
                             back_url=reverse("policy-revision-impact", args=[policy.policy_id, rev.revision]) + "#impact",
                             back_label="the revision's page")
    draft = None
    if "body" in request.POST:
        text = _posted_text(request)
        draft, errors = sel.validate_yaml(text, policy_id=policy.policy_id, revision=rev.revision)
        if draft is None:
            return _impact_region(request, policy, rev, sel.latest_preview(rev), draft_errors=errors)
    preview = services.impact_preview_start(revision=rev, user=request.user, draft=draft, selection=selection)
    preview.refresh_from_db()  # queued or running: the region polls it until it ends
    return _impact_region(request, policy, rev, preview)


@require_GET
@dashboard_page
def revision_impact_preview(request: HttpRequest, policy_id: str, revision: int, preview_id: str) -> HttpResponse:
    """The impact region for one preview: what the page polls while it runs."""
    policy = _policy_or_404(request, policy_id)
    rev = _revision_or_404(policy, revision)
    preview = sel.preview_get(rev, preview_id)
    if preview is None:
        raise Http404("impact preview not found")
    preview = services.impact_preview_reap(preview=preview)  # a poll ends one whose runner is gone
    from_editor = _from_editor(request)
    page = "policy-revision-edit" if from_editor else "policy-revision-impact"
    return render_region(request, "policies/partials/impact_preview.html",
                         _impact_context(request, policy, rev, preview, from_editor=from_editor),
                         title=f"Impact preview of {policy.policy_id} revision {rev.revision}",
                         back_url=reverse(page, args=[policy.policy_id, rev.revision]) + tenant_query(request) + "#impact",
                         back_label="the revision's page")


@require_GET
@dashboard_page
def revision_impact_export(request: HttpRequest, policy_id: str, revision: int, preview_id: str,
                           fmt: str) -> HttpResponse:
    """Every row of one preview (the unchanged ones too), in replay order, as CSV or JSON, streamed."""
    if fmt not in exports.EXPORT_FORMATS:
        raise BadRequest(f"format: “{fmt[:20]}” is not one of {', '.join(exports.EXPORT_FORMATS)}")
    policy = _policy_or_404(request, policy_id)
    rev = _revision_or_404(policy, revision)
    preview = sel.preview_get(rev, preview_id)
    if preview is None:
        raise Http404("impact preview not found")
    head = {"policy_id": policy.policy_id, "revision": rev.revision, "preview": str(preview.id),
            "status": preview.status, "replayed": preview.done, "total": preview.total,
            "body": "unsaved" if preview.unsaved else "saved", "digest": preview.digest,
            "selection": sel.selection_text(preview.selection)}
    return exports.rows_response(fmt, filename=exports.safe_filename(policy.policy_id, f"r{rev.revision}", "impact"),
                                 columns=sel.IMPACT_EXPORT_COLUMNS, rows=sel.impact_export_rows(preview.rows), head=head)


@require_POST
@dashboard_page
def revision_impact_cancel(request: HttpRequest, policy_id: str, revision: int, preview_id: str) -> HttpResponse:
    policy = _policy_or_404(request, policy_id)
    _require_editor(request, policy)
    rev = _revision_or_404(policy, revision)
    preview = sel.preview_get(rev, preview_id)
    if preview is None:
        raise Http404("impact preview not found")
    return _impact_region(request, policy, rev, services.impact_preview_cancel(preview=preview))


@require_POST
@dashboard_page
def revision_publish(request: HttpRequest, policy_id: str, revision: int) -> HttpResponse:
    policy = _policy_or_404(request, policy_id)
    _require_editor(request, policy)
    rev = _revision_or_404(policy, revision)
    note = request.POST.get("note", "").strip()
    if not note:
        return _impact_page(request, policy, rev, status=400, note_error="a note is required to publish")
    previous = sel.published_revision(policy)
    try:
        services.policy_revision_publish(revision=rev, user=request.user, note=note)
    except ServiceError as exc:
        return render(request, "policies/publish_refused.html", {"policy": policy, "revision": rev,
                                                                  "errors": exc.errors}, status=409)
    retired = f"; revision {previous.revision} is retired" if previous else ""
    messages.success(request, f"Revision {rev.revision} of {policy.policy_id} is published{retired}.")
    return HttpResponseRedirect(reverse("policy", args=[policy.policy_id]) + tenant_query(request) + f"#rev-{rev.revision}")
