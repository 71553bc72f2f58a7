"""Credentials in every form agent data carries them (issue 50, item 1): unquoted pairs and values,
the secret half of a known pair, a known-format key whole, split, encoded, hidden by zero-width or
full-width characters, and in a source_ref URL. Each is refused (`deny`, coding-agent) or redacted
whole (`deny_or_redact`, chat-agent and research-agent). The keys are made-up values in each
service's published format; each test states by hand which span is the secret."""

from __future__ import annotations

import base64
import json

import pytest

from ctxeng import sdk
from ctxeng.engine.secrets import credential_like, find_secrets

from .builders import item, policy, request, run

AWS_ID = "AKIA" + "Q3ZJ7XPLM2VB8KTN"
AWS_SECRET = "Xk8vQ2mZ" + "p7R1tY4wL9nB3cF6hJ0dS5aE2gU8iO1q"  # 40 characters, base64 alphabet
STRIPE_LONG = "sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc" + "Q9wErT5yUi8oP2aS"  # 8 + 24 + 16 characters
PASSWORD = "hunter2-Pa55word"
BEARER = "eyJ0b2tlbiI6InRlc3QifQ" + "Zx81nBq0PaLm3TyWv9Kc"

# form -> (text of a tool result, the secrets that must not reach the model, text that must)
FORMS: dict[str, tuple[str, tuple[str, ...], str]] = {
    "unquoted env": (f"AWS_ACCESS_KEY_ID={AWS_ID}\nAWS_SECRET_ACCESS_KEY={AWS_SECRET}\nREGION=eu-west-1\n", (AWS_ID, AWS_SECRET), "REGION=eu-west-1"),
    "export": (f"export DB_PASSWORD={PASSWORD}\nexport PORT=5432\n", (PASSWORD,), "PORT=5432"),
    "credentials file": (f"[default]\naws_access_key_id = {AWS_ID}\naws_secret_access_key = {AWS_SECRET}\nregion = eu-west-1\n", (AWS_ID, AWS_SECRET), "[default]"),
    "yaml": (f"database:\n  host: db.internal\n  password: {PASSWORD}\n", (PASSWORD,), "host: db.internal"),
    "json": (json.dumps({"user": "svc", "api_key": "Zx81nBq0PaLm3TyWv9KcRd", "retries": 3}), ("Zx81nBq0PaLm3TyWv9KcRd",), '"retries": 3'),
    "header": (f"curl -H 'Authorization: Bearer {BEARER}' https://api.example.org/v1/items\n", (BEARER,), "https://api.example.org/v1/items"),
    "dsn": (f"DATABASE_URL=postgres://admin:{PASSWORD}@db.internal:5432/app\n", (PASSWORD,), "db.internal:5432/app"),
    "query token": ("GET https://api.example.org/v1/items?access_token=Qm9uZ2xlMjAyNHRva2Vu7x&page=2\n", ("Qm9uZ2xlMjAyNHRva2Vu7x",), "page=2"),
    "40-character stripe key": (f"STRIPE_SECRET_KEY={STRIPE_LONG}\nDEBUG=false\n", (STRIPE_LONG, STRIPE_LONG[-16:]), "DEBUG=false"),
    "split over lines": ("STRIPE_KEY=sk_live_4eC39HqLyj\\\n    WDarjtT1zdp7dc\nDEBUG=false\n", ("sk_live_4eC39HqLyj", "WDarjtT1zdp7dc"), "DEBUG=false"),
    "base64": (f"blob: {base64.b64encode(STRIPE_LONG.encode()).decode()}\nDEBUG=false\n", (base64.b64encode(STRIPE_LONG.encode()).decode(),), "DEBUG=false"),
    "hex": (f"blob={STRIPE_LONG.encode().hex()}\nDEBUG=false\n", (STRIPE_LONG.encode().hex(),), "DEBUG=false"),
    "zero-width": ("STRIPE=sk_live_4eC39Hq\u200bLyjWDarjt\u200dT1zdp7dc\nDEBUG=false\n", ("4eC39Hq", "LyjWDarjt", "T1zdp7dc"), "DEBUG=false"),
    "full-width": ("STRIPE=ｓｋ＿ｌｉｖｅ＿４ｅＣ３９ＨｑＬｙｊＷＤａｒｊｔＴ１ｚｄｐ７ｄｃ\nDEBUG=false\n", ("４ｅＣ３９ＨｑＬｙｊＷＤａｒｊｔＴ１ｚｄｐ７ｄｃ",), "DEBUG=false"),
    "pair without labels": (f"User,Access key ID,Secret access key\nci-bot,{AWS_ID},{AWS_SECRET}\n", (AWS_ID, AWS_SECRET), "ci-bot"),
}


