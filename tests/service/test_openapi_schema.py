"""The checked-in OpenAPI schema (docs/openapi.yaml) is the one the code generates.

Regenerate after an API change: `.venv/bin/python manage.py spectacular --file docs/openapi.yaml`.
"""

from __future__ import annotations

from pathlib import Path

from django.core.management import call_command

REPO = Path(__file__).resolve().parents[2]


def test_docs_openapi_yaml_matches_the_generated_schema(tmp_path):
    generated = tmp_path / "openapi.yaml"
    call_command("spectacular", "--file", str(generated), "--validate", "--fail-on-warn")
    checked_in = (REPO / "docs" / "openapi.yaml").read_text()
    assert generated.read_text() == checked_in, (
        "docs/openapi.yaml is stale: run `manage.py spectacular --file docs/openapi.yaml`"
    )


def test_every_operation_documents_the_error_shape(client):
    schema = client.get("/api/schema/?format=json").json()
    assert schema["openapi"].startswith("3.1")
    for path, item in schema["paths"].items():
        for method, operation in item.items():
            for code in ("400", "401", "404", "429"):
                response = operation["responses"][code]
                assert response["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/Errors"}, (
                    path, method, code)
