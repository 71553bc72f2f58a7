"""State and direction (issue 43, class 5): what a page or an endpoint says must point the right way
and survive a round trip, not only be present.

- usage is only a model call's: a blocked assembly's report is refused (409 naming why) by the API
  and by the service behind it, and the SDK's local step refuses it and keeps no usage;
- a policy diff reads older → newer: every row's `from` cell is the older revision's value at its
  path and `to` the newer's (derived here from the two revision bodies), on the impact page (the
  published revision → the draft), on the diff page in both orders, and from the history's link;
- item ids holding `&`, `#`, `+`, a space, `%` and non-ASCII letters round-trip through every link
  that carries `?item=` or `?item_id=` on the pages that list them: each link's parameter parses
  back to the exact id, and the inspector it opens shows that id;
- the inspector's previous / next step links point to the step submitted just before / after;
- a compare's before / after columns are A's and B's decisions, and swap when A and B do.
"""

from __future__ import annotations

import html
import json
import re
from urllib.parse import parse_qs, urlsplit

import pytest

from ctxeng.engine.hashing import sha256_text
from manifests.examples import example_json

from .conftest import run_job

# --------------------------------------------------------------------------- usage of a blocked assembly


def test_the_api_refuses_usage_for_a_blocked_assembly_naming_why_and_stores_nothing(example, api):
    from manifests.models import UsageReport

    blocked = example["blocked"]
    assert blocked.status == "blocked"
    response = api(example["owner"]).post(f"/api/v1/assemblies/{blocked.id}/usage/", {"input_tokens": 100},
                                          format="json")
    assert response.status_code == 409
    [error] = response.json()["errors"]
    assert "blocked" in error and "no model call" in error
    assert not UsageReport.objects.filter(manifest__job=blocked).exists()
    ready = api(example["owner"]).post(f"/api/v1/assemblies/{example['ready'].id}/usage/", {"input_tokens": 100},
                                       format="json")
    assert ready.status_code == 200  # the same report for the ready step of the run is taken


def test_the_service_refuses_usage_for_a_blocked_manifest(example):
    """The rule lives in the service (the API is one caller): no report row for a blocked manifest."""
    from ctxeng.server.errors import Conflict
    from manifests.models import UsageReport
    from manifests.services import usage_report_record

    manifest = example["blocked"].manifest
    with pytest.raises(Conflict, match="blocked; no model call was made with it"):
        usage_report_record(manifest=manifest, user=example["owner"], input_tokens=10, cached_tokens=0,
                            output_tokens=1)
    assert not UsageReport.objects.filter(manifest=manifest).exists()
    report = usage_report_record(manifest=example["ready"].manifest, user=example["owner"], input_tokens=10,
                                 cached_tokens=0, output_tokens=1)
    assert report.input_tokens == 10


def test_a_local_blocked_step_refuses_usage_and_keeps_none(tmp_path):
    from ctxeng import sdk, starters

    text = starters.text("chat-agent", policy_id="chat-agent-needs-goal")
    path = tmp_path / "needs-goal.yaml"
    path.write_text(text.replace("resident:\n  include: []\n", "resident:\n  include: [task_brief]\n"))
    step = sdk.Session(str(path), model="gpt-4o").step([{"role": "user", "content": "hello"}])
    assert step.status == "blocked"
    sealed = step.manifest
    with pytest.raises(ValueError, match="blocked assembly produced no model input"):
        step.report_usage({"usage": {"prompt_tokens": 10, "completion_tokens": 1}})
    assert step.usage is None and step.manifest is sealed


# --------------------------------------------------------------------------- policy diff direction


def _at(body, path: str):
    """The value at a diff path (`a.b[2].c`) in a policy body; `missing` when absent."""
    node = body
    for part in re.findall(r"[^.\[\]]+|\[\d+\]", path):
        if part.startswith("["):
            index = int(part[1:-1])
            if not isinstance(node, list) or index >= len(node):
                return "missing"
            node = node[index]
        else:
            if not isinstance(node, dict) or part not in node:
                return "missing"
            node = node[part]
    return node


def _cell(text: str):
    text = html.unescape(text)
    return "missing" if text == "" else json.loads(text)


def diff_rows(body: str) -> list[tuple[str, str, object, object]]:
    """(path, change, from, to) of the diff table, the cells parsed back to JSON values."""
    table = re.search(r'<table class="dense diff">(.*?)</table>', body, re.S).group(1)
    return [(html.unescape(path), change, _cell(before), _cell(after)) for path, change, before, after in re.findall(
        r'<tr class="\w+"><td><code>(.*?)</code></td><td><span class="badge \w+">(\w+)</span></td>'
        r"<td><code>(.*?)</code></td><td><code>(.*?)</code></td></tr>", table, re.S)]


