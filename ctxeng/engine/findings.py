"""Negative findings and the scope they were searched in (seed §6: "not yet found" must not become
"does not exist"; a negative finding keeps its search scope).

Contract: text is read one *statement* at a time — a line, or a part of a line between `;` (the
structured summaries join a section's entries with `; `). A statement is

- a **negative finding** when it says something was not found — `not found`, `not yet found`,
  `no … found` (within 80 characters), `found no`/`found nothing`, `could not`/`couldn't`/
  `cannot`/`can't`/`did not`/`didn't` + `find`/`locate`, or any statement of absence by meaning
  (`is_absence`: `has no`, `lacks` ...) — and names a search scope;
- an **existence claim** when it says something does not exist — `does not exist`,
  `doesn't exist`, `do not exist`, `don't exist`, `no such`, `there is no`, `there are no`,
  `nonexistent`/`non-existent`, `never existed` — whatever else it says. An existence claim is
  never read as a negative finding: a search shows only that something was not found.

The **scope** is what follows `searched` (`searched:`, `searched in`, optionally in parentheses;
or `queried`, `query:`)
up to the closing parenthesis or the end of the statement: its entries split on `,` and ` and `,
stripped of spaces and a final `.`, compared as a set (`(searched: README.md, docs/, skills/)` and
`searched in docs/, skills/ and README.md` are the same scope; case is kept, paths are
case-sensitive). A statement without a scope is neither a finding nor a rewritten one here.

Beside the phrases, a statement **of absence** is judged by meaning (`is_absence`: a negation bound
to a verb of existence, possession or support — `has no`, `lacks`, `is absent from`, `does not
support`, `there is no`, `no X was found`, `missing`, `nowhere` — and not a directive, question,
condition, run outcome or quoted error line). `judge_statements(summary)` reads every section of a
summary or checkpoint but the directive ones (goal, constraints, next steps, open items): a statement
of absence needs its scope (`searched …`, `queried …`, `query: …`), in Confirmed Claims a source ref
beside it (`[repo@commit:path]`) will do; in the negative-findings section an existence claim always
fails. A statement failing it is not admitted as fact: the summary fails
`conflicts_and_negative_findings` and is excluded (`transforms`).

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
_SCOPE = re.compile(r"\b(?:searched|queried)(?:\s+in)?\s*:?\s*([^)\n]*)|\bquery\s*:\s*([^)\n]*)", re.I)
_SPLIT = re.compile(r",|\s+and\s+")


# --------------------------------------------------------------------------- absence by meaning
#
# A statement of absence is a negation bound to a verb of existence, possession or support (or a
# word that is one: `lacks`, `absent`, `missing`, `nowhere`), so a new phrasing of an old meaning
# needs no new rule: `has no`, `lacks`, `is absent from`, `does not support`, `there is no`, `no X
# was found`, `is never defined`, `none of … implement`, `zero matches`. Not absence: the negation
# words used for something else (`no-op`, `not only`, `no longer`, `no need`, `--no-verify`,
# `None` the value), directives and questions (`Do not push`, `must not`, `whether`, `?`),
# conditions that describe behaviour (`if no config is found, …`), run outcomes (`no errors`,
# `without errors`, `no failures`), a past fix (`added the missing import`) and quoted error lines
# (`FileNotFoundError: … No such file`), which summaries keep verbatim. Measured on
# tests/data/absence_sentences.json by bench/absence.py (precision and recall).

_VERBS = (r"exist|have|contain|include|support|provide|implement|handle|define|expose|use|call|register|mention|"
          r"reference|ship|offer|declare|describe|document|set|configure|appear|occur|accept|guarantee|keep|carry|"
          r"cover|list|check|enforce|validate|record|store|emit|log|retry|cite")
_PARTICIPLES = (r"supported|implemented|defined|declared|exported|configured|configurable|mentioned|documented|included|"
                r"used|called|referenced|registered|present|available|set|handled|found|located|exposed|provided|"
                r"covered|listed|checked|enforced|validated|recorded|stored|rate[\s-]limited|guaranteed|cited")
_ABSENCE = re.compile(
    "|".join([
        r"\b(?:does|do|did|is|are|was|were|has|have|had|can|could|will|would)(?:\s+not|n't)\s+(?:yet\s+|even\s+|actually\s+)?(?:" + _VERBS + r")\w*\b",
        r"\b(?:cannot|can't|doesn't|don't|didn't)\s+(?:" + _VERBS + r")\w*\b",
        r"\b(?:(?:is|are|was|were|be|been)\s+(?:not|never)|isn't|aren't|wasn't|weren't)\s+(?:yet\s+)?(?:" + _PARTICIPLES + r")\b",
        r"\bnever\s+(?:(?:" + _VERBS + r")\w*|" + _PARTICIPLES + r"|existed)\b",
        # a verb of possession or support with `no` as its object's determiner: has no, keeps no, offers no
        r"\b(?:(?:" + _VERBS + r")(?:s|ed)?|had|has|offers|keeps|returns|gives)\s+(?:no|neither)\s+\w",
        r"\bthere(?:\s+(?:is|are|was|were)(?:\s+no\b|n't)|'s\s+no\b)",
        r"\b(?:nobody|no\s+one)\s+\w+s\b",
        r"\bnone\s+(?:exists?|(?:is|are|was|were)\s+(?:found|present|there|available|left))\b",  # not `None is returned`
        r"\bno\s+such\b",
        r"\bno\s+[\w./-]+(?:\s+[\w./-]+){0,6}?\s+(?:was|were|is|are)?\s*(?:found|exists?|present)\b",
        r"\b(?:not\s+(?:yet\s+)?found)\b|\bfound\s+no(?:thing)?\b",
        r"\b(?:could\s+not|couldn't|cannot|can't|did\s+not|didn't)\s+(?:find|locate)\b",
        r"\black(?:s|ed|ing)?\b",
        r"\b(?:is|are|was|were)\s+absent\b|\babsent\s+(?:from|in)\b",
        r"\b(?:is|are|was|were)\s+missing\b|^[^,;:]*?\S\s+missing\b(?!\s+(?:import|argument|check|value|key|field))",
        r"\bnowhere\b",
        r"\bnon-?existent\b",
        r"\bnone\s+of\s+(?:the\s+)?\w+",
        r"\bnothing\s+(?:in|under|calls|uses|implements|defines|references|mentions)\b",
        r"\b(?:zero|0)\s+(?:matches|occurrences|results|hits|callers|usages)\b",
        r"\bun(?:supported|implemented)\b",
    ]),
    re.I,
)
# Whole statements that assert nothing absent, whatever cue they hold.
_NOT_ASSERTED = re.compile(
    r"\?\s*$|\bwhether\b|^\s*(?:do\s+not|don't|never|must|should|avoid|check|look|open\s+question|next)\b"
    r"|\b(?:must|should|shall)\s+not\b"
    r"|\b(?:if|when|whenever|unless|in\s+case)\b"  # a condition: behaviour, not a finding
    r"|^\s*(?:added|fixed|removed|restored)\b"  # a past change names what was added, not what is absent
    r"|\b[A-Z]\w*(?:Error|Exception)\b\s*:|^\s*(?:fatal|error|E)\s*:|\berrno\b",  # a quoted error line
    re.I,
)
# Negation words used for something else, removed before the cues are looked for.
_IDIOMS = re.compile(
    r"\bno-\w+|--no-[\w-]+|\b\d{3}\s+not\s+found\b|\bnot\s+only\b|\bno\s+longer\b|\bno\s+(?:need|matter|doubt)\b"
    r"|\b(?:no|without|with\s+no|zero|0)\s+(?:errors?|failures?|warnings?|exceptions?|regressions?|issues?|problems?)\b",
    re.I,
)


def is_absence(statement: str) -> bool:
    """Does `statement` assert that something is absent (not found, does not exist, has no, lacks,
    does not support ...)? See the comment above: a classifier by meaning, not a phrase list."""
    if _NOT_ASSERTED.search(statement):
        return False
    return _ABSENCE.search(_IDIOMS.sub(" ", statement)) is not None


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
    entries = {e.strip().rstrip(".").strip() for e in _SPLIT.split(m.group(1) or m.group(2) or "")}
    entries.discard("")
    return frozenset(entries) or None


def statements(text: str) -> list[Statement]:
    out = []
    for line in (text or "").splitlines():
        for part in line.split(";"):
            if _SCOPE.search(part) is None:
                continue  # no scope: not a statement this module judges
            claim = _EXISTENCE.search(part) is not None
            absent = _NOT_FOUND.search(part) is not None or is_absence(part)  # by phrase or by meaning
            out.append(Statement(part.strip(), _scope(part), not claim and absent, claim))
    return out


def _parts(line: str) -> list[str]:
    """A line's statements: split on `;` and on the ` | ` that joins done / in progress / blocked."""
    return [p for part in line.split(";") for p in part.split(" | ")]


