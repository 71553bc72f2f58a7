"""Bug class 5 (issue 54), service side: date filters and quotas with data on each bound.

The earlier filter tests asked for days two away from the data (test_why_filters: ±2 days, ±1 day
around "today"), where `since` read as `>=` or as `>` gives the same answer. Here the example's
runs and manifests are dated one fixed day, and each filter is asked for that day and the days on
either side:

- `/runs/` and `/why/` `since` / `until`: both inclusive days (`created_at__date__gte|lte`).
- tenant quotas (manifests.quotas): a rate window of `span` holds rows newer than `now - span`
  (a row exactly `span` old has left it); a rate refuses at `count >= limit`; a storage limit
  refuses only bytes *beyond* it (exactly at the limit passes).
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest
from django.db import connection

from ctxeng.server.errors import QuotaExceeded
from manifests import quotas
from manifests.models import Manifest, Run

DAY = date(2026, 3, 15)
AT = datetime(2026, 3, 15, 12, 0, tzinfo=UTC)


@pytest.fixture
def dated(example):
    """The example's runs and manifests, sealed one fixed day. A sealed manifest refuses every
    write through the ORM; its creation date is test data, set here in SQL."""
    Run.objects.update(created_at=AT)
    with connection.cursor() as cursor:
        cursor.execute(f"UPDATE {Manifest._meta.db_table} SET created_at = %s", [AT])
    return example


def shifted(days: int) -> str:
    return (DAY + timedelta(days=days)).isoformat()


@pytest.mark.parametrize(
    "query, listed",
    [
        ({"since": shifted(0)}, True),  # on the bound: the day itself is in
        ({"since": shifted(-1)}, True),
        ({"since": shifted(1)}, False),
        ({"until": shifted(0)}, True),
        ({"until": shifted(1)}, True),
        ({"until": shifted(-1)}, False),
        ({"since": shifted(0), "until": shifted(0)}, True),  # a one-day range
    ],
)
def test_the_runs_list_date_filters_include_the_day_named_on_either_bound(owner_client, dated, query, listed):
    body = owner_client.get("/runs/", query).content.decode()
    assert ("run-42" in body) is listed


@pytest.mark.parametrize(
    "query, found",
    [
        ({"since": shifted(0)}, True),
        ({"since": shifted(1)}, False),
        ({"until": shifted(0)}, True),
        ({"until": shifted(-1)}, False),
        ({"since": shifted(0), "until": shifted(0)}, True),
    ],
)
def test_the_why_page_date_filters_include_the_day_named_on_either_bound(owner_client, dated, query, found):
    body = owner_client.get("/why/", {"q": "plan-42-r4", **query}).content.decode()
    # run-42 has three steps excluding plan-42-r4 (test_why_filters)
    assert ("3 decisions in 1 group" in body) is found
    if not found:
        assert "0 decisions in 0 groups" in body


# --------------------------------------------------------------------------- quotas


def test_a_rate_window_holds_a_row_just_inside_it_and_not_one_exactly_its_span_old(dated):
    tenant = dated["tenant"]
    now = datetime(2026, 3, 16, 12, 0, tzinfo=UTC)  # the runs (AT) are exactly one day old
    rows = Run.objects.filter(tenant=tenant)
    total = rows.count()
    assert total > 0
    assert quotas._window(rows, quotas.DAY, now)[0] == 0
    assert quotas._window(rows, quotas.DAY, now - timedelta(microseconds=1))[0] == total
    count, wait = quotas._window(rows, quotas.DAY, now - timedelta(seconds=30))
    assert (count, wait) == (total, 30.0)  # Retry-After: when the oldest leaves the window


def test_a_rate_refuses_at_its_limit_and_passes_one_below_it(settings, dated):
    tenant = dated["tenant"]
    Run.objects.update(created_at=datetime.now(UTC))
    runs = Run.objects.filter(tenant=tenant).count()
    settings.CTXENG_QUOTA_RUNS_PER_DAY = runs + 1
    quotas.check_submit(tenant=tenant, new_run=True)  # one more run would reach the limit: allowed
    settings.CTXENG_QUOTA_RUNS_PER_DAY = runs
    with pytest.raises(QuotaExceeded) as refused:
        quotas.check_submit(tenant=tenant, new_run=True)
    assert f"{runs} in the last 24 hours, the limit is {runs}" in str(refused.value)


@pytest.mark.parametrize("slack, allowed", [(1, True), (0, True), (-1, False)])
def test_stored_bytes_exactly_at_the_limit_pass_and_one_byte_beyond_is_refused(settings, dated, slack, allowed):
    tenant = dated["tenant"]
    used = quotas.content_bytes(tenant)
    assert used > 0
    settings.CTXENG_QUOTA_CONTENT_BYTES = used + slack
    if allowed:
        quotas.check_stored(tenant=tenant, added=1)
    else:
        with pytest.raises(QuotaExceeded, match=f"would store {used} bytes, more than the limit {used - 1}"):
            quotas.check_stored(tenant=tenant, added=1)
