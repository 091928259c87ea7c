#!/usr/bin/env bash
# The GPU checks of issue 24, in one command on a machine with an NVIDIA GPU (run from the project's root):
#   bash benchmarks/gpu/run.sh [all | bench | suite] [budget_seconds]
# (bench: steps 2-4; suite: 2 and 5; all: every step. Measured on an H200: gpu_latency 33 s, gpu_predict 46 s,
# Hippo --gpu-quick 135 s, NetFuse --gpu-quick over 120 s; so a 15-minute lease fits one `bench` call and one
# `suite` call back to back, after the installs.)
# 1. (before it: benchmarks/gpu/stage.sh here and benchmarks/gpu/install.sh there install what that machine lacks);
# 2. prints the environment (GPU, onnxruntime providers, torch, what modelsql sees);
# 3. the tests marked gpu (tests/ -m gpu);
# 4. the four GPU benchmarks, each under its own time limit: batch-1 latency (benchmarks/gpu_latency.py),
#    PREDICT over a table (benchmarks/gpu_predict.py), NetFuse (benchmarks/netfuse.py --device cuda),
#    Hippo (benchmarks/hippo.py --device cuda), and the TVM CUDA probe (benchmarks/gpu/tvm_cuda_probe.py);
# 5. the whole suite with pytest-xdist, in the time left of the budget (default 560 s).
# Results: benchmarks/results/gpu_*.json; logs and a tarball of everything in $OUT (default /tmp/gpu-out),
# refreshed after every step, so a run cut short still leaves what it measured.
set -u
start=$(date +%s)
what=${1:-all}
budget=${2:-560}
case "$what" in bench) SKIP="${SKIP:-} suite";; suite) SKIP="${SKIP:-} gpu_tests gpu_latency gpu_predict gpu_netfuse gpu_hippo tvm_cuda";; all) ;;
  *) echo "run.sh: all, bench or suite, not $what"; exit 2;; esac
OUT=${OUT:-/tmp/gpu-out}; mkdir -p "$OUT"
export PYTHONPATH=$HOME/site:$PWD PYTHONUNBUFFERED=1 CUBLAS_WORKSPACE_CONFIG=:4096:8
log="$OUT/run.log"
left() { echo $(( budget - ($(date +%s) - start) )); }
pack() {
  mkdir -p /tmp/gpu-pack && cp -f benchmarks/results/gpu_*.json /tmp/gpu-*.xml /tmp/gpu-*.log /tmp/gpu-pack/ 2>/dev/null
  tar -czf "$OUT/results.tar.gz" -C /tmp gpu-pack 2>/dev/null
  for f in benchmarks/results/gpu_*.json; do [ -f "$f" ] && cp -f "$f" "$OUT/"; done
}
step() {  # step NAME LIMIT COMMAND...   (SKIP="name ..." leaves steps out)
  local name=$1 limit=$2; shift 2
  local over="LIMIT_$name"; limit=${!over:-$limit}   # LIMIT_<step>=seconds overrides a step's limit
  case " ${SKIP:-} " in *" $name "*) echo "== $name: skipped (SKIP)" | tee -a "$log"; return;; esac
  local cap; cap=$(left); [ "$limit" -gt "$cap" ] && limit=$cap
  if [ "$limit" -le 10 ]; then echo "== $name: skipped, no time left" | tee -a "$log"; return; fi
  echo "== $name (limit ${limit}s, $(left)s left): $*" | tee -a "$log"
  local t0; t0=$(date +%s)
  timeout -k 5 "$limit" "$@" > "/tmp/gpu-$name.log" 2>&1; local rc=$?
  tail -n 40 "/tmp/gpu-$name.log" | tee -a "$log"
  echo "== $name: rc=$rc in $(( $(date +%s) - t0 ))s" | tee -a "$log"
  pack
}

python3 - <<'PY' 2>&1 | tee -a "$log"
import onnxruntime as ort, torch
ort.preload_dlls()
print("gpu", torch.cuda.get_device_name(0) if torch.cuda.is_available() else None, "torch", torch.__version__,
      "onnxruntime", ort.__version__, ort.get_available_providers())
from modelsql.operators.backends import devices
print("modelsql devices", devices.available())
try:
    import tvm
    print("tvm", tvm.__version__, "cuda", tvm.cuda(0).exist)
except Exception as exc:
    print("tvm: not usable:", exc)
PY

step gpu_tests 90 python3 -m pytest -q -m gpu tests -p no:cacheprovider -rs --continue-on-collection-errors \
  --junitxml=/tmp/gpu-tests.xml
step gpu_latency 90 python3 benchmarks/gpu_latency.py
step gpu_predict 90 python3 benchmarks/gpu_predict.py
step gpu_netfuse 200 python3 benchmarks/netfuse.py --device cuda --gpu-quick
step gpu_hippo 150 python3 benchmarks/hippo.py --device cuda --gpu-quick
step tvm_cuda 60 python3 benchmarks/gpu/tvm_cuda_probe.py --out benchmarks/results/gpu_tvm_probe.json
step suite 600 python3 -m pytest -q -n 16 tests -p no:cacheprovider --maxfail=300 --timeout=240 \
  --continue-on-collection-errors --junitxml=/tmp/gpu-suite.xml
grep -E "passed|failed" /tmp/gpu-suite.log | tail -2 > "$OUT/suite_summary.txt" 2>/dev/null
grep -E "^(FAILED|ERROR)" /tmp/gpu-suite.log >> "$OUT/suite_summary.txt" 2>/dev/null
pack
echo "== done in $(( $(date +%s) - start ))s" | tee -a "$log"
