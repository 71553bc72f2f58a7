"""Models the SDK knows by name: provider and context window, so `model="gpt-4o"` is enough.

A dated or suffixed name (`gpt-4o-2024-08-06`, `claude-sonnet-4-5-20250929`) matches its family by
the longest known prefix. Any other model is given as a dict:
`model={"name": "my-model", "provider": "openai", "context_limit": 32000}`.
"""

from __future__ import annotations

from typing import Any

from .errors import SDKError

# name prefix -> (provider, context window in tokens), from the providers' model pages.
KNOWN_MODELS: dict[str, tuple[str, int]] = {
    "gpt-4o": ("openai", 128_000),
    "gpt-4o-mini": ("openai", 128_000),
    "gpt-4.1": ("openai", 1_047_576),
    "gpt-4.1-mini": ("openai", 1_047_576),
    "gpt-4.1-nano": ("openai", 1_047_576),
    "gpt-5": ("openai", 400_000),
    "gpt-5-mini": ("openai", 400_000),
    "gpt-5-nano": ("openai", 400_000),
    "o3": ("openai", 200_000),
    "o4-mini": ("openai", 200_000),
    "gpt-4-turbo": ("openai", 128_000),
    "gpt-3.5-turbo": ("openai", 16_385),
    "claude-opus-4": ("anthropic", 200_000),
    "claude-sonnet-4": ("anthropic", 200_000),
    "claude-haiku-4": ("anthropic", 200_000),
    "claude-3-7-sonnet": ("anthropic", 200_000),
    "claude-3-5-sonnet": ("anthropic", 200_000),
    "claude-3-5-haiku": ("anthropic", 200_000),
}

ADAPTER_BY_PROVIDER = {"openai": "openai_chat", "anthropic": "anthropic_messages"}


def model_spec(model: Any) -> dict[str, Any]:
    """`{provider, name, context_limit}` for a known model name or a dict naming all three."""
    if isinstance(model, str):
        prefix = max((p for p in KNOWN_MODELS if model == p or model.startswith(p + "-")), key=len, default=None)
        if prefix is None:
            raise SDKError(
                f"model: {model!r} is not a model the SDK knows; give "
                f"model={{'name': {model!r}, 'provider': ..., 'context_limit': ...}}"
            )
        provider, limit = KNOWN_MODELS[prefix]
        return {"provider": provider, "name": model, "context_limit": limit}
    if isinstance(model, dict):
        missing = [k for k in ("name", "context_limit") if not model.get(k)]
        if missing:
            raise SDKError(f"model.{missing[0]}: field required")
        provider = model.get("provider") or (model_spec(model["name"])["provider"] if _known(model["name"]) else None)
        if not provider:
            raise SDKError("model.provider: field required for a model the SDK does not know")
        return {"provider": provider, "name": model["name"], "context_limit": model["context_limit"],
                **({"api_version": model["api_version"]} if model.get("api_version") else {})}
    raise SDKError("model: expected a model name or a dict {name, provider, context_limit}")


def _known(name: str) -> bool:
    return any(name == p or name.startswith(p + "-") for p in KNOWN_MODELS)
