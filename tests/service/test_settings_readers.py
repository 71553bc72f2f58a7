"""The readers that turn the environment into settings (ctxeng/server/settings.py), in the test
process: each reads its value, falls back to its default when unset, and refuses a value it cannot
read with an error naming the variable. (tests/service/test_deploy.py checks the same through a
fresh `manage.py` process: what an operator sees; these judge each reader's every branch.)"""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured

from ctxeng.server import settings as s

NAME = "CTXENG_TEST_SETTING"


@pytest.fixture
def env(monkeypatch):
    monkeypatch.delenv(NAME, raising=False)
    return lambda value: monkeypatch.setenv(NAME, value)


@pytest.mark.parametrize(("value", "expected"), [
    ("1", True), ("true", True), (" Yes ", True), ("ON", True),
    ("0", False), ("false", False), ("no", False), ("off", False), ("", False),
])
def test_envbool_reads_each_spelling(env, value, expected):
    env(value)
    assert s.envbool(NAME, "maybe") is expected


@pytest.mark.parametrize(("reader", "default", "expected"), [
    (s.envbool, "true", True), (s.envbool, "false", False), (s.envint, " 7 ", 7), (s.envfloat, "2.5", 2.5),
    (s.envrate, "3/min", "3/min"), (s.envrate, "", ""), (s.envlist, "a, b,,c ", ["a", "b", "c"]),
])
def test_an_unset_variable_reads_its_default(env, reader, default, expected):
    assert reader(NAME, default) == expected


@pytest.mark.parametrize(("reader", "value", "expected"), [
    (s.envint, "42", 42), (s.envint, "-3", -3), (s.envfloat, "0.25", 0.25), (s.envfloat, "1e3", 1000.0),
    (s.envrate, "10/s", "10/s"), (s.envrate, "1/day", "1/day"), (s.envrate, "120/hour", "120/hour"),
    (s.envlist, "x", ["x"]), (s.envlist, "", []),
])
def test_a_set_variable_wins_over_the_default(env, reader, value, expected):
    env(value)
    assert reader(NAME, "999/min" if reader is s.envrate else "999") == expected


@pytest.mark.parametrize(("reader", "value", "message"), [
    (s.envbool, "maybe", "expected true/false, got 'maybe'"),
    (s.envint, "٣", "expected an integer, got '٣'"),  # int() would read it as 3
    (s.envint, "3.5", "expected an integer, got '3.5'"),
    (s.envfloat, "½", "expected a number, got '½'"),
    (s.envfloat, "fast", "expected a number, got 'fast'"),
    (s.envrate, "0/min", "expected N/s, N/min, N/hour or N/day, got '0/min'"),
    (s.envrate, "5/week", "expected N/s, N/min, N/hour or N/day, got '5/week'"),
    (s.envrate, "5 / min", "expected N/s, N/min, N/hour or N/day, got '5 / min'"),
])
def test_an_unreadable_value_is_refused_naming_the_variable(env, reader, value, message):
    env(value)
    with pytest.raises(ImproperlyConfigured) as raised:
        reader(NAME, "1")
    assert str(raised.value) == f"{NAME}: {message}"


@pytest.mark.parametrize(("value", "expected"), [
    ("X-Forwarded-Proto=https", ("HTTP_X_FORWARDED_PROTO", "https")),
    (" x_forwarded_scheme = wss ", ("HTTP_X_FORWARDED_SCHEME", "wss")),
    ("X-Forwarded-Proto", ("HTTP_X_FORWARDED_PROTO", "https")),  # the value defaults to https
    ("X-Forwarded-Proto=", ("HTTP_X_FORWARDED_PROTO", "https")),
    ("", None),
])
def test_the_proxy_ssl_header_is_read_as_djangos_meta_key_and_value(env, value, expected):
    env(value)
    assert s.env_proxy_ssl_header(NAME) == expected


def test_an_unset_proxy_ssl_header_trusts_no_header(env):
    assert s.env_proxy_ssl_header(NAME) is None


@pytest.mark.parametrize("value", ["X Forwarded Proto", "=https", "X-Proto:https=1"])
def test_a_proxy_ssl_header_that_is_not_a_header_name_is_refused(env, value):
    env(value)
    with pytest.raises(ImproperlyConfigured, match=f"^{NAME}: expected HEADER=VALUE such as X-Forwarded-Proto=https"):
        s.env_proxy_ssl_header(NAME)
