"""What a content purge removes from a sealed manifest, as pure functions.

A purged manifest keeps everything that explains it — decisions, reasons, gate results, lineage,
budget, every hash and digest — and loses the text bodies: each transform's `before_excerpt` and
`after_excerpt` (emptied, their schema default) and the provider input payload (dropped; its hash
stays in `assembly.serialized_model_input_hash`). The submitted request loses each candidate's
`content` (its `content_hash` stays). `Manifest.save` accepts exactly this change and nothing else.
"""

from __future__ import annotations

import copy
from typing import Any

EXCERPT_FIELDS = ("before_excerpt", "after_excerpt")


def purged_document(document: dict[str, Any]) -> dict[str, Any]:
    purged = copy.deepcopy(document)
    for record in purged.get("transforms") or []:
        if isinstance(record, dict):
            for name in EXCERPT_FIELDS:
                if name in record:
                    record[name] = ""
    return purged


def purged_request(request: dict[str, Any]) -> dict[str, Any]:
    purged = copy.deepcopy(request)
    for candidate in purged.get("candidates") or []:
        if isinstance(candidate, dict) and candidate.get("content") is not None:
            candidate["content"] = None
    return purged
