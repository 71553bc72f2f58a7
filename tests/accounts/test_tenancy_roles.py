"""`Tenancy.has_role`: a role is held only in a tenant the user belongs to with that role; a
tenant the user is not in holds no role (a survivor of the fresh mutation sample of seed 425378,
docs/mutation.md, where a missing tenant raised instead of answering no)."""

from __future__ import annotations

from types import SimpleNamespace

from ctxeng.accounts.selectors import Tenancy


def test_a_role_is_held_only_where_the_user_is_a_member_with_it():
    mine, theirs = SimpleNamespace(id=1), SimpleNamespace(id=2)
    tenancy = Tenancy(tenants=[mine], roles={1: frozenset({"agent", "reviewer"})}, current=mine)
    assert tenancy.has_role(mine, "agent") and tenancy.has_role(mine, "reviewer")
    assert not tenancy.has_role(mine, "admin")
    assert tenancy.has_role(theirs, "agent") is False  # not a member: no role, no error
