"""Evidence-driven upgrades (seed §8) in the service: publishing a revision that adds a mechanism
over the published one needs an `upgrades` record naming it (REST 400 and the editor's error at the
field path), a record's addresses are assemblies of the tenant, the impact preview replays the
addressed assemblies first and says whether each failure is gone, and the revision and diff pages
show the records.

The example fixture publishes the worked example (revision 3) and records three assemblies under it:
`ready`, `blocked` (blocked: its open items are missing, `required_partition_missing`) and
`hostile`; each also records its lossy summary's failed assertions (`summary-lossy`, excluded
`transform_blocked`). Each draft below adds one mechanism by hand — a second stable-prefix source — so the
expected verdicts are read off the drafts, not off the code.
"""

from __future__ import annotations

import copy

import pytest

from policies.models import ImpactPreview, PolicyRevision, PreviewStatus
from policies.services import policy_revision_update

API = "/api/v1/policies/source-research/revisions/"
MECHANISM = "cache.stable_prefix_sources.user_request"


def adds_a_prefix_source(body: dict, *, upgrades: list | None = None, fix_blocked: bool = False) -> dict:
    out = copy.deepcopy(body)
    out["cache"]["stable_prefix_sources"].append("user_request")
    if fix_blocked:  # the blocked assembly lacks its open items: no longer required, it is ready
        out["resident"]["include"].remove("open_items_summary")
    if upgrades is not None:
        out["upgrades"] = [*out.get("upgrades", []), *upgrades]  # revision 4's floor keeps its own record
    return out


def record(*addresses: str, mechanism: str = MECHANISM, shows: str = "summary-lossy: excluded transform_blocked") -> dict:
    return {"mechanism": mechanism, "addresses": list(addresses), "failure": "the step lost its task framing",
            "shows": shows, "new_failure_modes": "a changed task text invalidates the prefix", "cost": "more cache misses",
            "revocation": "roll back when the hit ratio drops under 50%",
            "revoke_when": {"shows": "blocked: required_partition_missing", "at_least": 2, "of_last": 5}}


def assembly_id(job) -> str:
    return job.manifest.assembly_id


@pytest.fixture
def owner_api(api, example):
    return api(example["owner"])


def test_publishing_an_added_mechanism_without_a_record_is_refused_at_its_field_path(owner_api, example):
    draft = example["draft"]
    assert owner_api.put(f"{API}4/", {"body": adds_a_prefix_source(draft.body)}, format="json").status_code == 200
    refused = owner_api.post(f"{API}4/publish/", {"note": "try"}, format="json")
    assert refused.status_code == 400
    (error,) = refused.json()["errors"]
    assert error.startswith("cache.stable_prefix_sources[1]: 'user_request' is new since source-research/3")
    assert repr(MECHANISM) in error
    assert PolicyRevision.objects.get(pk=draft.pk).status == "draft"
    with_record = adds_a_prefix_source(draft.body, upgrades=[record(assembly_id(example["blocked"]))])
    assert owner_api.put(f"{API}4/", {"body": with_record}, format="json").status_code == 200
    published = owner_api.post(f"{API}4/publish/", {"note": "with its record"}, format="json")
    assert published.status_code == 200, published.json()
    assert published.json()["status"] == "published"


def test_a_draft_without_a_new_mechanism_publishes_without_records(owner_api, example):
    # revision 4 of the fixture changes a relevance floor and a maximum: no mechanism is added.
    assert owner_api.post(f"{API}4/publish/", {"note": "floor"}, format="json").status_code == 200


def test_an_upgrade_must_address_assemblies_of_the_tenant(owner_api, example):
    body = adds_a_prefix_source(example["draft"].body, upgrades=[record(assembly_id(example["ready"]), "assembly-0000000000000000")])
    response = owner_api.put(f"{API}4/", {"body": body}, format="json")
    assert response.status_code == 400
    assert response.json()["errors"] == ["upgrades[1].addresses[1]: 'assembly-0000000000000000' is not an assembly of tenant 'tenant-x'"]


def test_the_editor_names_the_missing_record_at_the_clause_line_and_saves_nothing(owner_client, example):
    import yaml

    draft = example["draft"]
    text = yaml.safe_dump(adds_a_prefix_source(draft.body), sort_keys=False)
    response = owner_client.post("/policies/source-research/revisions/4/edit/", {"body": text, "action": "save"})
    assert response.status_code == 422
    page = response.content.decode()
    assert "cache.stable_prefix_sources[1]" in page and MECHANISM in page
    line = next(n for n, ln in enumerate(text.splitlines(), 1) if ln.strip() == "- user_request")
    assert f"line {line}" in page
    assert PolicyRevision.objects.get(pk=draft.pk).digest == draft.digest


