"""People-page fixtures: the dashboard's worked example (owner = every role in tenant-x, reviewer,
outsider in tenant-o), plus `both`, a member of tenant-x and tenant-o."""

from __future__ import annotations

import pytest

from tests.dashboard.conftest import PASSWORD, build_example


@pytest.fixture
def example(db):
    from ctxeng.accounts.services import tenant_member_add

    built = build_example()
    tenant_member_add(username="both", tenant_slug="tenant-x", roles=["reviewer"], password=PASSWORD)
    tenant_member_add(username="both", tenant_slug="tenant-o", roles=["agent"])
    return built


@pytest.fixture
def admin_client(client, example):
    client.force_login(example["owner"])
    return client


@pytest.fixture
def reviewer_client(client, example):
    client.force_login(example["reviewer"])
    return client
