"""The content store: Content blobs per tenant and the purge epoch row."""

import django.db.models.deletion
from django.db import migrations, models


def first_epoch(apps, schema_editor):
    apps.get_model("content", "ContentEpoch").objects.get_or_create(pk=1, defaults={"value": 1})


class Migration(migrations.Migration):
    initial = True

    dependencies = [
        ("accounts", "0001_initial"),
    ]

    operations = [
        migrations.CreateModel(
            name="Content",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("digest", models.CharField(max_length=71)),
                ("kind", models.CharField(help_text="text (a body) or json (a packed record or array)", max_length=4)),
                ("size", models.PositiveBigIntegerField(help_text="bytes of the blob (before any compression)")),
                ("location", models.CharField(choices=[("db", "Database"), ("s3", "Object Store")], default="db", max_length=2)),
                ("encoding", models.CharField(blank=True, help_text="how `body` is stored: '' (as is), 'zlib' or 'zlib-r1' (with the records dictionary)", max_length=8)),
                ("epoch", models.PositiveBigIntegerField(help_text="the purge epoch of the last write that referred to it")),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                ("body", models.BinaryField(blank=True, help_text="the bytes; null when kept in the object store", null=True)),
                ("tenant", models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name="+", to="accounts.tenant")),
            ],
            options={
                "constraints": [models.UniqueConstraint(fields=("tenant", "digest"), name="content_unique_per_tenant")],
            },
        ),
        migrations.CreateModel(
            name="ContentEpoch",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("value", models.PositiveBigIntegerField(default=1)),
            ],
        ),
        migrations.RunPython(first_epoch, migrations.RunPython.noop),
    ]
