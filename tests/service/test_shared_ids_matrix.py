"""Tenancy with the same identifiers in two tenants, seen by one user who belongs to both (issue 43, class 3).

The isolation matrix (test_isolation_matrix.py) probes one tenant with the other's objects. What
it cannot see is a lookup that ignores *which* of the user's tenants a page acts in: both tenants
here hold the policy `source-research` (revisions 3 and 4), the run `run-42` with steps `step-19`
(ready) and `step-20` (blocked), the same item ids and the artifact `artifact-shared`, each with a
marker of its own in every content, note and source ref. The user `both-tenants` holds every role
in both.

For every dashboard route of the URL conf (the table below must name each one: a new route fails
`test_the_tables_name_every_route_and_operation` until it is placed) and every query parameter its
view reads, in four modes — the session in tenant A, in tenant B, and each with `?tenant=` naming
the other — the page shows only the tenant it acts in: none of the other tenant's markers, job
ids, private names or members; its header's switcher selects that tenant; and every link it holds,
followed, answers in that tenant too (a link to a run or policy found by name that forgets
`?tenant=` opens the session's namesake, and shows the other tenant's data). Pages documented to
read all of the user's tenants (/why/ and its export) are held to each row: a row's run link opens
the run that holds the row's assembly. Every REST operation, asked for each tenant's objects
(`?tenant=` where the operation takes it), answers with nothing of the other tenant, and a list
spanning the user's tenants labels each object with the tenant whose data it holds.
"""

from __future__ import annotations

import html
import json
import re
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from tests.service.test_isolation_matrix import (
    FIXED_PATH_VALUES,
    PASSWORD,
    SHARED_ARTIFACT,
    SHARED_ITEM,
    SHARED_POLICY,
    SHARED_RUN,
    World,
    _marked_request,
    _methods_of,
    build_world,
    probe_scope,
    response_text,
)
from tests.surfaces import api_operations, dashboard_routes, view_inputs

pytestmark = pytest.mark.django_db

SLUGS = ("tenant-a", "tenant-b")
BOTH = "both-tenants"

# How each dashboard route is probed. "own": a page about the tenant's data (its bare GET must show
# something only the acting tenant has); "neutral": a page with no tenant data (login, health);
# "spanning": documented to read all of the user's tenants (each row is checked instead);
# "switch": the tenant switcher itself (tested on its own below).
DASHBOARD = {
    "home": "own", "healthz": "neutral", "favicon": "neutral", "login": "neutral", "logout": "neutral",
    "tenant-switch": "switch",
    "runs": "own", "run-timeline-export": "own", "run-matrix": "own", "run-window": "own", "run-search": "own", "run": "own",
    "assembly": "own", "assembly-item": "own", "assembly-input": "own", "assembly-window": "own",
    "assembly-export": "own", "assembly-section": "own",
    "why": "spanning", "why-export": "spanning", "compare": "own", "compare-export": "own", "usage": "own",
    "policies": "own", "policy": "own", "policy-revision-new": "own", "policy-revision-edit": "own",
    "policy-revision-impact": "own", "policy-revision-impact-run": "own", "policy-revision-impact-preview": "own",
    "policy-revision-impact-cancel": "own", "policy-revision-impact-export": "own", "policy-revision-publish": "own",
    "policy-diff": "own",
    "people": "own", "person-role": "own", "person-token": "own", "person-token-revoke": "own",
    "person-password-link": "own", "set-password": "neutral", "time-display": "neutral",
}
# "own" pages whose bare GET shows nothing only the acting tenant has: both tenants' revisions hold
# the same policy text, so their diff is the same (its header and links are still checked); a run's
# search without `?q=` is its empty form (its searches, `?q=` below, are checked for leaks).
SAME_IN_BOTH = {"policy-diff", "run-search"}

# Each REST operation: "own" answers about one object of the tenant asked for (nothing of the
# other may appear); "spanning" lists the user's tenants (each object labelled with its tenant
# holds only that tenant's data).
API = {
    "artifacts_list": "spanning", "artifacts_create": "own", "assemblies_list": "spanning",
    "assemblies_submit": "own", "assemblies_get": "own", "assemblies_input": "own", "assemblies_manifest": "own",
    "assemblies_request": "own", "assemblies_usage": "own", "items_decisions": "spanning",
    "policies_list": "spanning", "policies_validate": "own", "policies_revisions_list": "own",
    "policies_revisions_create": "own", "policies_revisions_get": "own", "policies_revisions_publish": "own",
    "policies_revisions_update": "own", "policies_diff": "own", "runs_close": "own",
    # a batch of recorded steps names its tenant in each step's request and each dropped total
    "recorded_steps_submit": "own",
}

