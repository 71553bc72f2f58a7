"""Hostile text in every string field, and every page rendered without one unescaped (issue 31).

The worked example's request and policy are rewritten field by field: every free string the
request model or the policy model declares (walked from their JSON schemas: a string with no enum,
pattern or format; and every key of a free-form map such as `source_ref`) gets its own hostile
payload, each with a unique marker: a `<script>`, an attribute breaker, a `javascript:` URL, an
event handler on an SVG, a tag that opens raw text. The same original text gets the same payload everywhere,
so references stay intact (an item's id in a tool call, a kind the policy names). The revision is
published with a hostile note, the request submitted, a hostile draft and an impact preview made.

Then every dashboard route of the URL conf is rendered with the world's objects, with and without
`HX-Request`, and every local link and htmx region a page names is followed (lazy regions
included). A page fails when a payload arrives unescaped: a marker in a tag or attribute name, in
an event-handler attribute, in a URL attribute that starts `javascript:`, inside a `<script>` or
`<style>`, or the payload's raw text anywhere in the response.
"""

from __future__ import annotations

import copy
import re
from collections import deque
from html.parser import HTMLParser
from typing import Any
from urllib.parse import urljoin, urlsplit

import pytest
from django.test import Client

from tests.surfaces import dashboard_routes, resolve, view_inputs

pytestmark = pytest.mark.django_db

# No "/" in any: a scope's segments are split on it.
PAYLOADS = (
    '<script>alert("{m}")',
    '"><img src=x onerror=alert("{m}")>',
    "' onmouseover='alert(1)' data-{m}='",
    'javascript:alert("{m}")',
    "<svg onload=alert('{m}')>",
    '<textarea><b class="{m}">',
)
# Values that must name something outside the request: the tenant, the policy, the adapter.
KEEP = {"principal.tenant", "policy.id", "adapter", "model.provider", "serialization.adapter"}
URL_ATTRIBUTES = {"href", "src", "action", "formaction", "hx-get", "hx-post", "hx-put", "hx-delete", "data", "poster"}
MAX_PAGES = 400
TENANT = "tenant-x"


def _engine_words() -> frozenset[str]:
    """The values the engine gives a meaning to (its vocabulary's enums: `tool_result` as a kind,
    a trust level as a role_limits key): left as they are, or the request would mean something else."""
    import enum

    from ctxeng.engine import vocabulary

    enums = {str(member.value) for value in vars(vocabulary).values()
             if isinstance(value, type) and issubclass(value, enum.Enum) for member in value}
    # Kinds the engine names in its code rather than in an enum.
    return frozenset(enums | {"tool_call", "tool_result", "summary", "goal", "current_stage", "article_draft",
                              "review_decision", "instruction"})


ENGINE_WORDS = _engine_words()


class Hostile:
    """Each original string's payload; the markers they carry."""

    def __init__(self) -> None:
        self.payloads: dict[str, str] = {}

    def of(self, original: str) -> str:
        if original in ENGINE_WORDS:
            return original
        if original not in self.payloads:
            n = len(self.payloads)
            self.payloads[original] = PAYLOADS[n % len(PAYLOADS)].format(m=f"hq{n}z")
        return self.payloads[original]

    @property
    def markers(self) -> list[str]:
        return [f"hq{n}z" for n in range(len(self.payloads))]


def _free_string(node: dict[str, Any]) -> bool:
    return node.get("type") == "string" and not ({"enum", "const", "pattern", "format"} & set(node))


def poison(schema: dict[str, Any], node: Any, value: Any, hostile: Hostile, path: str = "") -> Any:
    """`value` with every free string (and free map key) swapped for its payload."""
    node = resolve(schema, node) if isinstance(node, dict) else {}
    if path.lstrip(".") in KEEP:
        return value
    for choice in ("anyOf", "oneOf"):
        if choice in node:
            options = [resolve(schema, o) for o in node[choice]]
            fitting = [o for o in options if _fits(o, value)]
            return poison(schema, fitting[0] if fitting else {}, value, hostile, path)
    if isinstance(value, str):
        if not _free_string(node):
            return value
        if value.startswith(f"{TENANT}/"):  # a scope: the tenant stays, each segment below it is hostile
            return "/".join([TENANT, *(hostile.of(segment) for segment in value.split("/")[1:])])
        return hostile.of(value)
    if isinstance(value, list):
        return [poison(schema, node.get("items") or {}, v, hostile, f"{path}[]") for v in value]
    if isinstance(value, dict):
        properties = node.get("properties") or {}
        extra = node.get("additionalProperties")
        out = {}
        for key, sub in value.items():
            if key in properties:
                out[key] = poison(schema, properties[key], sub, hostile, f"{path}.{key}")
            else:  # a free-form map: its keys are the agent's text too, unless the schema names them
                names = resolve(schema, node.get("propertyNames") or {})
                out[hostile.of(key) if _free_string({"type": "string", **names}) else key] = poison(schema, extra if isinstance(extra, dict) else {}, sub, hostile,
                                              f"{path}.*")
        return out
    return value


