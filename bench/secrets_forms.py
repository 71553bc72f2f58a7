"""False alarms of the credential forms (issue 50) on text nobody wrote for the scanner: the shared
real agent traces (code, shell output, logs: `../shared/traces/` or CTXENG_TRACES) and the worked
example (docs/examples/research-agent). The traces hold no credential and the worked example one,
planted (`secret-env`, PLANTED): every other finding is a false alarm; each is printed with its
type and text so a reader can check that claim.

The rate is per scanned text (a message's content, a tool call's arguments): texts with any
finding / texts scanned, for all detectors together and for the forms issue 50 added; and per tool
call as `security.secrets_in_call_arguments` reads a call's arguments (`find_in_json`). Run:
`python -m bench.secrets_forms` (prints one row per corpus, then each finding).
"""

from __future__ import annotations

import json
from pathlib import Path

from bench.infra import TRACES

ROOT = Path(__file__).resolve().parent.parent
PLANTED = {"secret-env"}  # the worked example's credential, there to be found
NEW_FORMS = {"Keyword Value", "Authorization Header", "URL Token", "Paired Secret"}


def _strings(value) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def trace_texts() -> list[str]:
    """Each message's content and each tool call's arguments, from every trace file."""
    out: list[str] = []
    for path in sorted(TRACES.rglob("*")):
        if path.suffix not in (".json", ".traj"):
            continue
        data = json.loads(path.read_text())
        messages = data.get("messages") or data.get("history") or []
        for m in messages:
            out += _strings(m.get("content"))
            for call in m.get("tool_calls") or []:
                out += _strings((call.get("function") or {}).get("arguments"))
    return [t for t in out if t]


def example_texts(planted: bool = False) -> list[str]:
    """The worked example's contents, source refs and call arguments (`planted`: only the planted
    credential's item; else all the others)."""
    out: list[str] = []
    for name in ("request.json", "request-blocked.json"):
        request = json.loads((ROOT / "docs/examples/research-agent" / name).read_text())
        for cand in request.get("candidates") or []:
            if (cand.get("item_id") in PLANTED) != planted:
                continue
            out += _strings(cand.get("content"))
            out += [] if planted else _strings(cand.get("source_ref"))
        for call in (request.get("tool_calls") or []) if not planted else []:
            out += _strings(call.get("arguments"))
    return [t for t in out if t]


def trace_calls() -> list[dict]:
    """Each tool call's arguments (a JSON object) from every trace file."""
    out: list[dict] = []
    for path in sorted(TRACES.rglob("*")):
        if path.suffix not in (".json", ".traj"):
            continue
        data = json.loads(path.read_text())
        for m in data.get("messages") or data.get("history") or []:
            for call in m.get("tool_calls") or []:
                raw = (call.get("function") or {}).get("arguments")
                try:
                    args = json.loads(raw) if isinstance(raw, str) else raw
                except ValueError:
                    continue
                if isinstance(args, dict):
                    out.append(args)
    return out


def example_calls() -> list[dict]:
    return [call.get("arguments") or {} for name in ("request.json", "request-blocked.json")
            for call in json.loads((ROOT / "docs/examples/research-agent" / name).read_text()).get("tool_calls") or []]


def measure_calls() -> list[dict]:
    """`security.secrets_in_call_arguments`'s reading of whole calls (`find_in_json`: a string under
    a key read as `key: value`): calls with a finding, all false alarms on these corpora."""
    from ctxeng.engine.secrets import find_in_json

    rows = []
    for corpus, calls in (("shared traces, call arguments", trace_calls()), ("worked example, call arguments", example_calls())):
        flagged = [found for args in calls if (found := find_in_json(args, "arguments"))]
        rows.append({"corpus": corpus, "calls": len(calls), "calls_with_findings": len(flagged),
                     "false_alarm_rate": round(len(flagged) / max(len(calls), 1), 4),
                     "examples": sorted({(f.type, f"{path}: {f.text[:60]}") for found in flagged for path, _, fs in found for f in fs})})
    return rows


def measure() -> list[dict]:
    from ctxeng.engine.secrets import find_secrets

    planted = example_texts(planted=True)
    rows = [{"corpus": "worked example, planted credential", "texts": len(planted),
             "found": sum(1 for t in planted if find_secrets(t))}]
    for corpus, texts in (("shared traces", trace_texts()), ("worked example", example_texts())):
        hits = [(t, find_secrets(t)) for t in texts]
        flagged = [(t, f) for t, f in hits if f]
        new = [(t, [x for x in f if x.type in NEW_FORMS or x.type.startswith("Encoded ")]) for t, f in flagged]
        new = [(t, f) for t, f in new if f]
        rows.append({
            "corpus": corpus,
            "texts": len(texts),
            "chars": sum(map(len, texts)),
            "texts_with_findings": len(flagged),
            "findings": sum(len(f) for _, f in flagged),
            "false_alarm_rate": round(len(flagged) / max(len(texts), 1), 4),
            "texts_with_new_form_findings": len(new),
            "new_form_false_alarm_rate": round(len(new) / max(len(texts), 1), 4),
            "examples": sorted({(x.type, x.text[:60]) for _, f in flagged for x in f}),
        })
    return rows


def main() -> None:
    for row in measure() + measure_calls():
        examples = row.pop("examples", [])
        print(row)
        for kind, text in examples:
            print(f"    {kind}: {text!r}")


if __name__ == "__main__":
    main()
