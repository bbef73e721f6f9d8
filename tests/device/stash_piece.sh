#!/usr/bin/env bash
# On the device: keep each carried piece of the wheel tar in /tmp/stash (it outlives the call while the machine
# stays up); --join puts them together, checks the sha256 from tests/device/wheels-gpu.sha256, and unpacks the
# wheels into /tmp/wheels.
#   bash tests/device/stash_piece.sh          copy .whl-pieces/part-* here into /tmp/stash
#   bash tests/device/stash_piece.sh --join   join, check, unpack
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
mkdir -p /tmp/stash
if [ "${1:-}" != --join ]; then
  cp -v "$repo"/.whl-pieces/part-* /tmp/stash/
  ls -la /tmp/stash
  exit 0
fi
want=$(head -1 "$repo/tests/device/wheels-gpu.sha256" | cut -d' ' -f1)
[ "$(cat /tmp/wheels/.sha256 2>/dev/null)" = "$want" ] && { echo "wheels already unpacked"; exit 0; }
cat /tmp/stash/part-* >/tmp/stash/wheels.tar
have=$(sha256sum /tmp/stash/wheels.tar | cut -d' ' -f1)
[ "$have" = "$want" ] || { echo "wheels.tar sha256 $have, want $want: a piece is missing or broken"; exit 1; }
rm -rf /tmp/wheels && mkdir -p /tmp/wheels && tar -xf /tmp/stash/wheels.tar -C /tmp/wheels
echo "$want" >/tmp/wheels/.sha256
echo "$(find /tmp/wheels -name '*.whl' | wc -l) wheels unpacked"
