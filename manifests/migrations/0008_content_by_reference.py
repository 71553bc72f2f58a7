"""Content by reference (ctxeng.content): requests, manifest documents and payloads become packed
skeletons naming blobs stored once per tenant; artifact bodies move to the store; item rows point
at ItemDecision rows, stored once per tenant.

Existing rows are converted here, every blob into the database (location "db"); with an object
store configured, later writes put new bodies there.
"""

import django.db.models.deletion
from django.db import migrations, models

import manifests.models

from ctxeng.engine.limits import MAX_ITEM_ID, MAX_NAME

ITEM_FIELDS = ("item_id", "decision", "reason", "hard_gate", "detail", "partition", "tokens", "trust", "role",
               "kind", "source_type", "source_ref", "record")


def _save(Content, tenant_id, packer):
    digests = sorted(packer.blobs)
    for start in range(0, len(digests), 500):
        chunk = digests[start:start + 500]
        have = set(Content.objects.filter(tenant_id=tenant_id, digest__in=chunk).values_list("digest", flat=True))
        Content.objects.bulk_create(
            [Content(tenant_id=tenant_id, digest=d, kind=packer.kinds[d], size=len(packer.blobs[d]), epoch=1,
                     location="db", body=packer.blobs[d]) for d in chunk if d not in have],
            ignore_conflicts=True, batch_size=100,
        )


def convert(apps, schema_editor):
    from ctxeng.content.packing import Packer, pack_document
    from manifests.dashboard_selectors import reason_rank
    from manifests.services import summary_columns

    Content = apps.get_model("content", "Content")
    Job = apps.get_model("manifests", "AssemblyJob")
    Manifest = apps.get_model("manifests", "Manifest")
    Item = apps.get_model("manifests", "ManifestItem")
    ItemDecision = apps.get_model("manifests", "ItemDecision")
    Artifact = apps.get_model("manifests", "Artifact")

    for pk, tenant_id in Job.objects.values_list("pk", "tenant_id").iterator():
        request = Job.objects.filter(pk=pk).values_list("request", flat=True).first() or {}
        skeleton, packer = pack_document(request)
        _save(Content, tenant_id, packer)
        Job.objects.filter(pk=pk).update(request_packed=skeleton)

    for pk, tenant_id in Manifest.objects.values_list("pk", "job__tenant_id").iterator():
        document, payload = Manifest.objects.filter(pk=pk).values_list("document", "provider_input").first()
        document = document or {}
        records = {("included", r.get("item_id")): r for r in document.get("included") or []}
        records.update({("excluded", r.get("item_id")): r for r in document.get("excluded") or []})
        packer = Packer()
        rows = list(Item.objects.filter(manifest_id=pk).order_by("id").values("pk", *ITEM_FIELDS))
        entries = []
        for position, row in enumerate(rows):
            record = row["record"] or records.get((row["decision"], row["item_id"])) or {
                "item_id": row["item_id"], "decision": row["decision"]}
            digest = packer.ref_of(record)
            columns = {name: row[name] for name in ITEM_FIELDS if name != "record"}
            columns["zone"] = record.get("zone") or ""
            entry, _ = ItemDecision.objects.get_or_create(tenant_id=tenant_id, digest=digest, defaults={**columns, "epoch": 1})
            entries.append((reason_rank(row["decision"], row["reason"]), position, entry.pk))
        # Rewritten in the dashboard's default order (as the seal writes them), keeping each
        # item's document position.
        Item.objects.filter(manifest_id=pk).delete()
        Item.objects.bulk_create([Item(manifest_id=pk, entry_id=entry_id, position=position)
                                  for _, position, entry_id in sorted(entries)], batch_size=1000)
        document_packed, _ = pack_document(document, packer)
        payload_packed = None if payload is None else pack_document(payload, packer)[0]
        _save(Content, tenant_id, packer)
        # The base manager: the app's own refuses updates of sealed manifests; this is a migration.
        Manifest._base_manager.filter(pk=pk).update(document_packed=document_packed, payload_packed=payload_packed,
                                                    **summary_columns(document))

    for pk, tenant_id, content in Artifact.objects.values_list("pk", "tenant_id", "content").iterator():
        packer = Packer()
        packer.add_text(content)
        _save(Content, tenant_id, packer)


def irreversible(apps, schema_editor):
    raise RuntimeError("content by reference cannot be undone by migration; restore a backup instead")


