"""One tenant-isolation matrix over every API operation and every dashboard URL (issue 31).

Two tenants hold the same things under the same names: the worked example policy
(`source-research`, revisions 3 and a draft 4), the example run (`run-42`) with a ready and a blocked
step, the same Idempotency-Keys, an artifact `artifact-shared`, a usage report and an impact
preview; each also holds a run, a policy and an artifact of its own. Every candidate's content,
source_ref and every note carries a marker unique to its tenant.

Each tenant then probes the other, as each role it has (agent, reviewer, policy_editor, admin):

- every operation of the served OpenAPI document (so a new endpoint is covered by construction),
  its path parameters filled with the other tenant's objects, its own objects (names the tenants
  share) and names nobody has; every query and header parameter the document lists filled with
  each of the other tenant's names and values; a body built from the operation's request schema
  (the submit reuses the other tenant's Idempotency-Keys);
- every dashboard route of the URL conf outside the API, likewise, with every query and form
  parameter its view reads (tests/surfaces.py reads them from the view's source), with and without
  `HX-Request` where the view answers htmx differently.

Nothing of the other tenant may appear in any status line, header (Location included) or body,
unless the probe itself sent it; a probe naming one of the other tenant's objects must be answered
exactly as the same probe naming an object that does not exist; and the other tenant's rows are
the same after the probes as before.
"""

from __future__ import annotations

import json
import re
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import product
from typing import Any

import pytest
from django.db import transaction
from django.test import Client

from tests.surfaces import Route, api_operations, dashboard_routes, resolve, view_inputs

pytestmark = pytest.mark.django_db

ROLES = ("agent", "reviewer", "policy_editor", "admin")
SHARED_POLICY = "source-research"
SHARED_RUN = "run-42"
SHARED_KEYS = ("key-shared", "key-blocked")
SHARED_ARTIFACT = "artifact-shared"
SHARED_ITEM = "plan-42-r5"
PASSWORD = "isolation matrix password"

# Path parameters that name no tenant's object (a section of a page): their values are fixed.
# A set-password link is a bearer credential (whoever holds it acts as its user, by design): no
# tenant's real link is probed, an invalid one is.
FIXED_PATH_VALUES = {"section": ("tool_pairs", "transforms", "included", "excluded"),
                     "fmt": ("csv", "json"), "document": ("manifest", "payload", "request"),
                     "uidb64": ("MQ",), "token": ("c1x2yz-0123456789abcdef0123456789abcdef",)}
# An object's twin: the same names, each one only its tenant has swapped for one nobody has.
TWIN = "_twin"


@dataclass
class World:
    """One tenant's objects, the names it shares with the other, and what must never leak from it."""

    slug: str
    marker: str
    tenant: Any = None
    users: dict[str, Any] = field(default_factory=dict)
    # Objects a path can name: dicts of path-parameter values, each one coherent object.
    objects: list[dict[str, Any]] = field(default_factory=list)
    # Strings that identify this tenant's data; none may reach the other tenant.
    secrets: set[str] = field(default_factory=set)
    # Names (other than users' ids) only this tenant has, each with a twin of the same shape that
    # nobody has.
    twins: dict[str, str] = field(default_factory=dict)
    query_values: list[str] = field(default_factory=list)


def _marked_request(name: str, world: World, *, run_id: str, tag: str) -> dict[str, Any]:
    from ctxeng.engine.hashing import sha256_text
    from manifests.examples import example_json

    body = example_json(name)
    body["run_id"] = run_id
    body["principal"]["tenant"] = world.slug
    body["scope"] = body["scope"].replace("tenant-x", world.slug)
    for candidate in body["candidates"]:
        candidate["scope"] = candidate["scope"].replace("tenant-x", world.slug)
        candidate["source_ref"] = {**candidate["source_ref"], "note": f"{world.marker}-ref-{tag}"}
        if candidate.get("content") and candidate.get("content_hash") == sha256_text(candidate["content"]) \
                and candidate["kind"] in ("trace", "evidence", "background", "memory"):
            candidate["content"] += f" {world.marker}-content-{tag}"
            candidate["content_hash"] = sha256_text(candidate["content"])
    return body