TODAY = datetime.now(UTC).date().isoformat()
# The values each query parameter is tried with: the names both tenants share, so that a filter
# restarting from every tenant's rows finds the other tenant's namesakes.
QUERY_VALUES = {
    "status": ["ready", "blocked", "failed"], "policy": [SHARED_POLICY], "since": [TODAY], "until": [TODAY],
    "page": ["1", "2"], "steps_page": ["1"], "tool_pairs_page": ["1"], "transforms_page": ["1"],
    "run": [SHARED_RUN], "run_b": [SHARED_RUN], "step": ["step-19", "step-20"], "a": ["step-19"], "b": ["step-20"],
    "item": [SHARED_ITEM, "evidence-pi-old-commit"], "item_id": [SHARED_ITEM, "evidence-pi-old-commit"],
    "q": [SHARED_ITEM, "evidence"], "decision": ["excluded", "included"],
    "reason": ["ranking_lost", "scope_mismatch", "budget_evicted"], "outcome": ["included", "excluded"],
    "from": ["3"], "to": ["4"], "group": ["none", "reason"], "changed": ["1"], "steps": ["1", "2"], "by": ["step"],
    "verification": ["diverged", "verified", "pending"],
}
DEFAULT_VALUES = [SHARED_RUN, SHARED_ITEM, SHARED_POLICY]
# Whole queries a page reads together (one parameter alone is often only a half-filled form).
COMBINED = {
    "compare": [{"run": SHARED_RUN, "a": "step-19", "b": "step-20"}, {"run": SHARED_RUN, "a": "step-19#1",
                                                                       "run_b": SHARED_RUN, "b": "step-20"},
                {"by": "step", "run": SHARED_RUN, "run_b": SHARED_RUN}],
    "compare-export": [{"run": SHARED_RUN, "run_b": SHARED_RUN}, {"run": SHARED_RUN}],
    "why": [{"q": SHARED_ITEM}, {"run": SHARED_RUN, "decision": ""}, {"step": "step-19", "group": "none"}],
    "why-export": [{"q": SHARED_ITEM}, {"run": SHARED_RUN}],
    "policy-diff": [{"from": "3", "to": "4"}],
    "runs": [{"status": "ready", "policy": SHARED_POLICY, "since": TODAY, "until": TODAY}],
}
# Links not followed: they change the session or leave the product's pages.
NOT_FOLLOWED = ("/static/", "/api/", "/admin/", "/logout/", "/tenant/", "/login/")
SWITCHER = re.compile(r'<select id="tenant-select".*?</select>', re.S)
SELECTED_OPTION = re.compile(r'<option value="([^"]+)" selected>')


def selected_tenant(text: str) -> list[str]:
    """The tenant the header's switcher selects (empty: the response has no header)."""
    return [slug for switcher in SWITCHER.findall(text) for slug in SELECTED_OPTION.findall(switcher)]


@dataclass
class Shared:
    user: Any
    worlds: dict[str, World]

    def other(self, slug: str) -> World:
        return next(world for name, world in self.worlds.items() if name != slug)


@pytest.fixture
def shared(inline_jobs, django_capture_on_commit_callbacks) -> Shared:
    from django.contrib.auth import get_user_model

    from ctxeng.accounts.models import Role
    from ctxeng.accounts.services import tenant_member_add

    worlds = {slug: build_world(slug, django_capture_on_commit_callbacks) for slug in SLUGS}
    for slug in SLUGS:
        tenant_member_add(username=BOTH, tenant_slug=slug, roles=list(Role.values), password=PASSWORD)
    return Shared(user=get_user_model().objects.get(username=BOTH), worlds=worlds)


def forbidden(victim: World) -> set[str]:
    """What of `victim` may not appear on a page acting in the other tenant: its marker, job ids,
    private names and members, and its scopes (`tenant-b/...`); not its bare slug, which the
    switcher of a user in both tenants lists."""
    return (victim.secrets - {victim.slug}) | {f"{victim.slug}/"}


def leaked(text: str, victim: World) -> list[str]:
    out = []
    for secret in sorted(forbidden(victim)):
        if secret in text:
            at = text.index(secret)
            out.append(f"shows {secret!r} of {victim.slug}: ...{text[max(0, at - 150):at + 60]!r}...")
    return out


