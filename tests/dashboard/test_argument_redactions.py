"""The manifest page's tool pairs show each credential redacted from a call's arguments
(`tool_pairs[].argument_redactions`, issue 50): its field path and detector, escaped, never a value."""

from __future__ import annotations

from django.core.paginator import Paginator
from django.template.loader import render_to_string


def _pair(**fields) -> dict:
    pair = {"call_id": "c0", "serialized_call_id": "c0", "tool_name": "bash", "canonical_argument_hash": "sha256:" + "a" * 64,
            "canonicalization": "tool_name_plus_canonical_json_args/v1", "status": "success", "evidence_use": "confirmed_by_policy",
            "completed_seq": 0, "source_order": 0, "serialized_order": 0, "decision": "included", "result_item_id": "r0",
            "tokens": 12, "argument_redactions": []}
    return {**pair, **fields}


def _render(pairs: list[dict]) -> str:
    page = Paginator(pairs, 50).page(1)
    return render_to_string("manifests/partials/tool_pairs.html", {"tool_pairs_page": page, "job": {"id": "job-1"}, "unresolved": []})


def test_each_redacted_field_is_shown_with_its_detector_and_escaped():
    html = _render([_pair(argument_redactions=[{"path": "tool_calls[0].arguments.<b>env</b>", "detector": "Keyword Value"}])])
    assert html.count('class="argument-redaction"') == 1
    assert "<code>tool_calls[0].arguments.&lt;b&gt;env&lt;/b&gt;</code>" in html and "Keyword Value" in html


def test_a_pair_without_redactions_or_from_an_older_manifest_shows_none():
    older = _pair()
    del older["argument_redactions"]
    assert 'class="argument-redaction"' not in _render([_pair(), older])
