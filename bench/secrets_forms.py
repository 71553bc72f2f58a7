"""False alarms of the credential forms (issue 50) on text nobody wrote for the scanner: the shared
real agent traces (code, shell output, logs: `../shared/traces/` or CTXENG_TRACES) and the worked
example (docs/examples/research-agent). The traces hold no credential and the worked example one,
planted (`secret-env`, PLANTED): every other finding is a false alarm; each is printed with its
type and text so a reader can check that claim.

The rate is per scanned text (a message's content, a tool call's arguments): texts with any
finding / texts scanned, for all detectors together and for the forms issue 50 added. Run:
`python -m bench.secrets_forms` (prints one row per corpus, then each finding).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TRACES = Path(os.environ.get("CTXENG_TRACES", "/work/shared/traces"))
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
    for row in measure():
        examples = row.pop("examples", [])
        print(row)
        for kind, text in examples:
            print(f"    {kind}: {text!r}")


if __name__ == "__main__":
    main()
