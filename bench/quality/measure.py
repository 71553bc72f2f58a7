"""The per-step checks, computed on the payload a system would send (OpenAI chat messages).

- `text_of(message)`: everything of a message the model reads: its content (a string or text
  parts) and, for an assistant message, each tool call's name and arguments.
- required / forbidden: a marker is present when it occurs anywhere in the payload's texts;
  forbidden markers are counted by why they are forbidden (the scenario's `forbidden_why`).
- injected in authority: an injected marker counts once per step when it occurs in a `system` or
  `developer` message (the positions a provider gives authority). A tool message is not one.
- injected outside a data fence (its own column): an injected marker in any message outside every
  ctxeng data fence. A data fence is a span that opens with a header line `<<<ctx ...>>>` whose
  trust word is `untrusted` or `derived` (`<<<ctx CITE KIND TRUST[ SOURCE]>>>`, or `<<<ctx TRUST>>>`
  around a tool result) and closes at the next `<<<ctx:end>>>` (content cannot spell either; the
  parser is `ctxeng.engine.render.split_fences`). Baselines have no fences, so every occurrence of injected
  text in their payloads counts here (in a tool message it is where a tool result belongs; the
  column says only that nothing marks it as data).
- refused: `tests.provider_stub.check_openai_chat` rejects the body (a tool call without its
  result, a result without its call, an empty message list ...), or the payload's input tokens
  exceed the model's context window (the provider's `context_length_exceeded`).
- input tokens: OpenAI's counting recipe with o200k_base, gpt-4o's own encoding (shipped offline
  with the light install, `ctxeng.engine.tokens`), which every system here counts with: 3 per
  message, its texts, each call's name and arguments, and 3 to prime the reply.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from ctxeng.engine.render import split_fences

DATA_TRUST = ("untrusted", "derived")  # the header's trust words of data (roles untrusted_data, derived_context)


@lru_cache(maxsize=1)
def _tokenizer():
    from ctxeng.engine.tokens import tokenizer_for

    return tokenizer_for("o200k_base")


def count(text: str) -> int:
    return _tokenizer().count(text) if text else 0


def content_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "\n".join(p.get("text", "") for p in content if isinstance(p, dict))


def call_texts(message: dict[str, Any]) -> list[tuple[str, str]]:
    return [(c["function"]["name"], c["function"]["arguments"]) for c in message.get("tool_calls") or []]


def text_of(message: dict[str, Any]) -> str:
    parts = [content_text(message.get("content"))]
    for name, arguments in call_texts(message):
        parts.append(f"{name} {arguments}")
    return "\n".join(parts)


def message_tokens(message: dict[str, Any]) -> int:
    return 3 + count(content_text(message.get("content"))) + sum(count(n) + count(a) for n, a in call_texts(message))


def input_tokens(messages: list[dict[str, Any]]) -> int:
    return 3 + sum(message_tokens(m) for m in messages)


def outside_data_fences(text: str) -> str:
    """`text` with every ctxeng data fence (header to end marker) cut out; a fence of any other trust
    (task, state) keeps its body, and an unclosed fence is no fence."""
    return "".join(piece for piece, header in split_fences(text) if header is None or header["trust"] not in DATA_TRUST)


def refusal(body: dict[str, Any], context_limit: int, tokens: int) -> str | None:
    from tests.provider_stub import Rejected, check_openai_chat

    try:
        check_openai_chat(body)
    except Rejected as exc:
        return f"pairing: {exc}"[:200]
    if tokens > context_limit:
        return f"over_window: {tokens} input tokens > context limit {context_limit}"
    return None


def score(messages: list[dict[str, Any]] | None, step: dict[str, Any], *, context_limit: int,
          model: str = "gpt-4o") -> dict[str, Any]:
    """The step's figures for one payload (None: the system produced no payload, a blocked step)."""
    required = step["required"]
    if messages is None:
        return {"blocked": True, "required": len(required), "required_present": 0, "missing": list(required),
                "forbidden_present": [], "forbidden_by_why": {}, "injected_in_authority": [], "injected_outside_fences": [],
                "refused": None, "input_tokens": 0}
    texts = [text_of(m) for m in messages]
    whole = "\n".join(texts)
    authority = "\n".join(t for m, t in zip(messages, texts, strict=True) if m.get("role") in ("system", "developer"))
    unfenced = "\n".join(t if m.get("role") in ("system", "developer") else outside_data_fences(t)
                         for m, t in zip(messages, texts, strict=True))
    missing = [m for m in required if m not in whole]
    tokens = input_tokens(messages)
    return {
        "blocked": False,
        "required": len(required),
        "required_present": len(required) - len(missing),
        "missing": missing,
        "forbidden_present": [m for m in step["forbidden"] if m in whole],
        "forbidden_by_why": _by_why([m for m in step["forbidden"] if m in whole], step.get("forbidden_why", {})),
        "injected_in_authority": [m for m in step["injected"] if m in authority],
        "injected_outside_fences": [m for m in step["injected"] if m in unfenced],
        "refused": refusal({"model": model, "messages": messages}, context_limit, tokens),
        "input_tokens": tokens,
    }


def _by_why(markers: list[str], why: dict[str, str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for m in markers:
        out[why.get(m, "other")] = out.get(why.get(m, "other"), 0) + 1
    return out
