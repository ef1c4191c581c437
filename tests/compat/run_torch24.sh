#!/usr/bin/env bash
# The truth harness on torch 2.4.1, a torch that does not name its DataLoader workers
# (every thread is pt_main_thread): discovery must still find them. Run by hand, not in CI.
#
#   tests/compat/run_torch24.sh [bench_truth.py options, e.g. --cell 'spawn-*' --out /tmp/compat]
#
# Makes /work/venv-torch24 (outside the repo) once: torch 2.4.1 from the package index (it
# pulls CUDA libraries, some GB; it runs on CPU) and this project. The JOB runs with that
# venv's python; dltop runs from it too unless DLTOP_PYTHON names another one (e.g. the
# project's .venv/bin/python, to watch an old-torch job with a new-torch dltop).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
VENV=${VENV_TORCH24:-/work/venv-torch24}
if ! "$VENV/bin/python" -c 'import torch, sys; sys.exit(torch.__version__.split("+")[0] != "2.4.1")' 2>/dev/null; then
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q torch==2.4.1
    "$VENV/bin/pip" install -q -e "$ROOT"
fi
if [ -n "${SETUP_ONLY:-}" ]; then exit 0; fi
cd "$ROOT"
exec "$VENV/bin/python" benchmarks/bench_truth.py --subset compat \
    --job-python "$VENV/bin/python" --dltop-python "${DLTOP_PYTHON:-$VENV/bin/python}" "$@"
