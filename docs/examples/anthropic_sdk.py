"""Assemble a step's context with ctxeng for Claude, call Anthropic with it as it is, report the usage.

    pip install . anthropic    # from a checkout of this repository
    CTXENG_URL=http://127.0.0.1:8000 CTXENG_TOKEN=<agent token> ANTHROPIC_API_KEY=sk-ant-... \
        python docs/examples/anthropic_sdk.py [request.json]

The request defaults to the worked example, asked for with the `anthropic_messages` adapter and
a Claude model (a request's `adapter` overrides the policy's `serialization.adapter`; the
policy's `budget.response_reserve` becomes `max_tokens`). The SDK reads `ANTHROPIC_BASE_URL`
too; the tests point it at a local stub that checks the request as the API does. Prints one JSON
line: the status, the reply and the usage record. Exit 1 when the assembly is blocked.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import anthropic

from ctxeng.client import Client

WORKED_EXAMPLE = Path(__file__).parent / "research-agent" / "request.json"
CLAUDE = {"provider": "anthropic", "name": "claude-sonnet-4-5", "context_limit": 16000}


def main(argv: list[str]) -> int:
    if len(argv) > 1:
        request = json.loads(Path(argv[1]).read_text())
    else:
        request = {**json.loads(WORKED_EXAMPLE.read_text()), "adapter": "anthropic_messages", "model": CLAUDE}
    ctxeng = Client(os.environ.get("CTXENG_URL", "http://127.0.0.1:8000"), os.environ["CTXENG_TOKEN"])
    assembly = ctxeng.assemble(request, timeout=120, traceparent=os.environ.get("TRACEPARENT"))
    if not assembly.ready:
        print(json.dumps({"status": assembly.status, "blocked_reason": assembly.manifest["assembly"]["blocked_reason"]}))
        return 1

    response = anthropic.Anthropic().messages.create(**assembly.anthropic_kwargs())

    usage = assembly.report_usage(response)
    print(json.dumps({"status": assembly.status, "reply": response.content[0].text, "usage": usage}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
