"""Print the mutation score of a target's last whole `mutmut run` (what `make mutate` ends with).

    python -m tests.mutation.score content      # default: engine

Reads `.mutate/<target>/mutants/mutmut-cicd-stats.json` (written by `mutmut export-cicd-stats`
in the target's workspace, see tests/mutation/targets.py). The score is the
share of mutants a test noticed (killed, or timed out) among all the target's mutants but those
mutmut skipped: a mutant no test reaches is a survivor (since 2026-12-07; before, it left the
denominator), since the suite cannot notice it.
Equivalent survivors, judged by hand, are listed in docs/mutation.md.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    target = argv[0] if argv else "engine"
    path = Path(".mutate") / target / "mutants" / "mutmut-cicd-stats.json"
    if not path.exists():
        print(f"no mutation results for {target}: run `make mutate TARGET={target}`")
        return 1
    s = json.loads(path.read_text())
    noticed = s["killed"] + s["timeout"]
    judged = s["total"] - s["skipped"]
    score = 100.0 * noticed / judged if judged else 0.0
    print(
        f"mutation score of {target}: {noticed}/{judged} = {score:.1f}% killed "
        f"(survived {s['survived']} and reached by no test {s['no_tests']}, both survivors; suspicious {s['suspicious']}, "
        f"skipped {s['skipped']}, of {s['total']} mutants)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
