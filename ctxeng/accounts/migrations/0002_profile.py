"""A dashboard profile per user: how timestamps are shown (UTC, or the browser's zone)."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("accounts", "0001_initial"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="Profile",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("time_display", models.CharField(choices=[("utc", "Utc"), ("local", "Local")], default="utc", max_length=8)),
                ("user", models.OneToOneField(on_delete=django.db.models.deletion.CASCADE, related_name="dashboard_profile",
                                              to=settings.AUTH_USER_MODEL)),
            ],
        ),
    ]