def _leaf_changes(old, new, path: str = "") -> set[str]:
    """Every leaf path whose value differs between two bodies (written here, not the product's diff)."""
    if isinstance(old, dict) and isinstance(new, dict):
        return set().union(*(_leaf_changes(old.get(k, "missing"), new.get(k, "missing"), f"{path}.{k}" if path else k)
                             for k in set(old) | set(new))) if (old or new) else set()
    if isinstance(old, list) and isinstance(new, list):
        return set().union(set(), *(_leaf_changes(old[i] if i < len(old) else "missing",
                                                  new[i] if i < len(new) else "missing", f"{path}[{i}]")
                                    for i in range(max(len(old), len(new)))))
    return {path} if old != new or type(old) is not type(new) else set()


def assert_reads_old_to_new(body: str, old: dict, new: dict) -> None:
    rows = diff_rows(body)
    assert rows, "the diff shows no change"
    for path, change, before, after in rows:
        assert before == _at(old, path) and after == _at(new, path), (path, before, after)
        assert change == ("added" if before == "missing" else "removed" if after == "missing" else "changed"), \
            (path, change)
    covered = [path for path, *_ in rows]
    for leaf in _leaf_changes(old, new):
        assert any(leaf == p or leaf.startswith(p + ".") or leaf.startswith(p + "[") for p in covered), leaf


def test_the_impact_page_diffs_the_published_revision_into_the_draft(owner_client, example):
    published, draft = example["published"], example["draft"]
    assert _at(draft.body, "admission.min_relevance") == 0.9 != _at(published.body, "admission.min_relevance")
    body = owner_client.get(f"/policies/source-research/revisions/{draft.revision}/impact/").content.decode()
    assert_reads_old_to_new(body, published.body, draft.body)
    rows = {path: (before, after) for path, _, before, after in diff_rows(body)}
    assert rows["admission.min_relevance"][1] == 0.9  # the draft's floor is on the new side
    # the upgrade record only the draft has is added, not removed
    assert any(path.startswith("upgrades") and before == "missing" and after != "missing"
               for path, (before, after) in rows.items())


@pytest.mark.parametrize("order", ["older first", "newer first"])
def test_the_diff_page_reads_from_to_as_asked(owner_client, example, order):
    published, draft = example["published"], example["draft"]
    old, new = (published, draft) if order == "older first" else (draft, published)
    body = owner_client.get("/policies/source-research/diff/",
                            {"from": old.revision, "to": new.revision}).content.decode()
    assert_reads_old_to_new(body, old.body, new.body)


def test_the_history_links_each_revision_to_a_diff_that_reads_older_to_newer(owner_client, example):
    detail = owner_client.get("/policies/source-research/").content.decode()
    links = [html.unescape(h) for h in re.findall(r'href="(/policies/source-research/diff/\?[^"]+)"', detail)]
    assert links, "the history links a diff"
    for link in links:
        query = parse_qs(urlsplit(link).query)
        assert int(query["from"][0]) < int(query["to"][0]), link
    body = owner_client.get("/policies/source-research/diff/").content.decode()  # the default: previous → newest
    assert_reads_old_to_new(body, example["published"].body, example["draft"].body)


def test_the_api_diff_reads_from_to_as_asked(example, api):
    published, draft = example["published"], example["draft"]
    client = api(example["owner"])
    for old, new in ((published, draft), (draft, published)):
        answer = client.get("/api/v1/policies/source-research/diff/", {"from": old.revision, "to": new.revision})
        assert answer.status_code == 200
        changes = answer.json()["changes"]
        assert changes
        for change in changes:
            want_from, want_to = _at(old.body, change["path"]), _at(new.body, change["path"])
            assert (change["from"] if change["from"] is not None or want_from != "missing" else "missing") == want_from
            assert (change["to"] if change["to"] is not None or want_to != "missing" else "missing") == want_to


# --------------------------------------------------------------------------- ?item= round trips

# Included items (a transformed tool result, a document, the plan, evidence) and excluded ones, so
# that every kind of link names one: the payload's blocks, tool pairs, transforms, flips, lists.
ODD_IDS = {"result-call-c": "result c&d=e#x", "web-context7-overview": "web+plus overview",
           "plan-42-r5": "plan%41/%2F", "evidence-continue-construct": "évidence ünï✓ 日本",
           "trace-old-1": "trace a&b=c", "trace-old-2": "trace#frag"}
