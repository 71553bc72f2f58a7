"""Bug class 5 (issue 54), the shared throttle: a window holds `limit` events and refuses the next.

`rate_limits.windows_take` counts one event in every window or in none (ctxeng.server.rate_limits);
a window refuses when it already holds `limit` events (`>= limit`), so the limit-th event passes
and the one after it waits. Run in the cache the test settings configure (this process's, or Redis
with REDIS_URL set: the Lua script states the same comparison).
"""

from __future__ import annotations

import uuid

from ctxeng.server.rate_limits import windows_take


def key(name: str) -> str:
    return f"class-bounds:{name}:{uuid.uuid4().hex}"


def test_a_window_passes_its_limit_th_event_and_refuses_the_next_with_a_wait_within_the_window():
    window = [(key("one"), 3, 60.0)]
    assert [windows_take(window) for _ in range(3)] == [None, None, None]
    wait = windows_take(window)
    assert wait is not None and 0 < wait <= 60.0


def test_a_window_one_event_short_of_its_limit_lets_every_window_count_and_a_full_one_stops_them_all():
    address, username = key("address"), key("username")
    assert windows_take([(address, 2, 60.0)]) is None  # the address window holds 1 of 2
    # Both windows have room (address 1 of 2, username 0 of 5): the event counts in both.
    assert windows_take([(address, 2, 60.0), (username, 5, 60.0)]) is None
    # The address window is now full (2 of 2): nothing counts, not even in the username's window.
    assert windows_take([(address, 2, 60.0), (username, 5, 60.0)]) is not None
    assert [windows_take([(username, 5, 60.0)]) for _ in range(4)] == [None, None, None, None]
    assert windows_take([(username, 5, 60.0)]) is not None  # 1 + 4 = 5: the username's limit