def test_the_editor_names_an_address_that_is_no_assembly_of_the_tenant_at_its_line_and_saves_nothing(owner_client, example):
    """The check only the service makes (the addresses against the tenant's manifests, after the
    text parsed): its refusal reaches the editor as the field's error at the address's line."""
    import html

    import yaml

    draft = example["draft"]
    text = yaml.safe_dump(adds_a_prefix_source(draft.body, upgrades=[record("assembly-0000000000000000")]), sort_keys=False)
    response = owner_client.post("/policies/source-research/revisions/4/edit/", {"body": text, "action": "save"})
    assert response.status_code == 422
    page = html.unescape(response.content.decode())
    assert "'assembly-0000000000000000' is not an assembly of tenant 'tenant-x'" in page
    assert "upgrades[1].addresses[0]" in page
    line = next(n for n, ln in enumerate(text.splitlines(), 1) if "assembly-0000000000000000" in ln)
    assert f"line {line}" in page
    assert PolicyRevision.objects.get(pk=draft.pk).digest == draft.digest


def run_preview(owner_client, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        owner_client.post("/policies/source-research/revisions/4/impact/run/")
    preview = ImpactPreview.objects.get()
    assert preview.status == PreviewStatus.DONE, preview.error
    return preview


@pytest.mark.parametrize("fix_blocked, verdict", [(True, True), (False, False)])
def test_the_impact_preview_replays_the_addressed_assemblies_first_and_says_if_the_failure_is_gone(
    owner_client, example, django_capture_on_commit_callbacks, fix_blocked, verdict
):
    blocked, ready = assembly_id(example["blocked"]), assembly_id(example["ready"])
    body = adds_a_prefix_source(example["draft"].body, upgrades=[record(blocked, ready)], fix_blocked=fix_blocked)
    policy_revision_update(revision=example["draft"], body=body, user=example["owner"])
    preview = run_preview(owner_client, django_capture_on_commit_callbacks)
    first, second, *rest = preview.rows
    assert first["job"]["id"] == str(example["blocked"].id) and second["job"]["id"] == str(example["ready"].id)
    assert first["addressed"]["failure_gone"] is verdict
    assert first["addressed"]["recorded_failures"] == ["blocked: required_partition_missing"]
    # The ready one's failure is its lossy summary's failed assertions; no draft here touches them.
    assert second["addressed"]["failure_gone"] is False
    assert "summary-lossy: constraints failed" in second["addressed"]["recorded_failures"]
    assert [r["job"]["id"] for r in rest] == [str(example["hostile"].id)]  # each replayed once
    page = owner_client.get("/policies/source-research/revisions/4/impact/").content.decode()
    assert ("failure gone" if verdict else "still failing") in page
    assert f"upgrades: {1 if verdict else 0} of 2 addressed failures gone" in page


def test_the_revision_page_and_the_diff_show_the_record(owner_client, example):
    blocked = assembly_id(example["blocked"])
    original = copy.deepcopy(example["draft"].body)
    body = adds_a_prefix_source(original, upgrades=[record(blocked)])
    policy_revision_update(revision=example["draft"], body=body, user=example["owner"])
    for url in ("/policies/source-research/revisions/4/impact/", "/policies/source-research/diff/?from=3&to=4"):
        page = owner_client.get(url).content.decode()
        assert 'id="upgrades"' in page and MECHANISM in page and blocked in page
        assert "roll back when the hit ratio drops under 50%" in page
        assert 'id="upgrades-missing"' not in page
    # Without the record, the revision page says publishing it would be refused.
    policy_revision_update(revision=example["draft"], body=adds_a_prefix_source(original), user=example["owner"])
    page = owner_client.get("/policies/source-research/revisions/4/impact/").content.decode()
    assert 'id="upgrades-missing"' in page and "cache.stable_prefix_sources[1]" in page


def test_an_addressed_assembly_whose_content_was_purged_is_reported_not_replayed(owner_client, example,
                                                                                  django_capture_on_commit_callbacks):
    from manifests.services import manifest_purge_content

    blocked = assembly_id(example["blocked"])
    body = adds_a_prefix_source(example["draft"].body, upgrades=[record(blocked)])
    policy_revision_update(revision=example["draft"], body=body, user=example["owner"])
    assert manifest_purge_content(manifest=example["blocked"].manifest)
    preview = run_preview(owner_client, django_capture_on_commit_callbacks)
    first = preview.rows[0]
    assert first["job"] is None and first["addressed"]["assembly_id"] == blocked
    assert first["addressed"]["failure_gone"] is None and "no replayable record" in first["error"]
    page = owner_client.get("/policies/source-research/revisions/4/impact/")
    assert page.status_code == 200 and "not replayed: no verdict" in page.content.decode()


def test_an_assembly_of_another_tenant_is_not_an_address_of_this_tenants_upgrade(example):
    from ctxeng.accounts.models import Tenant
    from ctxeng.engine.errors import InvalidInput
    from policies.services import policy_parse, policy_upgrade_addresses_check

    theirs = assembly_id(example["ready"])  # an assembly of tenant-x
    policy = policy_parse(adds_a_prefix_source(example["draft"].body, upgrades=[record(theirs)]))
    policy_upgrade_addresses_check(tenant=example["ready"].tenant, policy=policy)  # its own tenant: accepted
    other = Tenant.objects.create(slug="tenant-q", name="tenant-q")
    with pytest.raises(InvalidInput) as refused:
        policy_upgrade_addresses_check(tenant=other, policy=policy)
    floor = assembly_id(example["blocked"])  # revision 4's own record of its relevance floor
    assert str(refused.value) == (f"invalid policy: upgrades[0].addresses[0]: {floor!r} is not an assembly of tenant 'tenant-q'; "
                                  f"upgrades[1].addresses[0]: {theirs!r} is not an assembly of tenant 'tenant-q'")


def test_an_addressed_assembly_must_show_the_failure_the_record_names(owner_api, example):
    """Seed §8: the evidence shows *that* failure. The ready assembly records no block, so it is no
    evidence for a record naming one; the blocked assembly is."""
    ready, blocked = assembly_id(example["ready"]), assembly_id(example["blocked"])
    wrong = adds_a_prefix_source(example["draft"].body, upgrades=[record(ready, shows="blocked: required_partition_missing")])
    response = owner_api.put(f"{API}4/", {"body": wrong}, format="json")
    assert response.status_code == 400
    (error,) = response.json()["errors"]
    assert error.startswith(f"upgrades[1].addresses[0]: assembly {ready!r} does not show the failure 'blocked: required_partition_missing'")
    right = adds_a_prefix_source(example["draft"].body, upgrades=[record(blocked, shows="blocked: required_partition_missing")])
    assert owner_api.put(f"{API}4/", {"body": right}, format="json").status_code == 200


def test_the_revision_page_evaluates_each_revocation_condition_from_the_policys_manifests(owner_client, example):
    """The policy's three assemblies: ready, blocked, hostile. 'blocked: required_partition_missing'
    shows in 1 of them: at_least 2 of the newest 5 is not met, at_least 1 is met."""
    blocked, original = assembly_id(example["blocked"]), copy.deepcopy(example["draft"].body)
    for at_least, verdict in ((2, "not met"), (1, "met")):
        entry = {**record(blocked, shows="blocked: required_partition_missing"),
                 "revoke_when": {"shows": "blocked: required_partition_missing", "at_least": at_least, "of_last": 5}}
        policy_revision_update(revision=example["draft"], body=adds_a_prefix_source(original, upgrades=[entry]), user=example["owner"])
        page = owner_client.get("/policies/source-research/revisions/4/impact/").content.decode()
        section = page.split('id="upgrades"')[1].split("</section>")[0]
        article = section.split(MECHANISM)[1].split("</article>")[0]
        assert f">{verdict}</span>" in article and "(1 of 3 read)" in article


def test_the_in_process_impact_preview_also_replays_each_assembly_once_addressed_ones_first(example):
    # policies.dashboard_selectors.impact_preview is the same replay run at once (no job): an
    # assembly an upgrade addresses is replayed as addressed, and not a second time as a recent one.
    from ctxeng.engine import parse_policy
    from policies.dashboard_selectors import impact_preview

    blocked, ready = assembly_id(example["blocked"]), assembly_id(example["ready"])
    body = adds_a_prefix_source(example["draft"].body, upgrades=[record(blocked, ready)])
    preview = impact_preview(example["draft"].policy, parse_policy(body))
    ids = [row["job"]["id"] for row in preview["rows"]]
    assert ids == [str(example["blocked"].id), str(example["ready"].id), str(example["hostile"].id)]
    assert preview["addressed"] == 2 and preview["replayed"] == 3


def test_the_editor_refuses_traces_at_a_new_diagnostic_stage_without_a_record(owner_client, example):
    import yaml

    body = copy.deepcopy(example["draft"].body)
    stages = body["retrieval"].get("diagnostic_stages", [])
    body["retrieval"]["diagnostic_stages"] = [*stages, "drafting"]
    response = owner_client.post("/policies/source-research/revisions/4/edit/",
                                 {"body": yaml.safe_dump(body, sort_keys=False), "action": "save"})
    assert response.status_code == 422
    page = response.content.decode()
    assert f"retrieval.diagnostic_stages[{len(stages)}]" in page and "retrieval.diagnostic_stages.drafting" in page


def test_the_upgrade_panel_lists_every_mechanism_of_the_registry(owner_client, example):
    page = owner_client.get("/policies/source-research/revisions/4/impact/").content.decode()
    panel = page.split('id="upgrade-mechanisms"', 1)[1].split("</details>", 1)[0]
    # Written out by hand: a clause dropped from the registry (or the panel) fails here.
    for clause in ("transforms.allowed", "retrieval.default_sources", "retrieval.diagnostic_sources", "retrieval.diagnostic_stages",
                   "retrieval.governed_candidate_sources", "disclosure.indexes", "cache.stable_prefix_sources",
                   "cache.prompt_cache_key", "admission.ranking", "admission.min_relevance", "admission.allow_incomplete",
                   "resident.include", "resident.when_present", "externalization.targets", "budget.partitions.*.eviction",
                   "source_limits.*.default", "source_limits.*.max_tokens", "trust.default_by_source"):
        assert f"<code>{clause}</code>" in panel, clause
    assert panel.count("<tr>") == 19  # the header and 18 mechanisms
