"""Benchmark 3 — growth: time per MB, time per small item, and peak memory.

- Time per MB (cold assembly, empty count cache) for 1 MB and 8 MB requests of the same mix
  (about 3 KB per candidate, so ~330 and ~2,650 candidates): the 8 MB figure must stay within
  1.2x of the 1 MB figure, so nothing in the engine is worse than linear.
- 10,000 small candidates of ~400 B: engine time per item against the floor's time per item on
  the same request (per-item overhead: validation, gates, fence headers, manifest records).
- Peak memory for the 8 MB request, in a fresh interpreter: the RSS high-water mark (VmHWM, reset
  after imports through /proc/self/clear_refs) while reading, parsing and assembling, less the RSS
  once the engine and tiktoken are loaded (the interpreter's baseline), as a multiple of the
  request's size on the wire (JSON bytes).
"""

from __future__ import annotations

import json
import subprocess
import sys

from . import workload
from .engine_floor import _encoding, _fresh_tokenizer, assemble_bytes, floor
from .infra import ROOT, python, python_env
from .timing import Row, at_most, interleaved, median, ms

BYTES_PER_ITEM = 3000


def _request(mb: float) -> bytes:
    n = max(40, int(mb * 1e6 / BYTES_PER_ITEM))
    return workload.dumps(workload.make_request(n_items=n, total_bytes=int(mb * 1e6), seed=int(mb * 10)))


def run(*, rounds: int = 5, quick: bool = False) -> list[Row]:
    from ctxeng.engine import parse_policy

    if quick:
        rounds = 2
    policy = parse_policy(workload.make_policy())
    enc = _encoding()
    rows: list[Row] = []

    small, large = _request(1), _request(8)
    mb_small = workload.request_bytes(json.loads(small)) / 1e6
    mb_large = workload.request_bytes(json.loads(large)) / 1e6
    times = interleaved(
        {
            "1MB": lambda: assemble_bytes(small, policy, _fresh_tokenizer()),
            "8MB": lambda: assemble_bytes(large, policy, _fresh_tokenizer()),
        },
        rounds,
    )
    per_small = median(times["1MB"]) / mb_small
    per_large = median(times["8MB"]) / mb_large
    rows.append(at_most(
        "3 growth", "time per MB, 8 MB vs 1 MB", f"{ms(per_large)}/MB vs {ms(per_small)}/MB", per_large / per_small, 1.2,
        times=times, mb=[round(mb_small, 2), round(mb_large, 2)],
    ))

    tiny = workload.dumps(workload.make_request(n_items=10_000, total_bytes=4_000_000, n_tool_pairs=40, seed=77, example=False))
    n = len(json.loads(tiny)["candidates"])
    times = interleaved(
        {
            "floor": lambda: floor(tiny, enc),
            "assemble": lambda: assemble_bytes(tiny, policy, _fresh_tokenizer()),
        },
        max(2, rounds - 2),
    )
    f, a = median(times["floor"]), median(times["assemble"])
    rows.append(at_most(
        "3 growth", f"time per item, {n:,} items of ~400 B", f"{a / n * 1e6:.0f} us/item (floor {f / n * 1e6:.0f} us/item)", a / f, 2.5, times=times,
    ))

    rows.append(_peak_memory(large))
    return rows


_MEMORY_CHILD = '''
import json, sys
from ctxeng.engine import assemble, parse_policy, parse_request
from ctxeng.engine.tokens import TiktokenTokenizer
from bench import workload
policy = parse_policy(workload.make_policy())
tok = TiktokenTokenizer()
tok.count("warm up")
def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
import gc
gc.collect()
with open("/proc/self/clear_refs", "w") as f:  # reset the high-water mark left by imports
    f.write("5")
base = status("VmRSS")
data = open(sys.argv[1], "rb").read()
result = assemble(parse_request(data), policy, tokenizer=tok)
print(json.dumps({"baseline": base, "peak": status("VmHWM"), "size": len(data), "status": result.status}))
'''


def _peak_memory(data: bytes) -> Row:
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory(prefix="ctxeng-bench-") as tmp:
        path = Path(tmp) / "request.json"
        path.write_bytes(data)
        out = subprocess.run([python(), "-c", _MEMORY_CHILD, str(path)], cwd=ROOT, env=python_env(), capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        return Row("3 growth", "peak memory, 8 MB request", f"not run: {out.stderr[-300:]}")
    r = json.loads(out.stdout.strip().splitlines()[-1])
    above = r["peak"] - r["baseline"]
    ratio = above / r["size"]
    return at_most(
        "3 growth", "peak memory above baseline, 8 MB request", f"{above / 1e6:.0f} MB for a {r['size'] / 1e6:.1f} MB request", ratio, 6.0, **r,
    )


if __name__ == "__main__":
    for row in run(quick="--quick" in sys.argv):
        print(row)
