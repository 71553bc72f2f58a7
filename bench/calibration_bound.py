"""The bound on what usage reports do to a tenant's other runs (issue 51, F3).

`python -m bench.calibration_bound` (a few seconds; not part of `make bench`). Usage reports come
from the agent, not from the provider, so the service cannot tell a made-up one from a real one.
The attack of issue 51 sent 20 reports at 1.99 times their estimate (inside the band that is
calibrated on) and cut the usable input of every later run of the tenant by 42% (159,833 →
92,673 on a 200k Claude model). Here, for each mode, a child interpreter on a fresh SQLite file
imports and publishes the worked example's policy in one tenant (its budget raised from 16,000
tokens to the model's context), seals a job for `claude-sonnet-4-5` with a 200,000-token context (the usable input before any report), stores 20
usage reports at 1.99x the estimate of 20 jobs of other runs, and seals one more job of a new run:
its usable input and the factor its manifest records.

- before: `CTXENG_CALIBRATION_STEP_PER_HOUR=3`, which holds the factor within x4 of the
  reference, beyond the largest factor there is (4): the reports' quantile, as before the bound;
- after: the default, 0.1 an hour.

Writes bench/results/issue51-calibration-bound.md.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from datetime import UTC, datetime

from .infra import ROOT, python, python_env

REPORTS, RATIO = 20, 1.99
MODEL = {"provider": "anthropic", "name": "claude-sonnet-4-5", "context_limit": 200_000}
MODES = [("before: no bound (`CTXENG_CALIBRATION_STEP_PER_HOUR=3`)", "3"),
         ("after: the default bound, 10% an hour", "0.1")]


def _child_run(step: str) -> dict:
    with tempfile.TemporaryDirectory(prefix="ctxeng-bench-calibration-") as tmp:
        env = python_env()
        env.pop("REDIS_URL", None)  # jobs in process
        env.update(DJANGO_SETTINGS_MODULE="ctxeng.server.settings", DATABASE_URL=f"sqlite:///{tmp}/bench.sqlite3",
                   DJANGO_DEBUG="0", DJANGO_SECRET_KEY="bench-only-not-secret-" + "x" * 40,
                   CTXENG_CALIBRATION_STEP_PER_HOUR=step)
        out = subprocess.run([python(), "-m", "bench.calibration_bound", "child"], cwd=ROOT, env=env,
                             capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise RuntimeError((out.stderr.strip().splitlines() or ["child failed"])[-1][:300])
    return json.loads(out.stdout.strip().splitlines()[-1])


def _child() -> None:
    import django

    django.setup()
    from django.core.management import call_command

    from ctxeng.accounts.models import Role, Tenant
    from ctxeng.accounts.services import tenant_member_add
    from manifests.examples import example_json, example_text
    from manifests.models import AssemblyJob
    from manifests.services import assembly_job_submit, usage_report_record
    from policies.services import policy_import

    call_command("migrate", verbosity=0, interactive=False)
    user = tenant_member_add(username="owner", tenant_slug="tenant-x", roles=list(Role.values),
                             password="bench pw bench pw").user
    # The example's policy holds the budget to 16,000 tokens; here to the model's whole context.
    text = example_text("policy.yaml").replace("model_context_limit: 16000", f"model_context_limit: {MODEL['context_limit']}")
    assert f"model_context_limit: {MODEL['context_limit']}" in text
    policy_import(tenant=Tenant.objects.get(slug="tenant-x"), text=text, user=user, publish=True, note="example")

    def seal(key: str) -> AssemblyJob:
        request = example_json("request.json")
        request["run_id"], request["model"] = f"run-{key}", {**request["model"], **MODEL}
        job, _ = assembly_job_submit(user=user, data=request, idempotency_key=key)  # assembled in process
        done = AssemblyJob.objects.get(pk=job.pk)
        assert done.status == "ready", (key, done.status, done.error, done.manifest.sections["assembly"].get("blocked_detail"))
        return done

    def usable(job: AssemblyJob) -> tuple[int, float]:
        sections = job.manifest.sections
        return sections["budget"]["usable_input"], sections["assembly"]["calibration"]["factor"]

    before, factor_before = usable(seal("first"))
    for n in range(REPORTS):
        job = seal(f"reported-{n}")
        estimate = job.manifest.estimated_input_tokens
        usage_report_record(manifest=job.manifest, user=user, input_tokens=round(estimate * RATIO), cached_tokens=0,
                            output_tokens=1)
    after, factor_after = usable(seal("next-run"))
    print(json.dumps({"before": before, "factor_before": factor_before, "after": after, "factor_after": factor_after}))


def main() -> None:
    rows = []
    for label, step in MODES:
        result = _child_run(step)
        change = (result["after"] - result["before"]) / result["before"]
        rows.append(f"| {label} | {result['before']:,} (factor {result['factor_before']}) | "
                    f"{result['after']:,} (factor {result['factor_after']}) | {change:+.0%} |")
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    text = "\n".join([
        f"# Usage reports and the usable input of other runs (issue 51, F3), {when}",
        "",
        f"`python -m bench.calibration_bound`: {REPORTS} usage reports at {RATIO}x their estimate, then a job of a new run "
        f"(`{MODEL['name']}`, {MODEL['context_limit']:,}-token context; the worked example's policy, its budget at that context).",
        "",
        "| mode | usable input before the reports | usable input of the next run | change |",
        "| --- | ---: | ---: | ---: |",
        *rows, ""])
    (ROOT / "bench" / "results" / "issue51-calibration-bound.md").write_text(text, encoding="utf-8")
    print(text)


if __name__ == "__main__":
    if sys.argv[1:] == ["child"]:
        _child()
    else:
        os.chdir(ROOT)
        main()
