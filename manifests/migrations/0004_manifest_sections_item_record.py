"""Manifest.sections and ManifestItem.record, backfilled for manifests sealed before them.

The manifest page reads these instead of the whole document (manifests.dashboard_selectors).
The backfill derives them with the same `page_sections` the sealing service calls. A manifest
whose item rows do not match its document (one written outside the service) keeps `sections`
null, and the page reads it from the document as before.
"""

from django.db import migrations, models


def backfill(apps, schema_editor):
    from manifests.dashboard_selectors import page_sections

    Manifest = apps.get_model("manifests", "Manifest")
    ManifestItem = apps.get_model("manifests", "ManifestItem")
    for pk in Manifest.objects.filter(sections__isnull=True).values_list("pk", flat=True).iterator():
        document = Manifest.objects.filter(pk=pk).values_list("document", flat=True).first() or {}
        records = {("included", r.get("item_id")): r for r in document.get("included") or []}
        records.update({("excluded", r.get("item_id")): r for r in document.get("excluded") or []})
        rows = list(ManifestItem.objects.filter(manifest_id=pk).only("pk", "decision", "item_id"))
        if len(rows) != len(records) or any((row.decision, row.item_id) not in records for row in rows):
            continue
        for row in rows:
            row.record = records[(row.decision, row.item_id)]
        ManifestItem.objects.bulk_update(rows, ["record"], batch_size=500)
        # The base manager: the app's own refuses bulk updates of sealed manifests; adding the
        # derived sections is the one update this migration makes.
        Manifest._base_manager.filter(pk=pk).update(sections=page_sections(document))


def forget(apps, schema_editor):
    """Reversing drops the columns; nothing to undo row by row."""


class Migration(migrations.Migration):

    dependencies = [
        ('manifests', '0003_manifest_content_purged_at'),
    ]

    operations = [
        migrations.AddField(
            model_name='manifest',
            name='sections',
            field=models.JSONField(blank=True, help_text='the small sections the manifest page shows, derived at seal time (no content bodies)', null=True),
        ),
        migrations.AddField(
            model_name='manifestitem',
            name='record',
            field=models.JSONField(blank=True, help_text="the item's full included/excluded record", null=True),
        ),
        migrations.AddIndex(
            model_name='manifestitem',
            index=models.Index(fields=['manifest', 'decision', 'reason'], name='item_manifest_decision'),
        ),
        migrations.RunPython(backfill, forget),
    ]
