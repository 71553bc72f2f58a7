"""Policy.tenant points at accounts.Tenant (the same table): state only."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("policies", "0003_source_text_unsaved_preview"),
        ("accounts", "0001_initial"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="policy", name="tenant",
                    field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name="policies", to="accounts.tenant"),
                ),
            ],
            database_operations=[],
        ),
    ]
