"""A client generated from the served OpenAPI schema is typed end to end and works.

`openapi-python-client` (the dev extra) generates a package from `/api/schema/` of a live server;
the test imports it and runs the worked example through it: submit, the long-poll of the job
(`wait`, `include`), the manifest and the provider input, each parsed into the generated models
(no free-form dicts where the schema knows the shape), and compares what it got with what the
server's own endpoints serve.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

PACKAGE = "ctxeng_typed_api"
GENERATOR = Path(sys.executable).parent / "openapi-python-client"


@pytest.fixture
def generated(live_server, tmp_path, monkeypatch):
    """The generated package, imported from tmp_path."""
    with urllib.request.urlopen(f"{live_server.url}/api/schema/?format=json", timeout=60) as response:  # noqa: S310
        schema = json.loads(response.read())
    (tmp_path / "openapi.json").write_text(json.dumps(schema))
    (tmp_path / "config.yaml").write_text(f"package_name_override: {PACKAGE}\nproject_name_override: ctxeng-typed-api\n")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    done = subprocess.run(
        [str(GENERATOR), "generate", "--path", "openapi.json", "--config", "config.yaml",
         "--output-path", PACKAGE, "--meta", "none"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    # Every schema the generator could not type is reported as a warning: there must be none.
    assert "Warning" not in done.stdout + done.stderr, done.stdout + done.stderr
    monkeypatch.syspath_prepend(str(tmp_path))
    yield importlib.import_module(PACKAGE)
    for name in [m for m in sys.modules if m == PACKAGE or m.startswith(f"{PACKAGE}.")]:
        del sys.modules[name]


def test_a_generated_client_submits_waits_and_reads_the_manifest_and_input(
    generated, live_server, inline_jobs, published_policy, agent_user, example_request, expected
):
    from rest_framework.authtoken.models import Token

    client_module = importlib.import_module(f"{PACKAGE}.client")
    api = importlib.import_module(f"{PACKAGE}.api.v1")
    models = importlib.import_module(f"{PACKAGE}.models")
    submit, get, manifest_of, input_of = (
        importlib.import_module(f"{api.__name__}.{name}")
        for name in ("assemblies_submit", "assemblies_get", "assemblies_manifest", "assemblies_input")
    )
    token = Token.objects.get_or_create(user=agent_user)[0].key
    client = client_module.AuthenticatedClient(base_url=live_server.url, token=token, prefix="Token",
                                               raise_on_unexpected_status=True)

    request = models.AssemblyRequest.from_dict(example_request)
    submitted = submit.sync_detailed(client=client, body=request, idempotency_key="typed-client/step-19")
    assert submitted.status_code == 202, submitted.content
    assert isinstance(submitted.parsed, models.AssemblySubmittedOut)
    job_id = submitted.parsed.id

    include = [models.AssembliesGetIncludeItem.MANIFEST, models.AssembliesGetIncludeItem.INPUT]
    job = get.sync(job_id, client=client, wait=30, include=include)
    assert isinstance(job, models.AssemblyJobDetailOut)
    assert job.status == models.AssemblyJobStatus.READY and job.policy.id == "source-research"
    assert isinstance(job.manifest, models.ContextAssemblyManifest)
    assert isinstance(job.input_, models.OpenAIChatInput)  # `input` shadows a builtin: the generator adds `_`

    manifest = manifest_of.sync(job_id, client=client)
    assert isinstance(manifest, models.ContextAssemblyManifest)
    reasons = {record.item_id: str(record.reason) for record in manifest.excluded}
    assert all(reasons.get(item) == reason for item, reason in expected["excluded"].items())
    provider_input = input_of.sync(job_id, client=client)
    assert isinstance(provider_input, models.OpenAIChatInput)
    assert provider_input.messages[0].role == "system"

    # The typed models carry everything the server sent: back to JSON, they are what it serves.
    served = client.get_httpx_client()
    assert provider_input.to_dict() == served.get(f"/api/v1/assemblies/{job_id}/input/").json()
    assert job.input_.to_dict() == provider_input.to_dict()
    assert manifest.to_dict() == served.get(f"/api/v1/assemblies/{job_id}/manifest/").json()
