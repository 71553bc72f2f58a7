"""docs/conformance.md is complete and true: every policy key has a row, every named module exists,
and every named test exists (so a row cannot point at nothing)."""

from __future__ import annotations

import re
import typing
from pathlib import Path

import pytest
from pydantic import BaseModel

from ctxeng.engine.models import ContextAssemblyManifest, ContextPolicy

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "conformance.md"
ROW = re.compile(r"^\|\s*`([^`]+)`\s*\|(.*)\|(.*)\|\s*$")
TEST_REF = re.compile(r"`(tests/[\w/]+\.py)::(\w+)`")
MODULE_REF = re.compile(r"`((?:ctxeng|manifests|policies)/[\w/]+\.py)`")


def policy_keys(model: type[BaseModel] = ContextPolicy, prefix: str = "") -> list[str]:
    """Every key of the policy format: nested models by dotted path, maps of models as `*`."""
    keys = []
    for name, field in model.model_fields.items():
        ann, path = field.annotation, f"{prefix}{name}"
        args = typing.get_args(ann)
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            keys += policy_keys(ann, path + ".")
        elif typing.get_origin(ann) is dict and isinstance(args[1], type) and issubclass(args[1], BaseModel):
            keys += policy_keys(args[1], path + ".*.")
        else:
            keys.append(path)
    return keys


def rows() -> dict[str, tuple[str, str]]:
    out: dict[str, tuple[str, str]] = {}
    for line in DOC.read_text(encoding="utf-8").splitlines():
        m = ROW.match(line)
        if m:
            assert m.group(1) not in out, f"{m.group(1)} has two rows"
            out[m.group(1)] = (m.group(2), m.group(3))
    return out


def test_the_key_walk_reaches_nested_and_mapped_clauses():
    keys = policy_keys()
    assert {"expiry.on", "budget.partitions.*.eviction", "source_limits.*.default", "role_limits"} <= set(keys)


@pytest.mark.parametrize("key", policy_keys())
def test_every_policy_key_has_a_row_with_a_module_and_a_test(key):
    table = rows()
    assert key in table, f"docs/conformance.md has no row for policy key {key!r}"
    modules, tests = table[key]
    assert MODULE_REF.search(modules), f"{key}: no module named"
    assert TEST_REF.search(tests), f"{key}: no test named"


@pytest.mark.parametrize("field", list(ContextAssemblyManifest.model_fields))
def test_every_manifest_section_has_a_row(field):
    if field == "manifest_schema_version":
        return
    assert field in rows(), f"docs/conformance.md has no row for manifest field {field!r}"


def test_every_named_module_and_test_exists():
    missing = []
    for key, (modules, tests) in rows().items():
        for module in MODULE_REF.findall(modules):
            if not (REPO / module).is_file():
                missing.append(f"{key}: module {module}")
        for path, name in TEST_REF.findall(tests):
            file = REPO / path
            if not file.is_file() or not re.search(rf"^def {name}\(", file.read_text(encoding="utf-8"), re.M):
                missing.append(f"{key}: test {path}::{name}")
    assert not missing, missing
