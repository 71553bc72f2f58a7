"""The run page of a long run (issue 41): a compact step table, a page of steps at a time, whose
queries do not grow with the steps and whose HTML stays small; each step's counts, changes and
token story computed here by hand from the worked example's requests and manifests."""

from __future__ import annotations

import re

from django.db import connection
from django.test.utils import CaptureQueriesContext

from manifests.models import Manifest
from manifests.selectors import manifest_document

from .long_run import long_run

MAX_BYTES = 150 * 1024


def _step_rows(body: str) -> list[str]:
    table = body.split('class="dense step-table"', 1)[1].split("</table>", 1)[0]
    return re.findall(r'<tr class="step-row[^"]*" id="step-\d+">(.*?)</tr>', table, re.S)


def test_a_200_step_run_renders_in_constant_queries_and_under_150_kb(owner_client, example):
    long_run([example["ready"], example["blocked"]], steps=20, run_id="run-short")
    long_run([example["ready"], example["blocked"]], steps=200)
    with CaptureQueriesContext(connection) as short:
        owner_client.get("/runs/run-short/")
    with CaptureQueriesContext(connection) as long:
        response = owner_client.get("/runs/run-long/")
    assert response.status_code == 200
    assert len(long.captured_queries) == len(short.captured_queries) <= 12
    assert len(response.content) <= MAX_BYTES, len(response.content)
    body = response.content.decode()
    assert len(_step_rows(body)) == 50 and "steps 151–200 of 200" in body
    assert ">step-200<" in body and ">step-151<" in body and ">step-150<" not in body
    first = owner_client.get("/runs/run-long/?steps_page=1").content.decode()
    assert len(_step_rows(first)) == 50 and ">step-1<" in first and ">step-50<" in first and ">step-51<" not in first


def _shown_steps(body: str) -> list[int]:
    return [int(n) for n in re.findall(r'<tr class="step-row[^"]*" id="step-(\d+)">', body)]


def test_a_long_run_opens_on_its_last_steps_and_pages_both_ways(owner_client, example):
    long_run([example["ready"], example["blocked"]], steps=120)
    body = owner_client.get("/runs/run-long/").content.decode()
    assert _shown_steps(body) == list(range(71, 121))
    assert 'href="?steps=21-70#steps" rel="prev"' in body and 'rel="next"' not in body
    assert 'href="?steps=1-50#steps"' in body
    earlier = owner_client.get("/runs/run-long/", {"steps": "21-70"}).content.decode()
    assert _shown_steps(earlier) == list(range(21, 71))
    assert 'href="?steps=1-20#steps" rel="prev"' in earlier and 'href="?steps=71-120#steps" rel="next"' in earlier
    assert _shown_steps(owner_client.get("/runs/run-long/", {"steps": "1-20"}).content.decode()) == list(range(1, 21))


def test_a_step_range_in_the_url_is_shown_and_bounded(owner_client, example):
    jobs = long_run([example["ready"], example["blocked"]], steps=200)
    body = owner_client.get("/runs/run-long/", {"steps": "120-140"}).content.decode()
    assert _shown_steps(body) == list(range(120, 141))
    assert f'<a href="/assemblies/{jobs[136].id}/">step-137</a>' in body
    assert _shown_steps(owner_client.get("/runs/run-long/", {"from": "130", "to": "133"}).content.decode()) == [130, 131, 132, 133]
    assert _shown_steps(owner_client.get("/runs/run-long/", {"to": "60"}).content.decode()) == list(range(11, 61))
    wide = owner_client.get("/runs/run-long/", {"steps": "10-190"}).content.decode()
    assert _shown_steps(wide) == list(range(10, 60)) and "At most 50 steps at a time" in wide
    beyond = owner_client.get("/runs/run-long/", {"steps": "195-900"}).content.decode()
    assert _shown_steps(beyond) == list(range(195, 201))


def test_go_to_step_n_opens_the_window_around_it_anchored_on_its_row(owner_client, example):
    long_run([example["ready"], example["blocked"]], steps=200)
    response = owner_client.get("/runs/run-long/", {"step": "137"})
    assert response.status_code == 302 and response["Location"] == "/runs/run-long/?steps=112-161#step-137"
    assert 137 in _shown_steps(owner_client.get(response["Location"].split("#")[0]).content.decode())
    assert owner_client.get("/runs/run-long/", {"step": "9999"})["Location"] == "/runs/run-long/?steps=175-200#step-200"
    assert owner_client.get("/runs/run-long/", {"step": "step-137"})["Location"] == "/runs/run-long/?steps=112-161#step-137"
    assert _shown_steps(owner_client.get("/runs/run-long/", {"steps": "120"}).content.decode()) == list(range(120, 170))


