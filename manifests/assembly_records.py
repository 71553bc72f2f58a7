"""The manifests app's side of `policies.assemblies`: recorded assemblies as the policies app reads
them (upgrade evidence, revocation conditions, impact previews), registered at start by
`manifests.apps.ManifestsConfig.ready`."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .dashboard_selectors import compare_sections, light_jobs, manifest_sections, request_of
from .models import Manifest
from .selectors import manifest_document, request_as_assembled

__all__ = ["compare_sections", "documents_of", "light_jobs", "manifest_sections", "newest_documents",
           "request_as_assembled", "request_of"]


def documents_of(*, tenant: Any, assembly_ids: Iterable[str], sections: tuple[str, ...]) -> dict[str, dict]:
    found = Manifest.objects.filter(job__tenant=tenant, assembly_id__in=list(assembly_ids))
    return {m.assembly_id: manifest_document(m, sections=sections) for m in found}


def newest_documents(*, policy: Any, count: int, sections: tuple[str, ...]) -> list[dict]:
    newest = Manifest.objects.filter(job__policy_revision__policy=policy).order_by("-created_at", "-pk")[:count]
    return [manifest_document(m, sections=sections) for m in newest]
