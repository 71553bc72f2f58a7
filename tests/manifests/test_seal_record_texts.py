"""The seal takes each item record's blob as pydantic wrote it (`record_texts`, `Packer.element_as`)
instead of walking its JSON form: what is stored must read back as the manifest's JSON form, the
same blobs as the walk for ordinary records, and the walk wherever a record's text could misread.

Oracles: `manifest_dict()` (the engine's JSON form of the manifest) and the seal without record
texts (`_prepare_manifest` walking every record, as every seal did before).
"""

from __future__ import annotations

import copy
import json

import pytest

from bench import workload
from ctxeng.content.packing import unpack
from ctxeng.engine import assemble, parse_policy, parse_request
from manifests.examples import example_json, example_text
from manifests.services import RECORD_SECTIONS, _prepare_manifest, record_texts

LONG = "a long source path " * 20  # 380 characters: a text blob of its own when walked


def _worked(candidates_edit=None):
    req = example_json("request.json")
    if candidates_edit:
        candidates_edit(req["candidates"])
    return assemble(parse_request(req), parse_policy(example_text("policy.yaml")))


def _workload():
    body = workload.make_request(n_items=300, total_bytes=300 * 300, n_tool_pairs=5, seed=5)
    return assemble(parse_request(json.dumps(body).encode()), parse_policy(workload.make_policy()))


def _sealed(result, *, texts: bool):
    document = result.manifest_dict()
    prepared = _prepare_manifest(document, result.serialized_input, records=record_texts(result.manifest) if texts else None)
    return document, prepared


def _read_back(prepared) -> dict:
    fetch = lambda digests: {d: prepared.packer.blobs[d] for d in digests if d in prepared.packer.blobs}  # noqa: E731
    return unpack(prepared.document_packed, fetch)


@pytest.mark.parametrize("make", [_worked, _workload], ids=["worked-example", "workload-300"])
def test_record_texts_are_the_records_json_form_and_seal_to_the_same_blobs_as_the_walk(make):
    result = make()
    document = result.manifest_dict()
    texts = record_texts(result.manifest)
    for name in RECORD_SECTIONS:
        assert len(texts[name]) == len(document[name]) > 0
        for text, value in zip(texts[name], document[name], strict=True):
            assert json.dumps(json.loads(text)) == json.dumps(value)
    walked = _prepare_manifest(copy.deepcopy(document), result.serialized_input)
    _, fast = _sealed(result, texts=True)
    assert fast.document_packed == walked.document_packed
    assert fast.payload_packed == walked.payload_packed
    assert fast.packer.blobs == walked.packer.blobs
    assert [digest for digest, _ in fast.entries] == [digest for digest, _ in walked.entries]


def test_a_record_holding_a_long_string_keeps_it_in_its_blob_and_reads_back_whole():
    def edit(candidates):
        candidates[10]["source_ref"] = {"path": LONG, "commit": "abc123"}

    result = _worked(edit)
    document, prepared = _sealed(result, texts=True)
    assert LONG in json.dumps(document)
    assert json.dumps(_read_back(prepared)) == json.dumps(document)
    record_blobs = [data for digest, data in prepared.packer.blobs.items() if LONG.encode() in data]
    assert record_blobs and all(data.startswith(b"{") for data in record_blobs)


def test_a_record_whose_text_could_read_as_a_reference_is_walked_and_reads_back_as_it_was():
    digest_like = "sha256:" + "0" * 64

    def edit(candidates):
        candidates[10]["source_ref"] = {"$t": digest_like}

    result = _worked(edit)
    document, prepared = _sealed(result, texts=True)
    assert any('"$t"' in text for name in RECORD_SECTIONS for text in record_texts(result.manifest)[name] if text)
    back = _read_back(prepared)
    assert json.dumps(back) == json.dumps(document)
    walked = _prepare_manifest(copy.deepcopy(document), result.serialized_input)
    assert prepared.document_packed == walked.document_packed and prepared.packer.blobs == walked.packer.blobs


def test_a_record_pydantic_cannot_write_is_walked():
    def edit(candidates):
        candidates[10]["source_ref"] = {"path": "notes/\ud800.md"}

    result = _worked(edit)
    texts = record_texts(result.manifest)
    assert None in [text for name in RECORD_SECTIONS for text in texts[name]]
    document, prepared = _sealed(result, texts=True)
    assert _read_back(prepared) == document


def test_record_texts_that_do_not_match_the_records_are_refused():
    result = _worked()
    document = result.manifest_dict()
    texts = record_texts(result.manifest)
    texts["excluded"] = texts["excluded"][:-1]
    with pytest.raises(ValueError, match="excluded"):
        _prepare_manifest(document, result.serialized_input, records=texts)
