#!/usr/bin/env bash
# Plan memory and parallelism for every example inventory (no host is contacted) and
# write one plan JSON per inventory.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
# shellcheck source=scripts/venv.sh
source scripts/venv.sh
out=${LLMSERVE_PLAN_DIR:-$repo/artifacts/plans}
mkdir -p "$out"
for inventory in inventories/examples/*/; do
  name=$(basename "$inventory")
  echo "=== $name"
  ansible-playbook playbooks/plan.yml -i "$inventory" -e "preflight_plan_file=$out/$name.json"
done
echo "plans written to $out/"
