"""The two diff tables, cell by cell and in order (issue 31, class 4): the compare page's partition
deltas and the policy diff. "Both numbers appear somewhere on the page" let a swapped column, a
wrong sign or a lost row pass; these read each table's rows and compare them with what the
sources say: the two sealed manifests' budgets, and the two policy bodies as the fixture wrote them.
"""

from __future__ import annotations

from html.parser import HTMLParser

import pytest

from manifests.models import Manifest
from manifests.selectors import manifest_document


class TableRows(HTMLParser):
    """The text of each cell of the first <table> after `marker`, row by row (header row included)."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[list[str]] = []
        self._in_table = self._done = False
        self._cell: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        if tag == "table" and not self._done:
            self._in_table = True
        elif self._in_table and tag == "tr":
            self.rows.append([])
        elif self._in_table and tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag):
        if self._in_table and tag in ("td", "th") and self._cell is not None:
            self.rows[-1].append(" ".join("".join(self._cell).split()))
            self._cell = None
        elif tag == "table" and self._in_table:
            self._in_table, self._done = False, True

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def table_after(body: str, marker: str) -> list[list[str]]:
    at = body.index(marker)
    opened = body.rfind("<table", 0, at)
    start = opened if opened != -1 and ">" not in body[opened:at] else at  # a marker inside the tag itself
    parser = TableRows()
    parser.feed(body[start:])
    return parser.rows


def _signed(n: int) -> str:
    return f"+{n}" if n > 0 else str(n)


def _limits(part: dict) -> str:
    maximum = part.get("maximum")
    return f"{part['minimum']}/{'∞' if maximum is None else maximum}"


@pytest.mark.parametrize("a_b", [("ready", "blocked"), ("blocked", "ready")])  # both signs of Δ
def test_the_compare_pages_partition_table_holds_each_partitions_numbers_in_policy_order(owner_client, example, a_b):
    job_a, job_b = example[a_b[0]], example[a_b[1]]
    body = owner_client.get(f"/compare/?a={job_a.id}&b={job_b.id}").content.decode()
    rows = table_after(body, "<h2>Partitions</h2>")
    a = manifest_document(Manifest.objects.get(job=job_a))["budget"]["partitions"]
    b = manifest_document(Manifest.objects.get(job=job_b))["budget"]["partitions"]
    policy_order = list(example["published"].body["budget"]["partitions"])  # as the policy lists them
    assert list(a) == policy_order and set(b) == set(a)
    expected = [["partition", "used before", "used after", "Δ", "items", "min / max"]]
    for name in policy_order:
        pa, pb = a[name], b[name]
        same_limits = (pa["minimum"], pa.get("maximum")) == (pb["minimum"], pb.get("maximum"))
        expected.append([
            name,
            str(pa["used"]),
            str(pb["used"]),
            _signed(pb["used"] - pa["used"]),
            f"{pa['items']} → {pb['items']}",
            _limits(pa) if same_limits else f"{_limits(pa)} → {_limits(pb)}",
        ])
    assert rows == expected
    # The example's two steps differ in what they used: the table is not all zeros by accident.
    assert any(row[3].startswith("+" if a_b[0] == "blocked" else "-") for row in rows[1:])


def test_the_policy_diff_table_lists_each_changed_path_with_from_and_to_in_path_order(owner_client, example):
    body = owner_client.get("/policies/source-research/diff/?from=3&to=4").content.decode()
    rows = table_after(body, 'class="dense diff"')
    published = example["published"].body
    background_max = published["budget"]["partitions"]["background"]["maximum"]
    # What tests/dashboard/conftest.py's draft_body changed, and nothing else, sorted by path.
    assert rows[0] == ["path", "change", "from", "to"]
    assert rows[1:] == [
        ["admission.min_relevance", "changed", str(published["admission"]["min_relevance"]), "0.9"],
        ["budget.partitions.background.maximum", "changed", str(background_max), "1000"],
        ["policy.revision", "changed", "3", "4"],
        ["upgrades", "added", "", rows[4][3]],  # the floor's upgrade record (seed §8), shown whole
    ]
    assert '"mechanism": "admission.min_relevance"' in rows[4][3]
    assert background_max == 1500


def text_diff_lines(body: str) -> list[tuple[str, str]]:
    """(kind, text) of each line of the page's text diff, unescaped."""
    import html
    import re

    block = body.split('id="text-diff"', 1)[1].split("</pre>", 1)[0]
    return [(kind, html.unescape(text)) for kind, text in re.findall(r'<span class="diff-(\w+)">(.*?)</span>', block, re.S)]


def test_the_text_diff_beside_the_table_is_the_bodies_canonical_yaml_line_by_line(owner_client, example):
    import difflib

    from policies.dashboard_selectors import canonical_yaml

    body = owner_client.get("/policies/source-research/diff/?from=3&to=4").content.decode()
    assert body.index('class="dense diff"') < body.index('id="text-diff"')  # the table first, the text beside it
    lines = text_diff_lines(body)
    expected = list(difflib.unified_diff(canonical_yaml(example["published"].body).splitlines(),
                                         canonical_yaml(example["draft"].body).splitlines(), "revision 3", "revision 4", lineterm=""))
    assert [text for _, text in lines] == expected
    added = [text[1:].strip() for kind, text in lines if kind == "add"]
    removed = [text[1:].strip() for kind, text in lines if kind == "del"]
    assert "min_relevance: 0.9" in added and "revision: 4" in added and "revision: 3" in removed
    assert [kind for kind, _ in lines[:3]] == ["file", "file", "hunk"]


def test_the_text_diff_escapes_what_the_policy_says(owner_client, example):
    from policies.models import PolicyRevision

    hostile = "<img src=x onerror=alert('diff')>"
    body = {**example["draft"].body, "upgrades": [{**example["draft"].body["upgrades"][0], "failure": hostile}]}
    PolicyRevision.objects.filter(pk=example["draft"].pk).update(body=body)
    page = owner_client.get("/policies/source-research/diff/?from=3&to=4").content.decode()
    assert hostile not in page
    assert any(hostile in text for kind, text in text_diff_lines(page) if kind == "add")


def test_a_revision_against_itself_has_no_text_diff(owner_client, example):
    body = owner_client.get("/policies/source-research/diff/?from=4&to=4").content.decode()
    assert 'id="text-diff"' not in body and "The two bodies are the same." in body


def _reversed_keys(value):
    if isinstance(value, dict):
        return {key: _reversed_keys(value[key]) for key in reversed(list(value))}
    if isinstance(value, list):
        return [_reversed_keys(item) for item in value]
    return value


def test_the_text_diff_does_not_depend_on_the_order_the_database_keeps_keys_in(owner_client, example):
    """PostgreSQL's jsonb hands a body's keys back ordered by length: the text diff must not show it."""
    from policies.models import PolicyRevision

    before = text_diff_lines(owner_client.get("/policies/source-research/diff/?from=3&to=4").content.decode())
    PolicyRevision.objects.filter(pk=example["draft"].pk).update(body=_reversed_keys(example["draft"].body))
    after = text_diff_lines(owner_client.get("/policies/source-research/diff/?from=3&to=4").content.decode())
    assert after == before and len(before) < 80  # a few hunks, not the whole body (200+ lines) replaced
