"""What the policies app reads of recorded assemblies, without importing the manifests app.

The apps depend one way (pyproject.toml's import contracts): `manifests` assembles under policy
revisions, so it imports `policies`, never the reverse. Three features of a policy still read
recorded assemblies — the evidence an upgrade record cites (seed §8: the manifest must show the
failure), the manifests its revocation condition is evaluated over, and the requests an impact
preview replays under a draft. This module names what they need (`AssemblyRecords`); the manifests
app registers its implementation, `manifests.assembly_records`, when Django starts
(`manifests.apps.ManifestsConfig.ready`), and `records()` returns it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

from django.core.exceptions import ImproperlyConfigured


class AssemblyRecords(Protocol):
    def documents_of(self, *, tenant: Any, assembly_ids: Iterable[str], sections: tuple[str, ...]) -> dict[str, dict]:
        """The sealed documents (those sections) of `tenant`'s manifests with these assembly ids."""

    def newest_documents(self, *, policy: Any, count: int, sections: tuple[str, ...]) -> list[dict]:
        """The documents of the `count` newest manifests assembled under any revision of `policy`."""

    def light_jobs(self, tenant_ids: list[int]) -> Any:
        """The tenants' assembly jobs as a queryset, without their heavy columns."""

    def request_of(self, job: Any) -> dict:
        """The request a job was submitted with."""

    def request_as_assembled(self, *, job: Any, request: dict, policy: Any) -> tuple[Any, Any]:
        """The request and artifacts as the worker assembled them, for a replay under `policy`."""

    def manifest_sections(self, manifest_pk: Any, sections: tuple[str, ...]) -> dict:
        """Sections of a sealed manifest."""

    def compare_sections(self, a: dict, b: dict) -> dict:
        """The comparison of two manifests' sections (flips, blocked, partitions)."""


_records: AssemblyRecords | None = None


def register(records: AssemblyRecords) -> None:
    global _records
    _records = records


def records() -> AssemblyRecords:
    if _records is None:
        raise ImproperlyConfigured("no assembly records are registered: the manifests app is not installed")
    return _records