def _fits(option: dict[str, Any], value: Any) -> bool:
    kind = option.get("type")
    return {"string": isinstance(value, str), "null": value is None, "array": isinstance(value, list),
            "object": isinstance(value, dict), "integer": isinstance(value, int) and not isinstance(value, bool),
            "number": isinstance(value, (int, float)), "boolean": isinstance(value, bool)}.get(kind, "$ref" in option
                                                                                              or not kind)


def build_hostile_world(capture) -> dict[str, Any]:
    from ctxeng.accounts.models import Role, Tenant
    from ctxeng.accounts.services import tenant_member_add
    from ctxeng.engine import parse_policy
    from ctxeng.engine.hashing import sha256_text
    from ctxeng.engine.models import AssemblyRequest, ContextPolicy
    from manifests.examples import example_json, example_text
    from manifests.services import usage_report_record
    from policies.services import impact_preview_start, policy_revision_create, policy_revision_publish
    from tests.dashboard.conftest import run_job

    tenant_member_add(username="owner", tenant_slug="tenant-x", roles=list(Role.values), password="pw")
    from django.contrib.auth import get_user_model

    owner = get_user_model().objects.get(username="owner")
    tenant = Tenant.objects.get(slug="tenant-x")
    hostile = Hostile()

    policy_body = parse_policy(example_text("policy.yaml")).model_dump(mode="json")
    policy_schema = ContextPolicy.model_json_schema()
    bad_policy = poison(policy_schema, policy_schema, policy_body, hostile)
    published = policy_revision_create(tenant=tenant, body=bad_policy, user=owner)
    note = hostile.of("publish note")
    policy_revision_publish(revision=published, user=owner, note=note)

    request_schema = AssemblyRequest.model_json_schema()
    jobs = []
    for name, key in (("request.json", "ready"), ("request-blocked.json", "blocked")):
        bad = poison(request_schema, request_schema, example_json(name), hostile)
        for candidate in bad["candidates"]:
            if candidate.get("content") is not None:
                candidate["content_hash"] = sha256_text(candidate["content"])
        jobs.append(run_job(owner, bad, key))
    if jobs[0].status == "ready":
        usage_report_record(manifest=jobs[0].manifest, user=owner, input_tokens=100, cached_tokens=0, output_tokens=1)
    draft_body = copy.deepcopy(bad_policy)
    draft_body["policy"]["revision"] = published.revision + 1
    draft_body["policy"].pop("digest", None)
    draft = policy_revision_create(tenant=tenant, body=draft_body, user=owner)
    with capture(execute=True):
        preview = impact_preview_start(revision=draft, user=owner)
    return {"owner": owner, "hostile": hostile, "jobs": jobs, "policy_id": published.policy.policy_id,
            "published": published, "draft": draft, "preview": preview, "note": note}


@pytest.fixture
def hostile_world(inline_jobs, django_capture_on_commit_callbacks):
    return build_hostile_world(django_capture_on_commit_callbacks)


class UnescapedFinder(HTMLParser):
    """Where a marker sits in markup rather than in text or in a harmless attribute value."""

    def __init__(self, markers: list[str]) -> None:
        super().__init__(convert_charrefs=True)
        self.markers = markers
        self.raw_element: str | None = None
        self.found: list[str] = []

    def _marked(self, text: str) -> list[str]:
        return [m for m in self.markers if m in text]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for marker in self._marked(tag):
            self.found.append(f"{marker}: a tag <{tag}>")
        for name, value in attrs:
            for marker in self._marked(name):
                self.found.append(f"{marker}: an attribute name {name!r} on <{tag}>")
            value = value or ""
            for marker in self._marked(value):
                if name.startswith("on"):
                    self.found.append(f"{marker}: inside the event handler {name}= of <{tag}>")
                if name in URL_ATTRIBUTES and value.strip().lower().startswith(("javascript:", "vbscript:", "data:")):
                    self.found.append(f"{marker}: a {value.split(':')[0]}: URL in {name}= of <{tag}>")
        if tag in ("script", "style"):
            self.raw_element = tag

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)
        self.raw_element = None

    def handle_endtag(self, tag: str) -> None:
        if tag == self.raw_element:
            self.raw_element = None

    def handle_data(self, data: str) -> None:
        if self.raw_element:
            for marker in self._marked(data):
                self.found.append(f"{marker}: inside <{self.raw_element}>")


