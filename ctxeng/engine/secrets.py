"""Credential detection for the security gate, by Yelp's maintained `detect-secrets` plugins.

Contract: `find_secrets(text)` returns every credential-like span of `text`, each with the type the
plugin that found it names (`"Stripe Access Key"`, `"AWS Access Key"`, `"GitHub Token"` ...), in
text order, overlapping spans merged (the longer type kept). The security gate denies or redacts
an item by these spans (`gates.security_policy_compliance`) and records each finding by type.

The plugins, in a fixed order (the list is the policy of this module; a new detect-secrets release
brings its own patterns for the same services):

- known formats: AWS, Stripe, GitHub, GitLab, Slack, private keys, JWT, basic auth in URLs, OpenAI,
  npm, PyPI, SendGrid, Twilio, Square, Azure storage (Artifactory, Discord, Mailchimp and Telegram
  are left out: their patterns cost 10-40x the others on every line of clean text);
- high entropy: quoted base64-alphabet strings above 4.5 bits per character (detect-secrets'
  default limit; a string shorter than 23 characters cannot reach it). Hex strings are not
  scanned for entropy: content hashes and commit ids are everyday agent data, and the hex keys of
  the services above are found by their own formats;
- ctxeng's own: API keys shaped `sk-…`, `sk-proj-…`, `sk-live-…` (20+ alphanumerics), which the
  OpenAI plugin finds only in its legacy `T3BlbkFJ` shape.

A private key is found by its BEGIN line; its span runs to its END line (or the end of the text),
so a redaction removes the key material, not just its header. Plugins are used for what they match
and never asked to verify a secret (no network).

Bounded work: each line is scanned in windows of at most WINDOW characters, overlapping by
OVERLAP (longer than any known format), so no regex ever sees more than WINDOW characters and the
cost per item is linear in its length (bench/secrets.py measures it against the hand-written list
this module replaced). Deterministic: the same text gives the same findings.

Credentials in every form they take in agent data (issue 50), beside the plugins' own patterns:

- **normalised first**: zero-width characters (U+200B-U+200D, U+2060, U+FEFF, U+00AD, U+180E) are
  dropped and full-width ASCII (U+FF01-U+FF5E, U+3000) folded before scanning; a finding's span
  covers the original characters, the invisible ones included;
- **whole keys**: a known-format finding runs to the end of its token (`[A-Za-z0-9_-]`), so a
  Stripe key longer than `sk_live_` + 24 is found whole, never a prefix;
- **pairs and values** (`Keyword Value`): the value after a key naming a credential — the
  keywords of detect-secrets' `KeywordDetector` plus `token` and `credential`, as one segment of
  the key (`AWS_SECRET_ACCESS_KEY`, `aws_secret_access_key`, `db.password`, `X-Api-Key`) —
  unquoted or quoted, after `=`, `:`, `:=` or `=>` (env files, `export`, credentials/INI files,
  YAML, JSON, URL query strings; never after `::`, which joins a path: a pytest node id
  `tests/test_token.py::test_x`); `Authorization`/`Proxy-Authorization` header values
  (`Bearer …`, `Basic …`, `token …`); a token as URL userinfo (`https://<token>@host`). A value
  counts when it is credential-like (`credential_like`): at least MIN_VALUE characters, not a
  placeholder or code (no `()[]{}<>$%`, no dotted name, no path), not a word or a name (letters, or
  words (letters then digits, or digits) joined by `_ . -`: `test-secret-key`, `NEW_VALUE_42`), and at least
  VALUE_ENTROPY bits per character;
- **the other half of a pair** (`Paired Secret`): when an item holds one half of a known pair —
  an AWS access key id, a `client_id`, a DSN or URL naming a user — every standalone
  base64-alphabet run of PARTNER_MIN+ characters in it with upper, lower and digit characters
  (never a hex digest) is the partner, labelled or not (`credentials.csv`, a bare second line);
- **split keys**: a known format cut over lines (a line break, with indentation or a `\\`
  continuation, between two token characters) is found across the break;
- **encoded keys**: base64 and hex runs of credential length (ENCODED_MIN to ENCODED_MAX
  characters) that decode to printable text are decoded and scanned; a finding in the decoded
  text marks the whole run (`Encoded <type>`).

The thresholds are measured for false alarms on real agent traces (`bench/secrets_forms.py`).
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
import types
from bisect import bisect_right
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache

from .hashing import sha256_text_kept
from .memo import Memo, kept_by_value

WINDOW = 4096
OVERLAP = 512
ENTROPY_LIMIT = 4.5
SCANNER = "detect-secrets/1.5 (ctxeng.engine.secrets/1)"

_KEY_BLOCK_END = re.compile(r"-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----")
_API_KEY = re.compile(r"sk-(?:live|proj|test)?-?[A-Za-z0-9]{20,}")


@dataclass(frozen=True)
class Finding:
    """One credential-like span: `type` as its detector names it, `start`/`end` in the text."""

    type: str
    start: int
    end: int
    text: str

    def group(self, _n: int = 0) -> str:
        return self.text

    def span(self) -> tuple[int, int]:
        return self.start, self.end


# Each plugin with a literal every one of its patterns must contain: a piece without any of them
# cannot match, so the plugin is not run on it (the substring test is ~100x cheaper than the
# patterns; a piece is lower-cased once for the case-insensitive ones). Read from the patterns of
# detect-secrets 1.5 (tests/engine/test_secrets.py keeps a known secret of each type found).
_ANCHORS: dict[str, tuple[tuple[str, ...], bool]] = {  # class name -> (literals, compare lower-cased)
    "AWSKeyDetector": (("a3t", "abia", "acca", "akia", "asia", "aws"), True),
    "StripeDetector": (("k_live_",), False),
    "GitHubTokenDetector": (("gh",), False),
    "GitLabTokenDetector": (("gl", "GR1348941"), False),
    "SlackDetector": (("xox", "hooks.slack.com"), True),
    "PrivateKeyDetector": (("PRIVATE KEY", "PuTTY-User-Key-File"), False),
    "JwtTokenDetector": (("eyJ",), False),
    "BasicAuthDetector": (("://",), False),
    "OpenAIDetector": (("T3BlbkFJ",), False),
    "NpmDetector": (("_authToken",), False),
    "PypiTokenDetector": (("pypi-",), False),
    "SendGridDetector": (("SG.",), False),
    "TwilioKeyDetector": (("AC", "SK"), False),
    "SquareOAuthDetector": (("sq0csp-",), False),
    "AzureStorageKeyDetector": (("AccountKey=",), False),
    "Base64HighEntropyString": (("'", '"'), False),
}


@contextmanager
def _requests_deferred():
    """While detect-secrets loads, `requests` (which its plugin base imports only to verify a
    secret over the network, never asked here) is a stand-in module that imports the real package
    on first use of any of its names: importing it runs urllib3, charset_normalizer,
    http.cookiejar and ssl, ~75 ms of CPU at the first step of every process. After, the stand-in
    is taken back out of `sys.modules`, so a later `import requests` anywhere in the process
    imports the real package as it would have; detect-secrets keeps the stand-in, which would
    import the package if a verification ever ran. A process that imported requests before is
    left as it is. (`importlib.util.LazyLoader` cannot do this on Python 3.11: the import
    statement itself reads the module's `__spec__`, which loads it.)"""
    import importlib
    import importlib.machinery
    import importlib.util
    import sys

    if "requests" in sys.modules or importlib.util.find_spec("requests") is None:
        yield
        return
    stand_in = types.ModuleType("requests", "requests, imported on first use (ctxeng.engine.secrets)")
    stand_in.__spec__ = importlib.machinery.ModuleSpec("requests", None)

    def real(name: str):
        if sys.modules.get("requests") is stand_in:
            del sys.modules["requests"]
        return getattr(importlib.import_module("requests"), name)

    stand_in.__getattr__ = real  # type: ignore[method-assign]
    sys.modules["requests"] = stand_in
    try:
        yield
    finally:
        if sys.modules.get("requests") is stand_in:
            del sys.modules["requests"]


@cache
def _plugins() -> tuple:
    """The detect-secrets plugins, built once (imported on first use: the light install's engine
    import stays cheap; `requests` deferred, see `_requests_deferred`)."""
    with _requests_deferred():
        return _load_plugins()


def _load_plugins() -> tuple:
    from detect_secrets.plugins import (
        aws,
        azure_storage_key,
        basic_auth,
        github_token,
        gitlab_token,
        high_entropy_strings,
        jwt,
        npm,
        openai,
        private_key,
        pypi_token,
        sendgrid,
        slack,
        square_oauth,
        stripe,
        twilio,
    )

    plugins = (
        aws.AWSKeyDetector(),
        stripe.StripeDetector(),
        github_token.GitHubTokenDetector(),
        gitlab_token.GitLabTokenDetector(),
        slack.SlackDetector(),
        private_key.PrivateKeyDetector(),
        jwt.JwtTokenDetector(),
        basic_auth.BasicAuthDetector(),
        openai.OpenAIDetector(),
        npm.NpmDetector(),
        pypi_token.PypiTokenDetector(),
        sendgrid.SendGridDetector(),
        twilio.TwilioKeyDetector(),
        square_oauth.SquareOAuthDetector(),
        azure_storage_key.AzureStorageKeyDetector(),
        high_entropy_strings.Base64HighEntropyString(limit=ENTROPY_LIMIT),
    )
    return tuple((plugin, *_ANCHORS[type(plugin).__name__]) for plugin in plugins)


def _windows(text: str) -> list[tuple[int, str]]:
    """(offset, piece): whole lines gathered into pieces of at most WINDOW characters (no
    detector's pattern crosses a line), a longer line cut into windows overlapping by OVERLAP."""
    out: list[tuple[int, str]] = []
    start = end = 0  # the piece being gathered: text[start:end]
    for line in text.splitlines(keepends=True):
        if end - start + len(line) > WINDOW and end > start:
            out.append((start, text[start:end]))
            start = end
        if len(line) > WINDOW:
            step = WINDOW - OVERLAP
            for at in range(0, len(line) - OVERLAP, step):
                out.append((end + at, line[at:at + WINDOW]))
            start = end = end + len(line)
            continue
        end += len(line)
    if end > start:
        out.append((start, text[start:end]))
    return out


def _spans_in(piece: str, value: str) -> list[tuple[int, int]]:
    out, at = [], piece.find(value)
    while at >= 0 and value:
        out.append((at, at + len(value)))
        at = piece.find(value, at + 1)
    return out


_JWT_TAIL = re.compile(r"[A-Za-z0-9\-_.+/=]*")


def _raw_findings(text: str, known_only: bool = False) -> list[Finding]:
    """Each plugin says which values are secrets (`analyze_string`, with its own checks: a JWT
    must decode, an entropy string must pass the limit); the span is its pattern's whole match."""
    found: list[Finding] = []
    plugins = _plugins()
    for offset, piece in _windows(text):
        lower = piece.lower()
        for plugin, anchors, folded in plugins:
            if known_only and getattr(plugin, "entropy_limit", None) is not None:
                continue
            if not any(a in (lower if folded else piece) for a in anchors):
                continue
            values = set(plugin.analyze_string(piece))
            if not values:
                continue
            entropy = getattr(plugin, "entropy_limit", None)
            if entropy is not None:
                for value in values:
                    # n characters carry at most log2(n) bits each: below 2**limit none can pass.
                    if len(value) >= 2 ** entropy and _shannon(plugin, value) > entropy:
                        found += [Finding(plugin.secret_type, offset + a, offset + b, "") for a, b in _spans_in(piece, value)]
                continue
            for regex in plugin.denylist:
                for m in regex.finditer(piece):
                    if m.group(0) in values or any(g in values for g in m.groups() if g):
                        a, b = m.span()
                        if plugin.secret_type == "JSON Web Token":  # the pattern stops before the signature
                            b = _JWT_TAIL.match(piece, b).end()  # type: ignore[union-attr]
                        found.append(Finding(plugin.secret_type, offset + a, offset + b, ""))
        for m in _API_KEY.finditer(piece):
            found.append(Finding("API Key", offset + m.start(), offset + m.end(), ""))
    return [_whole_key(text, f) if f.type == "Private Key" else f for f in found]


def _whole_key(text: str, f: Finding) -> Finding:
    """A private key's span: from the dashes before its BEGIN line to its END line or the text's end."""
    start = text.rfind("-----", max(0, f.start - 5), f.start)
    end = _KEY_BLOCK_END.search(text, f.end)
    return Finding(f.type, start if start >= 0 else f.start, end.end() if end else len(text), "")


# An agent sends most of its history again at every step: findings are kept by the content's
# digest (a pure function of the text, so the cache changes no decision), the newest CACHE_SIZE.
CACHE_SIZE = 16_384
_by_digest: Memo[tuple[Finding, ...]] = Memo(CACHE_SIZE)


def find_secrets(text: str, digest: str | None = None) -> list[Finding]:
    """Every credential-like span of `text`, in order; overlapping spans are merged into one
    (typed as the longest span among them). `digest`: the text's content digest (`sha256_text`),
    when the caller has it; otherwise it is computed here. Either way a text scanned before (at an
    earlier step: a message's content, the strings of its source_ref) is not scanned again."""
    if digest is None:
        digest = sha256_text_kept(text)
    return list(_by_digest.kept(digest, lambda: tuple(_scan(text))))


def _scan(text: str) -> list[Finding]:
    norm, where = _normalised(text)
    found = _all_findings(norm)
    if where is not None:  # back to the original text's offsets, invisible characters included
        found = [Finding(f.type, where[f.start], where[f.end - 1] + 1, "") for f in found if f.end > f.start]
    found = sorted(found, key=lambda f: (f.start, -(f.end - f.start)))
    merged: list[Finding] = []
    for f in found:
        if merged and f.start < merged[-1].end:
            last = merged[-1]
            if f.end > last.end:
                longer = f if f.end - f.start > last.end - last.start else last
                merged[-1] = Finding(longer.type, last.start, f.end, "")
            continue
        merged.append(f)
    return [Finding(f.type, f.start, f.end, text[f.start:f.end]) for f in merged]



# --------------------------------------------------------------------------- forms (issue 50)

MIN_VALUE = 8
VALUE_ENTROPY = 2.5
PARTNER_MIN = 20
PARTNER_ENTROPY = 3.5
ENCODED_MIN = 24
ENCODED_MAX = 4096

_INVISIBLE = "\u200b\u200c\u200d\u2060\ufeff\u00ad\u180e"
_ODD = re.compile(f"[{_INVISIBLE}\uff01-\uff5e\u3000]")


def _normalised(text: str) -> tuple[str, list[int] | None]:
    """`text` without zero-width characters and with full-width ASCII folded, and the original
    offset of each character kept (plus the text's length), or None when nothing changed."""
    if text.isascii() or _ODD.search(text) is None:
        return text, None
    out: list[str] = []
    where: list[int] = []
    for i, ch in enumerate(text):
        if ch in _INVISIBLE:
            continue
        o = ord(ch)
        out.append(chr(o - 0xFEE0) if 0xFF01 <= o <= 0xFF5E else " " if o == 0x3000 else ch)
        where.append(i)
    where.append(len(text))
    return "".join(out), where


def _all_findings(text: str, decode: bool = True) -> list[Finding]:
    found = [_whole_token(text, f) for f in _raw_findings(text)]
    found += _keyword_values(text)
    found += _split_keys(text, found)
    found += _partners(text, found)
    if decode:
        found += _encoded(text)
    return found


_TOKEN_TAIL = re.compile(r"[A-Za-z0-9_-]*")
_NOT_EXTENDED = {"Basic Auth Credentials", "Private Key", "Base64 High Entropy String", "JSON Web Token"}


def _whole_token(text: str, f: Finding) -> Finding:
    """A known-format key runs to the end of its token: the service's pattern may stop at its
    documented length while the key goes on (a Stripe key longer than sk_live_ + 24)."""
    if f.type in _NOT_EXTENDED:
        return f
    end = _TOKEN_TAIL.match(text, f.end).end()  # type: ignore[union-attr]
    return f if end == f.end else Finding(f.type, f.start, end, "")


@cache
def _keywords() -> tuple[str, ...]:
    """detect-secrets' KeywordDetector denylist (`api_?key`, `password`, `secret` ...), with `token`
    and `credentials?`, which it leaves to the known formats."""
    _plugins()  # detect-secrets loaded with `requests` deferred
    from detect_secrets.plugins.keyword import DENYLIST

    return (*DENYLIST, "token", "credentials?", "access_?key")


@cache
def _keyword_pattern() -> re.Pattern:
    # A key is a run of name characters with a keyword as one of its segments (split on _ . - and
    # case changes is approximated by: the keyword is bounded by a separator or the key's ends).
    # `::` separates a path, not a key from its value (a pytest node id `tests/test_token.py::test_x`,
    # a C++ or Rust path `token::Kind`).
    words = "|".join(k.replace("_?", "[_-]?") for k in _keywords())
    return re.compile(
        r"(?<![\w.-])(?P<key>(?:[\w-]*?[_.-])?(?:" + words + r")(?:[_.-][\w.-]*)?)"
        r"[\]'\"`]{0,2}[ \t]*(?::=|=>|=|:(?!:))[ \t]*(?P<q>['\"`]?)(?P<value>[^\s'\"`,;&]+)",
        re.I,
    )


_HEADER = re.compile(
    r"\b(?:proxy-)?authorization[\"']?[ \t]*[:=][ \t]*[\"']?(?:(?:bearer|basic|token|digest|apikey)[ \t]+)?"
    r"(?P<value>[A-Za-z0-9._~+/=-]+)",
    re.I,
)
_URL_TOKEN = re.compile(r"://(?P<value>[A-Za-z0-9_.~-]{16,})@")
_CODE = re.compile(r"[()\[\]{}<>$%]")
_DOTTED_NAME = re.compile(r"^[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+$")
_PATH = re.compile(r"^(?:/|\./|\.\./|~/|[A-Za-z]:\\)|\.[A-Za-z]{1,5}$|^https?:")
# Letters only, or words (each letters, then digits) joined by `_ . -`: `test-secret-key`, `NEW_VALUE_42`.
_NAME = re.compile(r"[A-Za-z]+|[A-Za-z]+\d*(?:[_.-]+(?:[A-Za-z]+\d*|\d+))+")
_PLACEHOLDER = re.compile(r"^(?:x+|\*+|\.+|-+|none|null|nil|true|false|undefined|changeme|redacted|required|optional)$", re.I)


def entropy(value: str) -> float:
    """Shannon entropy in bits per character, as detect-secrets' entropy plugins compute it."""
    return _shannon(_plugins()[-1][0], value)


def _shannon(plugin, data: str) -> float:
    """`plugin.calculate_shannon_entropy(data)`, the same float: the same terms, added in the same
    order (the plugin's charset), with each character counted in one pass instead of one
    `str.count` per character of the charset (65 passes over every quoted string scanned). A
    plugin that computes it its own way, or whose charset repeats a character, is asked."""
    order = _charset_order(plugin.charset)
    if order is None or type(plugin).calculate_shannon_entropy is not _base_shannon():
        return plugin.calculate_shannon_entropy(data)
    if not data:
        return 0
    entropy = 0.0
    for _, n in sorted((order[x], n) for x, n in Counter(data).items() if x in order):
        p_x = float(n) / len(data)
        entropy += - p_x * math.log(p_x, 2)
    return entropy


@cache
def _charset_order(charset: str) -> dict[str, int] | None:
    order = {x: i for i, x in enumerate(charset)}
    return order if len(order) == len(charset) else None


@cache
def _base_shannon():
    from detect_secrets.plugins.high_entropy_strings import HighEntropyStringsPlugin

    return HighEntropyStringsPlugin.calculate_shannon_entropy


def credential_like(value: str) -> bool:
    """Could `value`, written after a credential's key, be the credential? See the module docstring."""
    if len(value) < MIN_VALUE or _PLACEHOLDER.match(value) or _CODE.search(value):
        return False
    if _DOTTED_NAME.match(value) or _PATH.search(value):
        return False
    if _NAME.fullmatch(value):  # words and names: a variable, a constant, a type, an option
        return False
    return entropy(value) >= VALUE_ENTROPY


_STEMS = ("pass", "pwd", "secret", "key", "token", "credential", "contrase")  # each keyword holds one


def _lines_with(text: str, lower: str, stems: tuple[str, ...]) -> list[tuple[int, int]]:
    """(start, end) of each line of `text` (without its newline) where `lower` holds one of `stems`:
    on an ASCII text, where a pattern's case-insensitive keyword matches exactly where the
    lower-cased text holds it, every match of a pattern that never crosses a newline (and whose
    edges, `\\b` and look-arounds, read a newline as they read the string's ends) lies in one of
    these lines. Any other text: the whole text, one span."""
    if not text.isascii():
        return [(0, len(text))]
    starts = set()
    for stem in stems:
        at = lower.find(stem)
        while at >= 0:
            start = lower.rfind("\n", 0, at) + 1
            starts.add(start)
            end = lower.find("\n", at)
            at = lower.find(stem, end) if end >= 0 else -1
    out = []
    for start in sorted(starts):
        end = lower.find("\n", start)
        out.append((start, len(text) if end < 0 else end))
    return out


def _keyword_values(text: str) -> list[Finding]:
    out: list[Finding] = []
    lower = text.lower()
    if any(k in lower for k in _STEMS):
        pattern = _keyword_pattern()
        for start, end in _lines_with(text, lower, _STEMS):
            for m in pattern.finditer(text, start, end):
                value = m.group("value")
                if credential_like(value):
                    out.append(Finding("Keyword Value", m.start("value"), m.end("value"), ""))
    if "authorization" in lower:
        for m in _HEADER.finditer(text):
            if credential_like(m.group("value")):
                out.append(Finding("Authorization Header", m.start("value"), m.end("value"), ""))
    if "://" in text:
        for m in _URL_TOKEN.finditer(text):
            if credential_like(m.group("value")):
                out.append(Finding("URL Token", m.start("value"), m.end("value"), ""))
    return out


# One half of a known pair: each alternative of the pattern, and a literal it cannot match without
# (compared case-insensitively: in the lower-cased text, which on an ASCII text is exact).
_HALVES = (
    (r"(?:A3T[A-Z0-9]|ABIA|ACCA|AKIA|ASIA)[0-9A-Z]{16}",  # an AWS access key id
     lambda text, lower: any(k in lower for k in ("a3t", "abia", "acca", "akia", "asia"))),
    (r"\bclient[_-]?id\b", lambda text, lower: "client" in lower),  # an OAuth client id
    (r"\b[a-z][a-z0-9+.-]*://[^\s:/@]+@", lambda text, lower: "://" in text),  # a DSN or URL naming a user without a password
    (r"\b(?:user(?:name)?|login)[ \t]*=[ \t]*\S+[ \t]+(?:\w+=\S+[ \t]+)*?password\b",  # a libpq DSN
     lambda text, lower: ("user" in lower or "login" in lower) and "password" in lower),
)
_HALF = re.compile("|".join(pattern for pattern, _ in _HALVES), re.I)  # the definition; `_holds_half` searches it
_HALF_PARTS = tuple((re.compile(pattern, re.I), literal) for pattern, literal in _HALVES)
_STANDALONE = re.compile(rf"(?<![A-Za-z0-9/+_-])[A-Za-z0-9/+]{{{PARTNER_MIN},}}={{0,2}}(?![A-Za-z0-9/+=_-])")


def _holds_half(text: str) -> bool:
    """Whether `_HALF` matches in `text`: its alternatives searched one by one, on an ASCII text
    only those whose literal the text holds (the whole pattern, searched at every word boundary of
    the text, costs ~20x the substring tests on code that names none)."""
    lower = text.lower() if text.isascii() else None
    return any((lower is None or literal(text, lower)) and pattern.search(text) is not None for pattern, literal in _HALF_PARTS)


def _partners(text: str, found: list[Finding]) -> list[Finding]:
    """When the item holds one half of a known pair, the credential-shaped runs that may be the other."""
    if not _holds_half(text):
        return []
    taken = [(f.start, f.end) for f in found]
    out = []
    for m in _STANDALONE.finditer(text):
        value = m.group(0)
        if any(a < m.end() and m.start() < b for a, b in taken):
            continue
        if re.fullmatch(r"[0-9a-fA-F]+", value):  # digests and commit ids
            continue
        if not (re.search(r"[A-Z]", value) and re.search(r"[a-z]", value) and re.search(r"[0-9/+]", value)):
            continue
        if entropy(value) >= PARTNER_ENTROPY:
            out.append(Finding("Paired Secret", m.start(), m.end(), ""))
    return out


# A line break inside a token: its definition. `_break_spans` finds its matches (a test compares).
_BREAK = re.compile(r"(?<=[A-Za-z0-9_-])[ \t]*\\?\r?\n[ \t]*(?=[A-Za-z0-9_-])")
_BLANKS = re.compile(r"[ \t]*")
_TOKEN_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")


def _break_spans(text: str) -> list[tuple[int, int]]:
    """The spans of `_BREAK`'s matches in `text`, in order, found from each newline outwards (the
    pattern searched itself is tried at every character of the text). Each match holds exactly
    one newline, and for a newline there is at most one: its start is fixed by reading back over
    an optional `\\r`, an optional backslash and spaces or tabs to a token character, its end by
    reading on over spaces or tabs to one."""
    out = []
    n = len(text)
    j = text.find("\n")
    while j >= 0:
        end = _BLANKS.match(text, j + 1).end()  # type: ignore[union-attr]
        if end < n and text[end] in _TOKEN_CHARS:
            start = j
            if start > 0 and text[start - 1] == "\r":
                start -= 1
            if start > 0 and text[start - 1] == "\\":
                start -= 1
            while start > 0 and text[start - 1] in " \t":
                start -= 1
            if start > 0 and text[start - 1] in _TOKEN_CHARS:
                out.append((start, end))
        j = text.find("\n", j + 1)
    return out


def _split_keys(text: str, found: list[Finding]) -> list[Finding]:
    """Known formats cut over lines: the text with those line breaks removed is scanned by the
    known-format plugins; a finding that spans a removed break is mapped back across it, unless
    it starts inside a finding of the text as written (an open-ended pattern, `sk-…{20,}`, would
    otherwise run on into the next line's words)."""
    if "\n" not in text:
        return []
    spans = _break_spans(text)
    if not spans:
        return []
    parts: list[str] = []
    joined_at = [0]  # where each kept part of the text starts in the joined text ...
    text_at = [0]  # ... and in the text as written
    at = 0
    for start, end in spans:
        parts.append(text[at:start])
        joined_at.append(joined_at[-1] + start - at)
        text_at.append(end)
        at = end
    breaks = joined_at[1:]
    parts.append(text[at:])
    joined = "".join(parts)

    def where(i: int) -> int:  # the offset in the text as written of the joined text's character i
        k = bisect_right(joined_at, i) - 1
        return text_at[k] + i - joined_at[k]

    out = []
    for f in _raw_findings(joined, known_only=True):
        # Only a match the break cut counts (a whole key on one line was found there already),
        # and its tail is read in the text as written, not across the next break.
        start = where(f.start)
        if any(f.start < b < f.end for b in breaks) and not any(g.start <= start < g.end for g in found):
            out.append(_whole_token(text, Finding(f.type, start, where(f.end - 1) + 1, "")))
    return out


_B64_RUN = re.compile(rf"(?<![A-Za-z0-9+/_-])[A-Za-z0-9+/_-]{{{ENCODED_MIN},{ENCODED_MAX}}}={{0,2}}(?![A-Za-z0-9+/=_-])")
_HEX_DIGITS = re.compile(rf"[0-9a-fA-F]{{{ENCODED_MIN}}}")
_HEX_RUN = re.compile(rf"(?<![0-9A-Za-z])(?:[0-9a-fA-F]{{2}}){{{ENCODED_MIN // 2},{ENCODED_MAX // 2}}}(?![0-9A-Za-z])")


def _decoded(run: str) -> str | None:
    """`run` decoded (hex, else base64 or base64url) when it decodes to printable text."""
    try:
        if len(run) % 2 == 0 and re.fullmatch(r"[0-9a-fA-F]+", run):
            raw = bytes.fromhex(run)
        else:
            body = run.rstrip("=")
            raw = base64.b64decode(body + "=" * (-len(body) % 4), altchars=b"-_" if ("-" in body or "_" in body) else None, validate=True)
        out = raw.decode("utf-8")
    except (ValueError, binascii.Error, UnicodeDecodeError):
        return None
    printable = sum(ch.isprintable() or ch in "\n\r\t" for ch in out)
    return out if out and printable == len(out) else None


def _encoded(text: str) -> list[Finding]:
    out = []
    seen: set[tuple[int, int]] = set()
    # A hex run holds ENCODED_MIN hex digits in a row; the run's own pattern, which opens on a
    # look-behind, is tried at every character, the bare run only where a hex digit is.
    patterns = (_HEX_RUN, _B64_RUN) if _HEX_DIGITS.search(text) else (_B64_RUN,)
    for pattern in patterns:
        for m in pattern.finditer(text):
            if m.span() in seen:
                continue
            seen.add(m.span())
            plain = _decoded(m.group(0))
            if plain is None:
                continue
            inner = _all_findings(plain, decode=False)
            if inner:
                out.append(Finding(f"Encoded {inner[0].type}", m.start(), m.end(), ""))
    return out


# --------------------------------------------------------------------------- JSON values (issue 50)


def json_strings(value: object, path: str) -> Iterator[tuple[str, tuple, str]]:
    """Every string of a JSON value, at any depth, in order: (its field path from `path`, its key
    path, the string). Keys themselves are not yielded."""
    if isinstance(value, str):
        yield path, (), value
    elif isinstance(value, dict):
        for k, v in value.items():
            for where, keys, text in json_strings(v, f"{path}.{k}"):
                yield where, (k, *keys), text
    elif isinstance(value, list):
        for i, v in enumerate(value):
            for where, keys, text in json_strings(v, f"{path}[{i}]"):
                yield where, (i, *keys), text


# Where findings are kept in a memo (find_in_json, find_in_json_text, gates' source_ref scan): each
# string's (field path, key path, findings), the findings as a tuple so a caller that changes the
# list it is given cannot change what the next step is given.
JsonFindings = list[tuple[str, tuple, list[Finding]]]


def kept_findings(found: JsonFindings) -> tuple:
    """`found` as a memo keeps it (immutable)."""
    return tuple((where, keys, tuple(f)) for where, keys, f in found)


def given_findings(kept: tuple) -> JsonFindings:
    """A kept answer as the callers get it: fresh lists."""
    return [(where, keys, list(f)) for where, keys, f in kept]


def find_in_json(value: object, path: str) -> JsonFindings:
    """Every string of a JSON value that carries credential-like material, at any depth: (its field
    path from `path`, its key path, the findings with offsets in that string). A string under a key
    is scanned as the line `key: value`, so the key names it as it would in YAML or a header
    (`{"api_key": "…"}`, `{"Authorization": "Bearer …"}`); a finding inside the key alone does not
    count, and one that starts in it is cut to the value. Keys themselves are not scanned."""
    return given_findings(kept_by_value(_FOUND_IN_JSON, value, lambda: kept_findings(_in_json(value, path)), path))


# find_in_json's answers by the value's frozen JSON and its path (the memo module's rules): an
# agent's calls are read again at every step.
_FOUND_IN_JSON: Memo[tuple] = Memo(16_384)


def find_in_json_text(text: str, path: str) -> JsonFindings:
    """`find_in_json(json.loads(text), path)`, kept by the text and the path: what it parses to is
    a function of the text alone (`1`, `1.0` and `true` are three texts), so the text is the whole
    input, and a text the engine made itself at an earlier step (a call's arguments as sent,
    `ToolPair.arguments_json`) is neither parsed nor frozen again. The text must be JSON."""
    key = f"{len(path)}:{path}{text}"  # the path's length first: no other (path, text) spells the same key
    return given_findings(_FOUND_IN_TEXT.kept(key, lambda: kept_findings(_in_json(json.loads(text), path))))


# find_in_json_text's answers by the path and the text, one string (so `max_chars` weighs it):
# the keys at most 16 M characters in all.
_FOUND_IN_TEXT: Memo[tuple] = Memo(16_384, max_chars=16_000_000)


def _in_json(value: object, path: str) -> list[tuple[str, tuple, list[Finding]]]:
    out: list[tuple[str, tuple, list[Finding]]] = []
    for where, keys, node in json_strings(value, path):
        key = keys[-1] if keys and isinstance(keys[-1], str) else None
        prefix = f"{key}: " if key is not None else ""
        found = [
            Finding(f.type, max(f.start, len(prefix)) - len(prefix), f.end - len(prefix), "")
            for f in find_secrets(prefix + node)
            if f.end > len(prefix)
        ]
        if found:
            out.append((where, keys, [Finding(f.type, f.start, f.end, node[f.start:f.end]) for f in found]))
    return out
