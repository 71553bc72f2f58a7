"""Stage 4 — load mode: resident, retrieve or progressive disclosure (seed §3).

Contract: pinned items (resident kinds, required items, control) load `resident`; kinds the policy
lists under `disclosure.indexes` load `disclose` (an index whose detail the agent fetches on
demand by its source_ref); everything else was fetched for this step and loads `retrieve`. An
item may ask for a mode explicitly, but never for `resident` unless the policy pins it.
"""

from __future__ import annotations

from .vocabulary import LoadMode
from .working import Assembly


def assign_load_modes(asm: Assembly) -> None:
    indexes = set(asm.policy.disclosure.indexes)
    for cand in asm.alive():
        asked = cand.item.load_mode
        if cand.pinned:
            cand.load_mode = LoadMode.RESIDENT
        elif asked is not None and asked != LoadMode.RESIDENT:
            cand.load_mode = asked
        elif cand.item.kind in indexes:
            cand.load_mode = LoadMode.DISCLOSE
        else:
            cand.load_mode = LoadMode.RETRIEVE
        cand.admission_reason = _admission_reason(cand.item.kind, cand.load_mode, cand.pinned)


def _admission_reason(kind: str, mode: LoadMode, pinned: bool) -> str:
    if pinned:
        return f"resident_{kind}"
    if mode == LoadMode.DISCLOSE:
        return f"index_for_progressive_disclosure_{kind}"
    return f"supports_current_decision_{kind}"
