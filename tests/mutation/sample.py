"""Draw a reproducible random sample of the engine's mutants, and report how a run judged it.

A full `make mutate` takes hours, so the score in docs/mutation.md is estimated from uniform random
samples. The population is every mutant mutmut generated for `ctxeng/engine/` (the names in
`.mutate/engine/mutants/ctxeng/engine/*.py.meta`, written by `make mutate`, files in name order, each file's names sorted), minus the names
of earlier samples that tests were written against (`--exclude`, the files these commands wrote),
so a sample drawn here was never looked at before it is judged.

    python -m tests.mutation.sample pick --seed 1130 --size 150 --exclude a.txt > sample.txt
    python -m tests.mutation.targets run engine $(cat sample.txt)
    python -m tests.mutation.sample report sample.txt

`report` counts killed (or timed out), survived and not reached among the sample, per module too,
with a 95% Wilson interval on the killed share, and lists the survivors. A mutant no test reaches is
a survivor (since 2026-12-07; before, it left the denominator): the suite cannot notice it.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
from collections import Counter
from pathlib import Path

META = Path(".mutate/engine/mutants/ctxeng/engine")
# The other targets of tests/mutation/targets.py draw their samples with its `run --sample`.
NOTICED = {"killed", "timeout"}


def population() -> list[str]:
    names: list[str] = []
    for meta in sorted(META.glob("*.py.meta")):
        names.extend(sorted(json.loads(meta.read_text())["exit_code_by_key"]))
    return names


def exit_codes() -> dict[str, int | None]:
    codes: dict[str, int | None] = {}
    for meta in META.glob("*.py.meta"):
        codes.update(json.loads(meta.read_text())["exit_code_by_key"])
    return codes


def status(code: int | None) -> str:
    from mutmut.stats import status_by_exit_code

    return status_by_exit_code[code]


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    if n == 0:
        return 0.0, 0.0
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return centre - half, centre + half


def pick(seed: int, size: int, exclude: list[Path]) -> list[str]:
    seen = {line.strip() for path in exclude for line in path.read_text().splitlines() if line.strip()}
    names = [n for n in population() if n not in seen]
    return random.Random(seed).sample(names, size)


def module(name: str) -> str:
    return name.split(".")[2]


def report(sample: list[str]) -> None:
    codes = exit_codes()
    by = {n: status(codes.get(n)) for n in sample}
    counts = Counter(by.values())
    judged = [n for n, s in by.items() if s not in ("not checked", "skipped")]
    noticed = sum(1 for n in judged if by[n] in NOTICED)
    unreached = sum(1 for n in judged if by[n] == "no tests")
    lo, hi = wilson(noticed, len(judged))
    print(f"sample of {len(sample)}: {dict(counts)}")
    print(f"killed {noticed}/{len(judged)} judged ({unreached} reached by no test, counted as survivors) = "
          f"{100 * noticed / max(len(judged), 1):.1f}% (95% interval {100 * lo:.1f}-{100 * hi:.1f}%)")
    per: dict[str, Counter] = {}
    for n, s in by.items():
        per.setdefault(module(n), Counter())[s] += 1
    for m in sorted(per):
        c = per[m]
        print(f"  {m}: killed {c['killed'] + c['timeout']}, survived {c['survived']}, other {sum(c.values()) - c['killed'] - c['timeout'] - c['survived']}")
    for n in sorted(n for n, s in by.items() if s not in NOTICED):
        print(f"{by[n]}: {n}")


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("pick")
    a.add_argument("--seed", type=int, required=True)
    a.add_argument("--size", type=int, required=True)
    a.add_argument("--exclude", type=Path, nargs="*", default=[])
    b = sub.add_parser("report")
    b.add_argument("sample", type=Path)
    args = p.parse_args(argv)
    if args.cmd == "pick":
        print("\n".join(pick(args.seed, args.size, args.exclude)))
    else:
        report([line.strip() for line in args.sample.read_text().splitlines() if line.strip()])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
