"""`model.provider` is one the adapters, estimators and SDK know (issue 40, finding 9): any other
string was accepted, so a typo silently took the "no public tokenizer" path."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from ctxeng.engine.models import ModelSpec

KNOWN = ["openai", "anthropic", "azure", "azure_openai", "azure-openai"]


@pytest.mark.parametrize("provider", KNOWN)
def test_a_known_provider_is_accepted(provider):
    assert ModelSpec(provider=provider, name="m", context_limit=1000).provider == provider


@pytest.mark.parametrize("provider", ["x", "", "OpenAI", "open-ai", "gemini", " anthropic"])
def test_any_other_provider_is_refused_naming_the_field(provider):
    with pytest.raises(ValidationError) as caught:
        ModelSpec(provider=provider, name="m", context_limit=1000)
    errors = caught.value.errors()
    assert [error["loc"] for error in errors] == [("provider",)]
    assert "'openai'" in errors[0]["msg"] and "'anthropic'" in errors[0]["msg"]

