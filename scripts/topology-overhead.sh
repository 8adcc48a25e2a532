#!/usr/bin/env bash
# Orchestration overhead of a prefill/decode topology (docs/performance.md).
#
# 1. The parts' own start-up, without orchestrate: `orchestrate mock-server` from spawn to its
#    first `/health` 200, and sglang-router from spawn to `GET /workers` reporting 2 prefill +
#    2 decode (four mocks already up); polled every 5 ms, median of RUNS.
# 2. `orchestrate run` of a 2P2D task (prefill x2, decode x2 mocks, sglang-router as the entry
#    role, 4 requests), RUNS times: the deployment's `time_to_ready_s` (launch to topology
#    ready: counts reported + one completion through the router) and the run's start to its
#    first point's start.
# Overhead = time to ready - (mock start-up [prefill] + mock start-up [decode] + router
# start-up): the roles start one after the other, so their own start-ups add up. The router's
# own start-up (a Python import) varies by more than the overhead on a shared machine, so the
# worker roles' part (each role's ready time - the mock's start-up) is printed too.
#
# Usage: scripts/topology-overhead.sh   (BIN=path/to/orchestrate, default target/debug;
# ORCHESTRATE_ROUTERS_VENV as for the tests; RUNS=5)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN="${BIN:-${CARGO_TARGET_DIR:-target}/debug/orchestrate}"
VENV="${ORCHESTRATE_ROUTERS_VENV:-$HOME/.cache/orchestrate/routers-venv}"
RUNS="${RUNS:-5}"
[ -x "$BIN" ] || { echo "no $BIN (cargo build first, or BIN=...)" >&2; exit 2; }
[ -x "$VENV/bin/python" ] || { echo "no routers venv at $VENV" >&2; exit 2; }
BIN="$(realpath "$BIN")"
exec python3 - "$BIN" "$VENV" "$RUNS" "$(pwd)" <<'EOF'
import json, os, signal, socket, statistics, subprocess, sys, tempfile, time, urllib.request

BIN, VENV, RUNS, REPO = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]

def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p

def get(url):
    try:
        with urllib.request.urlopen(url, timeout=1) as r:
            return r.status, r.read()
    except Exception:
        return None, b""

def until(ok, limit=60):
    t0 = time.monotonic()
    while time.monotonic() - t0 < limit:
        if ok():
            return
        time.sleep(0.005)
    raise SystemExit("timed out")