def _history(text: str) -> list[dict]:
    return [
        {"role": "system", "content": "You are a careful agent."},
        {"role": "user", "content": "Why does the deploy fail?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c0", "type": "function", "function": {"name": "read_file", "arguments": json.dumps({"path": "deploy/.env"})}}]},
        {"role": "tool", "tool_call_id": "c0", "content": text},
    ]


def _step(starter: str, text: str):
    """One step of `starter` over a history whose tool result is `text` (research-agent also needs
    its resident parts)."""
    items = [sdk.repository_manifest({"acme/deploy": "c0ffee1"}), sdk.hard_constraints(["cite every claim"]),
             sdk.open_items({"o1": "find why the deploy fails"})] if starter == "research-agent" else []
    return sdk.Session(starter).step(_history(text), items=items)


def _result(step) -> dict:
    pair = next(p for p in step.manifest["tool_pairs"] if p["call_id"] == "c0")
    return next(r for r in step.manifest["included"] + step.manifest["excluded"] if r["item_id"] == pair["result_item_id"])


@pytest.mark.parametrize("form", sorted(FORMS))
def test_each_form_is_found_and_covers_the_whole_secret(form):
    text, secrets, kept = FORMS[form]
    found = find_secrets(text)
    covered = [(f.start, f.end) for f in found]
    for secret in secrets:
        at = text.index(secret)
        assert any(a <= at and at + len(secret) <= b for a, b in covered), (form, secret, [f.text for f in found])
    assert kept not in "".join(f.text for f in found), form


@pytest.mark.parametrize("starter", ["chat-agent", "research-agent"])
@pytest.mark.parametrize("form", sorted(FORMS))
def test_under_deny_or_redact_each_form_is_redacted_whole(starter, form):
    text, secrets, kept = FORMS[form]
    step = _step(starter, text)
    payload = json.dumps(step.kwargs, ensure_ascii=False)
    for secret in secrets:
        assert secret not in payload, (starter, form, secret)
    assert "[ctxeng:redacted credential]" in payload
    assert json.dumps(kept, ensure_ascii=False)[1:-1] in payload
    assert _result(step)["security_assessment"]["secret_handling"] == "redacted"


@pytest.mark.parametrize("form", sorted(FORMS))
def test_under_deny_each_form_is_refused(form):
    text, secrets, _ = FORMS[form]
    step = _step("coding-agent", text)
    payload = json.dumps(step.kwargs, ensure_ascii=False)
    rec = _result(step)
    assert (rec["reason"], rec["security_assessment"]["secret_handling"]) == ("security_rejected", "failed")
    for secret in secrets:
        assert secret not in payload


def test_the_secret_half_of_an_aws_pair_is_found_when_only_the_key_id_is_labelled():
    # The id is found by its format; the 40-character partner by the pair rule, with no key name.
    text = f"key id {AWS_ID}\nand then\n{AWS_SECRET}\n"
    assert [(f.type, f.text) for f in find_secrets(text)] == [("AWS Access Key", AWS_ID), ("Paired Secret", AWS_SECRET)]
    # Without the id (no pair) a bare 40-character run is not a finding.
    assert find_secrets(f"and then\n{AWS_SECRET}\n") == []


def test_a_client_id_and_a_dsn_user_bring_their_partner_with_them():
    partner = "Q3vT9xLm2PzR8wKd4NbY"
    assert [f.text for f in find_secrets(f"client_id: web-app\nthe other one is {partner}")] == [partner]
    assert [f.text for f in find_secrets(f"postgres://admin@db/app\nthen {partner}")] == [partner]
    assert find_secrets(f"the other one is {partner}") == []


