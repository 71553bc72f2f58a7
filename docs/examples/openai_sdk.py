"""Assemble a step's context with ctxeng, call OpenAI with the payload as it is, report the usage.

    pip install . openai    # from a checkout of this repository
    CTXENG_URL=http://127.0.0.1:8000 CTXENG_TOKEN=<agent token> OPENAI_API_KEY=sk-... \
        python docs/examples/openai_sdk.py [request.json]

The request defaults to the worked example (docs/examples/research-agent/request.json, adapter
`openai_chat`). The SDK reads `OPENAI_BASE_URL` too; the tests point it at a local stub that
checks the request as the API does. Prints one JSON line: the status, the reply and the usage
record (the estimate beside the provider's count). Exit 1 when the assembly is blocked.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import openai

from ctxeng.client import Client

WORKED_EXAMPLE = Path(__file__).parent / "research-agent" / "request.json"


def main(argv: list[str]) -> int:
    request = json.loads(Path(argv[1] if len(argv) > 1 else WORKED_EXAMPLE).read_text())
    ctxeng = Client(os.environ.get("CTXENG_URL", "http://127.0.0.1:8000"), os.environ["CTXENG_TOKEN"])
    assembly = ctxeng.assemble(request, timeout=120, traceparent=os.environ.get("TRACEPARENT"))
    if not assembly.ready:
        print(json.dumps({"status": assembly.status, "blocked_reason": assembly.manifest["assembly"]["blocked_reason"]}))
        return 1

    response = openai.OpenAI().chat.completions.create(**assembly.openai_kwargs())

    usage = assembly.report_usage(response)
    print(json.dumps({"status": assembly.status, "reply": response.choices[0].message.content, "usage": usage}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