def shows_own(text: str, world: World) -> bool:
    return any(secret in text for secret in forbidden(world))


def links_of(body: str) -> set[str]:
    found = set()
    for raw in re.findall(r'(?:href|hx-get|action)="([^"]+)"', body):
        link = html.unescape(raw).split("#")[0]
        if link.startswith("/") and not link.startswith(NOT_FOLLOWED):
            found.add(link)
    return found


# --------------------------------------------------------------------------- the dashboard


def _path_values(route, world: World, shared: Shared) -> list[dict[str, Any]]:
    """The acting tenant's own objects, by the names both tenants share where the path takes a name."""
    own = world.objects[0]
    values = {"job_id": own["job_id"], "run_id": SHARED_RUN, "policy_id": SHARED_POLICY, "revision": own["revision"],
              "preview_id": own["preview_id"],
              # a member of the acting tenant only: a token or password is its user's in every tenant
              "user_id": world.users["reviewer"].pk}
    sets = [{}]
    for name in route.parameters:
        choices = FIXED_PATH_VALUES.get(name) or [values[name]]
        sets = [{**partial, name: choice} for partial in sets for choice in choices]
    return sets


def _set_session(client: Client, slug: str) -> None:
    response = client.post("/tenant/", {"tenant": slug, "next": "/runs/"})
    assert response.status_code == 302, f"switching to {slug}: {response.status_code}"


def _probes(shared: Shared, acting: World):
    """(route, kind, method, url, params) for every route, method and query parameter value."""
    for route in dashboard_routes():
        kind = DASHBOARD[route.name]
        if kind == "switch":
            continue
        inputs = view_inputs(route.view)
        for values in _path_values(route, acting, shared):
            url = route.url(values)
            for method in _methods_of(route):
                if method == "POST":
                    yield route, kind, method, url, {name: (QUERY_VALUES.get(name) or DEFAULT_VALUES)[0]
                                                     for name in sorted(inputs.form)}
                    continue
                yield route, kind, method, url, {}
                for name in sorted(inputs.query - {"tenant"}):
                    for value in QUERY_VALUES.get(name, DEFAULT_VALUES):
                        yield route, kind, method, url, {name: value}
                for combined in COMBINED.get(route.name, []):
                    yield route, kind, method, url, combined


def _get(client: Client, url: str, params: dict[str, str], override: str | None, method: str = "GET"):
    client.cookies.pop("messages", None)
    query = {**params, **({"tenant": override} if override else {})}
    if method == "GET":
        return client.get(url, query)
    target = url + (f"?tenant={override}" if override else "")
    return client.post(target, params)


# (the session's tenant, the tenant `?tenant=` names): the converse of each mode is another mode.
MODES = {"session_a": ("tenant-a", None), "session_b": ("tenant-b", None),
         "session_a_page_b": ("tenant-a", "tenant-b"), "session_b_page_a": ("tenant-b", "tenant-a")}


