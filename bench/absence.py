"""Statements of absence judged by meaning (issue 50, item 2): the classifier
`ctxeng.engine.findings.is_absence` against hand labels.

`python -m bench.absence` (section 11 of `make bench`)

The labelled set is tests/data/absence_sentences.json: sentences written in the style of agent
summaries and checkpoints, each labelled `absence` (it asserts that something is not there: not
found, does not exist, has no, lacks, is absent from, does not support ...) or `not_absence` (hard
negatives: `no-op`, `not only`, `without errors`, `None is returned`, directives, questions,
conditions, run outcomes, quoted error lines), with the reason. `development` sentences were read
while the rules were written; `held_out` ones were written afterwards and measured once, the rules
unchanged: their figures are the ones to quote. Precision: of the sentences judged absence, how
many are; recall: of the absence sentences, how many are judged so. Every miss and false alarm is
printed with its rationale. Exits 0; the thresholds are asserted by
tests/engine/test_absence_classifier.py.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ctxeng.engine.findings import is_absence

SENTENCES = Path(__file__).resolve().parent.parent / "tests" / "data" / "absence_sentences.json"


def load() -> list[dict]:
    return json.loads(SENTENCES.read_text(encoding="utf-8"))["sentences"]


def score(rows: list[dict]) -> dict:
    """Counts, precision, recall, and each miss / false alarm (sentence, rationale)."""
    judged = [(r, is_absence(r["sentence"])) for r in rows]
    tp = sum(1 for r, got in judged if got and r["label"] == "absence")
    fp = [r for r, got in judged if got and r["label"] != "absence"]
    fn = [r for r, got in judged if not got and r["label"] == "absence"]
    return {
        "sentences": len(rows), "absence": tp + len(fn), "true_positives": tp,
        "precision": tp / (tp + len(fp)) if tp + len(fp) else 1.0,
        "recall": tp / (tp + len(fn)) if tp + len(fn) else 1.0,
        "false_alarms": [(r["sentence"], r["rationale"]) for r in fp],
        "misses": [(r["sentence"], r["rationale"]) for r in fn],
    }


def by_split() -> dict[str, dict]:
    rows = load()
    return {split: score([r for r in rows if r["split"] == split]) for split in ("held_out", "development")} | {"all": score(rows)}


def run(*, quick: bool = False) -> list:
    """Section 11 of `make bench`: precision and recall per split, as rows of the results table."""
    from .timing import Row

    out = []
    for split, s in by_split().items():
        out.append(Row("11 absence", f"{split}: precision, recall ({s['sentences']} sentences, {s['absence']} absence)",
                       f"{s['precision']:.2f}, {s['recall']:.2f}",
                       note=f"{len(s['false_alarms'])} false alarms, {len(s['misses'])} misses",
                       data={"false_alarms": s["false_alarms"], "misses": s["misses"]}))
    return out


def main() -> int:
    print("| split | sentences | absence | precision | recall | false alarms | misses |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    results = by_split()
    for split, s in results.items():
        print(f"| {split} | {s['sentences']} | {s['absence']} | {s['precision']:.3f} | {s['recall']:.3f} | "
              f"{len(s['false_alarms'])} | {len(s['misses'])} |")
    for split in ("held_out", "development"):
        for what in ("false_alarms", "misses"):
            for sentence, why in results[split][what]:
                print(f"{split} {'false alarm' if what == 'false_alarms' else 'miss'}: {sentence!r} ({why})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