def _job(user, body: dict[str, Any], key: str):
    from manifests.models import AssemblyJob
    from manifests.services import assembly_job_assemble, assembly_job_claim, assembly_job_submit

    job, _ = assembly_job_submit(user=user, data=body, idempotency_key=key)
    attempt = assembly_job_claim(job_id=job.id)
    if attempt is not None:
        assembly_job_assemble(job_id=job.id, attempt=attempt)
    return AssemblyJob.objects.select_related("manifest").get(pk=job.pk)


def build_world(slug: str, capture) -> World:
    from ctxeng.accounts.models import Tenant
    from ctxeng.accounts.services import tenant_member_add
    from manifests.examples import example_text
    from manifests.services import artifact_create, usage_report_record
    from policies.services import impact_preview_start, policy_import, policy_revision_create
    from tests.dashboard.conftest import draft_body

    world = World(slug=slug, marker=f"mark{uuid.uuid4().hex[:12]}")
    for role in ROLES:
        tenant_member_add(username=f"{slug}-{role}", tenant_slug=slug, roles=[role], password=PASSWORD)
    from django.contrib.auth import get_user_model

    world.users = {role: get_user_model().objects.get(username=f"{slug}-{role}") for role in ROLES}
    world.tenant = Tenant.objects.get(slug=slug)
    editor, agent = world.users["policy_editor"], world.users["agent"]

    policy_text = example_text("policy.yaml")
    published = policy_import(tenant=world.tenant, text=policy_text, user=editor, publish=True,
                              note=f"{world.marker}-publish-note")
    draft = policy_revision_create(tenant=world.tenant, body=draft_body(published.body), user=editor)
    private_policy = f"policy-{world.marker}"
    policy_import(tenant=world.tenant, text=policy_text.replace(SHARED_POLICY, private_policy), user=editor,
                  publish=False)
    ready = _job(agent, _marked_request("request.json", world, run_id=SHARED_RUN, tag="ready"), SHARED_KEYS[0])
    blocked = _job(agent, _marked_request("request-blocked.json", world, run_id=SHARED_RUN, tag="blocked"),
                   SHARED_KEYS[1])
    private_run = f"run-{world.marker}"
    own_key = f"key-{world.marker}"
    alone = _job(agent, _marked_request("request.json", world, run_id=private_run, tag="alone"), own_key)
    usage_report_record(manifest=ready.manifest, user=agent, input_tokens=1234, cached_tokens=0, output_tokens=5)
    private_artifact = f"artifact-{world.marker}"
    for artifact_id in (SHARED_ARTIFACT, private_artifact):
        artifact_create(user=agent, tenant=world.tenant, artifact_id=artifact_id, revision=1, kind="note",
                        content=f"{world.marker}-artifact {artifact_id}", writer=f"{world.marker}-writer",
                        scope=f"{slug}/project-y/task-42")
    with capture(execute=True):
        preview = impact_preview_start(revision=draft, user=editor)

    jobs = [str(ready.id), str(blocked.id), str(alone.id)]
    world.twins = {
        **{job: str(uuid.uuid4()) for job in jobs},
        str(preview.id): str(uuid.uuid4()),
        private_run: f"run-nobody{world.marker[4:]}",
        private_policy: f"policy-nobody{world.marker[4:]}",
        private_artifact: f"artifact-nobody{world.marker[4:]}",
        own_key: f"key-nobody{world.marker[4:]}",
    }
    world.objects = [
        {"job_id": jobs[0], "run_id": SHARED_RUN, "policy_id": SHARED_POLICY, "revision": draft.revision,
         "preview_id": str(preview.id), "item_id": SHARED_ITEM},
        {"job_id": jobs[1], "run_id": private_run, "policy_id": SHARED_POLICY, "revision": published.revision,
         "item_id": f"{SHARED_ITEM}"},
        {"job_id": jobs[2], "run_id": private_run, "policy_id": private_policy, "revision": published.revision},
        *({"user_id": user.pk, TWIN: {"user_id": 900000 + user.pk}} for user in world.users.values()),
    ]
    for obj in world.objects:
        obj.setdefault(TWIN, {name: world.twins[value] for name, value in obj.items() if isinstance(value, str) and value in world.twins})
    world.secrets = {slug, world.marker, *jobs, str(preview.id), private_run, private_policy, private_artifact,
                     own_key, *(user.get_username() for user in world.users.values())}
    world.query_values = [*jobs, private_run, private_policy, private_artifact, own_key, str(preview.id),
                          world.marker, slug, SHARED_POLICY, SHARED_RUN, SHARED_ITEM, SHARED_ARTIFACT, *SHARED_KEYS,
                          "ready", "blocked", "excluded", "included"]
    return world


