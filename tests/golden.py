"""The golden check: does a manifest reach every decision an `expected*.json` names?

    from tests.golden import check_expected, examples_dir, load_example
    check_expected(manifest_dict, serialized_input_or_None, expected_dict)

Shared by the engine, CLI and REST API tests, so all three hold the worked examples to one
reading of `shared/examples/README.md`. It only reads JSON documents (the manifest as the CLI and
the API return it, and the provider payload), never engine objects. An expected key this module
does not know fails the check: a new decision in the contract cannot be silently ignored.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

KNOWN_KEYS = {
    "status",
    "included",
    "excluded",
    "at_least_excluded",
    "acquisition",
    "not_in_excluded",
    "tool_pairs",
    "evidence_use",
    "transformed",
    "system_role_only_from",
    "never_in_system_role",
    "hashes",
    "hashes_absent",
    "budget_partitions",
    "blocked_reason",
    "missing",
    "excluded_still_recorded",
}

# A data fence (docs/sdk.md "What the model sees"): `<<<ctx CITE KIND TRUST ...>>>` in a user
# message, `<<<ctx TRUST ...>>>` in a tool message, the body, then `<<<ctx:end>>>`.
_BLOCK = re.compile(r"<<<ctx (?P<words>[^\n<>]*)>>>\n(?P<body>.*?)\n<<<ctx:end>>>", re.S)
_TRUST_WORDS = ("task", "state", "derived", "untrusted")


def cite_id(item_id: str) -> str:
    """The short id a fence names an item by: its id up to 16 characters, else its first letter and
    9 decimal digits of its sha256."""
    if len(item_id) <= 16 and item_id not in _TRUST_WORDS:
        return item_id
    return item_id[0].lower() + f"{int(hashlib.sha256(item_id.encode()).hexdigest(), 16) % 10**9:09d}"


def examples_dir() -> Path:
    """$CTXENG_EXAMPLES_DIR, else the shared examples beside the repo, else the vendored copy."""
    env = os.environ.get("CTXENG_EXAMPLES_DIR")
    if env:
        return Path(env)
    shared = Path(__file__).resolve().parents[1].parent / "shared" / "examples"
    if (shared / "research-agent" / "request.json").is_file():
        return shared
    return Path(__file__).resolve().parents[1] / "docs" / "examples"


def load_example(name: str, case: str = "research-agent") -> Any:
    """`load_example("expected.json")` -> parsed JSON; `.yaml` files come back as text."""
    path = examples_dir() / case / name
    text = path.read_text(encoding="utf-8")
    return json.loads(text) if name.endswith(".json") else text


def canonical_sha256(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def payload_strings(value: Any) -> list[str]:
    """Every string in a provider payload, depth first."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in payload_strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in payload_strings(v)]
    return []


def system_text(payload: dict[str, Any]) -> str:
    """All text a provider treats as system/developer instruction (OpenAI messages or Anthropic `system`)."""
    parts: list[str] = []
    if "system" in payload:
        parts.extend(payload_strings(payload["system"]))
    for msg in payload.get("messages", []):
        if msg.get("role") in ("system", "developer"):
            parts.extend(payload_strings(msg.get("content")))
    return "\n".join(parts)


def delivered_blocks(payload: dict[str, Any], manifest: dict[str, Any]) -> dict[str, str]:
    """item_id -> the body of its fenced block, wherever in the payload it was delivered: a block
    in a user message by its citable id, a tool result by the tool message answering its call."""
    by_cite = {cite_id(r["item_id"]): r["item_id"] for r in manifest["included"]}
    by_call = {p["serialized_call_id"]: p["result_item_id"] for p in manifest["tool_pairs"]}
    out: dict[str, str] = {}

    def read(text: str, call_id: str | None) -> None:
        for m in _BLOCK.finditer(text):
            first = m.group("words").split(" ")[0]
            item_id = by_call.get(call_id) if first in _TRUST_WORDS else by_cite.get(first)
            if item_id is not None:
                out[item_id] = m.group("body")

    for m in payload.get("messages", []) + payload.get("input", []):
        call_id = m.get("tool_call_id") or m.get("call_id")
        for part in m.get("content") if isinstance(m.get("content"), list) else [m.get("content"), m.get("output")]:
            if isinstance(part, dict) and part.get("type") == "tool_result":
                read(str(part.get("content")), part.get("tool_use_id"))
            elif isinstance(part, dict):
                read(str(part.get("text", "")), None)
            elif isinstance(part, str):
                read(part, call_id)
    return out