@pytest.mark.parametrize("value, expected", [
    ("hunter2-Pa55word", True),
    ("wJalrXUtnFEMI/K7MDENG/bPxRfiCYzEXAMPLEKEY", True),
    ("settings.SECRET_KEY", False),  # a dotted name
    ("request.POST['password']", False),  # code
    ("${DB_PASSWORD}", False),  # a placeholder
    ("test-secret-key", False),  # words
    ("NEW_VALUE_42", False),  # a constant's name
    ("/etc/app/secret.pem", False),  # a path
    ("1024", False),  # too short
    ("xxxxxxxxxxxx", False),
])
def test_a_value_after_a_credential_key_counts_only_when_credential_like(value, expected):
    assert credential_like(value) is expected


@pytest.mark.parametrize("text", [
    "max_tokens = 1024",
    "password = request.POST.get('password')",
    "SECRET_KEY = settings.SECRET_KEY",
    "token_count = len(tokens)",
    "api_key: str",
    "password: Optional[str] = None",
    "export DB_PASSWORD=${DB_PASSWORD}",
    "commit c0ffee1234567890abcdef1234567890abcdef12 by AKIA docs",
    "client_id: web-app\ncommit c0ffee1234567890abcdef1234567890abcdef12",
    "Authorization: Bearer $TOKEN",
    # `::` joins a path, not a key to its value: a pytest node id, a Rust or C++ path
    "tests/test_token.py::test_queue_47 PASSED        [  1%]",
    "FAILED tests/auth/test_api_key.py::test_rotate_3 - AssertionError",
    "use crate::token::Kind4x2;",
])
def test_ordinary_code_and_config_are_not_secrets(text):
    assert find_secrets(text) == []


URL_SECRET = "ghp_" + "wWPw5k4aXcaT4fNP0UcnZwJUVFk6LO0pINUx"


def _with_url(url: str) -> dict:
    doc = item("web", "web_document", "A page about deploys.", relevance=0.9, source_ref={"url": url})
    return request(extra=[doc])


def test_a_token_in_a_source_ref_url_is_redacted_in_the_header_and_recorded():
    result = run(_with_url(f"https://{URL_SECRET}@github.com/acme/deploy?ref=main"))
    payload = json.dumps(result.serialized_input)
    assert URL_SECRET not in payload
    assert "github.com/acme/deploy?ref=main" in payload and "A page about deploys." in payload
    (record,) = [t for t in result.manifest.transforms if t.type == "redact"]
    assert record.input_item_ids == ["web"] and "source_ref.url" in record.objective


def test_a_token_in_a_source_ref_query_is_refused_under_deny():
    pol = policy()
    pol["security"] = {**pol.get("security", {}), "secret_material": "deny"}
    result = run(_with_url("https://api.example.org/page?access_token=Qm9uZ2xlMjAyNHRva2Vu7x"), pol)
    excluded = {e.item_id: e for e in result.manifest.excluded}
    assert excluded["web"].reason == "security_rejected" and "source_ref.url" in excluded["web"].detail
    assert "Qm9uZ2xlMjAyNHRva2Vu7x" not in json.dumps(result.serialized_input)


def test_a_source_refs_strings_are_scanned_once_across_steps_as_content_is(monkeypatch):
    # An agent sends the same refs again at every step: the second assembly of the same request
    # finds the ref's secret again without scanning its text again (bench section 9's goal).
    from ctxeng.engine import memo, secrets

    url = f"https://{URL_SECRET}@github.com/acme/deploy?ref=main"
    scanned: list[str] = []
    real = secrets._scan
    monkeypatch.setattr(secrets, "_scan", lambda text: scanned.append(text) or real(text))
    secrets._by_digest.clear()
    memo.clear_all()  # and the per-content answers built on the scans (a ref's findings)
    for _ in range(2):
        result = run(_with_url(url))
        assert URL_SECRET not in json.dumps(result.serialized_input)
    assert scanned.count(url) == 1
    assert len(scanned) == len(set(scanned))
