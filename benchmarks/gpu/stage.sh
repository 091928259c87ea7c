#!/usr/bin/env bash
# Run here, in the project's root, before a run on a GPU machine that reaches no package registry
# (Python 3.12, torch with CUDA, numpy, onnx, pyarrow, scikit-learn, pandas, pytest(-xdist, -timeout) there).
# Downloads as cp312 manylinux wheels what that machine lacks: modelsql's other dependencies, onnxruntime-gpu,
# apache-tvm (COMPILE ... FOR 'cuda'), tritonclient[http] and dbapi-compliance (the tests), and packs them into
# folders .gpuw1 ... .gpuwN of at most 52 MB each (one transfer to that machine holds 64 MiB with the working
# tree), ignored by git; a wheel over 52 MB is split into parts, joined and checked there.
# Then, on the GPU machine, one call per folder, each carrying its folder, back to back (a machine goes back
# after 30 s idle):  bash benchmarks/gpu/install.sh .gpuwK      (K = 1 .. N; the last one installs into ~/site)
# and then:          bash benchmarks/gpu/run.sh [budget_seconds]
set -eu
top=$(git rev-parse --show-toplevel); cd "$top"
ex="$(git rev-parse --git-dir)/info/exclude"; grep -qx '/.gpuw*/' "$ex" 2>/dev/null || echo '/.gpuw*/' >> "$ex"
rm -rf .gpuw* && mkdir -p .gpuw-all
plat=""; for p in 2_28 2_27 2_24 2_17 2_5 2_31 2_34; do plat="$plat --platform manylinux_${p}_x86_64"; done
plat="$plat --platform manylinux2014_x86_64 --platform manylinux1_x86_64"
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp $plat \
  -d .gpuw-all "duckdb>=2.0,<3" "sqlglot>=30.30,<31" "optuna>=5.0,<6" alembic sqlalchemy colorlog mako starlette \
  uvicorn httptools orjson skl2onnx onnxconverter-common greenlet "onnxruntime-gpu==${ORT_GPU_VERSION:-1.31.1}" \
  apache-tvm==0.27.0.post1 apache-tvm-ffi==0.1.14.post1 xgboost-cpu tritonclient geventhttpclient gevent \
  zope.event zope.interface brotli python-rapidjson certifi 2>&1 | grep -v "^WARNING" || true
python3 -m pip download -q --no-deps -d .gpuw-all dbapi-compliance==1.15.0 2>&1 | grep -v "^WARNING" || true
limit=52000000; n=1; size=0; mkdir -p .gpuw1
put() {  # put FILE: into the current folder, or a new one when it would pass the limit
  local s; s=$(stat -c %s "$1")
  if [ $((size + s)) -gt $limit ]; then n=$((n + 1)); mkdir -p .gpuw$n; size=0; fi
  mv "$1" .gpuw$n/; size=$((size + s))
}
for w in .gpuw-all/*; do
  if [ "$(stat -c %s "$w")" -gt $limit ]; then  # split: parts, the name and the digest
    b=$(basename "$w"); split -b $limit -d -a 2 "$w" ".gpuw-all/$b.part."
    sha256sum "$w" | cut -d' ' -f1 > ".gpuw-all/$b.sha256"; rm "$w"
  fi
done
for w in .gpuw-all/*.part.* .gpuw-all/*.sha256 .gpuw-all/*; do [ -e "$w" ] && put "$w"; done
rmdir .gpuw-all
for k in $(seq 1 $n); do echo $n > .gpuw$k/FOLDERS; done
du -sh .gpuw* | tr '\n' ' '; echo
echo "On the GPU machine, one call per folder with it carried: bash benchmarks/gpu/install.sh .gpuwK (K = 1 .. $n)"
