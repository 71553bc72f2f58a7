"""Content addressing of JSON documents, as pure functions (no database).

`pack(value)` turns a JSON value (a submitted request, a sealed manifest, a provider payload) into
a small *skeleton* plus the *blobs* it refers to, each keyed by the sha256 of its bytes, as Git
keeps trees and blobs:

- a string of TEXT_MIN characters or more becomes a text blob, `{"$t": digest}`, the digest being
  sha256 of its UTF-8 bytes: for a candidate's content that is the `content_hash` the engine
  checks. A fenced payload block (`render.split_block`) is kept as `{"$cat": [head, {"$t": body},
  tail]}`: the head and tail carry the assembly's nonce, the body is the item's text, so a block
  shares its blob with the submitted content; a string that begins a text the packer was told
  of (`know`: the job's candidate contents, when a manifest is sealed) is `{"$pre": [digest,
  length]}`, and an excerpt of one (its head, the engine's EXCERPT_GAP, its tail) is a `$cat` of a
  `$pre` and a `{"$suf": [digest, length]}`, so a transform's `before_excerpt` costs no bytes;
- an object or array that is an element of a top-level array of the document (an item record, a
  candidate, a transform, a message) becomes a JSON blob, `{"$j": digest}`, when its packed form
  is NODE_MIN bytes or more (what is nested inside it stays in it); an engine record the sealer
  hands over as pydantic's JSON text (`element_as`) is that text, its long strings included, when
  nothing in it reads as a reference;
- a top-level array becomes a JSON blob when its packed form is TREE_MIN bytes or more.

The same record in the next step packs to the same bytes, so a step that repeats the last step's
candidates adds only its skeleton and the few containers that changed. An object of the agent's
own that happens to look like a reference (one key among MARKERS) is wrapped in `{"$lit": ...}`,
so `unpack(pack(x)) == x` for every JSON value, key order included, and a blob's JSON is written
in the value's own key order (never sorted): the read-back is the same document, byte for byte,
when rendered the same way.

Bytes are UTF-8 with `surrogatepass`: a lone surrogate the JSON edge accepted survives the round
trip instead of failing the write.
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ctxeng.engine.render import split_block
from ctxeng.engine.source_limits import EXCERPT_GAP

TEXT_MIN = 256
NODE_MIN = 128
TREE_MIN = 512
TEXT, JSON = "text", "json"
REF_TEXT, REF_JSON, CAT, LITERAL, PREFIX, SUFFIX = "$t", "$j", "$cat", "$lit", "$pre", "$suf"
MARKERS = frozenset((REF_TEXT, REF_JSON, CAT, LITERAL, PREFIX, SUFFIX))
_AS_IS = frozenset((int, float, bool, type(None)))  # JSON scalars other than strings: packed and read as they are


class UnpackError(ValueError):
    """A skeleton or blob is not what `pack` writes, or a blob it names is missing."""


def encode(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


def decode(data: bytes) -> str:
    return data.decode("utf-8", "surrogatepass")


def digest_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


class Packer:
    """Packs values and collects the blobs they need: `blobs` (digest -> bytes) and `kinds`
    (digest -> "text" | "json"). One Packer may pack several documents that share blobs."""

    def __init__(self) -> None:
        self.blobs: dict[str, bytes] = {}
        self.kinds: dict[str, str] = {}
        self._nodes: dict[int, tuple[Any, Any]] = {}
        self._known: dict[str, list[str]] = {}

    def know(self, texts: Iterable[str]) -> None:
        """Texts already in the store that strings packed later may begin (excerpts of them)."""
        for text in texts:
            if len(text) >= TEXT_MIN:
                self._known.setdefault(text[:TEXT_MIN], []).append(text)

    def skeleton(self, value: Any) -> str:
        """The packed root as JSON text (what a holder stores)."""
        return dumps(self.pack(value))

    def pack(self, value: Any) -> Any:
        if isinstance(value, str):
            return self._string(value)
        # A record is mostly numbers and short strings, which pack to themselves: they are kept
        # without a call each (a sealed manifest of 2,000 records has ~60,000 of them).
        if isinstance(value, dict):
            packed = {key: item if type(item) in _AS_IS or (type(item) is str and len(item) < TEXT_MIN) else self.pack(item)
                      for key, item in value.items()}
            return {LITERAL: packed} if len(packed) == 1 and next(iter(packed)) in MARKERS else packed
        if isinstance(value, list):
            return [item if type(item) in _AS_IS or (type(item) is str and len(item) < TEXT_MIN) else self.pack(item)
                    for item in value]
        return value

    def element(self, value: Any) -> Any:
        """An element of an array: an object or array stored as its own blob when large enough."""
        if not isinstance(value, dict | list):
            return self.pack(value)
        memo = self._nodes.get(id(value))
        if memo is not None and memo[0] is value:
            return memo[1]
        packed = self.pack(value)
        return self._placed(value, packed, dumps(packed))

    def element_as(self, value: dict | list, text: str) -> Any:
        """`element(value)` for a value the caller holds as JSON text already (an engine record,
        written by pydantic while `value` is its JSON form): that text is the blob, unwalked, when
        nothing in it could read as a reference (no `"$`), long strings left in it; otherwise the
        value is packed as `element` packs it. `text` must be `value` written as JSON."""
        if '"$' in text:
            return self.element(value)
        return self._placed(value, value, text)

    def _placed(self, value: dict | list, packed: Any, text: str) -> Any:
        """`value`'s place in its array, `packed` written as `text`: a blob of its own when large
        enough, else `packed` inline; remembered so the array's packing reuses it."""
        limit = TREE_MIN if isinstance(value, list) else NODE_MIN
        ref = {REF_JSON: self._blob(encode(text), JSON)} if len(text) >= limit else packed
        self._nodes[id(value)] = (value, ref)
        return ref

    def ref_of(self, value: dict | list) -> str:
        """The digest of `value` packed as an array element (packed once: packing its array later
        reuses it); a value too small for a blob of its own is stored as one anyway."""
        ref = self.element(value)
        if isinstance(ref, dict) and set(ref) == {REF_JSON}:
            return ref[REF_JSON]
        digest = self._blob(encode(dumps(ref)), JSON)
        return digest

    def tree(self, value: list) -> Any:
        """A top-level array of a document: its elements as blobs, itself a blob once TREE_MIN bytes."""
        packed = [self.element(item) for item in value]
        text = dumps(packed)
        return {REF_JSON: self._blob(encode(text), JSON)} if len(text) >= TREE_MIN else packed

    def add_text(self, text: str) -> str:
        """Store `text` as a text blob whatever its length (an artifact's body); its digest."""
        return self._blob(encode(text), TEXT)

    def _string(self, text: str) -> Any:
        if len(text) < TEXT_MIN:
            return text
        sliced = self._slice_of_known(text)
        if sliced is not None:
            return sliced
        parts = split_block(text)
        if parts is not None:
            head, body, tail = parts
            return {CAT: [head, {REF_TEXT: self._blob(encode(body), TEXT)}, tail]}
        return {REF_TEXT: self._blob(encode(text), TEXT)}

    def _slice_of_known(self, text: str) -> Any:
        for known in self._known.get(text[:TEXT_MIN], ()):
            if known.startswith(text):
                return {PREFIX: [self._blob(encode(known), TEXT), len(text)]}
        head, gap, tail = text.partition(EXCERPT_GAP)
        if gap and len(head) >= TEXT_MIN:
            for known in self._known.get(head[:TEXT_MIN], ()):
                if known.startswith(head) and known.endswith(tail):
                    digest = self._blob(encode(known), TEXT)
                    return {CAT: [{PREFIX: [digest, len(head)]}, gap, {SUFFIX: [digest, len(tail)]}]}
        return None

    def _blob(self, data: bytes, kind: str) -> str:
        digest = digest_of(data)
        if digest not in self.blobs:
            self.blobs[digest] = data
            self.kinds[digest] = kind
        return digest