def unescaped(html: str, hostile: Hostile) -> list[str]:
    finder = UnescapedFinder(hostile.markers)
    finder.feed(html)
    finder.close()
    raw = [f"raw payload {p!r}" for p in hostile.payloads.values() if p in html]
    return finder.found + raw


LINK = re.compile(r'(?:href|hx-get|src)="(/[^"]*)"')
NOT_FOLLOWED = ("/static/", "/logout/", "/admin/", "/api/", "/login/")


def start_urls(world: dict[str, Any]) -> list[str]:
    objects = {"job_id": [str(job.id) for job in world["jobs"]], "run_id": [world["jobs"][0].run.run_id],
               "policy_id": [world["policy_id"]], "revision": [world["published"].revision, world["draft"].revision],
               "preview_id": [str(world["preview"].id)], "section": ["tool_pairs", "transforms"],
               "user_id": [world["owner"].pk], "item_id": [],
               "fmt": ["csv", "json"], "document": ["manifest", "payload", "request"]}
    urls = []
    for route in dashboard_routes():
        if route.name in ("logout", "set-password", "login"):
            continue
        missing = [p for p in route.parameters if p not in objects]
        assert not missing, f"route {route.pattern}: no hostile object for {missing}; add one to start_urls"
        combos: list[dict[str, Any]] = [{}]
        for name in route.parameters:
            combos = [{**c, name: v} for c in combos for v in objects[name]]
        urls += [route.url(c) for c in combos]
    return urls


def test_no_page_shows_a_hostile_field_unescaped(hostile_world):
    client = Client()
    client.force_login(hostile_world["owner"])
    hostile = hostile_world["hostile"]
    assert len(hostile.payloads) >= 40, "the walk reached the request's and the policy's string fields"
    queue = deque((url, False) for url in start_urls(hostile_world))
    htmx_views = {route.pattern for route in dashboard_routes() if view_inputs(route.view).htmx}
    seen: set[tuple[str, bool]] = set()
    problems, shown = [], set()
    while queue and len(seen) < MAX_PAGES:
        url, htmx = queue.popleft()
        if (url, htmx) in seen:
            continue
        seen.add((url, htmx))
        response = client.get(url, HTTP_HX_REQUEST="true") if htmx else client.get(url)
        if response.status_code >= 500:
            problems.append(f"{url}: {response.status_code}")
            continue
        if not response.get("Content-Type", "").startswith("text/html"):
            # a download (CSV, JSON) or a plain-text message: a browser never renders it as markup
            # (nosniff is sent everywhere)
            assert response.get("X-Content-Type-Options") == "nosniff", url
            continue
        html = response.content.decode("utf-8", "replace")
        problems += [f"{url}{' (htmx)' if htmx else ''}: {p}" for p in unescaped(html, hostile)]
        shown |= {m for m in hostile.markers if m in html}
        for link in LINK.findall(html):
            target = urljoin(url, link.replace("&amp;", "&")).split("#")[0]
            if not target.startswith(NOT_FOLLOWED):
                queue.append((target, False))
                if any(urlsplit(target).path.startswith("/" + p.split("<")[0]) for p in htmx_views):
                    queue.append((target, True))
    assert not problems, "\n".join(problems[:50])
    # The oracle covers the fields: most payloads reached some page (escaped).
    assert len(shown) >= len(hostile.payloads) // 2, (len(shown), len(hostile.payloads))
    print(f"hostile fields: {len(hostile.payloads)} payloads, {len(seen)} pages, {len(shown)} shown escaped")


def test_the_finder_notices_each_unescaped_context():
    """Planted: each way a payload escapes its text is found; its escaped form is not."""
    hostile = Hostile()
    payloads = [hostile.of(str(n)) for n in range(6)]
    from django.utils.html import escape

    assert unescaped("".join(f"<p title='{escape(p)}'>{escape(p)}</p>" for p in payloads), hostile) == []
    assert unescaped(f'<a href="{escape(payloads[3])}">x</a>', hostile) != []  # a javascript: URL
    for payload in (payloads[0], payloads[1], payloads[4], payloads[5]):
        assert unescaped(f"<td>{payload}</td>", hostile), payload
    assert unescaped(f"<td title='{payloads[2]}'>x</td>", hostile)