def check_expected(manifest: dict[str, Any], serialized_input: dict[str, Any] | None, expected: dict[str, Any]) -> None:
    unknown = set(expected) - KNOWN_KEYS
    assert not unknown, f"expected file has keys the golden check does not know: {sorted(unknown)}"
    header = manifest["assembly"]
    included = [r["item_id"] for r in manifest["included"]]
    excluded = {r["item_id"]: r for r in manifest["excluded"]}
    reasons = {k: r["reason"] for k, r in excluded.items()}
    pairs: dict[str, list[dict[str, Any]]] = {}
    for p in manifest["tool_pairs"]:
        pairs.setdefault(p["call_id"], []).append(p)

    # Every candidate is decided exactly once, ready or blocked.
    candidates = [c["item_id"] for c in manifest["candidate_items"]]
    assert sorted(candidates) == sorted(included + list(excluded)), "each candidate must be included or excluded, once"
    assert not set(included) & set(excluded)

    if "status" in expected:
        assert header["status"] == expected["status"], f"status {header['status']} ({header.get('blocked_detail')})"
    for item_id in expected.get("included", []):
        assert item_id in included, f"{item_id} not included: {excluded.get(item_id, {}).get('detail', 'not a candidate')}"
    for item_id, reason in expected.get("excluded", {}).items():
        assert item_id in excluded, f"{item_id} should be excluded ({reason}) but is not"
        assert reasons[item_id] == reason, f"{item_id}: reason {reasons[item_id]} ({excluded[item_id]['detail']}), expected {reason}"
        _check_exclusion_record(excluded[item_id])
    if "at_least_excluded" in expected:
        rule = expected["at_least_excluded"]
        hits = [i for i in rule["of"] if reasons.get(i) in rule["reasons"]]
        assert len(hits) >= rule["count"], f"only {hits} of {rule['of']} excluded for {rule['reasons']}"

    acquisition = {r["source_request_id"]: r["outcome"] for r in manifest["source_acquisition"]}
    for request_id, outcome in expected.get("acquisition", {}).items():
        assert acquisition.get(request_id) == outcome, f"{request_id}: acquisition {acquisition.get(request_id)}, expected {outcome}"
    excluded_names = set(excluded) | {r.get("source_request_id") for r in manifest["excluded"]} - {None}
    for name in expected.get("not_in_excluded", []):
        assert name not in excluded_names, f"{name} is an acquisition outcome, not an exclusion"

    for call_id, result_id in expected.get("tool_pairs", {}).items():
        records = pairs.get(call_id, [])
        assert len(records) == 1, f"call {call_id}: {len(records)} pair records"
        record = records[0]
        assert record["result_item_id"] == result_id, f"call {call_id} paired with {record['result_item_id']}"
        assert record["pairing_assertion"] == "exactly_one_result_for_call"
        if header["status"] == "ready":
            assert record["decision"] == "included", f"pair {call_id}: {record['decision']}"
            assert result_id in included
    for call_id, use in expected.get("evidence_use", {}).items():
        (record,) = pairs[call_id]
        assert record["evidence_use"] == use, f"call {call_id}: evidence_use {record['evidence_use']}"
        result = next((r for r in manifest["included"] if r["item_id"] == record["result_item_id"]), None)
        if result is not None:
            assert result["evidence_use"] == use

    blocks = delivered_blocks(serialized_input, manifest) if serialized_input is not None else {}
    for item_id, rule in expected.get("transformed", {}).items():
        _check_transformed(manifest, blocks if serialized_input is not None else None, item_id, rule)

    if serialized_input is not None and ("system_role_only_from" in expected or "never_in_system_role" in expected):
        _check_system_role(manifest, serialized_input, expected)
    elif "system_role_only_from" in expected:
        control = [r["item_id"] for r in manifest["included"] if r["zone"] == "control"]
        assert set(control) <= set(expected["system_role_only_from"]), f"control zone holds {control}"

    for field in expected.get("hashes", []):
        value = header.get(field)
        assert isinstance(value, str) and re.fullmatch(r"sha256:[0-9a-f]{64}", value), f"{field} missing: {value!r}"
    if serialized_input is not None and "serialized_model_input_hash" in expected.get("hashes", []):
        assert header["serialized_model_input_hash"] == canonical_sha256(serialized_input), (
            "serialized_model_input_hash is not the hash of the serialized input"
        )
    for field in expected.get("hashes_absent", []):
        assert header.get(field) is None, f"{field} must be absent, is {header.get(field)!r}"
    if expected.get("hashes_absent"):
        assert serialized_input is None, "a blocked assembly produces no model input"

    partitions = manifest["budget"]["partitions"]
    for name, bounds in expected.get("budget_partitions", {}).items():
        used = partitions[name]["used"]
        if "max_used" in bounds:
            assert used <= bounds["max_used"], f"partition {name}: used {used} > {bounds['max_used']}"
        if "min_used" in bounds:
            assert used >= bounds["min_used"], f"partition {name}: used {used} < {bounds['min_used']}"
    assert manifest["budget"]["estimated_used"] <= manifest["budget"]["usable_input"]

    if "blocked_reason" in expected:
        assert header["blocked_reason"] == expected["blocked_reason"], f"blocked_reason {header['blocked_reason']}"
    if "missing" in expected:
        assert sorted(header["missing"]) == sorted(expected["missing"]), f"missing {header['missing']}"
    for item_id, reason in expected.get("excluded_still_recorded", {}).items():
        assert reasons.get(item_id) == reason, f"{item_id}: {reasons.get(item_id)} in the blocked manifest, expected {reason}"


