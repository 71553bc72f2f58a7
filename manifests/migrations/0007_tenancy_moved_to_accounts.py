"""Tenant and Membership moved to ctxeng.accounts (accounts 0001): point this app's foreign keys
there and drop the two models from this app's state. State only: the tables stay as they are."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("manifests", "0006_item_reason_text"),
        ("accounts", "0001_initial"),
        # Every other app points at accounts.Tenant first, so no state refers to manifests.Tenant here.
        ("policies", "0004_tenant_in_accounts"),
        ("audit", "0004_tenant_in_accounts_people_events"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="run", name="tenant",
                    field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name="runs", to="accounts.tenant"),
                ),
                migrations.AlterField(
                    model_name="assemblyjob", name="tenant",
                    field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name="jobs", to="accounts.tenant"),
                ),
                migrations.AlterField(
                    model_name="artifact", name="tenant",
                    field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name="artifacts", to="accounts.tenant"),
                ),
                migrations.DeleteModel(name="Membership"),
                migrations.DeleteModel(name="Tenant"),
            ],
            database_operations=[],
        ),
    ]
