"""Issue 40, finding 8: a page about an object acts in that object's tenant, and its links to
pages found by name (a run id, a policy id) open them in that tenant.

`both` reads tenant-x and tenant-o; each tenant has a policy `source-research` and a run `run-42`
of its own (tenant-o's published with a note that tells them apart). The
session acts in tenant-x; `both` opens tenant-o's assembly and run."""

from __future__ import annotations

import html
import json
import re

import pytest

from ctxeng.accounts.models import Tenant
from ctxeng.accounts.services import tenant_member_add
from manifests.examples import example_json, example_text
from policies.services import policy_import
from tests.dashboard.conftest import PASSWORD, build_example, run_job


@pytest.fixture
def two_tenants(db):
    built = build_example()
    tenant_member_add(username="both", tenant_slug="tenant-x", roles=["reviewer"], password=PASSWORD)
    tenant_member_add(username="both", tenant_slug="tenant-o", roles=["reviewer"])
    outsider = built["outsider"]
    policy_import(tenant=Tenant.objects.get(slug="tenant-o"), text=example_text("policy.yaml"), user=outsider,
                  publish=True, note="tenant-o's own")
    request = json.loads(json.dumps(example_json("request.json")).replace("tenant-x", "tenant-o"))
    request["policy"].pop("digest", None)
    other = run_job(outsider, request, "tenant-o-run")
    assert other.tenant.slug == "tenant-o" and other.run.run_id == built["ready"].run.run_id
    return {**built, "other": other}


@pytest.fixture
def both_client(client, two_tenants):
    from django.contrib.auth import get_user_model

    client.force_login(get_user_model().objects.get(username="both"))
    client.post("/tenant/", {"tenant": "tenant-x"})
    return client


def header_tenant(body: str) -> str:
    return re.search(r'<option value="([^"]+)" selected>', body).group(1)


def hrefs(body: str, prefix: str) -> set[str]:
    return {html.unescape(h) for h in re.findall(r'href="([^"]+)"', body) if h.startswith(prefix)}


def test_another_tenants_assembly_shows_its_tenant_and_links_its_run_and_policy(both_client, two_tenants):
    other = two_tenants["other"]
    body = both_client.get(f"/assemblies/{other.id}/").content.decode()
    assert header_tenant(body) == "tenant-o"
    assert hrefs(body, "/runs/run-42/") == {"/runs/run-42/?tenant=tenant-o"}
    assert {h.split("#")[0] for h in hrefs(body, "/policies/source-research/")} == {"/policies/source-research/?tenant=tenant-o"}
    policy = both_client.get("/policies/source-research/?tenant=tenant-o").content.decode()
    assert "tenant-o's own" in html.unescape(policy)
    assert "tenant-o's own" not in html.unescape(both_client.get("/policies/source-research/").content.decode())
    assert header_tenant(policy) == "tenant-o"


def test_the_run_named_in_the_url_opens_in_its_tenant_and_links_its_policy(both_client, two_tenants):
    other, ready = two_tenants["other"], two_tenants["ready"]
    run = both_client.get("/runs/run-42/?tenant=tenant-o").content.decode()
    assert header_tenant(run) == "tenant-o"
    assert f"/assemblies/{other.id}/" in run and f"/assemblies/{ready.id}/" not in run
    assert {h.split("#")[0] for h in hrefs(run, "/policies/source-research/")} == {"/policies/source-research/?tenant=tenant-o"}
    mine = both_client.get("/runs/run-42/").content.decode()  # the session's tenant: tenant-x's run
    assert header_tenant(mine) == "tenant-x" and f"/assemblies/{ready.id}/" in mine


def test_a_tenant_the_user_is_not_in_is_a_404(both_client, two_tenants):
    Tenant.objects.create(slug="tenant-z")
    assert both_client.get("/runs/run-42/?tenant=tenant-z").status_code == 404
    assert both_client.get("/policies/?tenant=no-such").status_code == 404


def test_the_session_keeps_its_tenant_and_switching_drops_the_pages_tenant(both_client, two_tenants):
    both_client.get(f"/assemblies/{two_tenants['other'].id}/")
    assert header_tenant(both_client.get("/runs/").content.decode()) == "tenant-x"
    switched = both_client.post("/tenant/", {"tenant": "tenant-o", "next": "/runs/run-42/?tenant=tenant-x&page=2"})
    assert switched["Location"] == "/runs/run-42/?page=2"


def test_a_user_of_one_tenant_gets_links_without_a_tenant(client, two_tenants):
    client.force_login(two_tenants["reviewer"])
    body = client.get(f"/assemblies/{two_tenants['ready'].id}/").content.decode()
    assert hrefs(body, "/runs/run-42/") == {"/runs/run-42/"}
