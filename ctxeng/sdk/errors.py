"""The SDK's errors: a small tree under `SDKError`, each message naming the argument or the path.

    SDKError                 bad input to the SDK (`messages[3].tool_call_id: ...`, `code(commit=...): ...`)
    ContextBlocked           the assembly was blocked; `.step`, `.manifest`, `.reason`

Errors of the remote path are the client's (`ctxeng.client.ClientError` and its subclasses).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._session import Step


class SDKError(ValueError):
    """Input the SDK cannot turn into a request; the message names the argument or field path."""


class ContextBlocked(Exception):
    """The assembly was blocked: no model input exists for this step. The manifest says why."""

    def __init__(self, step: Step) -> None:
        self.step = step
        self.manifest: dict[str, Any] = step.manifest
        self.reason: str | None = step.blocked_reason
        detail = "; ".join(step.manifest["assembly"].get("blocked_detail") or [])
        from ._builders import STATE_BUILDERS

        # A missing state part is named with the builder that provides it, given with step(items=[...]).
        builders = [STATE_BUILDERS[part] for part in step.manifest["assembly"].get("missing") or [] if part in STATE_BUILDERS]
        hint = f"; give them with session.step(..., items=[{', '.join(builders)}])" if builders else ""
        super().__init__(f"assembly {step.assembly_id} is blocked: {self.reason}" + (f" ({detail}{hint})" if detail or hint else ""))
