"""Negative findings and the scope they were searched in (seed §6: "not yet found" must not become
"does not exist"; a negative finding keeps its search scope).

Contract: text is read one *statement* at a time — a line, or a part of a line between `;` (the
structured summaries join a section's entries with `; `). A statement is

- a **negative finding** when it says something was not found — `not found`, `not yet found`,
  `no … found` (within 80 characters), `found no`/`found nothing`, `could not`/`couldn't`/
  `cannot`/`can't`/`did not`/`didn't` + `find`/`locate` — and names a search scope;
- an **existence claim** when it says something does not exist — `does not exist`,
  `doesn't exist`, `do not exist`, `don't exist`, `no such`, `there is no`, `there are no`,
  `nonexistent`/`non-existent`, `never existed` — whatever else it says. An existence claim is
  never read as a negative finding: a search shows only that something was not found.

The **scope** is what follows `searched` (`searched:`, `searched in`, optionally in parentheses)
up to the closing parenthesis or the end of the statement: its entries split on `,` and ` and `,
stripped of spaces and a final `.`, compared as a set (`(searched: README.md, docs/, skills/)` and
`searched in docs/, skills/ and README.md` are the same scope; case is kept, paths are
case-sensitive). A statement without a scope is neither a finding nor a rewritten one here.

`lost_findings(inputs, summary)` is what the `conflicts_and_negative_findings` assertion acts on:
every negative finding of the inputs must reappear in the summary as a negative finding with the
same scope (as many findings per scope as the inputs hold distinct ones), and no statement of the
summary may state an existence claim with a search scope. It reads the inputs' text with these
patterns alone, never with the summarizer's output format, so it can fail a summarizer.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

# Every pattern is matched inside one statement and none can rescan it from each position: the
# only bounded window is `no … found`'s 80 characters.
_NOT_FOUND = re.compile(
    r"\bnot\s+(?:yet\s+)?found\b|\bno\b.{0,80}?\bfound\b|\bfound\s+no(?:thing)?\b"
    r"|\b(?:could\s+not|couldn't|cannot|can't|did\s+not|didn't)\s+(?:find|locate)\b",
    re.I,
)
_EXISTENCE = re.compile(
    r"\b(?:does\s+not|doesn't|do\s+not|don't)\s+exist\b|\bno\s+such\b|\bthere\s+(?:is|are)\s+no\b"
    r"|\bnon-?existent\b|\bnever\s+existed\b",
    re.I,
)
_SCOPE = re.compile(r"\bsearched(?:\s+in)?\s*:?\s*([^)\n]*)", re.I)
_SPLIT = re.compile(r",|\s+and\s+")


@dataclass(frozen=True)
class Statement:
    text: str
    scope: frozenset[str] | None  # None: no search scope named
    not_found: bool  # says "not found" (and is no existence claim)
    existence_claim: bool  # says "does not exist" / "no such" ...


def _scope(text: str) -> frozenset[str] | None:
    m = _SCOPE.search(text)
    if m is None:
        return None
    entries = {e.strip().rstrip(".").strip() for e in _SPLIT.split(m.group(1))}
    entries.discard("")
    return frozenset(entries) or None


def statements(text: str) -> list[Statement]:
    out = []
    for line in (text or "").splitlines():
        for part in line.split(";"):
            if "searched" not in part.lower():
                continue  # no scope: not a statement this module judges
            claim = _EXISTENCE.search(part) is not None
            out.append(Statement(part.strip(), _scope(part), not claim and _NOT_FOUND.search(part) is not None, claim))
    return out


def absence_statements(text: str) -> list[Statement]:
    """Every statement of `text` that asserts an absence — says something was not found, or does
    not exist — with or without a search scope (`statements` keeps only the scoped ones)."""
    out = []
    for line in (text or "").splitlines():
        for part in line.split(";"):
            claim = _EXISTENCE.search(part) is not None
            not_found = not claim and _NOT_FOUND.search(part) is not None
            if claim or not_found:
                out.append(Statement(part.strip(), _scope(part), not_found, claim))
    return out


@dataclass(frozen=True)
class Judged:
    """One statement of a summary judged on its own text (`judge_statements`)."""

    text: str
    scope: frozenset[str] | None
    judged_as: str  # negative_finding | existence_claim
    problem: str | None  # None: it keeps the rule


def judge_statements(section: str, whole: str) -> list[Judged]:
    """The absence statements a summary makes, each judged without its inputs (seed §6: a negative
    conclusion keeps its search scope, "not yet found" never becomes "does not exist"):

    - every statement of its negative-findings section (`section`) that asserts an absence: a
      not-found statement passes only with a scope; an existence claim always fails, scope or not;
    - every other statement of the summary (`whole`) that names a search scope and asserts
      existence fails too (statements elsewhere without "searched" are not judged: error lines
      quote "not found" and "no such file" verbatim).
    Judged once per distinct statement text, in order."""
    out: dict[str, Judged] = {}
    for s in absence_statements(section):
        if s.existence_claim:
            problem = "asserts that something does not exist; a search shows only that it was not found"
        elif s.scope is None:
            problem = "a negative finding without the scope it was searched in"
        else:
            problem = None
        out.setdefault(s.text, Judged(s.text, s.scope, "existence_claim" if s.existence_claim else "negative_finding", problem))
    for s in statements(whole):
        if s.existence_claim and s.scope is not None and s.text not in out:
            out[s.text] = Judged(s.text, s.scope, "existence_claim", "asserts that something does not exist over a search scope")
    return list(out.values())


def negative_findings(text: str) -> list[Statement]:
    """The statements of `text` that say something was not found, with the scope searched."""
    return [s for s in statements(text) if s.not_found and s.scope is not None]


def findings_not_kept(inputs: list[str], summary: str) -> list[str]:
    """The negative findings of `inputs` that `summary` does not keep with the same scope (as many
    findings per scope as the inputs hold distinct ones), one line per scope short."""
    problems = []
    wanted = Counter(f.scope for f in {f.text: f for text in inputs for f in negative_findings(text)}.values())
    kept = Counter(f.scope for f in negative_findings(summary))
    for scope, n in wanted.items():
        if kept[scope] < n:
            problems.append(f"{n - kept[scope]} negative finding(s) searched in {', '.join(sorted(scope))} not kept with that scope")  # type: ignore[arg-type]
    return problems


def lost_findings(inputs: list[str], summary: str) -> list[str]:
    """Why `summary` does not keep the negative findings of `inputs` (empty: it does)."""
    problems = [
        f"states an existence claim with a search scope (a search shows only 'not found'): {s.text!r}"
        for s in statements(summary)
        if s.existence_claim and s.scope is not None
    ]
    return problems + findings_not_kept(inputs, summary)
