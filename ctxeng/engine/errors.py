"""Invalid input, explained by field path.

Every boundary (CLI, REST, policy editor) turns a pydantic `ValidationError` into `InvalidInput`,
whose messages read `candidates[3].item_id: field required`: the path a person would type to find
the field, then what is wrong with it.
"""

from __future__ import annotations

import json
import math
import re
from itertools import accumulate
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from .limits import MAX_JSON_DEPTH, MAX_JSON_INTEGER, MAX_POLICY_BYTES, MAX_YAML_NODES, MAX_YAML_SCALAR


class InvalidInput(ValueError):
    """A request or policy that cannot be assembled; `errors` name each field path."""

    def __init__(self, errors: list[str], *, what: str = "input") -> None:
        self.errors = errors
        self.what = what
        super().__init__(f"invalid {what}: " + "; ".join(errors))


class InputTooLarge(InvalidInput):
    """Input refused for its size alone, before it is parsed (the REST edge answers 413)."""


def _path(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


_OWN_PATH = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(?:\[\d+\]|\.[A-Za-z0-9_-]+)*: ")

_INDEX_PATH = re.compile(r"^\[\d+\]: ")

_MESSAGES = {
    "missing": "field required",
    "extra_forbidden": "unknown field",
}


def describe(exc: ValidationError) -> list[str]:
    """Turn a pydantic error into `path: message` lines, most specific path first."""
    lines: list[str] = []
    for err in exc.errors(include_url=False):
        loc = tuple(
            p for p in err["loc"] if not (isinstance(p, str) and (p.startswith("function-") or p == "[key]"))
        )
        msg = _MESSAGES.get(err["type"], err["msg"])
        if err["type"] in ("value_error", "assertion_error"):
            msg = msg.removeprefix("Value error, ").removeprefix("Assertion failed, ")
            # Model-level validators name the field below their model (`candidates[3].item_id: ...`,
            # `content: field required`): join that onto the model's own path.
            index = _INDEX_PATH.match(msg)
            if index and loc:  # a list validator naming the offending element: `expiry.on[0]: ...`
                lines.append(f"{_path(loc)}{msg}")
                continue
            own = _OWN_PATH.match(msg)
            if own:
                lines.append(f"{_path(loc)}.{msg}" if loc and not own.group(0).startswith("[") else msg)
                continue
        if err["type"] == "enum":
            expected = err.get("ctx", {}).get("expected", "")
            msg = f"unknown value {err.get('input')!r}; expected {expected}"
        path = _path(loc)
        lines.append(f"{path}: {msg}" if path else msg)
    return lines


def validate(model: type[BaseModel], data: Any, *, what: str) -> Any:
    if not isinstance(data, dict):
        raise InvalidInput([f"body: expected a JSON object, got {type(data).__name__}"], what=what)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise InvalidInput(describe(exc), what=what) from None


def load_json_text(text: str | bytes, *, what: str) -> Any:
    return loads_bounded(text, what=what)


NUL = "\x00"

# The depth scan: drop escaped backslashes and quotes (an escaped `\"` is no quote), keep only
# brackets and quotes, and every other quote-separated piece is outside a string.
_NOT_STRUCTURAL = bytes(sorted(set(range(256)) - set(b'[]{}"')))
_DEPTH_STEP = [0] * 256
_DEPTH_STEP[ord("[")] = _DEPTH_STEP[ord("{")] = 1
_DEPTH_STEP[ord("]")] = _DEPTH_STEP[ord("}")] = -1
# Longest integer literal that can be within MAX_JSON_INTEGER (sign included).
_INT_DIGITS = len(str(MAX_JSON_INTEGER)) + 1


def json_nesting(raw: bytes) -> int:
    """The deepest bracket nesting of a JSON text (brackets inside strings not counted), or, when
    the text opens at most MAX_JSON_DEPTH brackets in all, that count: a bound that is enough.

    Linear and without recursion (regex and `accumulate` run in C), so a 16 MB body of brackets
    is measured in milliseconds before `json.loads` would recurse into it.
    """
    opened = raw.count(b"[") + raw.count(b"{")
    if opened <= MAX_JSON_DEPTH:
        return opened
    # Escaped backslashes first, then escaped quotes: left to right, as JSON reads escapes. Two
    # C-level replaces build one buffer each, where a regex substitution over a body full of `\n`
    # escapes held a piece per escape (~60 MB for an 8 MB request).
    unescaped = raw.replace(b"\\\\", b"").replace(b'\\"', b"") if b"\\" in raw else raw
    brackets = b"".join(unescaped.translate(None, _NOT_STRUCTURAL).split(b'"')[::2])
    return max(accumulate(map(_DEPTH_STEP.__getitem__, brackets)), default=0)


class _Unrepresentable:
    """A number `read_json` refuses, kept in place so the error can name its field."""

    def __init__(self, text: str, why: str) -> None:
        self.text, self.why = text, why


class _DuplicateKey:
    """An object that names a key twice, kept in place so the error can name its path."""

    def __init__(self, key: str) -> None:
        self.key = key


# A lone surrogate (U+D800-U+DFFF) is no Unicode character: it cannot be encoded as UTF-8, so it
# can be neither hashed nor stored. JSON can carry one only as a `\ud800`-style escape.
_SURROGATE = re.compile("[\\ud800-\\udfff]")
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def shown(text: str) -> str:
    """`text` safe to put in an error message: a lone surrogate as its escape (`\ud800`), since a
    response holding the character itself could not be encoded."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def text_problem(text: str) -> str | None:
    """What makes `text` unstorable (a NUL, a lone surrogate), in words; None when it is fine.
    One rule for every string of a body, key or value, JSON or YAML."""
    if NUL in text:
        return "contains a NUL character (\\u0000)"
    found = _SURROGATE.search(text)
    if found:
        return (f"contains a lone surrogate (\\u{ord(found.group()):04x}), which is no Unicode character; "
                "send text that UTF-8 can encode")
    return None


def _problem(value: Any, path: str) -> str | None:
    """`path: message` for the first refused value (NUL, lone surrogate, non-finite or oversized
    number, repeated key), if any."""
    if isinstance(value, _Unrepresentable):
        shown_text = value.text if len(value.text) <= 24 else f"{value.text[:12]}... ({len(value.text)} characters)"
        return f"{path or 'body'}: {shown_text} {value.why}"
    if isinstance(value, _DuplicateKey):
        here = f"{path}.{shown(value.key)}" if path else shown(value.key)
        return f"{here}: duplicate key {shown(value.key)!r} (a JSON object names each key once)"
    if isinstance(value, str):
        problem = text_problem(value)
        return f"{path or 'body'}: {problem}" if problem else None
    if isinstance(value, dict):
        for key, item in value.items():
            here = f"{path}.{shown(str(key))}" if path else shown(str(key))
            problem = text_problem(str(key))
            if problem:
                return f"{here}: {problem}"
            found = _problem(item, here)
            if found:
                return found
    if isinstance(value, list):
        for index, item in enumerate(value):
            found = _problem(item, f"{path}[{index}]")
            if found:
                return found
    return None


_UTF8_BOM = b"\xef\xbb\xbf"


def _utf8_text(raw: bytes, *, what: str) -> str:
    """A body's bytes as text: UTF-8 only (RFC 8259 §8.1). The JSON parser would guess UTF-16
    and UTF-32 from the first bytes, and decode surrogates written in UTF-8 form; neither is sent
    by a client that means UTF-8, and both would be stored as something the client did not send."""
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")) or b"\x00" in raw[:4]:
        raise InvalidInput(["body: looks like UTF-16 or UTF-32; send JSON encoded as UTF-8"], what=what)
    try:
        return raw.removeprefix(_UTF8_BOM).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidInput([f"body: not UTF-8 (byte 0x{raw[exc.start]:02X} at offset {exc.start}); "
                            "send JSON encoded as UTF-8"], what=what) from None


def loads_bounded(raw: bytes | str, *, what: str = "input") -> Any:
    """Parse JSON within `limits`: InvalidInput names what is refused (nesting beyond
    MAX_JSON_DEPTH, found before the parser recurses; bytes that are not UTF-8; NaN, Infinity,
    overflowing floats, integers beyond MAX_JSON_INTEGER, NUL, lone surrogates, a key named twice
    in one object), by field path. The REST edge and the CLI both read JSON here."""
    given_text = isinstance(raw, str)
    if isinstance(raw, str):
        text = raw
        raw = raw.encode("utf-8", "surrogatepass")
    else:
        text = _utf8_text(raw, what=what)
    depth = json_nesting(raw)
    if depth > MAX_JSON_DEPTH:
        raise InvalidInput([f"body: nested {depth} levels deep, more than the limit {MAX_JSON_DEPTH}"], what=what)
    refused = False

    def parse_int(text: str) -> int | _Unrepresentable:
        nonlocal refused
        if len(text) <= _INT_DIGITS and abs(number := int(text)) <= MAX_JSON_INTEGER:
            return number
        refused = True
        return _Unrepresentable(text, f"is outside ±{MAX_JSON_INTEGER} (integers must be exact in JSON)")

    def parse_float(text: str) -> float | _Unrepresentable:
        nonlocal refused
        number = float(text)
        if math.isfinite(number):
            return number
        refused = True
        return _Unrepresentable(text, "overflows a floating-point number (numbers must be finite)")

    def parse_constant(text: str) -> _Unrepresentable:
        nonlocal refused
        refused = True
        return _Unrepresentable(text, "is not a JSON number (numbers must be finite)")

    def build_object(pairs: list[tuple[str, Any]]) -> dict[str, Any] | _DuplicateKey:
        # The parser keeps the last of two equal keys without a word; the YAML loader refuses
        # them, and so does this edge: a body that says two things means neither.
        nonlocal refused
        obj = dict(pairs)
        if len(obj) == len(pairs):
            return obj
        refused = True
        seen: set[str] = set()
        return _DuplicateKey(next(k for k, _ in pairs if k in seen or seen.add(k)))  # type: ignore[func-returns-value]

    try:
        data = json.loads(text, parse_int=parse_int, parse_float=parse_float, parse_constant=parse_constant,
                          object_pairs_hook=build_object)
    except json.JSONDecodeError as exc:
        raise InvalidInput([f"body: malformed JSON ({exc})"], what=what) from None
    # JSON can carry NUL and lone surrogates only as escapes (a str given by the CLI may hold a
    # surrogate itself); PostgreSQL cannot store either, and a surrogate cannot be hashed.
    # JSON's escapes are a lower-case \u; no lowered copy of the body is made.
    if (refused or "\\u0000" in text or ("\\u" in text and _SURROGATE_ESCAPE.search(text))
            or (given_text and _SURROGATE.search(text))):
        problem = _problem(data, "")
        if problem is not None:
            raise InvalidInput([problem], what=what)
    return data


class _YamlRefused(yaml.YAMLError):
    def __init__(self, mark: yaml.Mark, message: str) -> None:
        super().__init__(f"line {mark.line + 1}: {message}")


class _Yaml12Loader(yaml.SafeLoader):
    """SafeLoader where only true/false are booleans: YAML 1.1 reads the seed's `expiry.on` as True.

    Anchors and aliases (`&name`, `*name`, merge keys `<<: *name`) are refused, not expanded: a
    few kilobytes of nested aliases expand into hundreds of megabytes (a "billion laughs"), and a
    policy has no need for them. The error names the line. Nesting beyond MAX_JSON_DEPTH (the
    limit of every JSON body) is refused the same way, while composing: PyYAML's composer
    recurses per level, so 10,000 nested brackets would otherwise end in a RecursionError.
    Integers follow JSON's bound (MAX_JSON_INTEGER): one beyond it is kept as `_Unrepresentable`
    so the error can name its field, and `int()` never sees 5,000 digits (Python refuses more
    than 4,300 with a ValueError).
    """

    _depth = 0
    unrepresentable = False

    def compose_document(self):
        # `%YAML 1.1` would ask for the 1.1 reading this loader does not give, and `%TAG` renames
        # tags: a policy is plain YAML 1.2 data, so either directive is refused at its line.
        event = self.peek_event()
        if isinstance(event, yaml.DocumentStartEvent) and (event.version is not None or event.tags):
            raise _YamlRefused(event.start_mark, "YAML directives (%YAML, %TAG) are not accepted; remove the line")
        return super().compose_document()

    def compose_node(self, parent, index):
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent):
            raise _YamlRefused(event.start_mark, f"YAML aliases are not accepted (*{event.anchor}); write the value out")
        if getattr(event, "anchor", None) is not None:
            raise _YamlRefused(event.start_mark, f"YAML anchors are not accepted (&{event.anchor}); write the value out")
        if self._depth >= MAX_JSON_DEPTH:
            raise _YamlRefused(event.start_mark, f"nested deeper than {MAX_JSON_DEPTH} levels")
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_scalar(self, node):
        # A double-quoted scalar's escapes ("\\ud800", "\\0") make characters the reader refuses
        # raw: the same rule as every JSON string (`text_problem`), by line.
        value = super().construct_scalar(node)
        problem = text_problem(value) if isinstance(value, str) else None
        if problem:
            raise _YamlRefused(node.start_mark, f"a value {problem}")
        return value

    def construct_mapping(self, node, deep=False):
        # PyYAML keeps the last of two equal keys without a word: an edit that silently loses.
        first_line: dict[tuple[str, str], int] = {}
        for key_node, _ in node.value:
            if isinstance(key_node, yaml.ScalarNode):
                key = (key_node.tag, key_node.value)
                if key in first_line:
                    raise _YamlRefused(key_node.start_mark,
                                       f"duplicate key {key_node.value!r}; first at line {first_line[key]}")
                first_line[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep=deep)

    def construct_bounded_int(self, node):
        # Any form within the bound (decimal, 0x, 0o, 1_000, 1:30) is far shorter than 64 characters.
        number = super().construct_yaml_int(node) if len(node.value) <= 64 else None
        if number is None or abs(number) > MAX_JSON_INTEGER:
            self.unrepresentable = True
            return _Unrepresentable(node.value, f"is outside ±{MAX_JSON_INTEGER} (integers must be exact in JSON)")
        return number


_Yaml12Loader.add_constructor("tag:yaml.org,2002:int", _Yaml12Loader.construct_bounded_int)
_Yaml12Loader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:bool"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Yaml12Loader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)

# libyaml's event parser (C, ~1.5 µs an event) when PyYAML has it, else PyYAML's own.
_ScanLoader = getattr(yaml, "CBaseLoader", yaml.BaseLoader)


def _prescan_yaml(text: str | bytes, *, what: str) -> None:
    """Refuse a YAML text too big to load, before the loader builds anything: its bytes
    (MAX_POLICY_BYTES, InputTooLarge), then, streaming events and stopping at the first excess,
    its nodes (MAX_YAML_NODES), one scalar's length (MAX_YAML_SCALAR) and its nesting.

    PyYAML's pure-Python loader, which the policy needs (its line numbers, its refusals), spends
    ~50 µs a node: 200,000 keys held a web worker past its timeout. This scan reads at most
    MAX_YAML_NODES events. A text it cannot parse is left to the loader, whose error is the one
    to show.
    """
    size = len(text) if isinstance(text, bytes) else len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_POLICY_BYTES:
        raise InputTooLarge([f"body: {size} bytes of YAML, more than the limit {MAX_POLICY_BYTES}"], what=what)
    nodes = depth = 0
    try:
        for event in yaml.parse(text, Loader=_ScanLoader):
            if isinstance(event, (yaml.CollectionEndEvent)):
                depth -= 1
                continue
            if not isinstance(event, yaml.NodeEvent):
                continue
            nodes += 1
            line = event.start_mark.line + 1
            if nodes > MAX_YAML_NODES:
                raise InvalidInput([f"body: line {line}: more than {MAX_YAML_NODES} YAML nodes"], what=what)
            if isinstance(event, yaml.ScalarEvent) and len(event.value) > MAX_YAML_SCALAR:
                raise InvalidInput([f"body: line {line}: a scalar of {len(event.value)} characters, more than "
                                    f"the limit {MAX_YAML_SCALAR}"], what=what)
            if isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                if depth > MAX_JSON_DEPTH:
                    raise InvalidInput([f"body: line {line}: nested deeper than {MAX_JSON_DEPTH} levels"], what=what)
    except yaml.YAMLError:
        return


def compose_yaml_text(text: str | bytes) -> yaml.Node | None:
    """The node tree of a YAML text within the same bounds as `load_yaml_text` (InvalidInput
    beyond them; yaml.YAMLError when malformed): for locating a field's line, never its value."""
    _prescan_yaml(text, what="policy")
    return yaml.compose(text, Loader=yaml.SafeLoader)  # nodes only: an alias is a shared node, never expanded


def load_yaml_text(text: str | bytes, *, what: str) -> Any:
    """Parse policy YAML within `limits` (every path that reads a policy's YAML comes here: the
    API, the editor, the impact preview, the CLI, the management commands). InvalidInput names
    the line or the field of what is refused; InputTooLarge when the text is over MAX_POLICY_BYTES."""
    _prescan_yaml(text, what=what)
    loader = _Yaml12Loader(text)
    try:
        data = loader.get_single_data()
    except _YamlRefused as exc:
        raise InvalidInput([f"body: {exc}"], what=what) from None
    except yaml.YAMLError as exc:
        raise InvalidInput([f"body: malformed YAML ({exc})"], what=what) from None
    finally:
        loader.dispose()
    if loader.unrepresentable:
        raise InvalidInput([_problem(data, "")], what=what)
    return data
