"""Recording's cost to the agent (issue 49): a 200-step local run with `record=` off and on.

    python -m bench.recording [--steps 200] [--rounds 3]

Per step, this process's CPU time (`time.process_time`: the agent's thread and the recorder's
upload thread together) and wall time, over the loop and the final flush; the ratio on / off is
the figure the issue's goal (≤ 1.10×) is about. The service is a stand-in in another process that
answers `POST /api/v1/recorded-steps/` as the service does (`stored` per key) without storing or
verifying, so its own CPU is not counted here; what one web worker accepts and one worker verifies
per second is not measured by this script.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

from ctxeng import sdk

STAND_IN = r"""
import json, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
class H(BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        raw = json.dumps({"results": [{"idempotency_key": s["idempotency_key"], "outcome": "stored"} for s in body["steps"]],
                          "dropped": body["dropped"]}).encode()
        self.send_response(200); self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw))); self.end_headers(); self.wfile.write(raw)
server = ThreadingHTTPServer(("127.0.0.1", 0), H)
print(server.server_address[1], flush=True)
server.serve_forever()
"""

PRINCIPAL = {"id": "agent", "tenant": "tenant-x", "project": "bench"}


def run(steps: int, recorder: sdk.Recorder | None) -> tuple[float, float]:
    """(CPU s, wall s) of one run of `steps` steps, the flush included."""
    history = [{"role": "system", "content": "You are a careful research agent."}, {"role": "user", "content": "Begin."}]
    session = sdk.Session("chat-agent", principal=PRINCIPAL, record=recorder)
    cpu, wall = time.process_time(), time.perf_counter()
    for n in range(steps):
        session.step(history)
        history += [{"role": "assistant", "content": f"Step {n}: I read the next file and noted what it says. " * 4},
                    {"role": "user", "content": f"Continue with part {n + 1}."}]
    session.close(timeout=120)
    return time.process_time() - cpu, time.perf_counter() - wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    stand_in = subprocess.Popen([sys.executable, "-c", STAND_IN], stdout=subprocess.PIPE, text=True)
    try:
        url = f"http://127.0.0.1:{stand_in.stdout.readline().strip()}"
        run(20, None)  # warm: the tokenizer, the starter policy
        results = {"off": [], "on": []}
        for _ in range(args.rounds):
            results["off"].append(run(args.steps, None))
            recorder = sdk.Recorder(url, "bench")
            results["on"].append(run(args.steps, recorder))
            status = recorder.close()
            assert status["sent"] == args.steps and status["pending"] == 0, status
        best = {mode: (min(c for c, _ in rows), min(w for _, w in rows)) for mode, rows in results.items()}
        print(json.dumps({
            "steps": args.steps, "rounds": args.rounds,
            "cpu_ms_per_step": {m: round(1000 * c / args.steps, 3) for m, (c, _) in best.items()},
            "wall_ms_per_step": {m: round(1000 * w / args.steps, 3) for m, (_, w) in best.items()},
            "cpu_ratio_on_off": round(best["on"][0] / best["off"][0], 3),
            "wall_ratio_on_off": round(best["on"][1] / best["off"][1], 3),
        }, indent=2))
    finally:
        stand_in.terminate()


if __name__ == "__main__":
    main()
