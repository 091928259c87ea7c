#!/usr/bin/env bash
# Run here, in the project's root, before a GPU run: downloads as cp312 wheels what the GPU machine lacks
# beyond onnxruntime-gpu and the core dependencies (apache-tvm and its runtime for COMPILE ... FOR 'cuda',
# tritonclient[http] and dbapi-compliance for the tests), into folders .gpux1, .gpux2 (the TVM wheel in two parts) and .gpux3 (the rest), each under 52 MiB
# (one transfer to that machine holds 64 MiB), ignored by git. On the GPU machine, each folder is copied to
# ~/extra by its own call (`mkdir -p ~/extra && cp -r .gpuxK/. ~/extra/`); benchmarks/gpu/run.sh joins the
# TVM wheel's parts and installs everything into ~/site.
set -eu
top=$(git rev-parse --show-toplevel); cd "$top"
ex="$(git rev-parse --git-dir)/info/exclude"; grep -qx '/.gpu*/' "$ex" 2>/dev/null || echo '/.gpu*/' >> "$ex"
rm -rf .gpux1 .gpux2 .gpux3 .gpuxw && mkdir -p .gpux1 .gpux2 .gpux3 .gpuxw
plat=""; for p in 2_28 2_27 2_24 2_17 2_5 2_31 2_34; do plat="$plat --platform manylinux_${p}_x86_64"; done
plat="$plat --platform manylinux2014_x86_64 --platform manylinux1_x86_64"
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp $plat -d .gpuxw \
  apache-tvm==0.27.0.post1 apache-tvm-ffi==0.1.14.post1 xgboost-cpu tritonclient==2.73.0 geventhttpclient gevent \
  zope.event zope.interface brotli python-rapidjson certifi 2>&1 | grep -v "^WARNING" || true
python3 -m pip download -q --no-deps -d .gpuxw dbapi-compliance==1.15.0 2>&1 | grep -v "^WARNING" || true
tvm=$(ls .gpuxw/apache_tvm-*.whl)
split -b 50300000 -d -a 2 "$tvm" .gpux1/tvm.part.
mv .gpux1/tvm.part.01 .gpux2/ 2>/dev/null || true
[ ! -e .gpux1/tvm.part.02 ] || { echo "the TVM wheel needs three parts: add a folder"; exit 1; }
basename "$tvm" > .gpux3/TVM_WHEEL
sha256sum "$tvm" | cut -d' ' -f1 > .gpux3/TVM_SHA256
for w in .gpuxw/*; do [ "$w" = "$tvm" ] || mv "$w" .gpux3/; done
rm -rf .gpuxw
du -sh .gpux1 .gpux2 .gpux3