@pytest.fixture
def worlds(inline_jobs, django_capture_on_commit_callbacks) -> tuple[World, World]:
    return build_world("tenant-acme", django_capture_on_commit_callbacks), \
        build_world("tenant-bolt", django_capture_on_commit_callbacks)


# --------------------------------------------------------------------------- one probe


@contextmanager
def probe_scope(method: str, victim: World):
    """A probe leaves nothing behind: its writes are rolled back (so a later probe never sees a
    value an earlier one stored), and a write must not have touched the other tenant's rows."""
    before = _state(victim) if method != "GET" else None
    with transaction.atomic():
        yield
        if before is not None:
            assert _state(victim) == before, f"a {method} of the other tenant changed {victim.slug}'s rows"
        transaction.set_rollback(True)


# --------------------------------------------------------------------------- what a response shows


def response_text(response) -> str:
    """Everything a client sees: status, headers (Location included) and the body."""
    body = b"".join(response.streaming_content) if response.streaming else response.content
    headers = "\n".join(f"{k}: {v}" for k, v in response.items())
    return f"{response.status_code}\n{headers}\n\n{body.decode('utf-8', 'replace')}"


# Per-response values (CSP nonces, CSRF tokens, timestamps) differ between two identical requests.
_VOLATILE = [
    re.compile(r"[A-Za-z0-9_\-+=]{24,}"),
    re.compile(r"\d{4}-\d\d-\d\d[T ][\d:.]+(?:Z|[+-]\d\d:?\d\d)?"),
    re.compile(r"(?i)^(date|expires|last-modified|content-length):.*$", re.M),
    re.compile(r"\d+"),  # a user's id and its twin differ in digits only
]


def normalized(text: str) -> str:
    for pattern in _VOLATILE:
        text = pattern.sub("~", text)
    return text


@dataclass
class Findings:
    probes: int = 0
    problems: list[str] = field(default_factory=list)

    def leaks(self, label: str, text: str, victim: World, sent: str) -> None:
        self.probes += 1
        for secret in sorted(victim.secrets):
            if secret in text and secret not in sent:
                at = text.index(secret)
                self.problems.append(f"{label}: shows {secret!r} of {victim.slug}: "
                                     f"...{text[max(0, at - 120):at + 60]!r}...")

    def differs(self, label: str, seen: str, twin_seen: str) -> None:
        """`seen` (its victim names swapped for their twins) against the answer to the twin probe."""
        a, b = normalized(seen), normalized(twin_seen)
        if a != b:
            at = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
            self.problems.append(f"{label}: answered unlike the same probe naming nothing, from character {at}:\n"
                                 f"  {a[max(0, at - 200):at + 200]!r}\n  {b[max(0, at - 200):at + 200]!r}")

    def check(self) -> None:
        if self.problems:
            import tempfile
            from pathlib import Path

            Path(tempfile.gettempdir(), "isolation-matrix-findings.txt").write_text("\n".join(self.problems))
        assert not self.problems, f"{len(self.problems)} of {self.probes} probes leaked:\n" + "\n".join(self.problems[:40])


