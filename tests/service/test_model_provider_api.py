"""An unknown `model.provider` is a 400 naming the field through the API, nothing stored (issue 40,
finding 9; the engine's rule: tests/engine/test_model_provider.py)."""

from __future__ import annotations


def test_the_api_answers_an_unknown_provider_with_a_400_naming_model_provider(agent_api, published_policy,
                                                                               example_request):
    from manifests.models import AssemblyJob

    body = {**example_request, "model": {**example_request["model"], "provider": "x"}}
    response = agent_api.post("/api/v1/assemblies/", body, format="json")
    assert response.status_code == 400, response.content
    assert any(error.startswith("model.provider") for error in response.json()["errors"]), response.json()
    assert not AssemblyJob.objects.exists()