@pytest.mark.parametrize("mode", MODES)
def test_every_dashboard_url_and_filter_shows_only_the_tenant_it_acts_in(shared, django_capture_on_commit_callbacks,
                                                                          mode):
    session, override = MODES[mode]
    acting_slug = override or session
    acting, victim = shared.worlds[acting_slug], shared.other(acting_slug)
    client = Client()
    client.force_login(shared.user)
    _set_session(client, session)
    problems: list[str] = []
    links: dict[str, str] = {}
    opened: dict[str, str] = {}
    probes = 0
    for route, kind, method, url, params in _probes(shared, acting):
        label = f"[{mode}] {method} {url} {params}"
        with probe_scope(method, victim), django_capture_on_commit_callbacks(execute=True):
            response = _get(client, url, params, override, method)
            text = response_text(response)
        probes += 1
        if route.name == "logout":
            client.force_login(shared.user)
            _set_session(client, session)
        problems += [f"{label}: {p}" for p in (leaked(text, victim) if kind != "spanning" else [])]
        if kind == "spanning":
            problems += [f"{label}: {p}" for p in _spanning_rows(client, response, text, shared, opened)]
        if kind == "own" and route.name not in SAME_IN_BOTH and method == "GET" and not params \
                and response.status_code == 200 \
                and not shows_own(text, acting):
            problems.append(f"{label}: shows nothing of {acting.slug}, the tenant it acts in")
        selected = selected_tenant(text)
        if selected and selected != [acting_slug]:
            problems.append(f"{label}: its header selects {selected}, not {acting_slug}")
        if kind != "spanning" and method == "GET" and response.status_code == 200 \
                and "html" in response.get("Content-Type", ""):
            for link in links_of(text):
                if override is None or _names_an_object(link):
                    links.setdefault(link, label)
    assert probes >= 200, probes
    for link, source in sorted(links.items()):
        with django_capture_on_commit_callbacks(execute=True):
            response = client.get(link)
        text = response_text(response)
        if link.startswith(("/why/",)):
            problems += [f"[{mode}] link {link} (from {source}): {p}" for p in _spanning_rows(client, response, text, shared, opened)]
            continue
        problems += [f"[{mode}] link {link} (from {source}): {p}" for p in leaked(text, victim)]
        selected = selected_tenant(text)
        if selected and selected != [acting_slug]:
            problems.append(f"[{mode}] link {link} (from {source}): opens in {selected}, not {acting_slug}")
    problems = list(dict.fromkeys(problems))
    if problems:
        Path(tempfile.gettempdir(), f"shared-ids-{mode}.txt").write_text("\n".join(problems))
    assert not problems, f"{len(problems)} problems over {probes} probes and {len(links)} links:\n" + \
        "\n".join(problems[:30])
    print(f"shared ids, dashboard [{mode}]: {probes} probes, {len(links)} links followed")


def _names_an_object(link: str) -> bool:
    """Whether `link` opens a page about one object (a run, an assembly, a policy): such a link
    must open the object of the tenant the page acts in. A link to a list (the header's
    navigation) opens the session's tenant, by design: the page's `?tenant=` does not move the
    session."""
    from django.urls import resolve

    match = resolve(link.split("?")[0])
    return bool(match.kwargs) or "pick=" in link or "run=" in link


def _job_tenants(shared: Shared) -> dict[str, str]:
    return {obj["job_id"]: slug for slug, world in shared.worlds.items() for obj in world.objects if "job_id" in obj}


def _spanning_rows(client: Client, response, text: str, shared: Shared, opened: dict[str, str]) -> list[str]:
    """A page reading all the user's tenants: each row (an HTML table row, or an export's JSON row)
    holds only the data of the tenant its assembly belongs to, and a row's run link opens the
    run of that assembly."""
    problems: list[str] = []
    jobs = _job_tenants(shared)
    if response.get("Content-Type", "").startswith("application/json"):
        rows = json.loads(text.split("\n\n", 1)[1])  # the body (response_text read the stream)
        for row in rows.get("rows", []) if isinstance(rows, dict) else []:
            slug = row.get("tenant")
            if jobs.get(row.get("assembly")) != slug:
                problems.append(f"row {row.get('item_id')} labelled {slug} is assembly {row.get('assembly')}")
            problems += leaked(json.dumps(row), shared.other(slug)) if slug in shared.worlds else []
        return problems
    for row in re.findall(r"<tr\b.*?</tr>", text, re.S):
        row_jobs = {job for job in jobs if f"/assemblies/{job}/" in row}
        if not row_jobs:
            continue
        slugs = {jobs[job] for job in row_jobs}
        if len(slugs) != 1:
            problems.append(f"a row links assemblies of {sorted(slugs)}")
            continue
        slug = slugs.pop()
        problems += leaked(row, shared.other(slug))
        for link in links_of(row):
            if link.startswith("/runs/"):
                if link not in opened:
                    opened[link] = client.get(link).content.decode()
                if not row_jobs & {job for job in jobs if job in opened[link]}:
                    problems.append(f"a row of {slug}'s assembly {sorted(row_jobs)} links {link}, a run without it")
    return problems


def test_the_switcher_moves_every_page_to_the_chosen_tenant_and_back(shared):
    """Switching the session's tenant is what the converse rows of the matrix rely on: the same URL
    answers in A, then in B, then in A again."""
    client = Client()
    client.force_login(shared.user)
    for slug in (*SLUGS, SLUGS[0]):
        _set_session(client, slug)
        world, other = shared.worlds[slug], shared.other(slug)
        for url in ("/runs/", f"/runs/{SHARED_RUN}/", "/policies/", f"/policies/{SHARED_POLICY}/", "/usage/"):
            body = response_text(client.get(url))
            assert selected_tenant(body) == [slug], url
            assert shows_own(body, world) and not leaked(body, other), (url, leaked(body, other)[:2])