def _arg_sets(params: list[str], owner: World, victim: World) -> list[tuple[dict[str, Any], dict[str, Any] | None, bool]]:
    """(values, twin values, sweep) for a route's path parameters: each of the victim's objects
    that names them all (twin: the same with every name only the victim has swapped for one nobody
    has) and each of the prober's own (twin None). `sweep` marks the one set of the prober's own on
    which every query parameter is tried with every value (the others are probed bare)."""
    variable = [p for p in params if p not in FIXED_PATH_VALUES]
    fixed = [p for p in params if p in FIXED_PATH_VALUES]
    unknown = [p for p in variable if not any(p in obj for obj in owner.objects)]
    assert not unknown, f"path parameter(s) {unknown} name no object of the isolation world: add them to build_world"
    sets = []
    for world in (victim, owner):
        for obj in world.objects:
            if not all(p in obj for p in variable):
                continue
            base = {p: obj[p] for p in variable}
            for combo in product(*(FIXED_PATH_VALUES[p] for p in fixed)):
                values = {**base, **dict(zip(fixed, combo, strict=True))}
                if world is victim:
                    twin = {**values, **{p: v for p, v in obj[TWIN].items() if p in values}}
                    sets.append((values, twin if twin != values else None))
                else:
                    sets.append((values, None))
    unique, seen, swept = [], set(), False
    for values, twin in sets:
        key = json.dumps(values, sort_keys=True, default=str)
        if key not in seen:
            seen.add(key)
            sweep = twin is None and not swept and (values.get("job_id") in (None, owner.objects[0].get("job_id")))
            swept = swept or sweep
            unique.append((values, twin, sweep))
    return unique


# --------------------------------------------------------------------------- the REST API


def _schema(client) -> dict[str, Any]:
    response = client.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert response.status_code == 200
    return json.loads(response.content)


def _body_for(schema: dict[str, Any], node: Any, owner: World, victim: World, value: str, depth: int = 0) -> Any:
    """An instance of a request schema, every free string set to `value` (the victim's name)."""
    node = resolve(schema, node)
    if depth > 6 or not isinstance(node, dict):
        return value
    for choice in ("oneOf", "anyOf", "allOf"):
        if node.get(choice):
            return _body_for(schema, node[choice][0], owner, victim, value, depth + 1)
    if node.get("enum"):
        return node["enum"][0]
    kind = node.get("type")
    if kind == "object" or "properties" in node:
        return {name: _body_for(schema, sub, owner, victim, value, depth + 1)
                for name, sub in (node.get("properties") or {}).items() if name in (node.get("required") or [])
                or name in ("tenant", "note")}
    if kind == "array":
        return [_body_for(schema, node.get("items") or {}, owner, victim, value, depth + 1)]
    if kind == "integer":
        return 1
    if kind == "number":
        return 1.0
    if kind == "boolean":
        return True
    return value


def _bodies(schema: dict[str, Any], op, owner: World, victim: World) -> list[Any]:
    """Bodies for an operation: well-formed ones where the prober can act (its own request with
    the shared Idempotency-Keys, the policy, an artifact under the shared name), and one per
    victim value built from the request schema."""
    from manifests.examples import example_text

    if op.body_schema is None:
        return [None]
    bodies: list[Any] = []
    if op.operation_id == "assemblies_submit":
        bodies += [_marked_request("request.json", owner, run_id=SHARED_RUN, tag="probe"),
                   _marked_request("request.json", victim, run_id=SHARED_RUN, tag="ready")]
    elif op.operation_id == "artifacts_create":
        bodies += [{"artifact_id": SHARED_ARTIFACT, "revision": 1, "kind": "note", "content": "probe",
                    "writer": "probe", "scope": f"{owner.slug}/p"},
                   {"artifact_id": SHARED_ARTIFACT, "revision": 1, "kind": "note", "content": "probe",
                    "writer": "probe", "scope": f"{victim.slug}/p", "tenant": victim.slug}]
    elif op.operation_id.startswith("policies_"):
        bodies.append({"text": example_text("policy.yaml")})
    values = [victim.slug, *sorted(victim.twins)[:3]]
    bodies += [_body_for(schema, op.body_schema, owner, victim, value) for value in values]
    return bodies