def mock(port):
    return subprocess.Popen([BIN, "mock-server", "--port", str(port), "--model", "m",
                             "--preset", "fixed", "--itl-ms", "10"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

def stop(p):
    p.send_signal(signal.SIGTERM)
    try:
        p.wait(10)
    except subprocess.TimeoutExpired:
        p.kill(); p.wait()

def mock_startup():
    port = free_port(); t0 = time.monotonic(); p = mock(port)
    until(lambda: get(f"http://127.0.0.1:{port}/health")[0] == 200)
    dt = time.monotonic() - t0; stop(p); return dt

def router_startup(workers):
    port = free_port()
    args = [f"{VENV}/bin/python", "-m", "sglang_router.launch_router", "--pd-disaggregation"]
    for w in workers[:2]:
        args += ["--prefill", f"http://127.0.0.1:{w}", "8998"]
    for w in workers[2:]:
        args += ["--decode", f"http://127.0.0.1:{w}"]
    args += ["--port", str(port), "--prometheus-port", str(free_port())]
    t0 = time.monotonic()
    p = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    def ready():
        status, body = get(f"http://127.0.0.1:{port}/workers")
        if status != 200:
            return False
        stats = json.loads(body).get("stats", {})
        return stats.get("prefill_count") == 2 and stats.get("decode_count") == 2
    until(ready); dt = time.monotonic() - t0; stop(p); return dt

TASK = """name: pd-overhead
backend: sglang
model: m
roles:
  prefill:
    replicas: 2
    port: auto
    commands: ["exec {{{{ orchestrate }}}} mock-server --port {{{{ port }}}} --model m --preset fixed --itl-ms 10"]
  decode:
    replicas: 2
    port: auto
    commands: ["exec {{{{ orchestrate }}}} mock-server --port {{{{ port }}}} --model m --preset fixed --itl-ms 10"]
  router:
    port: auto
    depends_on: [prefill, decode]
    commands: ['exec {venv}/bin/python -m sglang_router.launch_router --pd-disaggregation{{% for u in roles.prefill.urls %}} --prefill {{{{ u }}}} 8998{{% endfor %}}{{% for u in roles.decode.urls %}} --decode {{{{ u }}}}{{% endfor %}} --port {{{{ port }}}} --prometheus-port {prom}']
entry_role: router
benchmark:
  dataset: {{kind: random, input_len: 16, output_len: 8}}
  tokenizer: {repo}/data/tokenizer/tokenizer.json
  num_prompts: 4
"""

def orchestrated():
    with tempfile.TemporaryDirectory() as d:
        task = os.path.join(d, "pd.yaml")
        with open(task, "w") as f:
            f.write(TASK.format(venv=VENV, prom=free_port(), repo=REPO))
        env = dict(os.environ, NO_COLOR="1", ORCHESTRATE_STATE_DIR=os.path.join(d, "state"))
        subprocess.run([BIN, "run", "--no-report", "-q", "--results", os.path.join(d, "r"), task],
                       check=True, env=env, stdout=subprocess.DEVNULL, cwd=d)
        base = os.path.join(d, "r", "pd-overhead")
        m = json.load(open(os.path.join(base, os.readlink(os.path.join(base, "latest")), "manifest.json")))
        from datetime import datetime
        at = lambda s: datetime.fromisoformat(s.replace("Z", "+00:00"))
        dep = m["deployments"][0]
        inst = dep["instances"]
        return (dep["time_to_ready_s"],
                (at(m["points"][0]["started_at"]) - at(m["started_at"])).total_seconds(),
                max(inst[k]["ready_after_s"] for k in ("prefill-0", "prefill-1")),
                max(inst[k]["ready_after_s"] for k in ("decode-0", "decode-1")),
                inst["router-0"]["ready_after_s"],
                inst["router-0"]["topology"][0]["checked_s"])

med = statistics.median
mocks = [mock_startup() for _ in range(RUNS)]
workers = [free_port() for _ in range(4)]
procs = [mock(p) for p in workers]
try:
    for p in workers:
        until(lambda: get(f"http://127.0.0.1:{p}/health")[0] == 200)
    routers = [router_startup(workers) for _ in range(RUNS)]
finally:
    for p in procs:
        stop(p)
runs = [orchestrated() for _ in range(RUNS)]
col = lambda i: med(r[i] for r in runs)
own = 2 * med(mocks) + med(routers)
print(f"mock-server start-up (spawn -> /health 200), median of {RUNS}: {med(mocks)*1000:.0f} ms")
print(f"sglang-router start-up (spawn -> /workers 2+2), median of {RUNS}: {med(routers)*1000:.0f} ms")
print(f"orchestrate run, median of {RUNS}: time_to_ready {col(0)*1000:.0f} ms "
      f"(prefill ready at {col(2)*1000:.0f}, decode at {col(3)*1000:.0f}, router at {col(4)*1000:.0f}, "
      f"topology check {col(5)*1000:.0f}); run start -> first point {col(1)*1000:.0f} ms")
print(f"sglang-router start-up range: {min(routers)*1000:.0f}..{max(routers)*1000:.0f} ms")
print(f"overhead = time_to_ready - (2 x mock + router start-up) = {(col(0) - own)*1000:.0f} ms")
worker_roles = (col(2) - med(mocks)) + (col(3) - col(2) - med(mocks))
print(f"overhead of the two worker roles (ready - mock start-up, each): {worker_roles*1000:.0f} ms; "
      f"topology check: {col(5)*1000:.0f} ms; run start -> deployment start: {(col(1) - col(0))*1000:.0f} ms")
EOF