FLIPS = "web+plus overview"  # scoped to another tenant at step-20: included, then excluded


def _odd_request(step_id: str, *, drop: tuple[str, ...] = (), flip: tuple[str, ...] = ()) -> dict:
    text = json.dumps(example_json("request.json"))
    for plain, odd in ODD_IDS.items():
        assert json.dumps(plain) in text, plain
        text = text.replace(json.dumps(plain), json.dumps(odd))  # every reference to it too
    request = json.loads(text)
    request.update(run_id="run-odd", step_id=step_id)
    request["candidates"] = [c for c in request["candidates"] if c["item_id"] not in drop]
    for candidate in request["candidates"]:
        if candidate["item_id"] in flip:
            candidate["scope"] = candidate["scope"].replace("tenant-x", "tenant-o")
    return request


@pytest.fixture
def odd(example):
    """run-odd: step-19 with the odd item ids; step-20 the same without `trace a&b=c` (only in A)
    and with FLIPS excluded (a flip)."""
    first = run_job(example["owner"], _odd_request("step-19"), "odd-1")
    second = run_job(example["owner"], _odd_request("step-20", drop=("trace a&b=c",), flip=(FLIPS,)), "odd-2")
    assert first.status == second.status == "ready"
    return {**example, "first": first, "second": second}


ITEM_PARAMS = ("item", "item_id")


def _item_links(body: str) -> list[tuple[str, str]]:
    """(link, the item id its query names) for every href / hx-get carrying ?item= or ?item_id=."""
    found = []
    for raw in re.findall(r'(?:href|hx-get)="([^"]+)"', body):
        link = html.unescape(raw)
        query = parse_qs(urlsplit(link).query, keep_blank_values=True)
        for name in ITEM_PARAMS:
            for value in query.get(name, []):
                if value:
                    found.append((link, value))
    return found


def _inspector_item(body: str) -> str | None:
    found = re.search(r'<h2 id="inspector-title"[^>]*><code>(.*?)</code>', body, re.S)
    return html.unescape(found.group(1)) if found else None


def test_odd_item_ids_round_trip_through_every_item_link(owner_client, odd):
    from manifests.models import ManifestItem

    first, second = odd["first"], odd["second"]
    ids_of = {str(job.id): set(ManifestItem.objects.filter(manifest__job=job).values_list("item_id", flat=True))
              for job in (first, second)}
    assert set(ODD_IDS.values()) <= ids_of[str(first.id)]
    seeds = [f"/assemblies/{first.id}/", f"/assemblies/{first.id}/window/", f"/assemblies/{first.id}/input/",
             f"/assemblies/{first.id}/transforms/", f"/assemblies/{first.id}/tool_pairs/",
             "/runs/run-odd/matrix/", "/why/?q=trace", "/why/?q=trace&group=none", "/why/?q=%E6%97%A5&decision=",
             f"/compare/?a={first.id}&b={second.id}", "/runs/run-odd/window/?window=kind"]
    seen_ids: set[str] = set()
    followed = 0
    queue, visited = list(seeds), set()
    while queue:
        page = queue.pop(0)
        if page in visited:
            continue
        visited.add(page)
        response = owner_client.get(page, follow=True)
        assert response.status_code == 200, page
        body = response.content.decode()
        for link, value in _item_links(body):
            job = re.match(r"/assemblies/([0-9a-f-]{36})/", link)
            if job is None or job.group(1) not in ids_of:
                continue
            # the previous / next step links carry the selected item over, whether or not that step has it
            known = ids_of[job.group(1)] | (ids_of[str(first.id)] if 'rel="' in body else set())
            assert value in known, f"{page} links {link!r}: item {value!r} is no item of its run"
            if value in ODD_IDS.values():
                seen_ids.add(value)
                if link not in visited:
                    queue.append(link)  # the inspector, its regions and the payload page, followed
        if "/item/" in page and "item_id=" in page:
            wanted = parse_qs(urlsplit(page).query)["item_id"][0]
            if wanted in ids_of[page.split("/")[2]]:
                assert wanted in html.unescape(body), (page, wanted)
        if page.startswith("/assemblies/") and "?item=" in page:
            wanted = parse_qs(urlsplit(page).query)["item"][0]
            if wanted in ids_of[page.split("/")[2]]:
                assert _inspector_item(body) == wanted, (page, _inspector_item(body))
                followed += 1
    assert seen_ids == set(ODD_IDS.values()), f"no link carried {sorted(set(ODD_IDS.values()) - seen_ids)}"
    assert followed >= len(ODD_IDS)