# One test per role: the probes spread over pytest-xdist's workers (the matrix is ~13,000 probes).
@pytest.mark.parametrize("role", ROLES)
def test_no_api_operation_shows_one_tenant_anything_of_another(worlds, api, submit, role):
    findings = Findings()
    for owner, victim in (worlds, worlds[::-1]):
        user = owner.users[role]
        client = api(user)
        schema = _schema(client)
        operations = api_operations(schema)
        assert len(operations) >= 15, "the served OpenAPI document lists the API's operations"
        for op in operations:
            path_params = [p.name for p in op.parameters if p.location == "path"]
            others = [p for p in op.parameters if p.location in ("query", "header")]
            for values, twin, sweep in _arg_sets(path_params, owner, victim):
                url = op.path.format(**values)
                for body in _bodies(schema, op, owner, victim):
                    seen = _call(client, victim, op.method, url, body, {}, submit)
                    label = f"{owner.slug}/{role} {op.method} {url} body={str(body)[:80]}"
                    findings.leaks(label, seen, victim, url + json.dumps(body))
                    if twin is not None:
                        twin_url = op.path.format(**twin)
                        twin_body = _swap(body, victim.twins)
                        twin_seen = _call(client, victim, op.method, twin_url, twin_body, {}, submit)
                        findings.differs(label, _twin_view(seen, victim), twin_seen)
                if not sweep:
                    continue
                body = _bodies(schema, op, owner, victim)[0]
                for param, value in ((p, v) for p in others for v in [*victim.query_values, *p.enum]):
                    query = {param.name: value} if param.location == "query" else {}
                    headers = {param.name: value} if param.location == "header" else {}
                    seen = _call(client, victim, op.method, url, body, query, submit, headers)
                    sent = url + json.dumps(body) + value
                    findings.leaks(f"{owner.slug}/{role} {op.method} {url} {param.location} "
                                   f"{param.name}={value}", seen, victim, sent)
    findings.check()
    print(f"isolation matrix, API as {role}: {findings.probes} probes")


def _swap(body: Any, twins: dict[str, str]) -> Any:
    if body is None:
        return None
    text = json.dumps(body)
    for value, twin in twins.items():
        text = text.replace(value, twin)
    return json.loads(text)


def _call(client, victim: World, method: str, url: str, body: Any, query: dict[str, str], submit,
          headers: dict[str, str] | None = None) -> str:
    from django.core.cache import caches

    caches["throttle"].clear()  # thousands of probes from one token: the rate limit is not what is tested
    extra = {f"HTTP_{k.upper().replace('-', '_')}": v for k, v in (headers or {}).items()}
    with probe_scope(method, victim):
        if method == "GET":
            response = client.get(url, query, **extra)
        elif method == "POST" and url.endswith("/assemblies/"):
            response = submit(client, body, key=(headers or {}).get("Idempotency-Key"), QUERY_STRING=_qs(query),
                              **{k: v for k, v in extra.items() if k != "HTTP_IDEMPOTENCY_KEY"})
        else:
            call = getattr(client, method.lower())
            response = call(url + ("?" + _qs(query) if query else ""), body, format="json", **extra)
        return response_text(response)


def _qs(query: dict[str, str]) -> str:
    from urllib.parse import urlencode

    return urlencode(query)


# --------------------------------------------------------------------------- the dashboard


def _page_call(client: Client, victim: World, method: str, url: str, params: dict[str, str], htmx: bool,
               capture) -> str:
    extra = {"HTTP_HX_REQUEST": "true"} if htmx else {}
    client.cookies.pop("messages", None)  # a message an earlier probe left would show on this one
    with probe_scope(method, victim), capture(execute=True):
        if method == "GET":
            return response_text(client.get(url, params, **extra))
        return response_text(client.post(url, params, **extra))


def dashboard_probes(owner: World, victim: World):
    """(label, method, url, params, htmx, twin_url or None) for every route, method, object and
    parameter value."""
    for route in dashboard_routes():
        inputs = view_inputs(route.view)
        methods = _methods_of(route)
        for values, twin, sweep in _arg_sets(route.parameters, owner, victim):
            url = route.url(values)
            twin_url = route.url(twin) if twin is not None else None
            for method in methods:
                read = sorted(inputs.query if method == "GET" else inputs.form | inputs.query)
                for htmx in (False, True) if inputs.htmx else (False,):
                    yield f"{method} {url}{' htmx' if htmx else ''}", method, url, {}, htmx, twin_url
                if not sweep:
                    continue
                for name, value in product(read, victim.query_values):
                    yield f"{method} {url}?{name}={value}", method, url, {name: value}, False, None


def _methods_of(route: Route) -> list[str]:
    """The methods a route answers: its view's require_GET/require_POST decorators, read by
    calling them with the wrong method is not possible without a request; the source says."""
    import inspect

    view = route.view
    try:
        source = inspect.getsource(inspect.getmodule(inspect.unwrap(view)))
    except (OSError, TypeError):
        return ["GET", "POST"]
    name = inspect.unwrap(view).__name__
    match = re.search(r"((?:@[^\n]+\n)+)def " + re.escape(name) + r"\(", source)
    decorators = match.group(1) if match else ""
    if "require_POST" in decorators:
        return ["POST"]
    if "require_GET" in decorators:
        return ["GET"]
    return ["GET", "POST"]


