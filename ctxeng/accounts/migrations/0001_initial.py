"""Tenant and Membership move here from the manifests app: state only, the tables stay
(`manifests_tenant`, `manifests_membership`, kept by `db_table`). manifests 0006, policies 0004 and
audit 0004 point their foreign keys here and then remove the old models from manifests' state."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ("manifests", "0005_run_closed_at"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="Tenant",
                    fields=[
                        ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                        ("slug", models.SlugField(max_length=100, unique=True)),
                        ("name", models.CharField(blank=True, max_length=200)),
                        ("created_at", models.DateTimeField(auto_now_add=True)),
                    ],
                    options={"db_table": "manifests_tenant", "ordering": ["slug"]},
                ),
                migrations.CreateModel(
                    name="Membership",
                    fields=[
                        ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                        ("role", models.CharField(choices=[("agent", "Agent"), ("reviewer", "Reviewer"), ("policy_editor", "Policy Editor"), ("admin", "Admin")], max_length=20)),
                        ("created_at", models.DateTimeField(auto_now_add=True)),
                        ("tenant", models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name="memberships", to="accounts.tenant")),
                        ("user", models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name="memberships", to=settings.AUTH_USER_MODEL)),
                    ],
                    options={
                        "db_table": "manifests_membership",
                        "constraints": [models.UniqueConstraint(fields=("user", "tenant", "role"), name="membership_unique_role")],
                    },
                ),
            ],
            database_operations=[],
        ),
    ]
