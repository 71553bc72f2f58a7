"""Lineage followed by content (issue 50, item 3): a lineage node is matched to the request's
candidates by its `digest` as well as by its id, so a derived item whose lineage carries the digest
of an excluded input is excluded with that input's reason, whatever the node is called. Expected
decisions are written by hand from the rule."""

from __future__ import annotations

from .builders import excluded_record, item, request, run, sha
from .test_admission_integrity_iv import PI_REF, lineage

RAW = "results are keyed by call id, in order"


def _excerpt(root_id: str, root_content: str = RAW) -> dict:
    return item("ev-excerpt", content="keyed by call id", source_ref={**PI_REF, "lines": "2-3"},
                source_lineage=lineage((root_id, "repository_source", root_content), ("ev-excerpt", "excerpt", "keyed by call id")))


def test_a_renamed_lineage_root_with_a_stale_items_digest_is_not_admitted():
    """The read at commit 0ld is stale (the task requires c0ffee). The excerpt's lineage root is
    called `fresh-read-7`, a name no candidate has, but its digest is the stale read's content: the
    excerpt inherits stale_revision, naming the stale read."""
    raw = item("ev-raw", content=RAW, source_ref={**PI_REF, "commit": "0ld"})
    r = run(request(extra=[raw, _excerpt("fresh-read-7")], required_revisions={"pi": "c0ffee"}))
    assert excluded_record(r, "ev-raw").reason == "stale_revision"
    ex = excluded_record(r, "ev-excerpt")
    assert (ex.reason, ex.hard_gate) == ("stale_revision", "required_revision")
    assert "'ev-raw'" in ex.detail


def test_a_digest_of_another_tenants_item_taints_whatever_the_node_is_called():
    foreign = item("mem", "memory_object", "the other tenant's roadmap", scope="tenant-z/project-q/task-9")
    note = item("note", "editable_project_file", "roadmap notes",
                source_lineage=lineage(("my-own-notes", "memory_object", "the other tenant's roadmap"), ("note", "note", "roadmap notes")))
    r = run(request(extra=[note, foreign]))
    assert excluded_record(r, "mem").reason == "permission_denied"
    assert excluded_record(r, "note").reason == "permission_denied"
    assert "'mem'" in excluded_record(r, "note").detail


def test_a_renamed_root_whose_digest_is_an_admitted_read_is_admitted():
    """Control: matching by content follows lineage; it does not distrust it."""
    raw = item("ev-raw", content=RAW, source_ref=PI_REF)
    r = run(request(extra=[raw, _excerpt("fresh-read-7")], required_revisions={"pi": "c0ffee"}))
    assert {"ev-raw", "ev-excerpt"} <= set(r.manifest.included_ids())


def test_a_digest_no_candidate_holds_changes_nothing():
    raw = item("ev-raw", content=RAW, source_ref={**PI_REF, "commit": "0ld"})
    r = run(request(extra=[raw, _excerpt("fresh-read-7", "some other text")], required_revisions={"pi": "c0ffee"}))
    assert "ev-excerpt" in r.manifest.included_ids()
    assert sha("some other text") != sha(RAW)