@pytest.mark.parametrize("role", ROLES)
def test_no_dashboard_url_shows_one_tenant_anything_of_another(worlds, inline_jobs, django_capture_on_commit_callbacks,
                                                                role):
    findings = Findings()
    for owner, victim in (worlds, worlds[::-1]):
        user = owner.users[role]
        client = Client()
        client.force_login(user)
        for label, method, url, params, htmx, twin_url in dashboard_probes(owner, victim):
            label = f"{owner.slug}/{role} {label}"
            seen = _page_call(client, victim, method, url, params, htmx, django_capture_on_commit_callbacks)
            if not client.cookies.get("sessionid") or not client.cookies["sessionid"].value:
                client.force_login(user)  # the probe was the logout page
            findings.leaks(label, seen, victim, url + json.dumps(params))
            if twin_url is not None:
                twin_seen = _page_call(client, victim, method, twin_url, params, htmx,
                                       django_capture_on_commit_callbacks)
                findings.differs(label, _twin_view(seen, victim), twin_seen)
    findings.check()
    print(f"isolation matrix, dashboard as {role}: {findings.probes} probes")


def _twin_view(text: str, victim: World) -> str:
    """The victim's names in `text` swapped for their twins (users' ids: the comparison ignores digits)."""
    for value, twin in victim.twins.items():
        text = text.replace(value, twin)
    return text


def _state(world: World) -> dict[str, Any]:
    """The tenant's rows a probe could change: memberships, tokens, jobs, revisions, artifacts, runs."""
    from rest_framework.authtoken.models import Token

    from ctxeng.accounts.models import Membership
    from manifests.models import Artifact, AssemblyJob, Run
    from policies.models import ImpactPreview, PolicyRevision

    tenant = world.tenant
    return {
        "members": sorted(Membership.objects.filter(tenant=tenant).values_list("user__username", "role")),
        "tokens": sorted(Token.objects.filter(user__memberships__tenant=tenant).values_list("key", flat=True)),
        "passwords": sorted(m.user.password for m in Membership.objects.filter(tenant=tenant).select_related("user")),
        "jobs": sorted(map(str, AssemblyJob.objects.filter(tenant=tenant).values_list("id", "status"))),
        "revisions": sorted(PolicyRevision.objects.filter(policy__tenant=tenant)
                            .values_list("policy__policy_id", "revision", "status", "digest")),
        "previews": sorted(map(str, ImpactPreview.objects.filter(revision__policy__tenant=tenant)
                               .values_list("id", "status"))),
        "artifacts": sorted(Artifact.objects.filter(tenant=tenant).values_list("artifact_id", "revision", "content_hash")),
        "runs": sorted(map(str, Run.objects.filter(tenant=tenant).values_list("run_id", "closed_at"))),
    }


def test_the_surfaces_enumerated_include_every_known_page_and_parameter():
    """The enumeration reads what the views read: a guard that tests/surfaces.py still finds the
    inspector's filters, the runs list's filters and the compare page's pair."""
    routes = {route.name: route for route in dashboard_routes()}
    assert {"runs", "run", "assembly", "assembly-item", "assembly-input", "assembly-section", "why", "compare",
            "usage", "policies", "policy", "policy-diff", "people", "person-role"} <= set(routes)
    assert {"status", "policy", "since", "until", "page"} <= view_inputs(routes["runs"].view).query
    assert {"q", "decision", "reason", "partition", "group", "page", "item", "outcome"} <= \
        view_inputs(routes["assembly"].view).query
    assert {"a", "b"} <= view_inputs(routes["compare"].view).query
    assert {"item_id", "part"} <= view_inputs(routes["assembly-item"].view).query
    assert {"note"} <= view_inputs(routes["policy-revision-publish"].view).form
    assert view_inputs(routes["assembly-input"].view).htmx
    assert not {"tool_pairs", "budget"} & view_inputs(routes["assembly"].view).query

