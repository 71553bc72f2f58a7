"""Tenancy lives in ctxeng.accounts, on the tables it had in the manifests app; the migrations
that moved it touch no table, and the models match the migrations."""

from __future__ import annotations

from io import StringIO

from django.core.management import call_command
from django.db import connection

from ctxeng.accounts.models import Membership, Tenant


def test_the_models_keep_their_tables():
    assert Tenant._meta.db_table == "manifests_tenant"
    assert Membership._meta.db_table == "manifests_membership"


def test_the_migrations_match_the_models(db):
    call_command("makemigrations", "--check", "--dry-run", stdout=StringIO())


def test_moving_tenancy_ran_no_sql(transactional_db):
    for app, name in (("accounts", "0001_initial"), ("manifests", "0007_tenancy_moved_to_accounts"),
                      ("policies", "0004_tenant_in_accounts"), ("audit", "0004_tenant_in_accounts_people_events")):
        out = StringIO()
        call_command("sqlmigrate", app, name, stdout=out)
        statements = [line for line in out.getvalue().splitlines() if line.strip() and not line.startswith("--")]
        # PostgreSQL wraps even an empty migration in BEGIN/COMMIT.
        assert all(s.strip() in ("BEGIN;", "COMMIT;") for s in statements), (app, statements)


def test_existing_rows_are_read_through_the_new_models(db):
    with connection.cursor() as cursor:
        cursor.execute("INSERT INTO manifests_tenant (slug, name, created_at) VALUES ('legacy', 'Legacy', CURRENT_TIMESTAMP)")
    assert Tenant.objects.get(slug="legacy").name == "Legacy"