def _check_exclusion_record(record: dict[str, Any]) -> None:
    assert record["detail"], f"{record['item_id']}: an exclusion explains itself"
    gates = record.get("hard_gate_results") or {}
    if record.get("hard_gate"):
        assert gates.get(record["hard_gate"]) == "failed", f"{record['item_id']}: its gate is not recorded failed"
        after = list(gates)[list(gates).index(record["hard_gate"]) + 1 :]
        assert all(gates[g] == "not_evaluated" for g in after), f"{record['item_id']}: gates after the failure ran"


def _check_transformed(manifest: dict[str, Any], blocks: dict[str, str] | None, item_id: str, rule: dict[str, Any]) -> None:
    record = next((r for r in manifest["included"] if r["item_id"] == item_id), None)
    assert record is not None, f"{item_id} must be included (transformed)"
    transforms = [t for t in manifest["transforms"] if t["output_item_id"] == item_id]
    assert transforms, f"{item_id} has no TransformRecord"
    assert record["transform_record_id"] in {t["record_id"] for t in transforms}
    for t in transforms:
        assert t["status"] in ("applied", "verified"), f"{t['record_id']}: {t['status']}"
        assert all(v != "failed" for v in t["preservation_assertions"].values()), t["preservation_assertions"]
        assert t["token_estimate_after"] is not None and t["token_estimate_after"] <= t["token_estimate_before"]
        assert t["trust_after"] == t["trust_before"] or t["type"] == "summarize"
    text = blocks.get(item_id) if blocks is not None else transforms[-1]["after_excerpt"]
    assert text is not None, f"{item_id} is not delivered in the serialized input"
    if "keeps_lines_containing" in rule:
        lines = [ln for ln in text.splitlines() if rule["keeps_lines_containing"] in ln]
        # The transform's own header line may name what it kept; count the kept source lines only.
        lines = [ln for ln in lines if not ln.startswith("[")]
        assert len(lines) == rule["count"], f"{item_id}: {len(lines)} lines with {rule['keeps_lines_containing']!r}"
    if "keeps" in rule:
        assert rule["keeps"] in text, f"{item_id}: {rule['keeps']!r} lost in the transform"


def _check_system_role(manifest: dict[str, Any], payload: dict[str, Any], expected: dict[str, Any]) -> None:
    system = system_text(payload)
    assert system, "the serialized input has no system text"
    allowed = set(expected.get("system_role_only_from", []))
    control = [r["item_id"] for r in manifest["included"] if r["zone"] == "control"]
    if "system_role_only_from" in expected:
        assert set(control) <= allowed, f"control zone holds {control}, only {sorted(allowed)} may be there"
        assert _BLOCK.search(system) is None, "a data block reached the system message"
    for text in expected.get("never_in_system_role", []):
        assert text not in system, f"{text!r} reached a system message"


VENDORED = Path(__file__).resolve().parents[1] / "docs" / "examples"


def recorded_digests(case: str = "research-agent") -> dict[str, str]:
    """name -> sha256 of the contract files, as `docs/examples/<case>/SHA256SUMS` records them
    (written with `sha256sum` from the shared examples when they were vendored)."""
    lines = (VENDORED / case / "SHA256SUMS").read_text().splitlines()
    return {name: digest for digest, name in (line.split(maxsplit=1) for line in lines if line.strip())}


def digests_of(directory: Path, names: Iterable[str]) -> dict[str, str | None]:
    """name -> sha256 of each file in `directory` (None when it is missing)."""
    return {name: hashlib.sha256((directory / name).read_bytes()).hexdigest() if (directory / name).is_file() else None
            for name in names}
