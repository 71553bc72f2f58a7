"""Secrets found by a maintained scanner (detect-secrets' plugins, ctxeng.engine.secrets), refused
or redacted by type, each finding recorded by type in the item's security assessment (issue 38
point 3). The keys below are made-up values in each service's published format."""

from __future__ import annotations

import json

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from ctxeng import sdk
from ctxeng.engine import secrets
from ctxeng.engine.secrets import WINDOW, find_secrets

STRIPE = "sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc"
AWS = "AKIA" + "IOSFODNN7EXAMPL3"
GITHUB = "ghp_" + "wWPw5k4aXcaT4fNP0UcnZwJUVFk6LO0pINUx"
SLACK = "xoxb-" + "263594206564-" + "2343594206574-" + "fake0token0value0abc"
JWT = ("eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9" + ".eyJzdWIiOiIxMjM0NTY3ODkwIn0"
       + ".dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U")
KEY_BLOCK = "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA7bq\n-----END RSA PRIVATE KEY-----"


@pytest.mark.parametrize("text, secret, kind", [
    (f"STRIPE_KEY={STRIPE}\n", STRIPE, "Stripe Access Key"),
    (f"aws_access_key_id = {AWS}", AWS, "AWS Access Key"),
    (f"token: {GITHUB}", GITHUB, "GitHub Token"),
    (f"SLACK={SLACK}", SLACK, "Slack Token"),
    (f"Authorization: Bearer {JWT}", JWT, "JSON Web Token"),
    (f"key:\n{KEY_BLOCK}\nafter", KEY_BLOCK, "Private Key"),
    ("DATABASE_URL=postgres://admin:hunter2pass@db.internal/app", "://admin:hunter2pass@", "Basic Auth Credentials"),
    ('secret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzEXAMPLEKEY"', "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzEXAMPLEKEY", "Base64 High Entropy String"),
    ("OPENAI=sk-proj-" + "B" * 24, "sk-proj-" + "B" * 24, "API Key"),
])
def test_each_known_format_is_found_whole_with_its_type(text, secret, kind):
    found = find_secrets(text)
    assert [(f.type, f.text) for f in found] == [(kind, secret)]
    assert text[found[0].start:found[0].end] == secret


@pytest.mark.parametrize("text", [
    '"sha256:9204afa34fcb66a1e561bcb2b04daca02464407b13318ed7647b7d28f8c57e7a"',  # a content hash
    'commit "c0ffee1234567890abcdef1234567890abcdef12"',  # a commit id: hex is not scanned for entropy
    'name = "ThisIsAVeryLongCamelCaseIdentifierName"',
    "the task-sk-list and AKIA docs, sk-live-short",
    "-----BEGIN PUBLIC KEY-----\nMIIB\n-----END PUBLIC KEY-----",
    "https://example.org/path?x=1 and http://host:8080/a",
])
def test_ordinary_agent_text_is_not_a_secret(text):
    assert find_secrets(text) == []


def test_a_key_at_a_window_edge_of_a_long_line_is_still_found():
    for at in (WINDOW - 10, WINDOW - 3, 2 * WINDOW + 5):
        text = "x " * (at // 2) + AWS + " y" * 3000
        assert [f.text for f in find_secrets(text)] == [AWS], at


HISTORY = [
    {"role": "system", "content": "You are a coding agent."},
    {"role": "user", "content": "Why does the deploy fail?"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": f"c{n}", "type": "function", "function": {"name": "read_file", "arguments": json.dumps({"path": p})}}
        for n, p in enumerate((".env", "deploy.sh", "ci.yml", "README"))]},
    {"role": "tool", "tool_call_id": "c0", "content": f"STRIPE_SECRET_KEY={STRIPE}\nDEBUG=false"},
    {"role": "tool", "tool_call_id": "c1", "content": f"export AWS_ACCESS_KEY_ID={AWS}\n./deploy"},
    {"role": "tool", "tool_call_id": "c2", "content": f"env:\n  GH_TOKEN: {GITHUB}\n  CI: true"},
    {"role": "tool", "tool_call_id": "c3", "content": "Run ./deploy to deploy."},
]


def _result(step, call_id: str) -> dict:
    pair = next(p for p in step.manifest["tool_pairs"] if p["call_id"] == call_id)
    return next(r for r in step.manifest["included"] + step.manifest["excluded"] if r["item_id"] == pair["result_item_id"])