def test_each_odd_id_opens_its_own_inspector_from_the_address_bar(owner_client, odd):
    from urllib.parse import quote

    for value in ODD_IDS.values():
        body = owner_client.get(f"/assemblies/{odd['first'].id}/?item={quote(value, safe='')}").content.decode()
        assert _inspector_item(body) == value


# --------------------------------------------------------------------------- previous / next step


def test_previous_and_next_step_point_to_the_steps_submitted_before_and_after(owner_client, example):
    ready, blocked, hostile = example["ready"], example["blocked"], example["hostile"]
    assert ready.created_at <= blocked.created_at <= hostile.created_at
    body = owner_client.get(f"/assemblies/{blocked.id}/").content.decode()
    prev = re.search(r'<a href="/assemblies/([^/"]+)/[^"]*" rel="prev"', body).group(1)
    after = re.search(r'<a href="/assemblies/([^/"]+)/[^"]*" rel="next"', body).group(1)
    assert (prev, after) == (str(ready.id), str(hostile.id))
    first = owner_client.get(f"/assemblies/{ready.id}/").content.decode()
    assert 'rel="prev"' not in first and re.search(rf'/assemblies/{blocked.id}/[^"]*" rel="next"', first)
    last = owner_client.get(f"/assemblies/{hostile.id}/").content.decode()
    assert 'rel="next"' not in last and re.search(rf'/assemblies/{blocked.id}/[^"]*" rel="prev"', last)


# --------------------------------------------------------------------------- compare direction

FLIPPED = "evidence-continue-construct"


@pytest.fixture
def flipped(example):
    """step-21: the worked request with one evidence item scoped to another tenant (a hard gate
    excludes it), so it flips from included (step-19) to excluded."""
    request = example_json("request.json")
    request["step_id"] = "step-21"
    for candidate in request["candidates"]:
        if candidate["item_id"] == FLIPPED:
            candidate["scope"] = candidate["scope"].replace("tenant-x", "tenant-o")
            candidate["content_hash"] = sha256_text(candidate["content"])
    job = run_job(example["owner"], request, "flipped")
    assert job.status == "ready"
    return {**example, "flipped": job}


def _flip_row(body: str, item_id: str) -> tuple[str, str]:
    for row in re.findall(r"<tr>\s*<td>.*?</tr>", body, re.S):
        if f"<code>{item_id}</code>" in row:
            badges = re.findall(r'<span class="badge \w+">(\w+)</span>', row)
            return badges[0], badges[1]
    raise AssertionError(f"{item_id} is not in the flips table")


def test_the_compare_before_and_after_columns_are_a_and_b_and_swap_with_them(owner_client, flipped):
    ready, later = flipped["ready"], flipped["flipped"]
    forward = owner_client.get("/compare/", {"a": str(ready.id), "b": str(later.id)}).content.decode()
    assert _flip_row(forward, FLIPPED) == ("included", "excluded")
    backward = owner_client.get("/compare/", {"a": str(later.id), "b": str(ready.id)}).content.decode()
    assert _flip_row(backward, FLIPPED) == ("excluded", "included")


# --------------------------------------------------------------------------- sort direction


def test_the_inspector_sorted_by_tokens_lists_the_largest_first(owner_client, example):
    body = owner_client.get(f"/assemblies/{example['ready'].id}/", {"sort": "tokens"}).content.decode()
    rows = [row for row in re.findall(r"<tr id=[^>]*>(.*?)</tr>", body, re.S) if 'class="item-cell"' in row]
    cells = [re.search(r'<td class="num">(?:<span title="a lower bound[^"]*">[^<]*</span>)?(\d*)</td>', row).group(1)
             for row in rows]
    tokens = [int(cell) for cell in cells if cell]
    assert len(tokens) >= 10 and len(set(tokens)) > 1
    assert tokens == sorted(tokens, reverse=True)


def test_the_runs_list_shows_the_newest_run_first(owner_client, example):
    later = example_json("request.json")
    later["run_id"] = "run-later"
    run_job(example["owner"], later, "later")
    body = owner_client.get("/runs/").content.decode()
    order = re.findall(r'<td><a href="/runs/([^/"?]+)/', body)
    assert order[:2] == ["run-later", "run-42"], order
