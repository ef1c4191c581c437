#!/usr/bin/env bash
# dltop on a real GPU: run by hand on a machine with an NVIDIA GPU, never in CI (about 3 minutes).
#
#   bash tests/gpu/check.sh          # from the repo root; results also go to $OUT when it is set
#
# Installs py-spy, austin-dist (and any other wheel) from .whl/ when that folder exists, puts the repo root on
# PYTHONPATH (dltop is not installed), prints nvidia-smi's and torch's view of the GPUs, starts
# tests/jobs/cuda_job.py (a tiny model on CUDA, 4 workers, pin_memory=True, persistent workers) in
# a process group of its own, runs `dltop snapshot` on it (JSON and text) and checks what it says
# about the GPU, stops the job, then runs a short `dltop bench`. Every step runs under `timeout`,
# cut to what is left of CHECK_BUDGET_S (240 s) from the start; a failed check prints FAIL and the
# script goes on (it exits 0: read the summary). The job's process group is killed on exit.
# Without CUDA the job falls back to the CPU: the GPU checks then FAIL, nothing else breaks.
set -u

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT" || exit 2
WORK=$(mktemp -d /tmp/dltop-gpu-check.XXXXXX)
DEST=${OUT:-$WORK}
mkdir -p "$DEST"
CHECKS=$WORK/checks.txt
: >"$CHECKS"
JOB= PGID=
STARTED=$SECONDS
DEADLINE=$((SECONDS + ${CHECK_BUDGET_S:-240}))  # every step's timeout is cut to what is left of this

step() { printf '\n=== %s (t=%ds) ===\n' "$*" "$((SECONDS - STARTED))"; }
limit() {  # limit SECONDS COMMAND...: timeout at SECONDS or at the deadline, whichever is first (5 s at least)
    local s=$1 left=$((DEADLINE - SECONDS))
    shift
    ((left < 5)) && left=5
    ((s > left)) && s=$left
    timeout -k 5 "$s" "$@"
}
check() {  # check NAME CONDITION-EXIT-CODE
    if [ "$2" -eq 0 ]; then echo "PASS $1"; else echo "FAIL $1"; fi | tee -a "$CHECKS"
}

stop_job() {
    [ -n "$JOB" ] || return 0
    kill -TERM -- "-$PGID" 2>/dev/null
    for _ in 1 2 3 4 5 6 7 8 9 10; do
        pgrep -g "$PGID" >/dev/null 2>&1 || break
        sleep 0.5
    done
    kill -KILL -- "-$PGID" 2>/dev/null
    wait "$JOB" 2>/dev/null
    JOB=
}
trap stop_job EXIT
trap 'exit 130' INT TERM

step "setup"
if [ -d .whl ] && compgen -G '.whl/*.whl' >/dev/null; then
    echo "installing from .whl/: $(cd .whl && echo *.whl)"
    limit 60 python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$ROOT
fi
case ":${PYTHONPATH:-}:" in
*":$ROOT:"*) ;;
*) export PYTHONPATH=$ROOT${PYTHONPATH:+:$PYTHONPATH} ;;
esac
[ -d /tmp/site/bin ] && export PATH=/tmp/site/bin:$PATH
echo "PYTHONPATH=$PYTHONPATH"
echo "python3: $(command -v python3) ($(python3 --version 2>&1))"
limit 30 python3 -m dltop --version
check "python3 -m dltop --version runs (with PYTHONPATH, dltop not installed)" $?
PY_SPY=$(command -v py-spy || true)
if [ -n "$PY_SPY" ] && limit 10 "$PY_SPY" --version; then
    STACKS=1 NO_STACKS=
    echo "py-spy: $PY_SPY (stacks on)"
else
    STACKS=0 NO_STACKS=--no-stacks
    echo "py-spy: not found (snapshots with --no-stacks)"
fi
AUSTIN=$(command -v austin || true)
if [ -n "$AUSTIN" ] && limit 10 "$AUSTIN" -V; then
    echo "austin: $AUSTIN (streams the trainer's samples)"
    check "austin runs on this machine" 0
else
    AUSTIN=
    echo "austin: not found or does not run here (py-spy windows sample the trainer)"
fi
limit 60 python3 - <<'EOF'
import importlib

for name in ["torch", "pynvml", "psutil", "prometheus_client", "msgpack", "rich", "textual", "zstandard"]:
    try:
        module = importlib.import_module(name)
        print(f"  {name}: {getattr(module, '__version__', 'yes')}")
    except Exception as err:  # noqa: BLE001 - any failure to import is what we want to see
        print(f"  {name}: NO ({type(err).__name__}: {err})")
EOF

step "nvidia-smi"
if command -v nvidia-smi >/dev/null; then
    limit 30 nvidia-smi --format=csv,noheader --query-gpu=index,name,driver_version,memory.used,memory.total,\
utilization.gpu,power.draw,temperature.gpu,pci.bus_id,uuid
else
    echo "nvidia-smi: not on PATH"
fi

