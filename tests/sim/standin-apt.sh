#!/usr/bin/env bash
# HARDWARE STAND-IN: a local apt repository of stand-in NVIDIA packages for the GPU-less simulated
# cluster. The packages carry the real names and versions (cuda-drivers-580, nvidia-fabricmanager-580
# at three 580 versions), so the nvidia_driver role's pinning, holding and fabric-manager logic run for
# real through apt and dpkg; what they install is an nvidia-smi that replays a real H200 capture
# (reporting the package's own version) and inert persistenced / fabric manager units.
#   tests/sim/standin-apt.sh DEST   build the repository into DEST (flat: Packages + *.deb)
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
dest=${1:?usage: $0 DEST}
fixture=$here/../fixtures/gpu/h200-1gpu-device
replay=$here/../fixtures/bin/nvidia-smi-replay
captured=580.159.04
versions=(580.95.05 580.159.04 580.172.08)
command -v dpkg-scanpackages >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq dpkg-dev >/dev/null; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
rm -rf "$dest.tmp" && mkdir -p "$dest.tmp"

control() {  # control NAME VERSION DESCRIPTION
  printf 'Package: %s\nVersion: %s-1\nArchitecture: amd64\nMaintainer: llmserve test rig <root@localhost>\nSection: non-free/libs\nPriority: optional\nDescription: HARDWARE STAND-IN for %s (llmserve simulated cluster)\n %s\n' \
    "$1" "$2" "$1" "$3"
}

unit() {  # unit NAME: an inert service where the real package ships a daemon
  printf '[Unit]\nDescription=HARDWARE STAND-IN %s (llmserve simulated cluster, no GPU)\n\n[Service]\nExecStart=/bin/sleep infinity\n\n[Install]\nWantedBy=multi-user.target\n' "$1"
}

for version in "${versions[@]}"; do
  pkg=$work/cuda-drivers-580-$version
  mkdir -p "$pkg/DEBIAN" "$pkg/usr/bin" "$pkg/usr/share/nvidia-standin/fixture" "$pkg/lib/systemd/system"
  control cuda-drivers-580 "$version" "nvidia-smi replays a real H200 capture reporting driver $version." >"$pkg/DEBIAN/control"
  install -m 0755 "$replay" "$pkg/usr/share/nvidia-standin/nvidia-smi-replay"
  for file in "$fixture"/nvidia-smi*; do
    sed "s/$captured/$version/g" "$file" >"$pkg/usr/share/nvidia-standin/fixture/$(basename "$file")"
  done
  cat >"$pkg/usr/bin/nvidia-smi" <<'SMI'
#!/bin/sh
# HARDWARE STAND-IN (llmserve simulated cluster): replays a real capture, changes nothing.
NVIDIA_SMI_FIXTURE_DIR=${NVIDIA_SMI_FIXTURE_DIR:-/usr/share/nvidia-standin/fixture} exec /usr/share/nvidia-standin/nvidia-smi-replay "$@"
SMI
  chmod 0755 "$pkg/usr/bin/nvidia-smi"
  unit nvidia-persistenced >"$pkg/lib/systemd/system/nvidia-persistenced.service"
  dpkg-deb --root-owner-group -Zgzip --build "$pkg" "$dest.tmp/cuda-drivers-580_${version}-1_amd64.deb" >/dev/null

  pkg=$work/nvidia-fabricmanager-580-$version
  mkdir -p "$pkg/DEBIAN" "$pkg/usr/bin" "$pkg/lib/systemd/system"
  control nvidia-fabricmanager-580 "$version" "Inert fabric manager unit; nv-fabricmanager prints $version." >"$pkg/DEBIAN/control"
  printf '#!/bin/sh\necho "Fabric Manager version is : %s (HARDWARE STAND-IN)"\n' "$version" >"$pkg/usr/bin/nv-fabricmanager"
  chmod 0755 "$pkg/usr/bin/nv-fabricmanager"
  unit nvidia-fabricmanager >"$pkg/lib/systemd/system/nvidia-fabricmanager.service"
  dpkg-deb --root-owner-group -Zgzip --build "$pkg" "$dest.tmp/nvidia-fabricmanager-580_${version}-1_amd64.deb" >/dev/null
done
(cd "$dest.tmp" && dpkg-scanpackages --multiversion . /dev/null 2>/dev/null >Packages)
rm -rf "$dest" && mv "$dest.tmp" "$dest"
echo "stand-in apt repository $dest: $(grep -c '^Package:' "$dest/Packages") packages"
