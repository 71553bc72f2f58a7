"""Reviewer dashboard III (issue 29), what a plain HTTP client sees: regions opened directly are
full pages, a log's kept failure lines in context, timestamps as `<time>` in UTC with the zone
named and a per-user time display, /why/ over every decision, /runs/ naming what it ignored, the
impact summary counting items once, whole words in flip details, labelled diff selects, the
favicon, a copy button on a one-time token, and badge colours of at least 4.5:1 contrast
computed from the stylesheet.
"""

from __future__ import annotations

import html
import re
from datetime import UTC, datetime
from pathlib import Path

import pytest
from django.conf import settings
from django.template.loader import render_to_string
from rest_framework.authtoken.models import Token

from ctxeng.accounts.models import Profile
from ctxeng.accounts.time_display import SESSION_TIME_DISPLAY
from manifests.examples import example_json, example_text
from policies.dashboard_selectors import impact_summary

from .conftest import PASSWORD

LAYOUT = '<nav class="mainnav">'


def region_urls(example):
    job = example["ready"].id
    return [
        f"/assemblies/{job}/transforms/",
        f"/assemblies/{job}/tool_pairs/",
        f"/assemblies/{job}/item/?item_id=trace-old-1",
        f"/assemblies/{job}/item/?item_id=result-call-c&part=excerpts",
        f"/assemblies/{job}/item/?item_id=result-call-a&part=payload",
        f"/assemblies/{job}/input/",
    ]


def test_a_region_opened_directly_is_a_page_and_htmx_still_gets_the_fragment(owner_client, example):
    for url in region_urls(example):
        page = owner_client.get(url)
        body = page.content.decode()
        assert page.status_code == 200 and body.startswith("<!doctype html>") and LAYOUT in body, url
        assert "HX-Request" in page["Vary"], url
        fragment = owner_client.get(url, headers={"HX-Request": "true"})
        assert fragment.status_code == 200 and "<html" not in fragment.content.decode() and LAYOUT not in fragment.content.decode(), url
        assert "HX-Request" in fragment["Vary"], url


def test_a_region_page_links_back_to_where_it_belongs(owner_client, example):
    job = example["ready"].id
    body = owner_client.get(f"/assemblies/{job}/item/?item_id=trace-old-1").content.decode()
    assert f'href="/assemblies/{job}/?item=trace-old-1"' in body and "trace-old-1: the content as submitted" in body
    body = owner_client.get(f"/assemblies/{job}/transforms/").content.decode()
    assert f'href="/assemblies/{job}/#transforms"' in body