def absence_statements(text: str, *, by_meaning: bool = True) -> list[Statement]:
    """Every statement of `text` that asserts an absence — says something was not found, or does
    not exist, or (by meaning, `is_absence`) has no, lacks, does not support ... — with or without a
    search scope (`statements` keeps only the scoped ones). `by_meaning=False`: only the not-found
    and existence phrases, read whatever the statement's form (the negative-findings section)."""
    out = []
    for line in (text or "").splitlines():
        for part in _parts(line):
            claim = _EXISTENCE.search(part) is not None
            if by_meaning and not is_absence(part):
                continue
            if claim or is_absence(part) or _NOT_FOUND.search(part) is not None:
                out.append(Statement(part.strip(), _scope(part), not claim, claim))
    return out


# Sections that direct rather than assert (`Goal: make sure the API has no breaking change`,
# `Next Steps: check whether …`): their statements are not findings and are not judged.
_DIRECTIVE = re.compile(r"^(?:goal|(?:hard\s+)?constraints|next\s+steps?|open\s+(?:items|questions))$", re.I)
_NEGATIVE_SECTION = re.compile(r"^conflicts(?:\s+and\s+negative\s+findings)?$", re.I)
_CLAIMS_SECTION = re.compile(r"^(?:confirmed\s+)?claims$", re.I)
_HEADING = re.compile(r"^[^\S\n]*([A-Za-z][A-Za-z /]{0,60}?)\s*:(.*)$")
# A source ref written beside a claim: `[repo@commit:path:lines]`, `[url=…]`, or a URL.
_SOURCE_REF = re.compile(r"\[[^\]\n]*[@:/=][^\]\n]*\]|\bhttps?://\S+")


