#!/usr/bin/env bash
# make bench: hot-path benchmarks side by side with a raw-ASGI hello-world (see docs/benchmarks.md).
# Servers are pinned to CPU 0, every load generator to CPU 1. Loopback only; ~4 minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}

if [ "${BENCH_ONLY:-}" != "gate" ] && ! command -v wrk >/dev/null 2>&1; then
  echo "bench: installing wrk (Debian package)"
  apt-get install -y wrk >/dev/null 2>&1 || { apt-get update >/dev/null && apt-get install -y wrk >/dev/null; }
fi
# the gate phase (bench/forward_auth.py) drives nginx with ab
if [[ ",${BENCH_ONLY:-}," == *",gate,"* ]] && ! command -v ab >/dev/null 2>&1; then
  echo "bench: installing ab and nginx (Debian packages)"
  apt-get install -y apache2-utils nginx >/dev/null 2>&1 || { apt-get update >/dev/null && apt-get install -y apache2-utils nginx >/dev/null; }
fi
# the /api/check profile uses py-spy (a dev dependency, in the lock) when the venv has it, else cProfile in-process
[ -x "$(dirname "$PY")/py-spy" ] || echo "bench: no py-spy beside $PY; profiling with cProfile"
command -v taskset >/dev/null || { echo "bench: taskset (util-linux) is required" >&2; exit 1; }
if [ "$(nproc)" -lt 2 ]; then
  echo "bench: needs 2 CPUs (server on CPU 0, load on CPU 1); this machine has $(nproc)" >&2
  exit 1
fi
# 2,000 SSE streams need the descriptors on both sides
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)" || true

mkdir -p bench/results
exec taskset -c 1 "$PY" bench/bench.py "$@"
