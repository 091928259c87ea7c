#!/usr/bin/env bash
# On the GPU machine: bash benchmarks/gpu/install.sh .gpuwK   (the folders benchmarks/gpu/stage.sh made, in any
# order, one call each). Keeps each folder's files in ~/wheels; once every split wheel has all its parts (its
# digest checks) and the last folder has arrived, installs every wheel into ~/site (PYTHONPATH=~/site:$PWD).
set -eu
mkdir -p "$HOME/wheels" && cp -r "$1"/. "$HOME/wheels/"
cd "$HOME/wheels"
expected=$(cat FOLDERS)
echo "$(basename "$1")" >> arrived; arrived=$(sort -u arrived | wc -l)
for sum in *.sha256; do
  [ -e "$sum" ] || continue
  w=${sum%.sha256}
  [ -f "$w" ] && continue
  cat "$w".part.* > "$w.tmp" 2>/dev/null || true
  if [ "$(sha256sum "$w.tmp" | cut -d' ' -f1)" = "$(cat "$sum")" ]; then mv "$w.tmp" "$w"; rm -f "$w".part.*
  else rm -f "$w.tmp"; fi
done
missing=$(for sum in *.sha256; do [ -e "$sum" ] && [ ! -f "${sum%.sha256}" ] && echo x; done | wc -l)
if [ "$missing" -gt 0 ] || [ "$arrived" -lt "$expected" ]; then
  echo "waiting: $arrived of $expected folders, $missing split wheels incomplete"; exit 0
fi
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$HOME/site" ./*.whl
python3 -m pip install -q --no-index --no-deps --no-build-isolation --no-compile --no-cache-dir --target "$HOME/site" \
  ./*.zip ./*.tar.gz 2>/dev/null || true
PYTHONPATH=$HOME/site python3 -c "import onnxruntime as o; o.preload_dlls(); print('onnxruntime', o.__version__, o.get_available_providers())"
echo "installed into $HOME/site"