def pack_document(value: Any, packer: Packer | None = None) -> tuple[str, Packer]:
    """Pack a document whose top-level arrays are its big sections (a request's candidates, a
    manifest's included/excluded/transforms): each such array is a tree blob."""
    packer = packer or Packer()
    if isinstance(value, dict):
        root = {key: (packer.tree(item) if isinstance(item, list) else packer.pack(item)) for key, item in value.items()}
        if len(root) == 1 and next(iter(root)) in MARKERS:
            root = {LITERAL: root}
    else:
        root = packer.pack(value)
    return dumps(root), packer


# --------------------------------------------------------------------------- references and reading


def references(node: Any) -> Iterable[tuple[str, str]]:
    """(kind, digest) of every blob `node` (a packed value) names directly."""
    stack = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, list):
            stack.extend(item for item in current if type(item) is dict or type(item) is list)
        elif isinstance(current, dict):
            if len(current) == 1:
                key, inner = next(iter(current.items()))
                if key == REF_TEXT and isinstance(inner, str):
                    yield TEXT, inner
                    continue
                if key == REF_JSON and isinstance(inner, str):
                    yield JSON, inner
                    continue
                if key in (PREFIX, SUFFIX) and isinstance(inner, list) and inner and isinstance(inner[0], str):
                    yield TEXT, inner[0]
                    continue
                if key == LITERAL and isinstance(inner, dict):
                    stack.extend(inner.values())
                    continue
            stack.extend(item for item in current.values() if type(item) is dict or type(item) is list)