def test_an_impact_preview_opened_directly_is_a_page(owner_client, example, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        owner_client.post("/policies/source-research/revisions/4/impact/run/")
    preview = example["draft"].impact_previews.get()
    url = f"/policies/source-research/revisions/4/impact/{preview.id}/"
    assert LAYOUT in owner_client.get(url).content.decode()
    assert LAYOUT not in owner_client.get(url, headers={"HX-Request": "true"}).content.decode()


def test_a_logs_kept_failure_lines_show_in_their_context_with_line_numbers(owner_client, example):
    submitted = next(c["content"] for c in example_json("request.json")["candidates"] if c["item_id"] == "result-call-c")
    lines = submitted.split("\n")
    failures = [number for number, line in enumerate(lines, 1) if line.startswith("FAILED ")]
    assert len(failures) == 3
    body = owner_client.get(f"/assemblies/{example['ready'].id}/item/?item_id=result-call-c&part=excerpts").content.decode()
    rows = re.findall(r'<tr class="(kept)?"><td class="line-no">(?:▶ )?(\d+)</td><td><code>(.*?)</code></td></tr>', body)
    shown = {int(number): (bool(kept), text) for kept, number, text in rows}
    expected = {n for f in failures for n in range(f - 2, f + 3)}
    assert set(shown) == expected
    for number in expected:
        assert shown[number] == (number in failures, html.escape(lines[number - 1])), number


# --------------------------------------------------------------------------- time

TIME = re.compile(r'<time datetime="(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)" title="([^"]*)">([^<]*)</time>')


def test_every_timestamp_is_a_time_element_in_utc_with_the_zone_named(owner_client, example):
    job = example["ready"]
    expected = job.created_at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    run_page = owner_client.get("/runs/run-42/").content.decode()
    assert expected in [text for _, _, text in TIME.findall(run_page)]
    for url in ("/", "/runs/", "/runs/run-42/", f"/assemblies/{job.id}/", "/policies/source-research/", "/people/"):
        body = owner_client.get(url).content.decode()
        found = TIME.findall(body)
        assert found, url
        for machine, title, text in found:
            moment = datetime.strptime(machine, "%Y-%m-%dT%H:%M:%SZ")
            assert text == title == moment.strftime("%Y-%m-%d %H:%M:%S UTC"), (url, text)
        assert body.count("<time ") == len(found), url


def test_the_time_display_is_a_setting_of_each_user(client, example):
    client.login(username="owner", password=PASSWORD)
    assert 'data-time-display="utc"' in client.get("/runs/").content.decode()
    moved = client.post("/account/time-display/", {"time_display": "local", "next": "/runs/?status=ready"})
    assert moved.status_code == 302 and moved["Location"] == "/runs/?status=ready"
    assert Profile.objects.get(user=example["owner"]).time_display == "local"
    assert 'data-time-display="local"' in client.get("/runs/").content.decode()
    client.logout()
    client.login(username="owner", password=PASSWORD)  # a new session reads the profile
    assert client.session[SESSION_TIME_DISPLAY] == "local"  # at login: no page has to query for it
    assert 'data-time-display="local"' in client.get("/runs/").content.decode()
    client.logout()
    client.login(username="reviewer", password=PASSWORD)
    assert 'data-time-display="utc"' in client.get("/runs/").content.decode()
    refused = client.post("/account/time-display/", {"time_display": "mars"}, follow=True)
    assert "time_display: expected one of utc, local" in refused.content.decode()
    assert not Profile.objects.filter(user=example["reviewer"]).exists()
    away = client.post("/account/time-display/", {"time_display": "local", "next": "https://evil.example/"})
    assert away["Location"] == "/"


def test_local_time_is_a_static_script_under_the_csp(owner_client, example):
    response = owner_client.get("/runs/")
    assert "script-src 'self'" in response["Content-Security-Policy"]
    body = response.content.decode()
    assert re.search(r'<script src="/static/ctxeng/local-time[^"]*\.js" defer></script>', body)
    assert not re.search(r"<script(?![^>]*\bsrc=)", body)  # no inline script


# --------------------------------------------------------------------------- the smaller items


def test_why_searches_every_decision_by_default(owner_client, example):
    included = example_json("expected.json")["included"][0]
    body = owner_client.get(f"/why/?q={included}").content.decode()
    assert re.search(rf'<code>{included}</code></a>(?:(?!</td>).)*</td>\s*<td><span class="badge good">included</span>', body, re.S)
    assert re.search(r'<option value="" selected>either</option>', body)
    assert "Unknown decision" in owner_client.get("/why/?q=plan&decision=maybe").content.decode()


def test_runs_says_which_filter_it_ignored(owner_client, example):
    body = owner_client.get("/runs/?since=2026-13-45&until=yesterday&status=bogus").content.decode()
    assert "“2026-13-45” is not a date" in body and "“yesterday” is not a date" in body and "Unknown status “bogus”" in body
    assert "run-42" in body  # the rest of the list still shows
    clean = owner_client.get("/runs/?since=2020-01-01&status=ready").content.decode()
    assert 'class="problems"' not in clean and "run-42" in clean


def _row(flips, *, count=None):
    comparison = {"flips": [{"item_id": i} for i in flips], "flip_count": len(flips) if count is None else count,
                  "flipped_item_ids": list(flips)}
    return {"comparison": comparison, "error": "", "changed": bool(flips)}


def test_the_impact_summary_counts_an_item_flipping_in_two_assemblies_once():
    summary = impact_summary([_row(["web-a", "mem-b"]), _row(["web-a"]), _row([])])
    assert (summary["flipped_items"], summary["flip_assemblies"], summary["flipped_items_at_least"]) == (2, 2, False)
    # a row stored before the full id list was kept shows only some of its flips: "at least"
    old = _row(["web-a"], count=3)
    del old["comparison"]["flipped_item_ids"]
    summary = impact_summary([old, _row(["web-a"])])
    assert (summary["flipped_items"], summary["flipped_items_at_least"]) == (1, True)


def test_the_impact_page_says_items_in_assemblies(owner_client, example, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        owner_client.post("/policies/source-research/revisions/4/impact/run/")
    body = owner_client.get("/policies/source-research/revisions/4/impact/").content.decode()
    assert re.search(r"\d+ items? would flip in \d+ assembl(y|ies)", body)


def test_a_flips_detail_is_never_cut_mid_word():
    words = [f"reduce_cand_{n}" for n in range(10, 90)]  # 15 characters a word with its space: 140 falls mid-word
    flip = {"item_id": "web-a", "before": {"decision": "included", "reason": "x"},
            "after": {"decision": "excluded", "reason": "budget_evicted", "detail": " ".join(words)}}
    shown = re.search(r'<span class="muted">([^<]*)</span></td>\s*</tr>', render_to_string("manifests/partials/flips.html", {"flips": [flip], "labels": None})).group(1)
    assert shown.endswith("…") and all(word in words for word in shown.rstrip(" …").split())


def test_the_diff_selects_have_labels(owner_client, example):
    body = owner_client.get("/policies/source-research/diff/?from=3&to=4").content.decode()
    for name in ("from", "to"):
        select_id = re.search(rf'<select id="([^"]+)" name="{name}">', body).group(1)
        assert f'<label for="{select_id}">{name}</label>' in body


def test_the_favicon_is_served(client, db):
    response = client.get("/favicon.ico", follow=True)
    assert response.status_code == 200 and response.redirect_chain
    assert b"<svg" in b"".join(response.streaming_content if response.streaming else [response.content])


def test_the_one_time_token_has_a_copy_button(owner_client, example):
    Token.objects.filter(user=example["reviewer"]).delete()  # build_example issued one
    body = owner_client.post(f"/people/{example['reviewer'].pk}/token/").content.decode()
    token = re.search(r'<code class="token-once" id="token-value">([^<]+)</code>', body).group(1)
    assert f'<button type="button" class="copy" data-copy="{token}"' in body
    assert re.search(r'<script src="/static/ctxeng/copy[^"]*\.js" defer>', body)


# --------------------------------------------------------------------------- contrast

CSS = Path(settings.BASE_DIR) / "static" / "ctxeng" / "app.css"
# The classes that colour a short word on a tinted box (badges, gate cells, assertion chips, the
# budget legend's min/max marks) and muted text; each must reach WCAG AA for normal text.
BADGE_SELECTOR = re.compile(r"^\.(badge|gate|gate-cell|assertion|mark-min|mark-max|legend-bad|muted)\b")
PAGE_BACKGROUNDS = ("#ffffff", "#f5f7fa", "#fafbfc")  # card, page, table head


def _luminance(colour: str) -> float:
    digits = colour.lstrip("#")
    digits = "".join(c * 2 for c in digits) if len(digits) == 3 else digits
    channels = [int(digits[i:i + 2], 16) / 255 for i in (0, 2, 4)]
    linear = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


def contrast(a: str, b: str) -> float:
    high, low = sorted((_luminance(a), _luminance(b)), reverse=True)
    return (high + 0.05) / (low + 0.05)


def css_colour_pairs(text: str) -> dict[str, list[tuple[str, str]]]:
    """selector -> [(text colour, background)] for the badge-like rules of a stylesheet: `var()`
    resolved from :root; a rule without its own background sits on its base class's (`.badge`) or
    its parent compound's (`.gate-cell.failed` for `.gate-cell.failed .gate-name`), else on every
    page background."""
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    variables = dict(re.findall(r"(--[\w-]+)\s*:\s*([^;}]+)", re.search(r":root\s*\{([^}]*)\}", text).group(1)))

    def value(raw: str) -> str:
        raw = raw.replace("!important", "").strip()
        match = re.fullmatch(r"var\((--[\w-]+)\)", raw)
        return variables[match.group(1)].strip() if match else raw

    rules: dict[str, dict[str, str]] = {}
    for selectors, body in re.findall(r"([^{}]+)\{([^{}]*)\}", text):
        declarations = dict((k.strip(), value(v)) for k, v in re.findall(r"([\w-]+)\s*:\s*([^;]+)", body))
        for selector in (s.strip() for s in selectors.split(",")):
            rules.setdefault(selector, {}).update(declarations)

    def background(selector: str) -> list[str]:
        own = rules.get(selector, {})
        for key in ("background", "background-color"):
            if own.get(key, "").startswith("#"):
                return [own[key]]
        if " " in selector:
            return background(selector.rsplit(" ", 1)[0])
        base = "." + selector.lstrip(".").split(".")[0]
        return background(base) if base != selector else list(PAGE_BACKGROUNDS)

    return {selector: [(declarations["color"], bg) for bg in background(selector)]
            for selector, declarations in rules.items()
            if BADGE_SELECTOR.match(selector) and declarations.get("color", "").startswith("#")}


def test_the_contrast_helper_knows_the_wcag_reference_values():
    assert round(contrast("#000", "#fff"), 1) == 21.0 and contrast("#777", "#fff") < 4.5 < contrast("#767676", "#fff")
    pairs = css_colour_pairs(":root{--w:#fff}.badge{color:#3a4451;background:#eceff3}.badge.x{color:#d08a00}"
                             ".gate-cell.failed{color:#fff;background:#b3261e}.gate-cell.failed .gate-name{color:var(--w)}")
    assert pairs == {".badge": [("#3a4451", "#eceff3")], ".badge.x": [("#d08a00", "#eceff3")],
                     ".gate-cell.failed": [("#fff", "#b3261e")], ".gate-cell.failed .gate-name": [("#fff", "#b3261e")]}


def test_badge_colours_reach_wcag_aa_contrast():
    pairs = css_colour_pairs(CSS.read_text())
    assert {".mark-min", ".gate-cell", ".gate.not_evaluated", ".badge.warn", ".muted"} <= set(pairs)
    low = {selector: round(contrast(fg, bg), 2) for selector, combos in pairs.items() for fg, bg in combos
           if contrast(fg, bg) < 4.5}
    assert low == {}


def test_the_runs_filter_offers_each_policy_of_the_tenant_by_its_id_in_order(owner_client, example):
    """/runs/'s policy menu: one option per policy id of the tenant acted in (sorted, the id as
    value and text), none of another tenant's, the chosen one selected."""
    from ctxeng.accounts.models import Tenant
    from policies.services import policy_import

    text = example_text("policy.yaml")
    policy_import(tenant=example["tenant"], text=text.replace("id: source-research", "id: a-first-policy", 1),
                  user=example["owner"], publish=False, note="a second policy")
    outsider_tenant = Tenant.objects.get(slug="tenant-o")
    policy_import(tenant=outsider_tenant, text=text.replace("id: source-research", "id: outsider-policy", 1),
                  user=example["outsider"], publish=False, note="another tenant's")
    body = owner_client.get("/runs/?policy=source-research").content.decode()
    menu = re.search(r'<select name="policy">(.*?)</select>', body, re.S).group(1)
    assert re.findall(r'<option value="([^"]*)"(?: selected)?>([^<]*)</option>', menu) == [
        ("", "any"), ("a-first-policy", "a-first-policy"), ("source-research", "source-research")]
    assert '<option value="source-research" selected>' in menu


@pytest.mark.parametrize("count", [499, 500, 501])
def test_the_flips_table_shows_500_and_says_how_many_there_are_beyond(count):
    """On each side of the 500-row bound: the table stops at 500 rows, and only a longer list says
    "Showing 500 of N"."""
    flips = [{"item_id": f"item-{n}", "before": {"decision": "included", "reason": "ranked"},
              "after": {"decision": "excluded", "reason": "budget_evicted"}} for n in range(count)]
    body = render_to_string("manifests/partials/flips.html", {"flips": flips, "labels": None})
    assert body.count("<tr>") == 1 + min(count, 500)  # the header's row and one per flip shown
    note = re.search(r'<p class="muted">Showing (\d+) of (\d+)\.</p>', body)
    assert (note.groups() if note else None) == (("500", str(count)) if count > 500 else None)