step "torch.cuda"
limit 60 python3 - <<'EOF'
import sys

import torch

print(f"torch {torch.__version__}, built for CUDA {torch.version.cuda}, cuda available: {torch.cuda.is_available()}")
for i in range(torch.cuda.device_count()):
    p = torch.cuda.get_device_properties(i)
    print(f"  cuda:{i} {p.name}, capability {p.major}.{p.minor}, {p.total_memory / 2**30:.1f} GiB,"
          f" {p.multi_processor_count} SMs")
sys.exit(0 if torch.cuda.is_available() else 1)
EOF
check "torch sees CUDA" $?

step "start tests/jobs/cuda_job.py"
READY=$WORK/ready.json
JOB_ARGS=(tests/jobs/cuda_job.py --workers 4 --sample-ms 3 --max-s 240 --ready "$READY")
setsid python3 "${JOB_ARGS[@]}" >"$DEST/cuda_job.log" 2>&1 &
JOB=$!
PGID=$(ps -o pgid= -p "$JOB" | tr -d ' ')  # setsid: a process group of its own
echo "job pid $JOB, process group $PGID"
JOB_T0=$SECONDS
WAIT_UNTIL=$((SECONDS + 90))  # up to 90 s for CUDA, the workers and the first steps
while ((SECONDS < WAIT_UNTIL && SECONDS < DEADLINE)); do
    [ -s "$READY" ] && break
    kill -0 "$JOB" 2>/dev/null || break
    sleep 0.5
done
if [ -s "$READY" ]; then
    cat "$READY"
    echo
    TRAINER=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["pid"])' "$READY")
    DEVICE=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["device"])' "$READY")
else
    echo "the job is not training after $((SECONDS - JOB_T0)) s (or it died); its log:"
    TRAINER=$JOB DEVICE=none
fi
tail -n 20 "$DEST/cuda_job.log"
check "the job trains on cuda (it says: $DEVICE)" "$([ "$DEVICE" = cuda ] && echo 0 || echo 1)"
sleep 2  # a few batches more: the pin-memory thread and every worker are up
echo "job processes:"
ps -e -o pid,ppid,pgid,nlwp,pcpu,rss,args | awk -v g="$PGID" 'NR == 1 || $3 == g' | cut -c1-150

step "dltop snapshot --pid $TRAINER --duration 8 --json $NO_STACKS"
limit 45 python3 -m dltop snapshot --pid "$TRAINER" --duration 8 --json $NO_STACKS \
    >"$DEST/snapshot.json" 2>"$DEST/snapshot.stderr"
rc=$?
echo "exit code $rc, $(wc -c <"$DEST/snapshot.json") bytes of JSON"
cat "$DEST/snapshot.stderr"
check "dltop snapshot --json exits 0 (exit $rc; 124: timed out)" "$rc"
limit 30 python3 - "$DEST/snapshot.json" "$TRAINER" "$STACKS" "$AUSTIN" <<'EOF' | tee -a "$CHECKS"
import json
import sys

path, trainer, stacks, austin = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1", sys.argv[4]


def check(name, ok):
    print(f"{'PASS' if ok else 'FAIL'} {name}")


def gib(n):
    return f"{n / 2**30:.2f} GiB" if isinstance(n, (int, float)) else "null"


def mb(n):
    return f"{n / 1e6:.1f} MB/s" if isinstance(n, (int, float)) else "null"


try:
    doc = json.load(open(path))
except (OSError, ValueError) as err:
    check(f"the snapshot is JSON ({err})", False)
    sys.exit(0)
print(f"schema {doc.get('schema')}, window {doc.get('window_s')} s")
job = doc.get("job") or {}
print(f"job: pid {job.get('pid')}, state {job.get('state')}, start method {job.get('start_method')}")
roles = {}
for proc in doc.get("processes", []):
    roles.setdefault(proc.get("role"), []).append(proc)
print("processes: " + ", ".join(f"{len(v)} {k}" for k, v in roles.items()))
for proc in roles.get("trainer", []):
    print(f"  trainer {proc['pid']}: cpu {proc.get('cpu_percent')}%, activity {proc.get('activity')},"
          f" unavailable {proc.get('unavailable')}")
print(f"gpu_status: {doc.get('gpu_status')!r}")
gpus = doc.get("gpus") or []
for gpu in gpus:
    print(f"gpu {gpu.get('index')}: {gpu.get('name')}")
    print(f"  util {gpu.get('util_percent')}%, memory {gib(gpu.get('mem_used_bytes'))} of {gib(gpu.get('mem_total_bytes'))},"
          f" power {gpu.get('power_w')} W, temperature {gpu.get('temperature_c')} C")
    print(f"  pcie rx {mb(gpu.get('pcie_rx_bytes_per_s'))}, tx {mb(gpu.get('pcie_tx_bytes_per_s'))}")
    print(f"  uuid {gpu.get('uuid')}, pci_bus_id {gpu.get('pci_bus_id')}")
    for p in gpu.get("processes") or []:
        print(f"  process {p.get('pid')}: {gib(p.get('used_memory_bytes'))}, sm util {p.get('sm_util_percent')}")
    other = sorted(set(gpu) - {"index", "name", "util_percent", "mem_used_bytes", "mem_total_bytes", "power_w",
                                "temperature_c", "pcie_rx_bytes_per_s", "pcie_tx_bytes_per_s", "uuid",
                                "pci_bus_id", "processes"})
    if other:
        print("  other fields: " + ", ".join(f"{k}={gpu[k]}" for k in other))
