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
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from dataclasses import dataclass
from functools import cache

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


@cache
def _plugins() -> tuple:
    """The detect-secrets plugins, built once (imported on first use: the light install's engine
    import stays cheap)."""
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


def _raw_findings(text: str) -> list[Finding]:
    """Each plugin says which values are secrets (`analyze_string`, with its own checks: a JWT
    must decode, an entropy string must pass the limit); the span is its pattern's whole match."""
    found: list[Finding] = []
    plugins = _plugins()
    for offset, piece in _windows(text):
        lower = piece.lower()
        for plugin, anchors, folded in plugins:
            if not any(a in (lower if folded else piece) for a in anchors):
                continue
            values = set(plugin.analyze_string(piece))
            if not values:
                continue
            entropy = getattr(plugin, "entropy_limit", None)
            if entropy is not None:
                for value in values:
                    if plugin.calculate_shannon_entropy(value) > entropy:
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
_by_digest: OrderedDict[str, list[Finding]] = OrderedDict()
_lock = threading.Lock()


def find_secrets(text: str, digest: str | None = None) -> list[Finding]:
    """Every credential-like span of `text`, in order; overlapping spans are merged into one
    (typed as the longest span among them). `digest`: the text's content digest, when the caller
    has it, so a text scanned before (at an earlier step) is not scanned again."""
    if digest is None:
        return _scan(text)
    with _lock:
        hit = _by_digest.get(digest)
        if hit is not None:
            _by_digest.move_to_end(digest)
            return hit
    found = _scan(text)
    with _lock:
        _by_digest[digest] = found
        while len(_by_digest) > CACHE_SIZE:
            _by_digest.popitem(last=False)
    return found


def _scan(text: str) -> list[Finding]:
    found = sorted(_raw_findings(text), key=lambda f: (f.start, -(f.end - f.start)))
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