class Migration(migrations.Migration):

    dependencies = [
        ("manifests", "0007_tenancy_moved_to_accounts"),
        ("content", "0001_initial"),
        ("accounts", "0001_initial"),
    ]

    operations = [
        migrations.CreateModel(
            name="ItemDecision",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("digest", models.CharField(help_text="sha256 of the packed record (its content blob)", max_length=80)),
                ("item_id", models.CharField(max_length=MAX_ITEM_ID)),
                ("decision", models.CharField(choices=[("included", "Included"), ("excluded", "Excluded")], max_length=10)),
                ("reason", models.TextField(blank=True, help_text="exclusion reason, or the admission reason")),
                ("hard_gate", models.CharField(blank=True, max_length=60)),
                ("detail", models.TextField(blank=True)),
                ("partition", models.CharField(blank=True, max_length=MAX_NAME)),
                ("zone", models.CharField(blank=True, max_length=60)),
                ("tokens", models.PositiveIntegerField(blank=True, null=True)),
                ("trust", models.CharField(blank=True, max_length=60)),
                ("role", models.CharField(blank=True, max_length=60)),
                ("kind", models.CharField(max_length=MAX_NAME)),
                ("source_type", models.CharField(max_length=MAX_NAME)),
                ("source_ref", models.JSONField(default=dict)),
                ("epoch", models.PositiveBigIntegerField(default=0, help_text="the content purge epoch of its last use")),
                ("tenant", models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name="+", to="accounts.tenant")),
            ],
            options={
                "constraints": [models.UniqueConstraint(fields=("tenant", "digest"), name="item_decision_unique_per_tenant")],
                "indexes": [models.Index(fields=["tenant", "item_id", "decision"], name="item_decision_lookup")],
            },
        ),
        migrations.AddField(
            model_name="assemblyjob", name="request_packed",
            field=models.TextField(default="{}", help_text="the AssemblyRequest as submitted, packed (ctxeng.content)"),
            preserve_default=False,
        ),
        migrations.AddField(
            model_name="manifest", name="document_packed",
            field=models.TextField(default="{}", help_text="the sealed ContextAssemblyManifest, packed (ctxeng.content)"),
            preserve_default=False,
        ),
        migrations.AddField(
            model_name="manifest", name="payload_packed",
            field=models.TextField(blank=True, help_text="the serialized model input, packed; null when blocked or purged", null=True),
        ),
        migrations.AddField(
            model_name="manifestitem", name="position",
            field=models.PositiveIntegerField(default=0, help_text="the item's place in the sealed document (included, then excluded)"),
        ),
        migrations.AddField(
            model_name="manifestitem", name="entry",
            field=models.ForeignKey(null=True, on_delete=django.db.models.deletion.PROTECT, related_name="+", to="manifests.itemdecision"),
        ),
        migrations.AddField(model_name="manifest", name="blocked_reason", field=models.TextField(blank=True)),
        migrations.AddField(model_name="manifest", name="usable_input", field=models.PositiveIntegerField(blank=True, null=True)),
        migrations.AddField(model_name="manifest", name="model_provider", field=models.TextField(blank=True)),
        migrations.AddField(model_name="manifest", name="model_name", field=models.TextField(blank=True)),
        migrations.RunPython(convert, irreversible),
        migrations.AlterField(
            model_name="manifest", name="sections",
            field=manifests.models.OrderedJSONField(
                blank=True, null=True,
                help_text="the small sections the manifest page shows, derived at seal time (no content bodies)"),
        ),
        migrations.RemoveIndex(model_name="manifestitem", name="item_decision"),
        migrations.RemoveIndex(model_name="manifestitem", name="item_manifest_decision"),
        *[migrations.RemoveField(model_name="manifestitem", name=name) for name in ITEM_FIELDS],
        migrations.AlterField(
            model_name="manifestitem", name="entry",
            field=models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name="+", to="manifests.itemdecision"),
        ),
        migrations.AddIndex(
            model_name="manifestitem", index=models.Index(fields=["manifest", "entry"], name="item_manifest_entry"),
        ),
        migrations.RemoveField(model_name="assemblyjob", name="request"),
        migrations.RemoveField(model_name="manifest", name="document"),
        migrations.RemoveField(model_name="manifest", name="provider_input"),
        migrations.RemoveField(model_name="artifact", name="content"),
        migrations.AlterField(
            model_name="artifact", name="content_hash",
            field=models.CharField(help_text="sha256 of the body, the blob in the content store", max_length=80),
        ),
    ]
