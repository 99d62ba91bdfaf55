#!/usr/bin/env bash
# `make demo`: a one-node elastic run of examples/train.py under elasticjob-agent (--standalone:
# an embedded etcd on loopback), with 2 gloo workers. Halfway through, one worker is killed to show
# a restart from the checkpoint. Prints a short summary; exits non-zero if the run failed.
set -euo pipefail
cd "$(dirname "$0")/.."

work="$(mktemp -d -t elasticjob-demo-XXXXXX)"
trap 'rm -rf "$work"' EXIT
port="$(.venv/bin/python -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
log="$work/agent.log"

echo "demo: elasticjob-agent --standalone --nproc-per-node 2 examples/train.py (log: $log)"
.venv/bin/elasticjob-agent --standalone --nproc-per-node 2 --max-restarts 2 \
  --health-addr 127.0.0.1 --health-port "$port" --monitor-interval 0.2 \
  examples/train.py --steps 60 --step-sleep 0.1 --checkpoint-every 10 \
  --checkpoint-dir "$work/ckpt" >"$log" 2>&1 &
agent=$!

# Kill one worker once training has written its first checkpoint.
status() { curl -fsS "http://127.0.0.1:$port/status" 2>/dev/null || true; }
for _ in $(seq 1 600); do
  [[ -f "$work/ckpt/step-10.pt" ]] && break
  kill -0 "$agent" 2>/dev/null || break
  sleep 0.5
done
victim="$(status | .venv/bin/python -c 'import json,sys; d=json.load(sys.stdin); print(d["workers"][1]["pid"])' 2>/dev/null || true)"
if [[ -n "$victim" ]]; then
  echo "demo: killing worker pid $victim (local rank 1) to show a restart"
  kill -9 "$victim" 2>/dev/null || true
fi

code=0
wait "$agent" || code=$?
echo
echo "demo summary"
echo "  agent exit code:   $code ($( .venv/bin/python -c "from elasticjob_agent.protocol.exit_codes import ExitCode; print(ExitCode($code).reason)" 2>/dev/null || echo unknown))"
echo "  group restarts:    $(grep -c 'event=group_stopped' "$log" || true)"
echo "  resumed from:      $(grep -o 'resumed from step=[0-9]*' "$log" | head -1 || echo none)"
echo "  final:             $(grep -o 'done step=[0-9]* rank=0 loss=[0-9.]*' "$log" | tail -1 || echo 'not finished')"
if [[ $code -ne 0 ]]; then
  echo "demo: the run failed; last lines of the log:" >&2
  tail -30 "$log" >&2
fi
exit "$code"