def test_a_stripe_key_an_aws_key_and_a_github_token_are_refused_by_type():
    step = sdk.Session("coding-agent").step(HISTORY)  # secret_material: deny
    payload = json.dumps(step.kwargs)
    for call_id, kind, secret in (("c0", "Stripe Access Key", STRIPE), ("c1", "AWS Access Key", AWS), ("c2", "GitHub Token", GITHUB)):
        rec = _result(step, call_id)
        assert (rec["reason"], rec["hard_gate"]) == ("security_rejected", "security_policy_compliance")
        assert kind in rec["detail"]
        assert rec["security_assessment"]["secret_findings"] == kind
        assert rec["security_assessment"]["secret_handling"] == "failed"
        assert secret not in payload
    clean = _result(step, "c3")
    assert clean in step.manifest["included"] and "secret_findings" not in clean["security_assessment"]


def test_under_deny_or_redact_each_key_is_redacted_and_recorded_by_type():
    step = sdk.Session("chat-agent").step(HISTORY)  # secret_material: deny_or_redact
    payload = json.dumps(step.kwargs)
    for secret in (STRIPE, AWS, GITHUB):
        assert secret not in payload
    assert "DEBUG=false" in payload and "./deploy" in payload
    rec = _result(step, "c0")
    assert rec["security_assessment"] == {**rec["security_assessment"], "secret_handling": "redacted", "secret_findings": "Stripe Access Key"}
    transform = next(t for t in step.manifest["transforms"] if t["type"] == "redact" and t["input_item_ids"] == [rec["item_id"]])
    assert "Stripe Access Key" in transform["objective"]


def test_a_text_is_scanned_once_whether_or_not_its_digest_is_given(monkeypatch):
    """A source_ref's strings come without a digest and are sent again at every step (issue 48):
    the scanner runs once per distinct text, and a text seen again gets the same findings."""
    from ctxeng.engine import secrets
    from ctxeng.engine.hashing import sha256_text

    scanned: list[str] = []
    scan = secrets._scan

    def counting(text: str):
        scanned.append(text)
        return scan(text)

    monkeypatch.setattr(secrets, "_scan", counting)
    secrets._by_digest.clear()
    url = "https://deploy:hunter2pass@ci.example.org/job/7"
    first = find_secrets(url)
    again = find_secrets(url)
    by_digest = find_secrets(url, sha256_text(url))
    other = find_secrets(f"token: {GITHUB}")
    assert [f.text for f in first] == [f.text for f in again] == [f.text for f in by_digest] == ["://deploy:hunter2pass@"]
    assert [f.text for f in other] == [GITHUB]
    assert scanned == [url, f"token: {GITHUB}"]


_FRESH_SCAN = """
import json, sys
if sys.argv[1] == "requests first":
    import requests
from ctxeng.engine.secrets import find_secrets
found = [f.type for text in json.loads(sys.argv[2]) for f in find_secrets(text)]
loaded = sorted(m for m in ("requests", "urllib3", "charset_normalizer") if m in sys.modules)
import detect_secrets.plugins.base as base
import requests
print(json.dumps({"found": found, "loaded": loaded, "real": hasattr(requests, "Session") and bool(requests.__file__),
                  "same": base.requests is requests,
                  "error": base.requests.exceptions.RequestException is requests.exceptions.RequestException}))
"""


