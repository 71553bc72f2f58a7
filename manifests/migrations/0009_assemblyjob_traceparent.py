from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('manifests', '0008_content_by_reference'),
    ]

    operations = [
        migrations.AddField(
            model_name='assemblyjob',
            name='traceparent',
            field=models.CharField(blank=True, help_text="the submit's W3C traceparent: the assembly span and its usage spans join its trace (ctxeng.telemetry)", max_length=55),
        ),
    ]
