#!/usr/bin/env bash
# Run here, where pip reaches the package index: the H200 device has no network, so vLLM 0.26.0, Ray
# and ansible-core travel to it as the exact wheels of requirements-gpu.txt, less carry-prune.txt. One device
# call carries at most 64 MiB with the working tree, so the wheels go as one tar cut into 56 MiB pieces,
# one piece a call (tests/device/stash_piece.sh gathers and joins them there). The tar is byte-for-byte
# reproducible, so its recorded sha256 only changes when the wheel set does.
#   bash tests/device/wheels.sh     -> .whl-pieces/part-NN, tests/device/wheels-gpu.sha256
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
req=$repo/tests/device/requirements-gpu.txt
dir=$repo/.whl-gpu
pieces=$repo/.whl-pieces
tar=$dir/wheels-gpu.tar
prune=$(grep -v '^#' "$repo/tests/device/carry-prune.txt")

# The device is CPython 3.12 on x86_64 with glibc 2.39. pip matches a manylinux_2_N tag exactly, so every
# N up to 39 is named (some wheels exist only for 2_31 or 2_34); the classic tags stay first.
platforms=(manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64)
for n in $(seq 18 39); do
  case $n in 27 | 28) ;; *) platforms+=("manylinux_2_${n}_x86_64") ;; esac
done
platforms+=(any)
args=()
for p in "${platforms[@]}"; do args+=(--platform "$p"); done
mkdir -p "$dir" "$pieces"
# --no-deps: requirements-gpu.txt is already the closure minus what the device has (torch, CUDA, ...).
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --abi cp312 "${args[@]}" -d "$dir" -r "$req"

# Only the listed versions go in the tar: an older wheel left in .whl-gpu/ would make two versions of
# one package, which stops the install there.
declare -A have=()
for f in "$dir"/*.whl; do
  b=${f##*/}
  IFS=- read -r name ver _ <<<"$b"
  name=${name,,}; name=${name//_/-}; name=${name//./-}
  have["$name==$ver"]+="$b "
done
files=()
while read -r line; do
  case $line in '' | '#'*) continue ;; esac
  key=${line,,}; name=${key%%==*}; name=${name//_/-}; name=${name//./-}; key=$name==${line#*==}
  grep -qxF "$name" <<<"$prune" && continue
  read -ra match <<<"${have[$key]:-}"
  if [ "${#match[@]}" -ne 1 ]; then
    echo "wheels.sh: $line: expected one wheel in $dir, found ${#match[@]}: ${match[*]:-}" >&2
    exit 1
  fi
  files+=("${match[0]}")
done <"$req"
mapfile -t files < <(printf '%s\n' "${files[@]}" | LC_ALL=C sort)

tar --format=gnu --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner --mode=u=rw,go=r \
  -cf "$tar" -C "$dir" "${files[@]}"
sha=$(sha256sum "$tar" | cut -d' ' -f1)
size=$(stat -c %s "$tar")
rm -f "$pieces"/part-*
split -b 56M -d -a 2 "$tar" "$pieces/part-"
rm -f "$tar"
count=$(find "$pieces" -name 'part-*' | wc -l)
limit=$((56 * 1024 * 1024))
for p in "$pieces"/part-*; do
  if [ "$(stat -c %s "$p")" -gt "$limit" ]; then echo "wheels.sh: $p is over 56 MiB" >&2; exit 1; fi
done
# Line 1 is sha256sum's format; line 2 lets the device tell a missing piece from a corrupt one.
printf '%s  wheels-gpu.tar\n%s bytes in %s pieces\n' "$sha" "$size" "$count" >"$repo/tests/device/wheels-gpu.sha256"
echo "${#files[@]} wheels, $((size / 1024 / 1024)) MiB in $count pieces (.whl-pieces/part-00..$(printf '%02d' $((count - 1)))), sha256 $sha"
