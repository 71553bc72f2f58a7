"""Context quality, measured (issue 28): long-horizon agent runs replayed through ctxeng and the
tools agents use today, scored per step on what the model would see.

- `scenarios` — the seeded, versioned generator of three runs (a coding agent across two
  repositories, a research agent across five, a 60+ turn support chat). Each step lists the
  markers the model must see, the ones it must not, and the injected instructions.
- `systems` — ctxeng (the SDK with a starter policy), langchain-core's `trim_messages`, LangChain
  v1's `ContextEditingMiddleware` with `ClearToolUsesEdit`, and a naive "drop the oldest" loop,
  each fed the same events the way its users feed it.
- `measure` — the per-step checks on each payload (markers, fences, the provider's pairing rules,
  exact cl100k input tokens).
- `run` — `make bench-quality` (`python -m bench.quality.run`): writes
  `bench/results/quality.json` and `bench/results/quality.png`.
"""
