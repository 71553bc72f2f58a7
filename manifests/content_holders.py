"""What manifests keep in the content store (ctxeng.content.store holders), for the purge's mark.

- a job's request skeleton;
- a manifest's document and payload skeletons;
- an artifact's body (the text blob its content_hash names);
- an item decision's record (the JSON blob its digest names; the inspector reads it).
"""

from __future__ import annotations

from collections.abc import Iterable

from ctxeng.content.packing import JSON, TEXT
from ctxeng.content.store import Holder, register_holder, skeleton_references

CHUNK = 2000


def _job_requests(tenant_id: int) -> Iterable[Iterable[tuple[str, str]]]:
    from .models import AssemblyJob

    for skeleton in AssemblyJob.objects.filter(tenant_id=tenant_id).values_list("request_packed", flat=True).iterator(CHUNK):
        yield skeleton_references(skeleton)


def _manifests(tenant_id: int) -> Iterable[Iterable[tuple[str, str]]]:
    from .models import Manifest

    rows = Manifest.objects.filter(job__tenant_id=tenant_id).values_list("document_packed", "payload_packed")
    for document, payload in rows.iterator(CHUNK):
        yield skeleton_references(document)
        yield skeleton_references(payload)


def _artifacts(tenant_id: int) -> Iterable[Iterable[tuple[str, str]]]:
    from .models import Artifact

    for digest in Artifact.objects.filter(tenant_id=tenant_id).values_list("content_hash", flat=True).iterator(CHUNK):
        yield ((TEXT, digest),)


def _item_decisions(tenant_id: int) -> Iterable[Iterable[tuple[str, str]]]:
    from .models import ItemDecision

    for digest in ItemDecision.objects.filter(tenant_id=tenant_id).values_list("digest", flat=True).iterator(CHUNK):
        yield ((JSON, digest),)


def _prune_item_decisions(tenant, epoch: int) -> int:
    """Delete the tenant's item decisions no manifest uses, of an epoch older than the purge's,
    each re-checked under its row lock (a seal since the bump has raised its epoch)."""
    from django.db import transaction
    from django.db.models import Exists, OuterRef

    from .models import ItemDecision, ManifestItem

    used = Exists(ManifestItem.objects.filter(entry=OuterRef("pk")))
    ids = list(ItemDecision.objects.filter(tenant=tenant, epoch__lt=epoch).exclude(used).values_list("pk", flat=True))
    deleted = 0
    for start in range(0, len(ids), 500):
        with transaction.atomic():
            locked = list(ItemDecision.objects.select_for_update()
                          .filter(pk__in=ids[start:start + 500], epoch__lt=epoch).values_list("pk", flat=True))
            deleted += ItemDecision.objects.filter(pk__in=locked).exclude(used).delete()[0]
    return deleted


def register() -> None:
    register_holder(Holder("manifests.request", _job_requests))
    register_holder(Holder("manifests.manifest", _manifests))
    register_holder(Holder("manifests.artifact", _artifacts))
    register_holder(Holder("manifests.item_decision", _item_decisions, prune=_prune_item_decisions))
