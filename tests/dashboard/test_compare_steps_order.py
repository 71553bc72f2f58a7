"""Compare two steps (issue 52): the flipped items come first, and a partition's borrowed room is
shown beside what it used (so "used 23208, max 13200" does not read as an error)."""

from __future__ import annotations

import re

from django.template.loader import render_to_string

from manifests.dashboard_selectors import partition_deltas


def test_the_flipped_items_come_before_the_status_and_the_partitions(owner_client, example):
    body = owner_client.get("/compare/", {"a": str(example["ready"].id), "b": str(example["blocked"].id)}).content.decode()
    main = body.split("<main", 1)[1]
    flipped, status, partitions = (main.index(words) for words in ("Flipped items", "<h2>Status</h2>", "<h2>Partitions</h2>"))
    assert flipped < status < partitions


def test_a_partitions_borrowed_room_is_shown_beside_what_it_used():
    budget_a = {"partitions": {"evidence": {"used": 23208, "minimum": 2000, "maximum": 13200, "items": 9, "borrowed": 10008},
                               "state": {"used": 500, "minimum": 500, "maximum": 1000, "items": 2}}}
    budget_b = {"partitions": {"evidence": {"used": 13000, "minimum": 2000, "maximum": 13200, "items": 7, "borrowed": 0},
                               "state": {"used": 500, "minimum": 500, "maximum": 1000, "items": 2}}}
    rows = partition_deltas(budget_a, budget_b)
    assert [(r["name"], r["borrowed_a"], r["borrowed_b"]) for r in rows] == [("evidence", 10008, 0), ("state", 0, 0)]
    shown = render_to_string("manifests/partials/partition_deltas.html", {"partitions": rows})
    cells = re.findall(r'<td class="num">(.*?)</td>', shown, re.S)
    assert re.sub(r"<[^>]+>", "", cells[0]) == "23208 (10008 borrowed)"
    assert cells[1] == "13000" and "borrowed" not in "".join(cells[2:])
