"""A per-machine cache of an encoding's rank table, so a fresh process does not rebuild it.

o200k_base's 200,000 ranks are shipped as base64 text; decoding them is ~140 ms of CPU at every
start of every process. `load_ranks(name, source_sha256, build)` returns the table `build()` makes
from the source whose sha256 is `source_sha256`, reading it from a file this module wrote before
when that file is whole and was built from that same source, else building it and writing the file.

Where: `$CTXENG_CACHE_DIR`, else `$XDG_CACHE_HOME/ctxeng`, else `~/.cache/ctxeng`
(`cache_dir()`); one file per encoding, `<name>.ranks`.

Never trusted blindly. The file is a header line — the format, this Python's marshal version, the
source's sha256, the table's size and the sha256 of the payload — then the payload (the table, by
`marshal`, which builds values and never runs code). A file whose header does not parse, names
another format, marshal version or source (stale), or whose payload's sha256 or size differs
(corrupt, truncated) is rebuilt from the source and replaced. Written atomically (a temporary file
in the same directory, then `os.replace`), so concurrent processes never read half a file; a
directory that cannot be written leaves the table built in memory, as before the cache existed.
"""

from __future__ import annotations

import hashlib
import marshal
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

FORMAT = "ctxeng-ranks/1"
ENV = "CTXENG_CACHE_DIR"


def cache_dir() -> Path:
    """Where the per-machine caches live (see the module docstring)."""
    if os.environ.get(ENV):
        return Path(os.environ[ENV])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "ctxeng"


def cache_path(name: str) -> Path:
    return cache_dir() / f"{name}.ranks"


def _header(source_sha256: str, size: int, payload_sha256: str) -> bytes:
    return f"{FORMAT} marshal={marshal.version} source={source_sha256} size={size} sha256={payload_sha256}\n".encode()


def read(path: Path, source_sha256: str) -> dict[bytes, int] | None:
    """The table in `path` when it is whole and built from `source_sha256`'s source, else None."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    head, sep, payload = data.partition(b"\n")
    if not sep:
        return None
    try:
        fields = dict(part.split("=", 1) for part in head.decode("ascii").split(" ")[1:])
        fmt = head.decode("ascii").split(" ", 1)[0]
    except ValueError:  # not ASCII, or a field without "="
        return None
    if (fmt != FORMAT or fields.get("marshal") != str(marshal.version) or fields.get("source") != source_sha256
            or fields.get("sha256") != hashlib.sha256(payload).hexdigest()):
        return None
    try:
        table = marshal.loads(payload)
    except (EOFError, ValueError, TypeError):
        return None
    if not isinstance(table, dict) or str(len(table)) != fields.get("size"):
        return None
    return table


def write(path: Path, source_sha256: str, table: dict[bytes, int]) -> bool:
    """Write `table` to `path` atomically; False (and nothing written) where that is not possible."""
    payload = marshal.dumps(table)
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, prefix=path.name + ".", suffix=".tmp", delete=False) as f:
            tmp = f.name
            f.write(_header(source_sha256, len(table), hashlib.sha256(payload).hexdigest()))
            f.write(payload)
        os.replace(tmp, path)
        return True
    except OSError:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
        return False


def load_ranks(name: str, source_sha256: str, build: Callable[[], dict[bytes, int]]) -> dict[bytes, int]:
    """The rank table of encoding `name`: from this machine's cache when it holds a whole table built
    from the source `source_sha256`, else `build()` (written to the cache for the next process)."""
    path = cache_path(name)
    table = read(path, source_sha256)
    if table is None:
        table = build()
        write(path, source_sha256, table)
    return table