def sections(text: str) -> list[tuple[str | None, str]]:
    """(heading, body) for each `Heading:` of a summary, in order; text before the first: heading None."""
    out: list[tuple[str | None, list[str]]] = [(None, [])]
    for line in (text or "").splitlines():
        m = _HEADING.match(line)
        if m is not None and len(m.group(1).split()) <= 6:
            out.append((m.group(1).strip(), [m.group(2)]))
        else:
            out[-1][1].append(line)
    return [(h, "\n".join(body)) for h, body in out if h is not None or any(b.strip() for b in body)]


@dataclass(frozen=True)
class Judged:
    """One statement of a summary judged on its own text (`judge_statements`)."""

    text: str
    scope: frozenset[str] | None
    judged_as: str  # negative_finding | existence_claim
    problem: str | None  # None: it keeps the rule
    section: str | None = None


_UNSCOPED = "a statement of absence without the scope it was searched in is not admitted as fact"


def judge_statements(text: str) -> list[Judged]:
    """The absence statements a summary makes, in any section, each judged without its inputs
    (seed §6: a negative conclusion keeps its search scope, "not yet found" never becomes "does
    not exist"):

    - its negative-findings section (`Conflicts and Negative Findings:`): every statement asserting
      an absence, by phrase or by meaning; a not-found statement passes only with a scope, an
      existence claim always fails, scope or not;
    - its claims (`Confirmed Claims:`): a statement of absence passes only with a source ref beside
      it (`[repo@commit:path]`) or a scope; "does not exist" without one fails;
    - every other section but the directive ones (goal, constraints, next steps, open items):
      a statement of absence by meaning (`is_absence`) passes only with a scope; an existence
      claim over a search scope fails ("searched" shows only "not found").
    Judged once per distinct statement text, in order."""
    out: dict[str, Judged] = {}
    for heading, body in sections(text):
        name = " ".join((heading or "").split())
        if heading is not None and _DIRECTIVE.match(name):
            continue
        negative = heading is not None and _NEGATIVE_SECTION.match(name) is not None
        for st in absence_statements(body, by_meaning=not negative):
            kind = "existence_claim" if st.existence_claim else "negative_finding"
            if negative and st.existence_claim:
                problem: str | None = "asserts that something does not exist; a search shows only that it was not found"
            elif heading is not None and _CLAIMS_SECTION.match(name):
                sourced = st.scope is not None or _SOURCE_REF.search(st.text) is not None
                problem = None if sourced else "a claim of absence without a source ref or a search scope is not admitted as fact"
            elif st.existence_claim and st.scope is not None:
                problem = "asserts that something does not exist over a search scope"
            elif st.scope is None:
                problem = _UNSCOPED
            else:
                problem = None
            out.setdefault(st.text, Judged(st.text, st.scope, kind, problem, heading))
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
