"""The checked-in JSON Schemas in docs/schemas/ are exactly what the models generate now.

Regenerate with `python -m ctxeng schema request > docs/schemas/request.schema.json` (and policy,
manifest).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ctxeng.cli import SCHEMAS, schema_for

SCHEMA_DIR = Path(__file__).resolve().parents[2] / "docs" / "schemas"


@pytest.mark.parametrize("name", SCHEMAS)
def test_the_checked_in_schema_equals_what_the_models_generate(name):
    path = SCHEMA_DIR / f"{name}.schema.json"
    assert path.is_file(), f"missing {path}; run: python -m ctxeng schema {name} > {path}"
    assert json.loads(path.read_text(encoding="utf-8")) == schema_for(name), (
        f"{path.name} is stale; run: python -m ctxeng schema {name} > docs/schemas/{name}.schema.json"
    )


def test_the_request_schema_documents_the_candidate_fields_the_worked_example_uses():
    from tests.golden import load_example

    schema = schema_for("request")
    fields = set(schema["$defs"]["ContextItem"]["properties"])
    for cand in load_example("request.json")["candidates"]:
        assert set(cand) <= fields
