"""What secret scanning costs: detect-secrets' plugins (ctxeng.engine.secrets) against the
hand-written list of five patterns it replaced (issue 38), on the same texts in the same run.

Three texts of ~1 MB each: source code, JSON tool output, and prose with a key every ~50 kB. The
figure is each scanner's median time per MB over interleaved runs and their ratio; the first call
(which imports detect-secrets and `requests`) is reported apart. Run: `python -m bench.secrets`.
"""

from __future__ import annotations

import re
import statistics
import time

# The hand list as it stood before issue 38 (ctxeng/engine/gates.py), with its prefix pre-check.
_OLD = re.compile(
    r"(sk-(?:live|proj|test)?-?[A-Za-z0-9]{20,}|AKIA[0-9A-Z]{16}"
    r"|-----BEGIN [A-Z ]*PRIVATE KEY-----(?:.*?-----END [A-Z ]*PRIVATE KEY-----|.*\Z)"
    r"|ghp_[A-Za-z0-9]{36}|xox[baprs]-[A-Za-z0-9-]{10,})",
    re.S,
)
_OLD_PREFIXES = ("sk-", "AKIA", "-----BEGIN ", "ghp_", "xox")


def old_scan(text: str) -> list:
    if not any(p in text for p in _OLD_PREFIXES):
        return []
    return list(_OLD.finditer(text))


def texts() -> dict[str, str]:
    code = "def handler(event, context):\n    items = [x for x in event['items'] if x]\n    return {'count': len(items)}\n" * 11_000
    json_out = '{"id": 1234, "sha": "c0ffee1234567890abcdef1234567890abcdef12", "status": "ok", "url": "https://example.org/a/b"}\n' * 9_000
    key = "sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc"
    prose = ("The deploy failed because the environment variable was not set on the runner. " * 600 + f"STRIPE={key}\n") * 20
    return {"code": code, "json": json_out, "prose+keys": prose}


def measure(repeat: int = 5) -> list[dict]:
    from ctxeng.engine.secrets import find_secrets

    started = time.perf_counter()
    find_secrets("warm up: import the plugins")
    first = time.perf_counter() - started
    rows = []
    for name, text in texts().items():
        mb = len(text) / 1e6
        new, old = [], []
        for _ in range(repeat):  # interleaved, so machine load hits both alike
            t = time.perf_counter()
            found = find_secrets(text)
            new.append(time.perf_counter() - t)
            t = time.perf_counter()
            old_found = old_scan(text)
            old.append(time.perf_counter() - t)
        rows.append({
            "text": name, "mb": round(mb, 2), "findings": len(found), "old_findings": len(old_found),
            "ms_per_mb": round(statistics.median(new) * 1000 / mb, 1),
            "old_ms_per_mb": round(statistics.median(old) * 1000 / mb, 2),
            "ratio": round(statistics.median(new) / max(statistics.median(old), 1e-9), 1),
        })
    rows.append({"text": "first call (imports)", "ms": round(first * 1000)})
    return rows


def main() -> None:
    for row in measure():
        print(row)


if __name__ == "__main__":
    main()
