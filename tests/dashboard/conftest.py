"""Dashboard fixtures: the worked example in tenant-x, and an owner, a member, a reviewer and an outsider.

- owner: every role in tenant-x (can publish)
- reviewer: the reviewer role only in tenant-x (reads everything, cannot edit or publish)
- outsider: a member of another tenant only; every tenant-x object is 404 for them
"""

from __future__ import annotations

import copy
import os

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from ctxeng.accounts.models import Role, Tenant
from ctxeng.accounts.services import tenant_member_add
from ctxeng.engine.hashing import sha256_text
from manifests.examples import example_json, example_text
from manifests.models import AssemblyJob
from manifests.services import assembly_job_assemble, assembly_job_claim, assembly_job_submit
from policies.services import policy_import, policy_revision_create

PASSWORD = "correct horse battery"
XSS_CONTENT = "<script>alert('content')</script> and <img src=x onerror=alert('img')>"
XSS_REF = "<img src=x onerror=alert('ref')>"


def run_job(user, data, key):
    job, _ = assembly_job_submit(user=user, data=data, idempotency_key=key)
    attempt = assembly_job_claim(job_id=job.id)
    if attempt is not None:
        assembly_job_assemble(job_id=job.id, attempt=attempt)
    return AssemblyJob.objects.get(pk=job.pk)


def floor_record(blocked_assembly_id: str) -> dict:
    """The upgrade record revision 4's relevance floor needs (seed §8: a floor is a mechanism),
    addressing the blocked assembly, whose manifest shows the failure it names."""
    return {"mechanism": "admission.min_relevance", "addresses": [blocked_assembly_id],
            "failure": "a step blocked while low-relevance material filled the window",
            "shows": "blocked: required_partition_missing", "new_failure_modes": "evidence under 0.9 loses ranking",
            "cost": "none at run time", "revocation": "roll back when evidence keeps losing ranking",
            "revoke_when": {"shows": "*: excluded ranking_lost", "at_least": 3, "of_last": 10}}


def draft_body(published_body: dict, addressed_assembly_id: str | None = None) -> dict:
    """Revision 4: a relevance floor of 0.9 drops the web overview (relevance 0.8), with its upgrade
    record when given the assembly it addresses (a draft may lack it until published), and the
    background partition shrinks."""
    body = copy.deepcopy(published_body)
    body["policy"]["revision"] = 4
    body["policy"].pop("digest", None)
    body["admission"]["min_relevance"] = 0.9
    body["budget"]["partitions"]["background"]["maximum"] = 1000
    if addressed_assembly_id is not None:
        body["upgrades"] = [floor_record(addressed_assembly_id)]
    return body


def build_example():
    """The worked example as `make run` loads it, plus a hostile request and a draft revision 4."""
    tenant_member_add(username="owner", tenant_slug="tenant-x", roles=list(Role.values), password=PASSWORD)
    tenant_member_add(username="reviewer", tenant_slug="tenant-x", roles=[Role.REVIEWER], password=PASSWORD)
    tenant_member_add(username="outsider", tenant_slug="tenant-o", roles=list(Role.values), password=PASSWORD)
    users = {u.username: u for u in get_user_model().objects.all()}
    owner = users["owner"]
    tenant = Tenant.objects.get(slug="tenant-x")
    published = policy_import(tenant=tenant, text=example_text("policy.yaml"), user=owner, publish=True, note="worked example")
    ready = run_job(owner, example_json("request.json"), "ready")
    blocked = run_job(owner, example_json("request-blocked.json"), "blocked")
    hostile_request = example_json("request.json")
    hostile_request["step_id"] = "step-20"
    for candidate in hostile_request["candidates"]:
        if candidate["item_id"] == "plan-42-r5":
            candidate["content"] = XSS_CONTENT
            candidate["content_hash"] = sha256_text(XSS_CONTENT)
            candidate["source_ref"] = {**candidate["source_ref"], "note": XSS_REF}
    hostile = run_job(owner, hostile_request, "hostile")
    draft = policy_revision_create(tenant=tenant, body=draft_body(published.body, blocked.manifest.assembly_id), user=owner)
    return {"owner": owner, "reviewer": users["reviewer"], "outsider": users["outsider"], "tenant": tenant,
            "published": published, "draft": draft, "ready": ready, "blocked": blocked, "hostile": hostile}


@pytest.fixture
def example(db):
    return build_example()


def _signed_in_client(user) -> Client:
    """A client of its own per role: a test taking two roles' clients holds two sessions (one
    shared `client` signed in twice would make both the last role, hiding a tenancy bug)."""
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def owner_client(example):
    return _signed_in_client(example["owner"])


@pytest.fixture
def reviewer_client(example):
    return _signed_in_client(example["reviewer"])


@pytest.fixture
def outsider_client(example):
    return _signed_in_client(example["outsider"])


CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def reveal(page, region: str) -> None:
    """Scroll a lazily loaded region (`hx-trigger="intersect once"`) into view and wait for its table.

    The loaded region replaces its placeholder, which has the same id, so a locator action can
    find the placeholder detached half-way; one script scrolls it, then the wait is on the table."""
    page.evaluate("(id) => document.getElementById(id).scrollIntoView()", region.lstrip("#"))
    page.wait_for_selector(f"{region} table")


@pytest.fixture(scope="module")
def browser():
    """Headless Debian Chromium driven by playwright, one per test module (and xdist worker): a
    launch costs ~1 s of CPU, and each test opens its pages in fresh contexts (no shared cookies).
    Module scope, not session: playwright's sync API holds an event loop on this thread, which no
    test outside the browser modules should run beside."""
    assert os.path.exists(CHROMIUM), f"{CHROMIUM} is missing: apt-get install chromium"
    from playwright.sync_api import sync_playwright

    os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
        yield launched
        launched.close()


@pytest.fixture
def signed_in(transactional_db, live_server, browser):
    """(the worked example, `open_page(width, height, *, username="owner")`: a new page logged in
    as that user on the live server); the pages are closed after the test."""
    example = build_example()
    pages = []

    def open_page(width: int = 1440, height: int = 900, *, username: str = "owner"):
        page = browser.new_page(viewport={"width": width, "height": height})
        page.goto(f"{live_server.url}/login/")
        page.fill("#id_username", username)
        page.fill("#id_password", PASSWORD)
        page.click("button[type=submit]")
        page.wait_for_url(f"{live_server.url}/")
        pages.append(page)
        return page

    yield example, open_page
    for page in pages:
        page.close()
