"""A generated long run for the run page's tests and benchmark: `steps` steps of one run whose
manifests copy the worked example's sealed ones (its ready and blocked steps, alternately in blocks),
written with bulk inserts instead of `steps` assemblies, so a 200-step run costs a second, not
half a minute. Each copy is a whole manifest: the sealed document, sections and one item row per
decision, pointing at the same stored decisions."""

from __future__ import annotations

import uuid
from datetime import timedelta

from manifests.models import AssemblyJob, Manifest, ManifestItem


def long_run(sources: list[AssemblyJob], *, steps: int, run_id: str = "run-long", block: int = 7) -> list[AssemblyJob]:
    """`steps` new jobs in a new run of the sources' tenant: step N copies sources[(N // block) %
    len(sources)], so the decisions change every `block` steps. Returns the jobs in step order."""
    first = sources[0]
    run = type(first.run).objects.create(tenant=first.tenant, run_id=run_id)
    manifests = {job.pk: Manifest.objects.get(job=job) for job in sources}
    rows = {job.pk: list(ManifestItem.bare.filter(manifest=manifests[job.pk]).values_list("entry_id", "position"))
            for job in sources}
    jobs, copies = [], []
    for number in range(steps):
        source = sources[(number // block) % len(sources)]
        job = AssemblyJob(id=uuid.uuid4(), tenant=first.tenant, run=run, step_id=f"step-{number + 1}",
                          request_packed=source.request_packed, request_digest=source.request_digest,
                          policy_revision=source.policy_revision, status=source.status, attempts=1,
                          submitted_by=source.submitted_by)
        jobs.append(job)
        copies.append((job, source))
    AssemblyJob.objects.bulk_create(jobs)
    start = first.created_at + timedelta(hours=1)
    for number, job in enumerate(jobs):  # distinct, increasing times: the run's order is its steps' order
        at = start + timedelta(seconds=number)
        AssemblyJob.objects.filter(pk=job.pk).update(created_at=at, claimed_at=at, finished_at=at + timedelta(milliseconds=40))
    sealed = []
    for job, source in copies:
        m = manifests[source.pk]
        sealed.append(Manifest(job=job, assembly_id=f"asm-{job.pk}", status=m.status, document_packed=m.document_packed,
                               payload_packed=m.payload_packed, assembly_input_hash=m.assembly_input_hash,
                               serialized_model_input_hash=m.serialized_model_input_hash,
                               estimated_input_tokens=m.estimated_input_tokens, sections=m.sections,
                               blocked_reason=m.blocked_reason, usable_input=m.usable_input,
                               model_provider=m.model_provider, model_name=m.model_name))
    Manifest.objects.bulk_create(sealed)
    by_job = {m.job_id: m for m in Manifest.objects.filter(job__run=run)}
    ManifestItem.objects.bulk_create([
        ManifestItem(manifest=by_job[job.pk], entry_id=entry_id, position=position)
        for job, source in copies for entry_id, position in rows[source.pk]], batch_size=2000)
    return list(AssemblyJob.objects.filter(run=run).order_by("created_at"))


CORRECTION = "Correction: leave hello-agents out, and cite continue at its newest commit instead."


def corrected_step(example, *, words: str = CORRECTION, key: str = "corrected") -> AssemblyJob:
    """A step of run-42 whose request carries the user's correction: a user turn (`user-correction`,
    a goal the task partition admits) saying `words`."""
    from ctxeng.engine.hashing import sha256_text
    from manifests.examples import example_json

    from .conftest import run_job

    request = example_json("request.json")
    request["step_id"] = f"step-{key}"
    goal = next(c for c in request["candidates"] if c["item_id"] == "task-goal")
    request["candidates"].append({**goal, "item_id": "user-correction", "source_ref": {"object_id": "user-correction"},
                                  "content": words, "content_hash": sha256_text(words),
                                  "turn": {"index": 1, "speaker": "user"}})
    return run_job(example["owner"], request, key)