Fetch = Callable[[list[str]], Mapping[str, bytes]]
Present = Callable[[list[str]], Iterable[str]]


class Memo:
    """Decoded blobs (a text blob's string, a JSON blob parsed) by kind and digest, the least
    recently used dropped first once their blobs add up to more than `limit` bytes.

    A digest names its bytes, so a decoded value is the same in every read that names it; what a
    memo cannot say is whether the reader may still name it (the blob is in its tenant's store),
    which `unpack` asks the store (`present`) for every blob it takes from here. Values are shared
    between reads and never changed: `_build` makes new containers from them."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.size = 0
        self._values: OrderedDict[tuple[str, str], tuple[Any, int]] = OrderedDict()

    def get(self, kind: str, digest: str) -> Any:
        entry = self._values.get((kind, digest))
        if entry is None:
            return _MISSING
        self._values.move_to_end((kind, digest))
        return entry[0]

    def put(self, kind: str, digest: str, value: Any, size: int) -> None:
        if size > self.limit or (kind, digest) in self._values:
            return
        self._values[(kind, digest)] = (value, size)
        self.size += size
        while self.size > self.limit:
            _, (_, dropped) = self._values.popitem(last=False)
            self.size -= dropped

    def clear(self) -> None:
        self._values.clear()
        self.size = 0

    def __len__(self) -> int:
        return len(self._values)


_MISSING = object()


def unpack(skeleton: str | Any, fetch: Fetch, *, keys: Iterable[str] | None = None,
           memo: Memo | None = None, present: Present | None = None) -> Any:
    """The value `skeleton` packs, its blobs read through `fetch` (digests -> bytes, one call per
    level of the tree). `keys` reads only those top-level keys of an object document. With a
    `memo`, blobs decoded before are taken from it once `present` (digests -> those the store
    holds) confirms each is still there, and the blobs fetched are added to it."""
    if memo is not None and present is None:
        raise ValueError("a memo needs `present`: the store must confirm every blob taken from it")
    root = json.loads(skeleton) if isinstance(skeleton, str) else skeleton
    if keys is not None:
        if not isinstance(root, dict):
            raise UnpackError("a document with named sections must be an object")
        if set(root) == {LITERAL}:
            root = root[LITERAL]
        root = {LITERAL: {key: root[key] for key in keys if key in root}}
    texts: dict[str, str] = {}
    nodes: dict[str, Any] = {}
    pending = list(references(root))
    while pending:
        wanted = sorted({(kind, digest) for kind, digest in pending if digest not in (texts if kind == TEXT else nodes)})
        remembered = {}
        if memo is not None:
            remembered = {ref: value for ref in wanted if (value := memo.get(*ref)) is not _MISSING}
            if remembered:
                names = sorted({digest for _, digest in remembered})
                _require(names, set(present(names)))
        fetched = sorted({digest for kind, digest in wanted if (kind, digest) not in remembered})
        found = fetch(fetched) if fetched else {}
        _require(fetched, found)
        following: list[tuple[str, str]] = []
        for kind, digest in wanted:
            value = remembered.get((kind, digest), _MISSING)
            if value is _MISSING:
                data = found[digest]
                value = decode(data) if kind == TEXT else json.loads(decode(data))
                if memo is not None:
                    memo.put(kind, digest, value, len(data))
            if kind == TEXT:
                texts[digest] = value
            else:
                nodes[digest] = value
                following.extend(references(value))
        pending = following
    return _build(root, texts, nodes)


def _require(wanted: list[str], found: Any) -> None:
    missing = [digest for digest in wanted if digest not in found]
    if missing:
        raise UnpackError(f"content {missing[0]} is missing from the store ({len(missing)} blob(s) missing)")


def _build(node: Any, texts: dict[str, str], nodes: dict[str, Any]) -> Any:
    if isinstance(node, list):
        return [_build(item, texts, nodes) if type(item) is dict or type(item) is list else item for item in node]
    if not isinstance(node, dict):
        return node
    if len(node) == 1:
        key, inner = next(iter(node.items()))
        if key == REF_TEXT:
            return texts[inner]
        if key == REF_JSON:
            if inner not in nodes:
                raise UnpackError(f"content {inner} is missing from the store")
            return _build(nodes[inner], texts, nodes)
        if key == PREFIX:
            return texts[inner[0]][: inner[1]]
        if key == SUFFIX:
            text = texts[inner[0]]
            return text[len(text) - inner[1]:]
        if key == CAT:
            if not isinstance(inner, list):
                raise UnpackError("a $cat reference must hold an array")
            return "".join(_build(part, texts, nodes) for part in inner)
        if key == LITERAL:
            return {name: _build(item, texts, nodes) for name, item in inner.items()}
    return {name: _build(item, texts, nodes) if type(item) is dict or type(item) is list else item
            for name, item in node.items()}