# --------------------------------------------------------------------------- the REST API


# An operation that cannot succeed on this world, and the refusal that shows it judged the asked
# tenant's object (not the "which tenant?" refusal an operation ignoring `?tenant=` would give).
ACTED_REFUSALS = {
    # Revision 4 adds admission.min_relevance without an upgrades entry (seed §8).
    "policies_revisions_publish": "publishing it needs an upgrades entry naming 'admission.min_relevance'",
}


def _api_values(world: World) -> dict[str, Any]:
    own = world.objects[0]
    return {"job_id": own["job_id"], "run_id": SHARED_RUN, "policy_id": SHARED_POLICY, "revision": own["revision"],
            "item_id": SHARED_ITEM}


def _api_body(op_id: str, world: World) -> Any:
    if op_id == "assemblies_submit":
        return _marked_request("request.json", world, run_id=SHARED_RUN, tag="probe")
    if op_id == "artifacts_create":
        return {"artifact_id": SHARED_ARTIFACT, "revision": 2, "kind": "note", "content": "probe", "writer": "probe",
                "scope": f"{world.slug}/project-y/task-42", "tenant": world.slug}
    if op_id == "assemblies_usage":
        return {"input_tokens": 1000}
    from policies.models import PolicyRevision

    draft = PolicyRevision.objects.get(policy__tenant=world.tenant, policy__policy_id=SHARED_POLICY,
                                       revision=world.objects[0]["revision"])
    if op_id == "policies_validate":
        return draft.body
    if op_id in ("policies_revisions_create", "policies_revisions_update"):
        return {"body": {**draft.body, "policy": {**draft.body["policy"], "revision": draft.revision + 1}}
                if op_id.endswith("create") else draft.body, "tenant": world.slug}
    if op_id == "runs_close":
        return {"tenant": world.slug}
    if op_id == "recorded_steps_submit":  # the recorder's dropped total for the shared run, in this tenant
        return {"steps": [], "dropped": [{"tenant": world.slug, "run_id": SHARED_RUN, "count": 1}]}
    if op_id == "policies_revisions_publish":
        return {"note": "probe"}
    return None


def _labelled(node: Any, found: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every JSON object that names its tenant."""
    if isinstance(node, dict):
        if isinstance(node.get("tenant"), str):
            found.append(node)
        for value in node.values():
            _labelled(value, found)
    elif isinstance(node, list):
        for value in node:
            _labelled(value, found)
    return found


def test_every_api_operation_answers_for_the_tenant_asked_and_labels_what_it_lists(shared, api, submit):
    from django.core.cache import caches

    client = api(shared.user)
    schema = json.loads(client.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").content)
    problems: list[str] = []
    probes = 0
    for op in api_operations(schema):
        kind = API[op.operation_id]
        takes_tenant = any(p.name == "tenant" and p.location == "query" for p in op.parameters)
        for slug in SLUGS:
            world, victim = shared.worlds[slug], shared.other(slug)
            url = op.path.format(**_api_values(world))
            query = {"tenant": slug} if takes_tenant else {}
            if op.operation_id == "policies_diff":
                query |= {"from": 3, "to": 4}
            body = _api_body(op.operation_id, world)
            caches["throttle"].clear()
            with probe_scope(op.method, victim):
                if op.method == "GET":
                    response = client.get(url, query)
                elif op.operation_id == "assemblies_submit":
                    response = submit(client, body, key=f"probe-{slug}")
                else:
                    target = url + (f"?tenant={slug}" if takes_tenant else "")
                    response = getattr(client, op.method.lower())(target, body, format="json")
                text = response_text(response)
            probes += 1
            label = f"{op.method} {url} {query} as {BOTH}"
            assert response.status_code < 500, f"{label}: {text[:400]}"
            if kind == "own":
                problems += [f"{label}: {p}" for p in leaked(text, victim)]
                # It must act, not only refuse: an operation that ignored `?tenant=` would answer a
                # 400 (which of the two?) or act on the other tenant's namesake, and leak nothing.
                refusal = ACTED_REFUSALS.get(op.operation_id)
                acted = 200 <= response.status_code < 300 or (refusal is not None and refusal in text)
                if not acted:
                    problems.append(f"{label}: answered {response.status_code}, not 2xx: {response.content[:300]!r}")
                continue
            payload = json.loads(response.content) if response.status_code == 200 else {}
            labelled = _labelled(payload, [])
            if response.status_code == 200:
                assert labelled, f"{label}: a list spanning tenants names no tenant on its objects"
            for obj in labelled:
                if obj["tenant"] in shared.worlds:
                    problems += [f"{label}: an object labelled {obj['tenant']} {p}"
                                 for p in leaked(json.dumps(obj), shared.other(obj["tenant"]))]
    assert probes == 2 * len(api_operations(schema))
    assert not problems, "\n".join(problems[:30])


def test_a_shared_policy_name_asked_without_a_tenant_is_refused_naming_tenant(shared, api):
    """A policy id both tenants hold: the API cannot guess which, so it says how to choose."""
    client = api(shared.user)
    response = client.get(f"/api/v1/policies/{SHARED_POLICY}/revisions/")
    assert response.status_code == 400
    assert "?tenant=" in response.json()["errors"][0]
    for slug in SLUGS:
        answered = client.get(f"/api/v1/policies/{SHARED_POLICY}/revisions/", {"tenant": slug}).json()
        assert {revision["tenant"] for revision in answered["results"]} == {slug}
        text = json.dumps(answered)
        assert shared.worlds[slug].marker in text and not leaked(text, shared.other(slug))


def test_the_runs_status_filter_lists_only_the_acting_tenants_runs(shared):
    """The filter that once restarted from every tenant's runs: each status, in each tenant,
    lists that tenant's run-42 (its steps' ids) and never the other's."""
    client = Client()
    client.force_login(shared.user)
    for slug in SLUGS:
        _set_session(client, slug)
        world, other = shared.worlds[slug], shared.other(slug)
        for status, expected in (("ready", True), ("blocked", True), ("failed", False)):
            body = client.get("/runs/", {"status": status}).content.decode()
            assert not leaked(body, other), (slug, status, leaked(body, other)[:1])
            assert (f"/runs/{SHARED_RUN}/" in body) is expected, (slug, status)
            assert (f"run-{world.marker}" in body) is (status == "ready"), (slug, status)


