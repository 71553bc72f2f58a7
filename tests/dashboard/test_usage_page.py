"""The token estimates page (/usage/): the engine's input-token estimate against the provider's
reported input tokens, per model (provider and name from the sealed manifest), then the latest
reports, for the current tenant only.

Every figure is computed here from the stored estimates and the actual counts the test chose,
never read back from the selector it checks.
"""

from __future__ import annotations

import html
import json
import re
from html.parser import HTMLParser
from statistics import mean

import pytest
from django.test import Client

from ctxeng.accounts.models import Tenant
from manifests.examples import example_json, example_text
from manifests.models import AssemblyJob, UsageReport
from manifests.services import usage_report_record
from policies.services import policy_import

from .conftest import run_job

HOSTILE_MODEL = '<script>alert("model")</script><img src=x onerror=alert(1)>'
# (model name, the error each report gets: estimate − actual, in tokens)
PLAN = [
    ("gpt-4o", 120),
    ("gpt-4o-mini", -300),
    ("gpt-4o", -45),
    ("gpt-4o", 30),
    ("gpt-4o-mini", -12),
]


class Tables(HTMLParser):
    """Each <table>'s rows as lists of cells; a cell is (text, [hrefs])."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: dict[str, list[list[tuple[str, list[str]]]]] = {}
        self._table: list | None = None
        self._row: list | None = None
        self._cell: list | None = None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "table":
            self._table = self.tables.setdefault(attrs.get("class", ""), [])
        elif tag == "tr" and self._table is not None:
            self._row = []
        elif tag in ("td", "th") and self._row is not None:
            self._cell = ["", []]
        elif tag == "a" and self._cell is not None:
            self._cell[1].append(attrs.get("href"))

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self._row.append((" ".join(self._cell[0].split()), self._cell[1]))
            self._cell = None
        elif tag == "tr" and self._row is not None:
            self._table.append(self._row)
            self._row = None
        elif tag == "table":
            self._table = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell[0] += data


def tables(response) -> dict[str, list[list[tuple[str, list[str]]]]]:
    parser = Tables()
    parser.feed(response.content.decode())
    return parser.tables


def number(text: str) -> float:
    return float(text.replace("%", "").replace("+", "").replace("−", "-"))


def submit_with_model(user, name: str, key: str, provider: str = "openai", tenant: str = "tenant-x") -> AssemblyJob:
    request = json.loads(json.dumps(example_json("request.json")).replace("tenant-x", tenant))
    request["run_id"] = f"run-usage-{key}"
    request["model"] = {**request["model"], "provider": provider, "name": name}
    job = run_job(user, request, f"usage-{key}")
    assert job.status == "ready", job.error
    return job


def report(api_client, job: AssemblyJob, error: int, cached: int = 0) -> dict:
    """Report usage through the REST endpoint so that estimate − actual == error."""
    estimate = job.manifest.estimated_input_tokens
    response = api_client.post(f"/api/v1/assemblies/{job.id}/usage/",
                               {"input_tokens": estimate - error, "cached_tokens": cached, "output_tokens": 7},
                               format="json")
    assert response.status_code == 200, response.content
    assert response.json()["estimate_error"] == error
    return {"job": job, "model": job.manifest.sections["assembly"]["model"]["name"], "estimated": estimate,
            "actual": estimate - error, "cached": cached, "error": error}


@pytest.fixture
def reported(example, api):
    """Five reports in tenant-x over two models (three for gpt-4o, two for gpt-4o-mini), in PLAN order."""
    owner_api = api(example["owner"])
    rows = []
    for index, (name, error) in enumerate(PLAN):
        job = submit_with_model(example["owner"], name, str(index))
        rows.append(report(owner_api, job, error, cached=10 * index))
    return rows


def expected_figures(rows: list[dict]) -> dict:
    estimated, actual = [r["estimated"] for r in rows], [r["actual"] for r in rows]
    errors = [r["estimated"] - r["actual"] for r in rows]
    pct = [100.0 * e / a for e, a in zip(errors, actual, strict=True)]
    over = max((r for r in rows if r["error"] > 0), key=lambda r: r["error"], default=None)
    under = min((r for r in rows if r["error"] < 0), key=lambda r: r["error"], default=None)
    return {"calls": len(rows), "estimated_sum": sum(estimated), "actual_sum": sum(actual),
            "estimated_mean": mean(estimated), "actual_mean": mean(actual), "error_mean": mean(errors),
            "error_pct_mean": mean(pct), "abs_error_pct_mean": mean(abs(p) for p in pct), "over": over, "under": under}


def test_the_nav_links_to_the_token_estimates_page(owner_client):
    body = owner_client.get("/runs/").content.decode()
    assert re.search(r'<nav class="mainnav">.*<a href="/usage/">Token estimates</a>.*</nav>', body, re.S)


def test_it_requires_login(client, example):
    response = client.get("/usage/")
    assert response.status_code == 302 and response["Location"].startswith("/login/")


def test_the_empty_state_says_how_to_report_usage(owner_client, example):
    response = owner_client.get("/usage/")
    assert response.status_code == 200
    body = response.content.decode()
    assert 'id="no-usage"' in body and "No usage reported yet" in body
    assert "a.report_usage(response)" in body and "ctxeng.client" in body
    assert "POST /api/v1/assemblies/&lt;id&gt;/usage/" in body
    assert "usage-models" not in body and "usage-reports" not in body


def test_per_model_figures_links_and_ordering(owner_client, reported):
    response = owner_client.get("/usage/")
    assert response.status_code == 200
    assert "No usage reported yet" not in response.content.decode()
    head, *rows = tables(response)["dense usage-models"]
    columns = [text for text, _ in head]
    assert columns[:2] == ["provider / model", "calls"]
    # Most reported model first.
    assert [row[0][0] for row in rows] == ["openai / gpt-4o", "openai / gpt-4o-mini"]
    for row, name in zip(rows, ["gpt-4o", "gpt-4o-mini"], strict=True):
        want = expected_figures([r for r in reported if r["model"] == name])
        cell = {column: row[i] for i, column in enumerate(columns)}
        assert int(cell["calls"][0]) == want["calls"]
        assert int(cell["estimated (sum)"][0]) == want["estimated_sum"]
        assert int(cell["actual (sum)"][0]) == want["actual_sum"]
        assert number(cell["estimated (mean)"][0]) == pytest.approx(want["estimated_mean"], abs=0.051)
        assert number(cell["actual (mean)"][0]) == pytest.approx(want["actual_mean"], abs=0.051)
        assert number(cell["mean error"][0]) == pytest.approx(want["error_mean"], abs=0.051)
        assert number(cell["mean error %"][0]) == pytest.approx(want["error_pct_mean"], abs=0.051)
        assert number(cell["mean |error| %"][0]) == pytest.approx(want["abs_error_pct_mean"], abs=0.051)
        for column, worst in (("worst over-estimate", want["over"]), ("worst under-estimate", want["under"])):
            if worst is None:
                assert cell[column] == ("—", [])
            else:
                assert cell[column][1] == [f"/assemblies/{worst['job'].id}/"]
                assert cell[column][0].startswith(f"{worst['error']:+d} (")
    gpt4o = dict(zip(columns, rows[0], strict=True))
    assert gpt4o["worst over-estimate"][0].startswith("+120 ") and gpt4o["worst under-estimate"][0].startswith("-45 ")
    mini = dict(zip(columns, rows[1], strict=True))
    assert mini["worst over-estimate"] == ("—", []) and mini["worst under-estimate"][0].startswith("-300 ")


def test_the_selector_figures_match_an_independent_computation(example, reported):
    from manifests.dashboard_selectors import usage_by_model

    found = usage_by_model(tenant=example["tenant"])
    assert [(row["provider"], row["model_name"]) for row in found] == [("openai", "gpt-4o"), ("openai", "gpt-4o-mini")]
    for row in found:
        want = expected_figures([r for r in reported if r["model"] == row["model_name"]])
        for key in ("calls", "estimated_sum", "actual_sum"):
            assert row[key] == want[key], key
        for key in ("estimated_mean", "actual_mean", "error_mean", "error_pct_mean", "abs_error_pct_mean"):
            assert float(row[key]) == pytest.approx(want[key], rel=1e-9), key
        for side, worst in (("worst_over", want["over"]), ("worst_under", want["under"])):
            assert (row[side] or {}).get("job_id") == (worst["job"].id if worst else None), side
        assert row["last_reported_at"] == max(
            UsageReport.objects.get(manifest__job=r["job"]).reported_at for r in reported if r["model"] == row["model_name"])


def test_the_latest_reports_newest_first_with_links(owner_client, reported):
    head, *rows = tables(owner_client.get("/usage/"))["dense usage-reports"]
    columns = [text for text, _ in head]
    assert columns == ["assembly", "provider / model", "estimated", "actual", "cached", "output", "error", "error %",
                       "calibration", "reported"]
    assert len(rows) == len(PLAN)
    for row, want in zip(rows, reversed(reported), strict=True):
        cell = dict(zip(columns, row, strict=True))
        assert cell["assembly"] == (f"{want['job'].run.run_id} / {want['job'].step_id}", [f"/assemblies/{want['job'].id}/"])
        assert cell["provider / model"][0] == f"openai / {want['model']}"
        assert [int(cell[c][0]) for c in ("estimated", "actual", "cached", "output")] == [
            want["estimated"], want["actual"], want["cached"], 7]
        assert cell["error"][0] == f"{want['error']:+d}"
        assert number(cell["error %"][0]) == pytest.approx(100.0 * want["error"] / want["actual"], abs=0.051)
        assert cell["calibration"][0] == "in band"  # errors of a few hundred tokens: within 0.5..2 times


def test_the_latest_reports_are_paged(owner_client, example, reported, monkeypatch):
    from manifests import views

    monkeypatch.setattr(views, "USAGE_PAGE_SIZE", 2)
    first = tables(owner_client.get("/usage/"))["dense usage-reports"][1:]
    third = owner_client.get("/usage/?page=3")
    last = tables(third)["dense usage-reports"][1:]
    assert [row[0][1] for row in first] == [[f"/assemblies/{r['job'].id}/"] for r in reported[::-1][:2]]
    assert [row[0][1] for row in last] == [[f"/assemblies/{reported[0]['job'].id}/"]]
    assert "page 3 of 3" in third.content.decode()
    # The per-model table is not paged: every model on every page.
    assert len(tables(third)["dense usage-models"]) == 3


def test_a_hostile_model_name_is_escaped(owner_client, example, api):
    job = submit_with_model(example["owner"], HOSTILE_MODEL, "hostile", provider="openai")
    assert job.manifest.sections["assembly"]["model"]["name"] == HOSTILE_MODEL
    report(api(example["owner"]), job, 5)
    body = owner_client.get("/usage/").content.decode()
    assert "<script>alert" not in body and "<img src=x" not in body
    assert body.count(html.escape(HOSTILE_MODEL, quote=False)) + body.count(html.escape(HOSTILE_MODEL)) >= 2


def _tenant_o_report(example, name: str = "tenant-o-model") -> AssemblyJob:
    outsider = example["outsider"]
    policy_import(tenant=Tenant.objects.get(slug="tenant-o"), text=example_text("policy.yaml"), user=outsider,
                  publish=True, note="tenant-o copy")
    job = submit_with_model(outsider, name, "tenant-o", tenant="tenant-o")
    assert job.tenant.slug == "tenant-o"
    usage_report_record(manifest=job.manifest, user=outsider, input_tokens=job.manifest.estimated_input_tokens + 999,
                        cached_tokens=0, output_tokens=1)
    return job


def test_an_outsider_sees_its_own_empty_page(outsider_client, reported):
    body = outsider_client.get("/usage/").content.decode()
    assert "No usage reported yet" in body
    assert "gpt-4o" not in body
    assert not any(str(r["job"].id) in body for r in reported)


def test_another_tenants_reports_never_appear(owner_client, example, reported):
    other = _tenant_o_report(example)
    outsider_client = Client()  # not the `outsider_client` fixture: it is the same client as owner_client
    outsider_client.force_login(example["outsider"])
    owner_body = owner_client.get("/usage/").content.decode()
    assert "tenant-o-model" not in owner_body and str(other.id) not in owner_body
    assert [row[1][0] for row in tables(owner_client.get("/usage/"))["dense usage-models"][1:]] == ["3", "2"]
    outsider_response = outsider_client.get("/usage/")
    outsider_body = outsider_response.content.decode()
    models = tables(outsider_response)["dense usage-models"][1:]
    assert [row[0][0] for row in models] == ["openai / tenant-o-model"]
    assert models[0][1][0] == "1" and number(models[0][6][0]) == -999
    assert not any(str(r["job"].id) in outsider_body for r in reported)
    assert "gpt-4o" not in outsider_body
    # Its own assembly links resolve for it; tenant-x's are 404 to it.
    assert outsider_client.get(f"/assemblies/{other.id}/").status_code == 200
    assert outsider_client.get(f"/assemblies/{reported[0]['job'].id}/").status_code == 404


def test_the_query_count_does_not_grow_with_reports(owner_client, example, api, django_assert_max_num_queries):
    owner_api = api(example["owner"])
    for index in range(2):
        report(owner_api, submit_with_model(example["owner"], f"model-{index}", f"q{index}"), 10 + index)
    with django_assert_max_num_queries(9) as few:
        assert owner_client.get("/usage/").status_code == 200
    baseline = len(few)
    for index in range(2, 8):
        report(owner_api, submit_with_model(example["owner"], f"model-{index % 3}", f"q{index}"), index - 4)
    with django_assert_max_num_queries(baseline):
        response = owner_client.get("/usage/")
    assert response.status_code == 200
    assert len(tables(response)["dense usage-models"]) == 1 + 3
    assert len(tables(response)["dense usage-reports"]) == 1 + 8


# --------------------------------------------------------------------------- calibration per model

CLAUDE_ERRORS = [-40, -120, 15, -75, -210, -60]  # estimate − actual: mostly under-estimates


def nearest_rank_factor(ratios: list[float], quantile: float = 0.95, min_reports: int = 5, default: float = 1.15) -> float:
    """The documented rule, by hand: the ceil(q·n)-th smallest ratio, at least 1, rounded up to 4 decimals."""
    if len(ratios) < min_reports:
        return default
    import math

    ranked = sorted(ratios)[math.ceil(quantile * len(ratios)) - 1]
    return max(1.0, math.ceil(round(ranked * 10_000, 6)) / 10_000)


def test_the_page_shows_each_models_counter_factor_and_error_before_and_after(owner_client, example, reported, api):
    owner_api = api(example["owner"])
    claude = [report(owner_api, submit_with_model(example["owner"], "claude-sonnet-4-5", f"c{i}", provider="anthropic"), error)
              for i, error in enumerate(CLAUDE_ERRORS)]
    head, *rows = tables(owner_client.get("/usage/"))["dense usage-models"]
    columns = [text for text, _ in head]
    by_model = {row[0][0]: dict(zip(columns, row, strict=True)) for row in rows}

    ratios = [r["actual"] / r["estimated"] for r in claude]
    factor = nearest_rank_factor(ratios)
    assert factor > 1
    cell = by_model["anthropic / claude-sonnet-4-5"]
    assert cell["counter"][0] == "cl100k_base estimate (no public tokenizer)"
    assert cell["calibration factor"][0] == f"{factor:.4f} (quantile of {len(claude)} reports)"
    after = mean(100.0 * (r["estimated"] * factor - r["actual"]) / r["actual"] for r in claude)
    assert number(cell["mean error % after"][0]) == pytest.approx(after, abs=0.051)
    under_before = sum(r["estimated"] < r["actual"] for r in claude) / len(claude)
    under_after = sum(r["estimated"] * factor < r["actual"] for r in claude) / len(claude)
    assert cell["under-estimated before"][0] == f"{round(100 * under_before)}%"
    assert cell["under-estimated after"][0] == f"{round(100 * under_after)}%"
    assert under_after < under_before

    # An exact counter is not calibrated: after is before.
    gpt = by_model["openai / gpt-4o"]
    assert gpt["counter"][0] == "o200k_base exact"
    assert gpt["calibration factor"][0] == "1.0000 (exact count)"
    assert number(gpt["mean error % after"][0]) == pytest.approx(number(gpt["mean error %"][0]), abs=0.051)


def test_a_model_with_too_few_reports_shows_the_default_factor(owner_client, example, api):
    owner_api = api(example["owner"])
    for i in range(2):
        report(owner_api, submit_with_model(example["owner"], "claude-opus-4-1", f"few{i}", provider="anthropic"), -50)
    head, *rows = tables(owner_client.get("/usage/"))["dense usage-models"]
    cell = dict(zip([text for text, _ in head], rows[0], strict=True))
    assert cell["calibration factor"][0] == "1.1500 (default factor)"


def test_an_outlier_is_listed_and_marked_but_left_out_of_the_factor(owner_client, example, api):
    """Issue 40, finding 3: a report outside 0.5..2 times its estimate is shown for review, marked
    as an outlier, and the factor (the 5th of five in-band ratios, by hand) does not read it."""
    owner_api = api(example["owner"])
    plausible = [report(owner_api, submit_with_model(example["owner"], "claude-opus-4-1", f"in{i}", provider="anthropic"),
                        error) for i, error in enumerate([-40, -120, 15, -75, -210])]
    wild = submit_with_model(example["owner"], "claude-opus-4-1", "wild", provider="anthropic")
    response = owner_api.post(f"/api/v1/assemblies/{wild.id}/usage/", {"input_tokens": 2**31 - 1}, format="json")
    assert response.status_code == 200 and response.json()["used_for_calibration"] is False
    page = tables(owner_client.get("/usage/"))
    head, *rows = page["dense usage-models"]
    cell = dict(zip([text for text, _ in head], rows[0], strict=True))
    factor = nearest_rank_factor([r["actual"] / r["estimated"] for r in plausible])
    assert cell["calibration factor"][0] == f"{factor:.4f} (quantile of 5 reports; 1 outlier left out)"
    head, *rows = page["dense usage-reports"]
    marks = {row[0][1][0]: dict(zip([text for text, _ in head], row, strict=True))["calibration"][0] for row in rows}
    assert marks.pop(f"/assemblies/{wild.id}/") == "outlier"
    assert set(marks.values()) == {"in band"} and len(marks) == 5


def _token_story(body: str) -> str:
    return html.unescape(re.search(r'<span class="token-story">(.*?)</span>\s*</div>', body, re.S).group(1))


def test_the_overview_tells_the_providers_count_only_once_it_was_reported(example, api, owner_client):
    """The assembly page's token line: no "provider reported" before a report; after one, the
    provider's input tokens and their difference from the items' estimate, signed."""
    job = example["ready"]
    before = _token_story(owner_client.get(f"/assemblies/{job.id}/").content.decode())
    assert "used" in before and "provider reported" not in before
    estimated = int(job.manifest.sections["budget"]["estimated_used"])
    response = api(example["owner"]).post(f"/api/v1/assemblies/{job.id}/usage/",
                                          {"input_tokens": estimated + 17, "cached_tokens": 0, "output_tokens": 3}, format="json")
    assert response.status_code == 200, response.content
    after = _token_story(owner_client.get(f"/assemblies/{job.id}/").content.decode())
    assert re.search(rf"provider reported {estimated + 17} \(\+17 vs the items' estimate\)", after), after
