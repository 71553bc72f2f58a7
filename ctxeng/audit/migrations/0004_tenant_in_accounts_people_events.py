"""AuditEvent.tenant points at accounts.Tenant (the same table; state only), and the people page's
events (user created, role granted, password set, set-password link issued) join the actions."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("audit", "0003_login_locked_out"),
        ("accounts", "0001_initial"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="auditevent", name="tenant",
                    field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.CASCADE, related_name="audit_events", to="accounts.tenant"),
                ),
            ],
            database_operations=[],
        ),
        migrations.AlterField(
            model_name="auditevent",
            name="action",
            field=models.CharField(choices=[
                ("revision_created", "Revision Created"), ("revision_edited", "Revision Edited"),
                ("revision_published", "Revision Published"), ("revision_retired", "Revision Retired"),
                ("token_issued", "Token Issued"), ("token_revoked", "Token Revoked"), ("run_closed", "Run Closed"),
                ("membership_revoked", "Membership Revoked"), ("login_locked_out", "Login Locked Out"),
                ("user_created", "User Created"), ("membership_granted", "Membership Granted"),
                ("password_set", "Password Set"), ("password_link_issued", "Password Link Issued"),
            ], max_length=30),
        ),
    ]
