"""Migration manifests 0008 converts stored rows to content by reference, losing nothing.

In a subprocess on a SQLite file of its own: migrate to manifests 0007, write old-style rows with
the historical models (a job whose `request` is the worked example, its manifest's `document` and
`provider_input` as the engine seals them, item rows with the old columns — those sealed after
0004 with their `record`, those before without — the blocked example beside it, and an artifact
with its `content`), migrate to the latest, then read everything back through the current app's
selectors and print a JSON verdict: what each check found, and the first difference where one
failed. A content purge right after must find every converted blob still referred to.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

WRITE_OLD_ROWS = r'''
import json, sys
import django
django.setup()
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

from ctxeng.engine import assemble, parse_policy, parse_request
from ctxeng.engine.hashing import sha256_json, sha256_text
from ctxeng.engine.policy import policy_digest
from manifests.examples import example_json, example_text

apps = MigrationExecutor(connection).loader.project_state(("manifests", "0007_tenancy_moved_to_accounts")).apps
Tenant = apps.get_model("accounts", "Tenant")
Policy = apps.get_model("policies", "Policy")
PolicyRevision = apps.get_model("policies", "PolicyRevision")
Run = apps.get_model("manifests", "Run")
AssemblyJob = apps.get_model("manifests", "AssemblyJob")
Manifest = apps.get_model("manifests", "Manifest")
ManifestItem = apps.get_model("manifests", "ManifestItem")
Artifact = apps.get_model("manifests", "Artifact")

policy = parse_policy(example_text("policy.yaml"))
tenant = Tenant.objects.create(slug="tenant-x", name="tenant-x")
revision = PolicyRevision.objects.create(
    policy=Policy.objects.create(tenant=tenant, policy_id=policy.policy.id), revision=policy.policy.revision,
    body=policy.model_dump(mode="json"), digest=policy_digest(policy), status="published", published_at=timezone.now(),
)

expected = {"jobs": [], "artifact": None}
for index, name in enumerate(("request.json", "request-blocked.json")):
    request = example_json(name)
    result = assemble(parse_request(request), policy)
    document, payload = result.manifest_dict(), result.serialized_input
    run, _ = Run.objects.get_or_create(tenant=tenant, run_id=request["run_id"])
    job = AssemblyJob.objects.create(
        tenant=tenant, run=run, step_id=request["step_id"], request=request, request_digest=sha256_json(request),
        policy_revision=revision, status=result.status,
    )
    assembly = document["assembly"]
    manifest = Manifest.objects.create(
        job=job, assembly_id=assembly["id"], status=assembly["status"], document=document, provider_input=payload,
        assembly_input_hash=assembly.get("assembly_input_hash") or "",
        serialized_model_input_hash=assembly.get("serialized_model_input_hash") or "",
    )
    # As the service wrote them before 0008; the first job's rows were sealed after 0004 (with
    # their record), the blocked job's before (no record: the migration finds it in the document).
    with_record = index == 0
    rows = [ManifestItem(
        manifest=manifest, item_id=item["item_id"], decision="included", reason=item["admission_reason"],
        partition=item["partition"], tokens=item["tokens"], trust=item["trust"], role=item["intended_role"],
        kind=item["kind"], source_type=item["source_type"], source_ref=item["source_ref"],
        record=item if with_record else None,
    ) for item in document["included"]]
    rows += [ManifestItem(
        manifest=manifest, item_id=item["item_id"], decision="excluded", reason=item["reason"],
        hard_gate=item.get("hard_gate") or "", detail=item["detail"], partition=item.get("partition") or "",
        tokens=item.get("tokens"), trust=item.get("trust") or "", role=item["intended_role"], kind=item["kind"],
        source_type=item["source_type"], source_ref=item["source_ref"], record=item if with_record else None,
    ) for item in document["excluded"]]
    ManifestItem.objects.bulk_create(rows)
    expected["jobs"].append({
        "job": str(job.pk), "request": request, "document": document, "payload": payload,
        "items": [{"item_id": r["item_id"], "decision": "included", "reason": r["admission_reason"]}
                  for r in document["included"]]
                 + [{"item_id": r["item_id"], "decision": "excluded", "reason": r["reason"]}
                    for r in document["excluded"]],
        "records": document["included"] + document["excluded"],
    })

content = example_json("request.json")["candidates"][-1]["content"] + "\n(archived; naïve café ✓)"
artifact = Artifact.objects.create(
    tenant=tenant, artifact_id="trace-archive", revision="1", kind="trace", content=content,
    content_hash=sha256_text(content), writer="research-agent/v2", scope="tenant-x/project-y/task-42",
)
expected["artifact"] = {"pk": artifact.pk, "content": content}
with open(sys.argv[1], "w", encoding="utf-8") as out:
    json.dump(expected, out, ensure_ascii=False)
print(json.dumps({"jobs": len(expected["jobs"]), "items": sum(len(j["items"]) for j in expected["jobs"])}))
'''

CHECK_NEW_ROWS = r'''
import json, sys
import django
django.setup()

from ctxeng.accounts.models import Tenant
from ctxeng.content.models import Content
from ctxeng.content.store import content_purge
from manifests.models import Artifact, AssemblyJob, Manifest, ManifestItem
from manifests.selectors import artifact_content, item_record_of, job_request, manifest_document, manifest_payload


def first_difference(found, wanted, path="$"):
    if type(found) is not type(wanted):
        return f"{path}: {type(found).__name__} {str(found)[:120]!r} != {type(wanted).__name__} {str(wanted)[:120]!r}"
    if isinstance(wanted, dict):
        if list(found) != list(wanted):
            return f"{path}: keys {list(found)} != {list(wanted)}"
        for key in wanted:
            diff = first_difference(found[key], wanted[key], f"{path}.{key}")
            if diff:
                return diff
        return None
    if isinstance(wanted, list):
        if len(found) != len(wanted):
            return f"{path}: {len(found)} elements != {len(wanted)}"
        for index, (a, b) in enumerate(zip(found, wanted)):
            diff = first_difference(a, b, f"{path}[{index}]")
            if diff:
                return diff
        return None
    return None if found == wanted else f"{path}: {str(found)[:120]!r} != {str(wanted)[:120]!r}"


expected = json.load(open(sys.argv[1], encoding="utf-8"))
verdict = {}
differences = {}


def check(name, found, wanted):
    diff = first_difference(found, wanted)
    verdict[name] = diff is None
    if diff:
        differences[name] = diff


def read_all(tag):
    for index, want in enumerate(expected["jobs"]):
        job = AssemblyJob.objects.get(pk=want["job"])
        manifest = Manifest.objects.get(job=job)
        request = job_request(job)
        check(f"{tag}job{index}.request", request, want["request"])
        verdict[f"{tag}job{index}.request_bytes"] = json.dumps(request) == json.dumps(want["request"])
        check(f"{tag}job{index}.document", manifest_document(manifest), want["document"])
        check(f"{tag}job{index}.payload", manifest_payload(manifest), want["payload"])
        rows = ManifestItem.objects.filter(manifest=manifest).order_by("position")  # document order
        check(f"{tag}job{index}.items", list(rows.values("item_id", "decision", "reason")), want["items"])
        check(f"{tag}job{index}.records", [item_record_of(row) for row in rows.select_related("entry")], want["records"])
    artifact = Artifact.objects.get(pk=expected["artifact"]["pk"])
    check(f"{tag}artifact", artifact_content(artifact), expected["artifact"]["content"])


read_all("")
tenant = Tenant.objects.get(slug="tenant-x")
counts = {"content_rows": Content.objects.count(), "s3_rows": Content.objects.exclude(location="db").count()}
report = content_purge(tenant=tenant)
counts.update(purged=report.deleted, pruned=sum(report.pruned.values()), after_purge=Content.objects.count())
read_all("after_purge.")
print(json.dumps({"verdict": verdict, "differences": differences, "counts": counts}))
'''


def _run(args: list[str], env: dict[str, str], timeout: float = 120) -> str:
    done = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{' '.join(args[:3])} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}"
    return done.stdout


def test_migration_0008_converts_requests_manifests_item_rows_and_artifacts_losing_nothing(tmp_path):
    env = {k: v for k, v in os.environ.items()
           if k not in ("DATABASE_URL", "REDIS_URL", "CTXENG_CONTENT_STORE") and not k.startswith("CTXENG_TEST_")}
    env.update(DJANGO_SETTINGS_MODULE="ctxeng.server.settings", DATABASE_URL=f"sqlite:///{tmp_path / 'db.sqlite3'}",
               CTXENG_CONTENT_STORE="db", PYTHONUNBUFFERED="1")
    manage, expected = [sys.executable, "manage.py"], str(tmp_path / "expected.json")

    _run([*manage, "migrate", "manifests", "0007_tenancy_moved_to_accounts", "--no-input"], env)
    written = json.loads(_run([sys.executable, "-c", WRITE_OLD_ROWS, expected], env).strip().splitlines()[-1])
    assert written["jobs"] == 2 and written["items"] >= 20, written
    migrated = _run([*manage, "migrate", "--no-input"], env)
    assert "Applying manifests.0008_content_by_reference... OK" in migrated, migrated
    result = json.loads(_run([sys.executable, "-c", CHECK_NEW_ROWS, expected], env).strip().splitlines()[-1])

    assert result["differences"] == {}
    assert len(result["verdict"]) == 2 * (2 * 6 + 1) and all(result["verdict"].values()), result["verdict"]
    counts = result["counts"]
    # Every blob went to the database, each once, and every one of them is referred to.
    assert counts["content_rows"] > 0 and counts["s3_rows"] == 0, counts
    assert (counts["purged"], counts["pruned"], counts["after_purge"]) == (0, 0, counts["content_rows"]), counts