def test_a_step_or_range_that_is_not_a_number_is_a_400_naming_the_parameter(owner_client, example):
    long_run([example["ready"]], steps=3)
    for params, name in (({"step": "٣"}, "step"), ({"step": "step-99"}, "step"), ({"steps": "a-b"}, "steps"), ({"steps": "١٢"}, "steps"),
                         ({"from": "x"}, "from"), ({"to": "-1"}, "to")):
        response = owner_client.get("/runs/run-long/", params)
        assert response.status_code == 400, params
        assert f"{name}:" in response.content.decode(), params


def test_the_step_window_is_tenant_scoped(outsider_client, example):
    long_run([example["ready"]], steps=3)
    assert outsider_client.get("/runs/run-long/", {"step": "2"}).status_code == 404
    assert outsider_client.get("/runs/run-long/", {"steps": "1-2"}).status_code == 404


def test_each_step_counts_its_decisions_and_what_changed_from_the_step_before(owner_client, example):
    jobs = long_run([example["ready"], example["blocked"]], steps=9, block=3)
    body = owner_client.get("/runs/run-long/").content.decode()
    rows = _step_rows(body)
    documents = {key: manifest_document(Manifest.objects.get(job=example[key])) for key in ("ready", "blocked")}
    decided = {key: {**{r["item_id"]: ("included", "") for r in d["included"]},
                     **{r["item_id"]: ("excluded", r["reason"]) for r in d["excluded"]}} for key, d in documents.items()}
    assert len(rows) == len(jobs)
    for number, (job, row) in enumerate(zip(jobs, rows, strict=True)):
        key = ("ready", "blocked")[(number // 3) % 2]
        mine = decided[key]
        assert f'href="/assemblies/{job.id}/?decision=included"' in row
        included = sum(1 for d, _ in mine.values() if d == "included")
        assert f'?decision=included" title="the items included at {job.step_id}">{included}</a>' in row
        reasons: dict[str, int] = {}
        for d, reason in mine.values():
            if d == "excluded":
                reasons[reason] = reasons.get(reason, 0) + 1
        for reason, count in reasons.items():
            assert f'href="/assemblies/{job.id}/?reason={reason}"' in row
            assert re.search(rf'<span class="reason-name">{reason}</span> {count}</a>', row), (reason, count)
        if number == 0:
            assert "first step" in row
        elif number % 3:
            assert "no change" in row
        else:
            before = decided[("ready", "blocked")[((number - 1) // 3) % 2]]
            new = len(set(mine) - set(before))
            gone = len(set(before) - set(mine))
            flipped = sum(1 for i in set(mine) & set(before) if mine[i][0] != before[i][0])
            other = sum(1 for i in set(mine) & set(before) if mine[i][0] == before[i][0] == "excluded" and mine[i][1] != before[i][1])
            expected = " ".join(part for part in (f"+{new} new" if new else "", f"−{gone} gone" if gone else "",
                                                   f"{flipped} flipped" if flipped else "",
                                                   f"{other} other reason" if other else "") if part)
            assert expected and expected in " ".join(row.split()), (number, expected)
            assert f"/compare/?a={jobs[number - 1].id}&amp;b={job.id}" in row


def test_each_step_tells_one_token_story_used_and_free(owner_client, example):
    long_run([example["ready"]], steps=2)
    budget = manifest_document(Manifest.objects.get(job=example["ready"]))["budget"]
    used = sum(part["used"] for part in budget["partitions"].values()) + budget["framing_tokens"]
    row = _step_rows(owner_client.get("/runs/run-long/").content.decode())[0]
    assert f">{used} / {budget['usable_input']}<" in row
    assert f'<td class="num">{budget["usable_input"] - used}</td>' in row


def test_the_inspector_tells_the_same_token_story_as_the_run_page(owner_client, example):
    budget = manifest_document(Manifest.objects.get(job=example["ready"]))["budget"]
    items = sum(part["used"] for part in budget["partitions"].values())
    used = items + budget["framing_tokens"]
    body = owner_client.get(f"/assemblies/{example['ready'].id}/").content.decode()
    story = " ".join(body.split('class="token-story">', 1)[1].split("</span>", 1)[0].split())
    assert story.startswith(f"used <strong>{used}</strong> ({items} items + {budget['framing_tokens']} framing) of "
                            f"{budget['usable_input']} usable · free {budget['usable_input'] - used}")
    legend_free = re.search(r'free <span class="muted" title="usable (\d+) − used (\d+)">(-?\d+)</span>', body).groups()
    assert legend_free == (str(budget["usable_input"]), str(used), str(budget["usable_input"] - used))


def _matrix_items(body: str) -> list[str]:
    table = body.split('class="dense run-grid"', 1)[1].split("</table>", 1)[0]
    return re.findall(r'<th class="item-col" scope="row"><code>([^<]+)</code>', table)


def _decisions_by_step(example) -> list[dict[str, tuple[str, str]]]:
    """Each step of run-42 (in order): item -> (decision, reason), read off the sealed documents."""
    steps = []
    for key in ("ready", "blocked", "hostile"):
        document = manifest_document(Manifest.objects.get(job=example[key]))
        steps.append({**{r["item_id"]: ("included", "") for r in document["included"]},
                      **{r["item_id"]: ("excluded", r["reason"]) for r in document["excluded"]}})
    return steps


def test_the_matrix_searches_filters_by_reason_and_sorts_by_most_excluded(owner_client, example):
    steps = _decisions_by_step(example)
    items = sorted(set().union(*steps))
    excluded = {i: sum(1 for s in steps if s.get(i, ("",))[0] == "excluded") for i in items}
    by_most = sorted(items, key=lambda i: (-excluded[i], i))
    body = owner_client.get("/runs/run-42/matrix/", {"sort": "excluded"}).content.decode()
    assert _matrix_items(body) == by_most[:50]
    stale = sorted(i for i in items if any(s.get(i) == ("excluded", "stale_revision") for s in steps))
    body = owner_client.get("/runs/run-42/matrix/", {"reason": "stale_revision"}).content.decode()
    assert _matrix_items(body) == stale
    body = owner_client.get("/runs/run-42/matrix/", {"q": "trace-old"}).content.decode()
    assert _matrix_items(body) == [f"trace-old-{n}" for n in range(1, 6)]
    # a source ref's text finds its item: the URL of the web overview
    body = owner_client.get("/runs/run-42/matrix/", {"q": "context7.com"}).content.decode()
    assert _matrix_items(body) == ["web-context7-overview"]
    body = owner_client.get("/runs/run-42/matrix/", {"sort": "sideways", "reason": "nope"}).content.decode()
    assert "Unknown order" in body and "Unknown exclusion reason" in body and _matrix_items(body) == items[:50]


def test_the_matrix_shows_twenty_steps_at_a_time_opening_on_the_last(owner_client, example):
    jobs = long_run([example["ready"], example["blocked"]], steps=45)
    opened = owner_client.get("/runs/run-long/matrix/").content.decode()
    heads = re.findall(r'<th class="step-head">.*?<a href="/assemblies/([^/]+)/">', opened, re.S)
    assert heads == [str(job.id) for job in jobs[25:]] and "steps 26–45 of 45" in opened
    first = owner_client.get("/runs/run-long/matrix/", {"steps": "1"}).content.decode()
    heads = re.findall(r'<th class="step-head">.*?<a href="/assemblies/([^/]+)/">', first, re.S)
    assert heads == [str(job.id) for job in jobs[:20]] and "steps 1–20 of 45" in first
    last = owner_client.get("/runs/run-long/matrix/", {"steps": "41"}).content.decode()
    heads = re.findall(r'<th class="step-head">.*?<a href="/assemblies/([^/]+)/">', last, re.S)
    assert heads == [str(job.id) for job in jobs[40:]] and "steps 41–45 of 45" in last
    assert "later steps" not in last and "earlier steps" in last


def test_an_outsider_gets_404_for_the_run_regions(outsider_client, example):
    for url in ("/runs/run-42/matrix/", "/runs/run-42/window/"):
        assert outsider_client.get(url).status_code == 404


def test_every_panel_of_a_step_states_the_same_used_free_and_usable(owner_client, example):
    jobs = long_run([example["ready"]], steps=1)
    budget = manifest_document(Manifest.objects.get(job=example["ready"]))["budget"]
    items = sum(part["used"] for part in budget["partitions"].values())  # by hand from the partitions
    used = items + budget["framing_tokens"]
    usable, free = budget["usable_input"], budget["usable_input"] - used
    row = _step_rows(owner_client.get("/runs/run-long/").content.decode())[0]
    assert f">{used} / {usable}<" in row and f'<td class="num">{free}</td>' in row
    page = " ".join(owner_client.get(f"/assemblies/{jobs[0].id}/").content.decode().split())
    story = f"used <strong>{used}</strong> ({items} items + {budget['framing_tokens']} framing) of {usable} usable · free {free}"
    assert story in page  # the overview's token story
    chart = page.split("<div class=\"budget\">", 1)[1].split("</p>", 1)[0].strip()
    assert chart.startswith(f"<p>used <strong>{used}</strong> ({items} items + {budget['framing_tokens']} framing) of "
                            f"<strong>{usable}</strong> usable · free {free} ·")
    assert f"<title>free: {free} tokens</title>" in page  # the chart's free segment
    assert re.search(rf'free <span class="muted" title="usable {usable} − used {used}">{free}</span>', page)  # the bar