for loader in doc.get("loaders") or []:
    print(f"loader: {loader}")
check(f"gpu_status is 'ok' (it is {doc.get('gpu_status')!r})", doc.get("gpu_status") == "ok")
check(f"at least one GPU ({len(gpus)})", len(gpus) >= 1)
pids = {p.get("pid") for gpu in gpus for p in gpu.get("processes") or []}
check(f"the trainer {trainer} is among the GPUs' processes {sorted(pids, key=str)}", trainer in pids)
utils = [gpu.get("util_percent") for gpu in gpus]
check(f"util_percent is a number on every GPU {utils}",
      bool(utils) and all(isinstance(u, (int, float)) and not isinstance(u, bool) for u in utils))
check(f"job.pid is the trainer ({job.get('pid')})", job.get("pid") == trainer)
workers = [p for p in roles.get("worker", []) if p.get("trainer_pid") == trainer]
check(f"4 workers of the trainer found ({len(workers)})", len(workers) == 4)
loaders = [ld for ld in doc.get("loaders") or [] if ld.get("trainer_pid") == trainer]
pin = [ld.get("pin_memory") for ld in loaders]
if stacks:
    check(f"the loader shows pin_memory true ({pin})", bool(pin) and all(p is True for p in pin))
    times = [ld.get("trainer_time") or {} for ld in loaders]
    samples = [t.get("samples") for t in times]
    # Austin: ~7 a second over the 8 s (3 at least), read every tick; py-spy windows: a few a second
    least = 24 if austin else 8
    check(f"the trainer's time split from {samples} samples ({'austin' if austin else 'py-spy'}; >= {least})",
          bool(samples) and all((n or 0) >= least for n in samples))
else:
    print(f"INFO pin_memory {pin} (stacks off: not checked)")
findings = doc.get("findings") or []
print(f"findings ({len(findings)}):")
for f in findings:
    print(f"  [{f.get('severity')}] {f.get('id')}: {f.get('title')}")
    if f.get("suggestion"):
        print(f"      suggestion: {f['suggestion']}")
for p in doc.get("pending") or []:
    print(f"  not judged yet: {p}")
ids = {f.get("id") for f in findings}
if stacks:
    check("stacks were readable (no stacks-unavailable finding)", "stacks-unavailable" not in ids)
EOF

step "dltop snapshot --pid $TRAINER --duration 5 (text)"
limit 30 python3 -m dltop snapshot --pid "$TRAINER" --duration 5 $NO_STACKS \
    >"$DEST/snapshot.txt" 2>&1
rc=$?
cat "$DEST/snapshot.txt"
check "dltop snapshot (text) exits 0 (exit $rc)" "$rc"

step "dltop jobs"
limit 20 python3 -m dltop jobs 2>&1
step "stop the job"
stop_job
tail -n 5 "$DEST/cuda_job.log"
for _ in 1 2 3 4 5 6 7 8 9 10; do  # killed processes may linger a moment before init reaps them
    left=$(pgrep -g "$PGID" | tr '\n' ' ')
    [ -z "$left" ] && break
    sleep 0.5
done
check "nothing of the job is left (${left:-none})" "$([ -z "$left" ] && echo 0 || echo 1)"

BUDGET=$((DEADLINE - SECONDS - 30))  # 40 s, less when the steps before took long
((BUDGET > 40)) && BUDGET=40
((BUDGET < 10)) && BUDGET=10
step "dltop bench (budget $BUDGET s, timeout 90 s)"
limit 90 python3 -m dltop bench --budget-s "$BUDGET" --max-workers 8 --batch-size 32 --warmup-s 0.5 --chunk-s 0.5 \
    --json "$DEST/bench.json" 2>&1
rc=$?
echo
check "dltop bench exits 0 (exit $rc; 124: timed out)" "$rc"
if [ -s "$DEST/bench.json" ]; then
    kind=$(limit 30 python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["device"]["kind"])' \
        "$DEST/bench.json")
    check "the bench ran on cuda (it says: $kind)" "$([ "$kind" = cuda ] && echo 0 || echo 1)"
fi

step "summary"
cp "$CHECKS" "$DEST/checks.txt" 2>/dev/null
echo "$(grep -c '^PASS' "$CHECKS") passed, $(grep -c '^FAIL' "$CHECKS") failed, in $((SECONDS - STARTED)) s;" \
    "files in $DEST"
grep '^FAIL' "$CHECKS"
exit 0
