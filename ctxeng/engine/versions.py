"""Objects, versions and parts: which readings a later event makes stale (DESIGN "What the agent read").

An item that shows what an object holds is a *reading* of it; an item that changed it is a
*write*. Both are named in the item's `source_ref`: flat (`path`, `url`, `artifact_id`,
`memory_id` or a declared `object`, with `lines`/`part`, `revision`/`commit` and `access:
write`), or as a list `objects: [{access, path, repo, lines, part, revision|commit}, ...]` when
one call read or wrote several (a shell command).

- **Identity.** An object is named by all of its identity: a file by `repo` + `path` (a path
  without a repo is another object than the same path in a named repo), a page by its URL, a plan
  or artifact by its id, a memory by its key, a declared object by every argument its declaration
  names (`object`, plus `within` for further qualifiers).
- **Version.** A state of the object: a stated `revision` or `commit` (one the history gives), or,
  when none is stated, the state between two writes.
- **Part.** A range of one version: `lines` ("120-160", "5", "120-", "1-20,40-50"), or a `part`
  whose lines the history does not state ("lines matching 'Backoff'"); neither is the whole object.
- **A write** changes the object (`access: write`); one that puts new content in place of what was
  there (its range, or all of it) says `replaces: true` (an editor's `create`, a plan rewritten
  whole): only such a write makes an earlier write's arguments obsolete (ctxeng.engine.elision).

The rule (judged once per assembly, over every candidate, before any gate excludes one):

1. Parts of one version never make each other stale. A later reading whose content covers an
   earlier one's, equal where they overlap, at the same version, replaces it as a **duplicate**
   (excluded at ranking, reason `duplicate`, naming the covering item and both ranges).
2. A reading is **stale** when the object changed after it: a later write of the object (any
   range); a later reading at a higher numeric revision; or a later reading that overlaps it and
   differs where they overlap (the object changed in between, though no write was seen).
3. Calls of one assistant turn are concurrent: never versions of each other, and a write in the
   same turn as a reading does not make it stale.
4. Two readings at the same *stated* revision or commit, overlapping, that differ there are a
   **conflict**: both kept, recorded in the manifest's `conflicts`, never "newer".
5. An item that fails its own permission, scope or integrity gate supersedes nothing;
   an item that writes is never stale (it says what was done); objects `required_revisions` names
   are judged by that rule alone; derived items (summaries, excerpts) are judged through their inputs.
6. Only what can be shown is claimed. Content is compared where the lines are known: a line-numbered
   output (`cat -n`, `nl`, an editor's view), or an exact range whose text has that many lines;
   otherwise two whole readings by their hashes. A part whose lines are unknown is never a duplicate
   and never stale but by a write. Two stated commits have no order the engine can know.

"Later" is the history's order: a tool result stands at its call's assistant turn, another item at
its turn, and one turn's calls are concurrent; then a higher numeric revision; then the later turn;
then the later `observed_at`; the order candidates are given in never decides.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .working import Assembly, Candidate

# The source_ref fields that name an object; first match wins.
OBJECT_KEYS = ("object", "path", "url", "artifact_id", "memory_id")
# Further identity beside the key: a path's repository; other qualifiers a declaration names.
QUALIFIERS = ("repo", "within")
# Authority text and the agent's own turns are not readings of an object.
NOT_OBJECT_READS = ("system_policy", "user_request", "runtime_state", "model_output", "model_summary",
                    "checkpoint_summary", "repository")
_WORDS = {"object": "object", "path": "path", "url": "page", "artifact_id": "artifact", "memory_id": "memory"}

# One line of numbered output: `cat -n`/`nl` ("   120\ttext"), grep -n / SWE-agent ("120:text").
_NUMBERED = re.compile(r"^\s*(\d{1,7})(?:\t|:)(.*)$")
_WRAPPER_LINES = 5  # unnumbered header/footer lines a numbered view may carry (file name, "(N more lines)")


@dataclass(frozen=True)
class Reading:
    """One object an item reads or writes, with the part and the version it names."""

    key: tuple[str, ...]
    label: str
    write: bool
    lines: tuple[tuple[int, int | None], ...] | None = None
    part: str | None = None
    version: str | None = None
    replaces: bool = False  # a write that puts new content in place of what was there (`source_ref.replaces`)

    @property
    def whole(self) -> bool:
        return self.lines is None and self.part is None

    def range_text(self) -> str:
        if self.lines is not None:
            if len(self.lines) == 1 and self.lines[0][0] == self.lines[0][1]:
                return f"line {self.lines[0][0]}"
            return "lines " + ",".join(f"{a}-{'' if b is None else b}" if b != a else str(a) for a, b in self.lines)
        return self.part or "all of it"


@dataclass
class Verdict:
    """What the rule decided for one assembly: stale and duplicate items (item_id -> detail, and the
    item or event that made it so) and the conflicts it recorded."""

    stale: dict[str, str] = field(default_factory=dict)
    stale_by: dict[str, str] = field(default_factory=dict)
    duplicate: dict[str, str] = field(default_factory=dict)
    duplicate_of: dict[str, str] = field(default_factory=dict)
    conflicts: list[dict] = field(default_factory=list)


def parse_lines(value: object) -> tuple[tuple[int, int | None], ...] | None:
    """`"120-160"`, `"5"`, `"120-"`, `"1-20,40-50"` or `[a, b]` (b = -1 or None: to the end) as
    ranges; None for anything else (a range that cannot be read is no range: the whole object)."""
    if isinstance(value, (list, tuple)) and len(value) == 2 and all(isinstance(v, int) or v is None for v in value):
        a, b = value
        if isinstance(a, int) and a >= 1:
            return ((a, None if b is None or b < 0 else max(a, b)),)
        return None
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return ((value, value),)
    if not isinstance(value, str):
        return None
    out: list[tuple[int, int | None]] = []
    for piece in value.replace(" ", "").split(","):
        m = re.fullmatch(r"(\d+)(?:([-:])(\d*))?", piece)
        if m is None:
            return None
        a = int(m.group(1))
        b: int | None = a if m.group(2) is None else (int(m.group(3)) if m.group(3) else None)
        if a < 1 or (b is not None and b < a):
            return None
        out.append((a, b))
    return tuple(out) or None


def _reading(ref: dict, item_revision: object, write: bool) -> Reading | None:
    for key in OBJECT_KEYS:
        value = ref.get(key)
        if isinstance(value, (str, int)) and not isinstance(value, bool) and str(value):
            quals = tuple(str(ref.get(q)) if ref.get(q) not in (None, "") else "" for q in QUALIFIERS)
            label = f"{_WORDS[key]} {str(value)!r}" + "".join(
                f" in {q} {v!r}" if q == "repo" else f" ({v})" for q, v in zip(QUALIFIERS, quals, strict=True) if v
            )
            version = next((ref[k] for k in ("revision", "commit") if ref.get(k) is not None), item_revision)
            part = ref.get("part")
            return Reading(
                key=(key, str(value), *quals), label=label, write=write,
                lines=parse_lines(ref.get("lines")),
                part=str(part) if isinstance(part, str) and part.strip() else None,
                version=None if version is None else str(version),
                replaces=write and ref.get("replaces") is True,
            )
    return None


def readings(cand: Candidate) -> list[Reading]:
    """The objects an item reads or writes, as its source_ref names them (none for authority text,
    the agent's own turns and derived items)."""
    item = cand.item
    if item.source_type in NOT_OBJECT_READS or item.input_item_ids:
        return []
    ref = item.source_ref
    listed = ref.get("objects")
    if isinstance(listed, list) and listed:
        out = []
        for entry in listed:
            if isinstance(entry, dict):
                r = _reading({**entry, "repo": entry.get("repo", ref.get("repo"))}, None, entry.get("access") == "write")
                if r is not None:
                    out.append(r)
        return out
    r = _reading(ref, item.revision, ref.get("access") == "write")
    return [r] if r is not None else []


def _numeric(version: str | None) -> int | None:
    return int(version) if version is not None and version.isdecimal() else None


def _place(asm: Assembly, cand: Candidate, calls: dict[str, tuple[int | None, int]]) -> tuple[int | None, int | None]:
    """(assistant turn, call position): a tool result at its call's, a turn at its index, else nowhere."""
    item = cand.item
    if item.call_id is not None and item.call_id in calls:
        return calls[item.call_id]
    if item.turn is not None:
        return (item.turn.index, None)
    return (None, None)


def _later(a: Candidate, pa, ra: Reading, b: Candidate, pb, rb: Reading) -> bool | None:
    """Is b's reading of the object after a's? True, False, or None when they are concurrent or
    nothing orders them: calls of one turn are concurrent; else a higher numeric revision, else the
    later turn (calls without turns by their order), else the later `observed_at`."""
    (ta, ca), (tb, cb) = pa, pb
    if ta is not None and ta == tb:
        return None  # one assistant turn's calls are concurrent, whatever revisions they state
    na, nb = _numeric(ra.version), _numeric(rb.version)
    if na is not None and nb is not None and na != nb:
        return nb > na
    if ta is not None and tb is not None:
        return tb > ta
    if ta is None and tb is None and ca is not None and cb is not None and ca != cb:
        return cb > ca
    seen, other = a.item.observed_at, b.item.observed_at
    if seen is not None and other is not None and seen != other:
        return other > seen
    return None


# --------------------------------------------------------------------------- content on a range


@dataclass(frozen=True)
class _Text:
    """A reading's lines by number where they are known (`sure`), and its raw lines."""

    by_number: dict[int, str] | None
    raw: list[str]


def _text(cand: Candidate, r: Reading) -> _Text:
    content = cand.content or ""
    raw = [line.rstrip() for line in content.replace("\r\n", "\n").split("\n")]
    while raw and raw[-1] == "":
        raw.pop()
    numbered = _numbered(raw)
    if numbered is not None:
        return _Text(numbered, raw)
    if r.lines is not None and len(r.lines) == 1 and r.lines[0][1] is not None:
        a, b = r.lines[0]
        if len(raw) == b - a + 1:
            return _Text({a + i: line for i, line in enumerate(raw)}, raw)
    return _Text(None, raw)


def _numbered(raw: list[str]) -> dict[int, str] | None:
    """Lines by number when the output numbers every line (a few unnumbered header and footer lines
    aside) with numbers that only grow; else None."""
    hits = [(_NUMBERED.match(line), i) for i, line in enumerate(raw)]
    numbered = [i for m, i in hits if m is not None]
    if not numbered or numbered[0] > _WRAPPER_LINES or len(raw) - 1 - numbered[-1] > _WRAPPER_LINES:
        return None
    out: dict[int, str] = {}
    last = 0
    for i in range(numbered[0], numbered[-1] + 1):
        m = hits[i][0]
        if m is None:
            if raw[i].strip():
                return None
            continue
        n = int(m.group(1))
        if n <= last:
            return None
        out[n] = m.group(2).rstrip()
        last = n
    return out


def _declared_covers(outer: Reading, inner: Reading) -> bool:
    """Does `outer`'s stated range hold all of `inner`'s (a part of unknown lines covers only itself)?"""
    if outer.whole:
        return True
    if outer.part is not None or inner.part is not None:
        return outer.part is not None and outer.part == inner.part and outer.lines == inner.lines
    if inner.lines is None:
        return False
    assert outer.lines is not None
    return all(any(a <= lo and (b is None or (hi is not None and hi <= b)) for a, b in outer.lines) for lo, hi in inner.lines)


def _compare(a: Candidate, ra: Reading, b: Candidate, rb: Reading) -> tuple[str, str]:
    """How b's content stands to a's where they overlap: ("covers" | "equal" | "differs" | "unknown", words)."""
    if ra.whole and rb.whole or (ra.lines == rb.lines and ra.part == rb.part):
        if a.item.content_hash == b.item.content_hash:
            return "covers", "the same content"
        if ra.whole and rb.whole:
            return "differs", "different content"
        ta, tb = _text(a, ra), _text(b, rb)
        if ta.by_number is None or tb.by_number is None:
            return "unknown", ""
    else:
        ta, tb = _text(a, ra), _text(b, rb)
    if ta.by_number is None:
        return "unknown", ""
    if tb.by_number is not None:
        common = sorted(set(ta.by_number) & set(tb.by_number))
        if common:
            changed = [n for n in common if ta.by_number[n] != tb.by_number[n]]
            if changed:
                return "differs", f"line {changed[0]} differs"
            if set(ta.by_number) <= set(tb.by_number):
                return "covers", "the same lines"
            return "equal", "the same lines where they overlap"
    # A whole or unnumbered later reading: the earlier lines found in it, in order, are the same.
    wanted = [ta.by_number[n] for n in sorted(ta.by_number)]
    contiguous = sorted(ta.by_number) == list(range(min(ta.by_number), max(ta.by_number) + 1))
    if contiguous and wanted and _contains(tb.raw, wanted) and _declared_covers(rb, ra):
        return "covers", "the same lines"
    return "unknown", ""


def _contains(haystack: list[str], block: list[str]) -> bool:
    first = block[0]
    n = len(block)
    for i, line in enumerate(haystack):
        if line.endswith(first) and i + n <= len(haystack) and all(haystack[i + k].endswith(block[k]) for k in range(n)):
            return True
    return False


# --------------------------------------------------------------------------- the judgement


def _fails_own_gates(asm: Assembly, cand: Candidate) -> bool:
    """An item that fails its own permission, scope or integrity gate supersedes nothing: another
    tenant's, another subject's or a forged item cannot take live evidence out. (An expired reading
    still shows that the object changed.)"""
    from . import gates

    return any(not check(asm, cand).passed for check in (gates.permission, gates.tenant_and_project_scope,
                                                         gates.structural_integrity))


def judge(asm: Assembly) -> Verdict:
    """The stale, duplicate and conflicting readings among the assembly's candidates (once per assembly)."""
    if asm.versions is not None:
        return asm.versions
    if asm.required_revisions is None:
        asm.required_revisions = asm.request.required_revision_map()
    required = asm.required_revisions
    calls = {c.call_id: (c.turn, None if c.turn is not None else n) for n, c in enumerate(asm.request.tool_calls)}
    groups: dict[tuple[str, ...], list[tuple[Candidate, Reading, tuple]]] = {}
    per_item: dict[str, list[Reading]] = {}
    for cand in asm.candidates:
        found = readings(cand)
        if not found:
            continue
        per_item[cand.item_id] = found
        place = _place(asm, cand, calls)
        for r in found:
            if r.key[1] in required or (r.key[2] and r.key[2] in required):
                continue
            groups.setdefault(r.key, []).append((cand, r, place))
    verdict = Verdict()
    failing: dict[str, bool] = {}

    def eligible(c: Candidate) -> bool:
        if c.item_id not in failing:
            failing[c.item_id] = _fails_own_gates(asm, c)
        return not failing[c.item_id]

    # item_id -> per reading of it: (the event that made it stale, its words) / the covering item
    stale_events: dict[str, dict[Reading, tuple[str, str]]] = {}
    covered: dict[str, dict[Reading, tuple[str, str]]] = {}
    for members in groups.values():
        if len(members) < 2:
            continue
        for a, ra, pa in members:
            if ra.write or any(r.write for r in per_item[a.item_id]):
                continue
            single = len(per_item[a.item_id]) == 1
            newest: tuple | None = None  # (b, rb, pb, words)
            cover: tuple | None = None
            for b, rb, pb in members:
                if b is a:
                    continue
                order = _later(a, pa, ra, b, pb, rb)
                both_stated = ra.version is not None and rb.version is not None
                if not rb.write and single and len(per_item[b.item_id]) == 1 and both_stated and ra.version == rb.version:
                    relation, words = _compare(a, ra, b, rb)
                    if relation == "differs" and a.item_id < b.item_id:
                        verdict.conflicts.append({
                            "object": ra.label, "revision": ra.version, "item_ids": [a.item_id, b.item_id],
                            "ranges": [ra.range_text(), rb.range_text()],
                            "detail": f"{ra.label} at revision {ra.version!r}: {words} between items {a.item_id!r} and {b.item_id!r}",
                        })
                if order is not True or not eligible(b):
                    continue
                if rb.write:
                    words = f"a write of {ra.label} ({rb.range_text() if not rb.whole else 'any range'})"
                    words += f" by item {b.item_id!r}" + (f" (call {b.item.call_id!r})" if b.item.call_id else "")
                    words += f" after this item read {ra.range_text()}"
                    newest = _newest(newest, (b, rb, pb, words), a, pa, ra)
                    continue
                na, nb = _numeric(ra.version), _numeric(rb.version)
                if na is not None and nb is not None and nb > na:
                    words = f"a reading of {ra.label} at revision {rb.version!r} (item {b.item_id!r}); this item read revision {ra.version!r}"
                    newest = _newest(newest, (b, rb, pb, words), a, pa, ra)
                    continue
                if both_stated and ra.version != rb.version:
                    continue  # two stated commits: no order the engine can know
                if not single or len(per_item[b.item_id]) != 1:
                    continue  # one call's output of several objects: its lines are not one object's
                relation, words = _compare(a, ra, b, rb)
                if relation == "differs":
                    if both_stated:
                        continue  # the same stated version differing: a conflict, recorded above
                    words = (f"{ra.label} changed after this reading: a later reading (item {b.item_id!r}, {rb.range_text()}) "
                             f"shows {words}" + ("" if ra.whole else f" in this item's {ra.range_text()}"))
                    newest = _newest(newest, (b, rb, pb, words), a, pa, ra)
                elif relation == "covers" and (ra.part is None or ra.part == rb.part):
                    cover = (b, rb, pb, f"a later reading of {ra.label} (item {b.item_id!r}, {rb.range_text()}) holds "
                                        f"this item's {ra.range_text()} unchanged")
            if newest is not None:
                stale_events.setdefault(a.item_id, {})[ra] = (newest[0].item_id, newest[3])
            elif cover is not None:
                covered.setdefault(a.item_id, {})[ra] = (cover[0].item_id, cover[3])
    for item_id, found in per_item.items():
        events = stale_events.get(item_id, {})
        if events and all(r in events for r in found):
            by = [events[r] for r in found]
            verdict.stale[item_id] = "; ".join(dict.fromkeys(f"stale: {w}" for _, w in by))
            verdict.stale_by[item_id] = by[-1][0]
            continue
        dup = covered.get(item_id, {})
        if dup and all(r in dup or r in events for r in found):
            by = [dup.get(r) or events[r] for r in found]
            verdict.duplicate[item_id] = "; ".join(dict.fromkeys(w for _, w in by))
            verdict.duplicate_of[item_id] = by[-1][0]
    asm.versions = verdict
    return verdict


def _newest(current: tuple | None, candidate: tuple, a: Candidate, pa, ra: Reading) -> tuple:
    """Of two events that make a reading stale, the earlier one: the first change after the reading
    is what made it stale (a later one would also have)."""
    if current is None:
        return candidate
    b, rb, pb, _ = candidate
    c, rc, pc, _ = current
    return candidate if _later(b, pb, rb, c, pc, rc) is True else current
