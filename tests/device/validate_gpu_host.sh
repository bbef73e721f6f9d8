#!/usr/bin/env bash
# Run on a real NVIDIA host (the device tool's H200 machine): captures the raw nvidia-smi
# views as test fixtures and runs gpu_facts, gpu_topology and the preflight role through
# real ansible-core against localhost. Writes everything into one tarball under $OUT.
# Usage there: bash tests/device/validate_gpu_host.sh   (wheels for ansible-core in .whl/)
set -uo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
OUT=${OUT:-/tmp/llmserve-device-out}
work=$(mktemp -d /tmp/llmserve-device.XXXXXX)
cap="$work/capture"
mkdir -p "$cap" "$OUT"
export LC_ALL=C.UTF-8 LANG=C.UTF-8 NCCL_NVLS_ENABLE=0
py=$(command -v python3)

if [ -d "$repo/.whl" ] && [ -z "${LLMSERVE_SKIP_WHEELS:-}" ]; then
  "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$repo"/.whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH
fi
mkdir -p /tmp/collections/ansible_collections/llmserve
ln -sfn "$repo" /tmp/collections/ansible_collections/llmserve/vllm_cluster
export ANSIBLE_COLLECTIONS_PATH=/tmp/collections ANSIBLE_INJECT_FACT_VARS=false ANSIBLE_LOCALHOST_WARNING=false
export ANSIBLE_CONFIG=$repo/tests/integration/empty-ansible.cfg ANSIBLE_STDOUT_CALLBACK=ansible.builtin.default ANSIBLE_CALLBACK_RESULT_FORMAT=json
ansible() { "$py" "$(type -P ansible)" "$@"; }
ansible_playbook() { "$py" "$(type -P ansible-playbook)" "$@"; }

capture() {  # capture FILE CMD...: raw output of one view, rc appended to a log
  local file=$1; shift
  "$@" >"$cap/$file" 2>"$cap/$file.stderr"
  echo "$file rc=$? : $*" >>"$cap/commands.log"
}
capture nvidia-smi.txt nvidia-smi
capture nvidia-smi_-L.txt nvidia-smi -L
capture nvidia-smi_topo_-m.txt nvidia-smi topo -m
capture nvidia-smi_topo_-p2p_n.txt nvidia-smi topo -p2p n
capture nvidia-smi_topo_-p2p_r.txt nvidia-smi topo -p2p r
capture nvidia-smi_nvlink_-s.txt nvidia-smi nvlink -s
capture nvidia-smi_-q_-x.xml nvidia-smi -q -x
capture nvidia-smi_query-gpu.csv nvidia-smi \
  "--query-gpu=index,name,uuid,pci.bus_id,memory.total,memory.used,driver_version,compute_cap,mig.mode.current,persistence_mode,power.limit,ecc.mode.current,clocks.max.sm" \
  --format=csv,noheader,nounits
"$py" "$repo/tests/device/nvml_topology.py" >"$cap/nvml_topology.json" 2>"$cap/nvml_topology.json.stderr"

run_module() {  # run_module NAME ARGS: one module through the real ansible CLI, JSON result kept
  local name=$1 args=$2 file=$3
  ansible localhost -c local -i localhost, -e "ansible_python_interpreter=$py" \
    -m "llmserve.vllm_cluster.$name" -a "$args" -o >"$work/$file" 2>&1
  echo "$name $args rc=$?" | tee -a "$work/modules.log"
}
run_module gpu_facts "source=auto" gpu_facts_auto.txt
run_module gpu_facts "source=nvml require_gpus=1" gpu_facts_nvml.txt
run_module gpu_facts "source=nvidia-smi" gpu_facts_smi.txt
run_module gpu_topology "require_tp_size=1" gpu_topology.txt
n=$(nvidia-smi -L | grep -c '^GPU ')
run_module gpu_topology "require_tp_size=$n require_link=any" gpu_topology_all.txt
run_module gpu_topology "require_tp_size=$((n * 2))" gpu_topology_too_big.txt

# The preflight role end to end on this host: real facts, real topology, real planner.
ansible_playbook -i "$repo/tests/device/inventory.yml" -e "ansible_python_interpreter=$py" \
  -e "preflight_plan_file=$work/plan.json" "$repo/tests/device/preflight.yml" >"$work/preflight.log" 2>&1
echo "preflight rc=$?" | tee -a "$work/modules.log"

tar -C "$work" -czf "$OUT/device-results.tgz" .