@pytest.mark.parametrize("first", ["ctxeng first", "requests first"])
def test_detect_secrets_scans_without_importing_requests_and_a_later_import_is_the_real_package(first):
    # requests is what detect-secrets' plugins would verify a secret with; ctxeng never asks it to.
    import subprocess
    import sys

    texts = [f"STRIPE_KEY={STRIPE}", f"aws_access_key_id = {AWS}", f"token: {GITHUB}", f"key:\n{KEY_BLOCK}\n",
             'secret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzEXAMPLEKEY"']
    out = subprocess.run([sys.executable, "-c", _FRESH_SCAN, first, json.dumps(texts)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["found"] == ["Stripe Access Key", "AWS Access Key", "GitHub Token", "Private Key", "Base64 High Entropy String"]
    if first == "ctxeng first":
        assert result["loaded"] == []
        assert not result["same"]  # detect-secrets holds the stand-in, which reaches the real package
    else:
        assert result["loaded"] == ["charset_normalizer", "requests", "urllib3"]
        assert result["same"]
    assert result["real"] and result["error"]


# The scan's fast paths against what they stand for: detect-secrets' own entropy, and each pattern
# searched over the whole text (issue 48: the CLI scans 2,000 candidates in a fresh process).
PIECES = ["password", "PassWord", "pwd", "secret", "api_key", "X-Api-Key", "TOKEN", "credentials", "contraseña",
          "db.pass", "access-key", "AKIA", "akia", "a3t", "client_id", "Client-ID", "user", "login", "username",
          "://", "http", "@", "=", ":=", "=>", ":", "::", " ", "\t", "\n", "\r", "\\", '"', "'", "`", ",", ";", "&",
          "[", "]", ".", "-", "_", "/", "+", "0123456789", "wJalrXUtnFEMI", "K7MDENG", "bPxRfiCYz", "Zx9",
          "ſ", "\u212a", "é", "ı", "\u2028"]
texts = st.lists(st.sampled_from(PIECES), max_size=40).map("".join)


@given(st.text(max_size=80) | texts)
@example("")
@example("aaaa")
@settings(max_examples=300, deadline=None)
def test_the_entropy_is_detect_secrets_own_to_the_last_bit(value):
    plugin = secrets._plugins()[-1][0]
    assert secrets.entropy(value) == plugin.calculate_shannon_entropy(value)


@given(texts)
@example("abc \\\r\n\tdef")
@example("a \\ \n b")
@example("a\\\\\nb")
@example("a\r\r\nb")
@settings(max_examples=400, deadline=None)
def test_line_breaks_inside_tokens_are_the_patterns_own_matches(text):
    assert secrets._break_spans(text) == [m.span() for m in secrets._BREAK.finditer(text)]


def test_every_keyword_holds_a_stem_the_scan_looks_for_first():
    # The scan reads only the lines holding a stem: a keyword of a later detect-secrets without one
    # would go unread there (its DENYLIST is read at run time).
    for keyword in secrets._keywords():
        assert any(stem in keyword.lower() for stem in secrets._STEMS), keyword


@given(texts)
@example("db_password = 'Zx9wJalrXUtnFEMI'\napi_key: K7MDENGbPxRfiCYz")
@example("pa\u017fsword=wJalrXUtnFEMIK7MDENG token")  # the long s: matched case-insensitively, not by lower()
@settings(max_examples=400, deadline=None)
def test_keyword_values_are_the_keyword_patterns_matches_over_the_whole_text(text):
    expected = []
    if any(k in text.lower() for k in secrets._STEMS):
        expected = [(m.start("value"), m.end("value")) for m in secrets._keyword_pattern().finditer(text)
                    if secrets.credential_like(m.group("value"))]
    got = [(f.start, f.end) for f in secrets._keyword_values(text) if f.type == "Keyword Value"]
    assert got == expected


@given(texts)
@example("username = admin password")
@example("AKIAwJalrXUtnFEMIK7MD")
@settings(max_examples=400, deadline=None)
def test_a_text_holds_half_of_a_pair_exactly_where_the_pattern_matches(text):
    assert secrets._holds_half(text) == (secrets._HALF.search(text) is not None)


@pytest.mark.parametrize("n", range(18, 28))
def test_a_quoted_string_is_a_high_entropy_secret_exactly_when_detect_secrets_entropy_says_so(n):
    # Strings of n distinct characters carry log2(n) bits each: 23 is the shortest above the limit.
    plugin = secrets._plugins()[-1][0]
    value = "ABCDEFGHIJKLMNOPQRSTUVWXYZabc"[:n]
    found = [f.type for f in find_secrets(f'x = "{value}"')]
    assert ("Base64 High Entropy String" in found) == (plugin.calculate_shannon_entropy(value) > plugin.entropy_limit)


@given(st.lists(st.sampled_from(["0123456789abcdef", "ABCDEF", "0", "x", " ", "\n", "=", "dGVzdA", "-_"]), max_size=12).map("".join))
@example("686f6f6b733a2f2f736b5f6c6976655f34654333394871")
@settings(max_examples=300, deadline=None)
def test_a_text_without_encoded_hex_digits_in_a_row_has_no_hex_run(text):
    if secrets._HEX_DIGITS.search(text) is None:
        assert secrets._HEX_RUN.search(text) is None


def test_a_hex_encoded_key_is_found_as_encoded():
    encoded = STRIPE.encode().hex()
    assert [f.type for f in find_secrets(f"blob = {encoded}\n")] == ["Encoded Stripe Access Key"]
