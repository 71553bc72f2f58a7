"""What every wire format shares: frozen models that forbid unknown keys, and strict numbers.

Every model of `request_models`, `policy_models` and `manifest_models` derives from `Frozen` (or
`Open`, for free-form references), so a typo is an error naming the field, never an ignored key.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import (
    BaseModel,
    ConfigDict,
    Strict,
)

# Every integer and number a request or a policy gives: strict, so `true` is not 1 (pydantic's lax
# mode reads a boolean as an integer and a number), nor "3" 3 or 2.0 2. An integer is still a
# Number. A test walks every request and policy model and finds no lax integer or number.
Int = Annotated[int, Strict()]
Number = Annotated[float, Strict()]


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


class Open(BaseModel):
    """A frozen model that keeps unknown keys: used for free-form references (source_ref)."""

    model_config = ConfigDict(frozen=True, extra="allow", allow_inf_nan=False)
