"""Which counter estimates a model's input tokens, whether its count is exact, and the margin kept
when it is not.

Contract:

- `estimate_for(model)`: an OpenAI model (provider `openai` or Azure's) is counted with the
  encoding `OPENAI_ENCODINGS` gives its name, and that count is exact. A name continues a prefix
  when it is the prefix or the prefix followed by `-` (`gpt-4o-2024-08-06`, `gpt-4o-mini`), a
  fine-tune (`ft:gpt-4o-mini:org::id`) is its base model, and the longest prefix wins. An OpenAI
  name the table does not know is counted with the newest encoding (`NEWEST_ENCODING`) and is not
  exact: a guess, said so in the manifest. Any other provider (Anthropic, anything unnamed) has no
  public tokenizer: cl100k_base counts (what every estimate was counted with before this table,
  so a tenant's usage reports stay comparable) and the count is not exact.
- `calibrate(model, ratios, clause)`: the margin for an inexact count, from the actual/estimate
  ratios of the model's usage reports: the `clause.quantile` by nearest rank (the smallest ratio
  that at least that share of reports do not exceed), never below 1 (the budget is never enlarged
  past the arithmetic), rounded up to 4 decimals; with fewer than `clause.min_reports` reports,
  `clause.default_factor`.
- `bounded_calibration(calibration, reference=, step=)`: a factor from reported usage held within
  `step` of a reference factor (down: divided by 1 + step, up: multiplied by it), and within
  [1, 4]: how the service bounds what an hour of usage reports can do (issue 51, F3; the reports
  come from the agent, not from the provider, so they are untrusted input).
- `applied_calibration(...)`: what the assembly divides its usable input by: 1.0 for an exact
  count whatever was passed; for an inexact one the calibration given (checked against the policy's
  clause) or, without one, the clause's default factor.

Dividing the usable input, not multiplying the counts: every token figure in a manifest stays what
the encoding counted (comparable with the provider's count on the usage page and with the next
report's estimate, so calibrating never feeds on calibrated numbers), and the division happens
once, without rounding per item.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from .errors import InvalidInput
from .models import BudgetCalibration, Calibration, Estimate, ModelSpec

# Model name prefix -> encoding, as tiktoken.model maps them (a test compares the names both know).
OPENAI_ENCODINGS: dict[str, str] = {
    "gpt-5": "o200k_base",
    "gpt-4.5": "o200k_base",
    "gpt-4.1": "o200k_base",
    "gpt-4o": "o200k_base",
    "chatgpt-4o": "o200k_base",
    "o1": "o200k_base",
    "o3": "o200k_base",
    "o4": "o200k_base",
    "gpt-4": "cl100k_base",
    "gpt-3.5-turbo": "cl100k_base",
    "gpt-3.5": "cl100k_base",
    "gpt-35-turbo": "cl100k_base",
    "text-embedding-3": "cl100k_base",
    "text-embedding-ada-002": "cl100k_base",
}
OPENAI_PROVIDERS = frozenset({"openai", "azure", "azure_openai", "azure-openai"})
NEWEST_ENCODING = "o200k_base"
NO_PUBLIC_TOKENIZER_ENCODING = "cl100k_base"
FACTOR_DECIMALS = 4


def openai_encoding(name: str) -> str | None:
    """The table's encoding for an OpenAI model name, None when no prefix matches."""
    base = name.removeprefix("ft:").split(":", 1)[0]
    prefix = max((p for p in OPENAI_ENCODINGS if base == p or base.startswith(p + "-")), key=len, default=None)
    return None if prefix is None else OPENAI_ENCODINGS[prefix]


def estimate_for(model: ModelSpec) -> Estimate:
    """How `model`'s input tokens are counted (see the module docstring)."""
    if model.provider.lower() not in OPENAI_PROVIDERS:
        return Estimate(encoding=NO_PUBLIC_TOKENIZER_ENCODING, exact=False, basis="no public tokenizer")
    encoding = openai_encoding(model.name)
    if encoding is None:
        return Estimate(encoding=NEWEST_ENCODING, exact=False, basis="newest encoding for an unknown OpenAI model")
    return Estimate(encoding=encoding, exact=True, basis="model table")


def estimate_with(model: ModelSpec, tokenizer: object) -> Estimate:
    """The estimate of a count made by a tokenizer the caller chose: the table's when it is the
    table's encoding for `model`, else not exact (whatever the tokenizer is, it was not chosen for
    this model)."""
    table = estimate_for(model)
    encoding = getattr(tokenizer, "encoding", None)
    if encoding == table.encoding:
        return table
    name = encoding or getattr(tokenizer, "name", type(tokenizer).__name__)
    return Estimate(encoding=str(name), exact=False, basis="tokenizer given by the caller")


def _rounded_up(x: float) -> float:
    scale = 10**FACTOR_DECIMALS
    return math.ceil(round(x * scale, 6)) / scale  # round first: 1.1 * 1e4 is 11000.000000000002


def calibrate(model: str, ratios: Iterable[float], clause: BudgetCalibration) -> Calibration:
    """The calibration of `model` from its reports' actual/estimate `ratios` (non-positive or
    non-finite ratios are not reports: skipped)."""
    usable = sorted(r for r in ratios if math.isfinite(r) and r > 0)
    if len(usable) < clause.min_reports:
        return Calibration(model=model, factor=clause.default_factor, quantile=clause.quantile, reports_used=0,
                           reports_available=len(usable), basis="default factor")
    rank = max(1, math.ceil(clause.quantile * len(usable)))
    factor = min(4.0, max(1.0, _rounded_up(usable[rank - 1])))
    return Calibration(model=model, factor=factor, quantile=clause.quantile, reports_used=len(usable),
                       reports_available=len(usable), basis="reported usage")


def bounded_calibration(calibration: Calibration, *, reference: float, step: float) -> Calibration:
    """`calibration` with a factor from reported usage held within [reference / (1 + step),
    reference * (1 + step)] and [1, 4]; a default or exact factor as it is (module docstring)."""
    if calibration.basis != "reported usage":
        return calibration
    scale = 10**FACTOR_DECIMALS
    low = max(1.0, _rounded_up(reference / (1 + step)))
    high = min(4.0, max(low, math.floor(round(reference * (1 + step) * scale, 6)) / scale))
    factor = min(max(calibration.factor, low), high)
    return calibration if factor == calibration.factor else calibration.model_copy(update={"factor": factor})


def applied_calibration(estimate: Estimate, model: str, given: Calibration | None, clause: BudgetCalibration) -> Calibration:
    """The calibration an assembly applies (see the module docstring); a given one that the
    policy's clause could not have produced is refused naming the field."""
    if estimate.exact:
        return Calibration(model=model, factor=1.0, basis="exact count")
    if given is None:
        return calibrate(model, [], clause)
    errors = []
    if given.model != model:
        errors.append(f"calibration.model: {given.model!r} is not the request's model {model!r}")
    if given.quantile != clause.quantile:
        errors.append(f"calibration.quantile: {given.quantile} is not the policy's budget.calibration.quantile {clause.quantile}")
    if given.basis == "default factor" and given.factor != clause.default_factor:
        errors.append(f"calibration.factor: {given.factor} is not the policy's budget.calibration.default_factor {clause.default_factor}")
    if given.basis == "reported usage" and given.reports_used < clause.min_reports:
        errors.append(f"calibration.reports_used: {given.reports_used} is fewer than the policy's budget.calibration.min_reports {clause.min_reports}")
    if given.basis == "exact count":
        errors.append(f"calibration.basis: the count for {model!r} is not exact")
    if errors:
        raise InvalidInput(errors, what="calibration")
    return given