# --------------------------------------------------------------------------- the tables are complete


def test_the_tables_name_every_route_and_operation(db, api):
    """A new page or endpoint fails here until it is placed in DASHBOARD or API (and so probed)."""
    from django.contrib.auth import get_user_model

    routes = {route.name for route in dashboard_routes()}
    assert routes == set(DASHBOARD), f"unplaced routes: {sorted(routes - set(DASHBOARD))}; " \
        f"gone: {sorted(set(DASHBOARD) - routes)}"
    user = get_user_model().objects.create_user("schema-reader")
    schema = json.loads(api(user).get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").content)
    operations = {op.operation_id for op in api_operations(schema)}
    assert operations == set(API), f"unplaced operations: {sorted(operations - set(API))}; " \
        f"gone: {sorted(set(API) - operations)}"
    query_params = set().union(*(view_inputs(route.view).query for route in dashboard_routes()))
    untried = query_params - set(QUERY_VALUES) - {"tenant"}
    assert not untried or untried <= set(_DEFAULTED), f"query parameters without values: {sorted(untried - set(_DEFAULTED))}"


# Query parameters probed with DEFAULT_VALUES (the shared names): their views read them as names or
# free text. A parameter outside this list and QUERY_VALUES fails the test above until placed.
_DEFAULTED = ("partition", "source", "sort", "kind", "source_type", "window", "window_sort", "pick", "next",
              "include", "note", "part", "role", "action", "username", "roles", "body", "text", "time_display",
              "display")


def test_a_compare_of_the_other_tenants_steps_acts_in_their_tenant(shared):
    """Steps picked by assembly id (a run page's timeline columns) may be the other tenant's: the
    page then acts in their tenant, its header and its links naming it, not the session's."""
    client = Client()
    client.force_login(shared.user)
    for session in SLUGS:
        _set_session(client, session)
        for slug, world in shared.worlds.items():
            ready, blocked = world.objects[0]["job_id"], world.objects[1]["job_id"]
            body = response_text(client.get("/compare/", {"pick": [ready, blocked]}))
            assert selected_tenant(body) == [slug], (session, slug)
            assert ready in body and not leaked(body, shared.other(slug)), (session, slug)
            for link in links_of(body):
                if link.startswith(("/runs/", "/policies/")) and _names_an_object(link):
                    assert f"tenant={slug}" in link, (session, slug, link)
