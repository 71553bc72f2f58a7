"""One step's token figures, from one place: every panel that states a step's used, free or
usable tokens (the run page's step table, the inspector's token story and budget bar, the budget
chart beside the pipeline stages) reads them here, so one step never shows two totals.

Pure functions of the sealed budget record, no queries. The rule (DESIGN, the budget): `items` is
the admitted items' tokens (`budget.estimated_used`), `framing` the text ctxeng adds that is no
item's (`budget.framing_tokens`), `used` the payload, `items + framing` (`budget.payload_tokens`
when the manifest records it; a manifest sealed before framing was counted has `used = items`),
and `free = usable − used`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class TokenFigures:
    usable: int | None
    items: int | None
    framing: int | None
    used: int | None
    free: int | None

    @property
    def used_percent(self) -> int:
        """used of usable, as a whole percentage capped at 100 (0 when either is unknown)."""
        return min(100, round(100 * self.used / self.usable)) if self.usable and self.used is not None else 0


def _number(value: Any) -> int | None:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def token_figures(budget: dict[str, Any] | None) -> TokenFigures:
    """The figures of one step's sealed budget record (`budget` of the manifest)."""
    budget = budget if isinstance(budget, dict) else {}
    usable, items = _number(budget.get("usable_input")), _number(budget.get("estimated_used"))
    framing, used = _number(budget.get("framing_tokens")), _number(budget.get("payload_tokens"))
    if used is None and items is not None:
        used = items + (framing or 0)
    free = usable - used if usable is not None and used is not None else None
    return TokenFigures(usable=usable, items=items, framing=framing, used=used, free=free)
