"""Placeholder until the stages land."""
from __future__ import annotations
from dataclasses import dataclass
from typing import Any
from .models import ContextAssemblyManifest


@dataclass(frozen=True)
class AssemblyResult:
    manifest: ContextAssemblyManifest
    serialized_input: dict[str, Any] | None

    @property
    def status(self) -> str:
        return self.manifest.assembly.status.value

    def manifest_dict(self) -> dict[str, Any]:
        return self.manifest.model_dump(mode="json")


def assemble(request, policy, *, tokenizer=None, created_at=None) -> AssemblyResult:
    raise NotImplementedError
