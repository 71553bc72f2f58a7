"""Finding the worked example files (policy, requests, expected decisions).

They live in `docs/examples/research-agent/` (vendored; tests check it against the specification's
SHA256SUMS). `CTXENG_EXAMPLES_DIR` names another folder of examples, looked in first.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.conf import settings

EXAMPLE = "research-agent"
FILES = ("policy.yaml", "request.json", "request-blocked.json", "expected.json", "expected-blocked.json")


def example_dir(name: str = EXAMPLE) -> Path:
    for root in (Path(settings.CTXENG_EXAMPLES_DIR), Path(settings.CTXENG_VENDORED_EXAMPLES_DIR)):
        if (root / name / "policy.yaml").is_file():
            return root / name
    raise FileNotFoundError(
        f"example {name!r} not found in {settings.CTXENG_EXAMPLES_DIR} or {settings.CTXENG_VENDORED_EXAMPLES_DIR}"
    )


def example_text(filename: str, name: str = EXAMPLE) -> str:
    return (example_dir(name) / filename).read_text(encoding="utf-8")


def example_json(filename: str, name: str = EXAMPLE) -> Any:
    return json.loads(example_text(filename, name))
