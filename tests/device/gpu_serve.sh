#!/usr/bin/env bash
# CUDA vLLM on the GPU device, started from what the roles render (issue 14, part 2). One phase per device call,
# so each call stays inside the 10-minute limit; a server started by one phase (its own session, run_unit.py)
# outlives the call and the next phase measures or stops it. Everything a phase captured goes to $OUT/<phase>.tgz.
#   bash tests/device/gpu_serve.sh setup              join + install the carried wheels, build models, render units
#   bash tests/device/gpu_serve.sh start SHAPE [ray]  start the replica (mp, or through the Ray head unit), wait ready
#   bash tests/device/gpu_serve.sh accept SHAPE       acceptance load stages + the independent client against it
#   bash tests/device/gpu_serve.sh stop               stop the replica (and Ray)
# Several phases may follow each other in one call: gpu_serve.sh start llama-3.1-8b -- stop -- start qwen2.5-32b
#
# The device sequence (the machine goes back 30 s after a call, so send each call right after the last one):
#   here:      bash tests/device/wheels.sh                                   (10 pieces of 56 MiB)
#   calls 1-10: carry [".whl-pieces/part-NN"], run: bash tests/device/stash_piece.sh
#   call 11:   gpu_serve.sh setup -- start llama-3.1-8b                       (about 5 min)
#   call 12:   gpu_serve.sh accept llama-3.1-8b -- stop                       (about 5 min)
#   call 13:   gpu_serve.sh start qwen2.5-32b -- stop -- start llama-3.1-70b-fp8 -- stop
#   call 14:   gpu_serve.sh start llama-3.1-8b ray -- stop                    (Ray head unit + Ray executor)
# Each call's $OUT/<phases>.tgz holds every capture so far (logs, rendered units, plans, reports, comparisons).
set -uo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
dev=$repo/tests/device
OUT=${OUT:-/tmp/llmserve-device-out}
state=/tmp/llmserve-device
runtime=/opt/vllm/current
models=/srv/models
mkdir -p "$OUT" "$state/capture"
export LC_ALL=C.UTF-8 LANG=C.UTF-8 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export ANSIBLE_COLLECTIONS_PATH=/tmp/collections ANSIBLE_INJECT_FACT_VARS=false ANSIBLE_LOCALHOST_WARNING=false
export ANSIBLE_CONFIG=$repo/tests/integration/empty-ansible.cfg ANSIBLE_NOCOLOR=1 PYTHONUNBUFFERED=1
event() { printf '{"t": %s, "event": "%s", %s}\n' "$(date +%s.%N)" "$1" "${2:-\"-\": 0}" | tee -a "$state/capture/events.jsonl"; }
playbook() { "$runtime/bin/ansible-playbook" "$@"; }

setup() {
  bash "$dev/stash_piece.sh" --join || return 1
  # A venv of the carried wheels that sees the device's own torch and CUDA libraries through a .pth file (a venv
  # made from the device's python3, itself a venv, would not see them with --system-site-packages).
  if [ ! -x /opt/vllm/0.26.0/bin/vllm ]; then
    python3 -m venv --without-pip /opt/vllm/0.26.0 || return 1
    # pip of the device's python installs into the new venv (its scripts get the venv's interpreter); the .pth
    # comes after, so pip never sees (nor uninstalls) the device's own packages.
    python3 -m pip --python /opt/vllm/0.26.0/bin/python install -q --no-index --no-deps --no-compile --no-cache-dir \
      /tmp/wheels/*.whl || return 1
    site=$(/opt/vllm/0.26.0/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' >"$site/device-torch.pth"
  fi
  ln -sfn /opt/vllm/0.26.0 "$runtime"
  mkdir -p /tmp/collections/ansible_collections/llmserve
  ln -sfn "$repo" /tmp/collections/ansible_collections/llmserve/vllm_cluster
  getent passwd vllm >/dev/null || useradd --system --home-dir /var/lib/vllm --shell /usr/sbin/nologin vllm \
    || { echo "vllm:x:990:990::/var/lib/vllm:/usr/sbin/nologin" >>/etc/passwd; echo "vllm:x:990:" >>/etc/group; }
  python3 "$dev/models.py" "$models" && chmod -R a+rX "$models"
  "$runtime/bin/python" -c 'import vllm, ray, ansible; print("vllm", vllm.__version__, "ray", ray.__version__)' \
    | tee "$state/capture/versions.txt"
  nvidia-smi --query-gpu=index,name,uuid,memory.total,memory.used,driver_version --format=csv >"$state/capture/gpu.csv"
  event setup '"ok": true'
}

render() {  # render SHAPE BACKEND: the roles write /etc/systemd/system/{ray-head,vllm-r0}.service and /etc/vllm/r0.env
  local shape=$1 backend=$2 extra='["--load-format", "dummy"'
  [ "$shape" = llama-3.1-70b-fp8 ] && extra="$extra"', "--quantization", "fp8"'
  local env='{}' raygpus='[]'
  if [ "$backend" = ray ]; then
    extra="$extra"', "--distributed-executor-backend", "ray"'
    env='{"RAY_ADDRESS": "127.0.0.1:6379"}'
    raygpus='[0]'
  fi
  local versions
  versions=$("$runtime/bin/python" -c 'import json, ray, vllm; print(json.dumps({"vllm_cluster_vllm_version": vllm.__version__, "vllm_cluster_ray_version": ray.__version__})[1:-1])')
  cat >"$state/vars-$shape-$backend.json" <<EOF
{$versions, "vllm_cluster_model": {"id": "device/$shape", "revision": "$(printf '%s' "$shape" | sha1sum | cut -c1-40)",
  "served_name": "$shape", "config_path": "$models/$shape/config.json"},
 "device_model_path": "$models/$shape", "vllm_serve_extra_args": $extra],
 "vllm_serve_environment": $env, "ray_cluster_gpus": $raygpus,
 "acceptance_tokenizer": "$models/$shape", "acceptance_served_name": "$shape"}
EOF
  playbook -i "$dev/inventory-serve.yml" -e "@$state/vars-$shape-$backend.json" --skip-tags preflight_host,vllm_serve_service \
    "$dev/serve.yml" >"$state/capture/render-$shape-$backend.log" 2>&1 || { tail -40 "$state/capture/render-$shape-$backend.log"; return 1; }
  cp /etc/systemd/system/vllm-r0.service "$state/capture/vllm-r0-$shape-$backend.service"
  cp /etc/systemd/system/ray-head.service "$state/capture/ray-head-$shape-$backend.service"
  cp /etc/vllm/plan.json "$state/capture/plan-$shape-$backend.json"
  # The env file holds the API key: keep its variable names only.
  cut -d= -f1 /etc/vllm/r0.env >"$state/capture/r0-$shape-$backend.env-names"
  awk -F= '/^VLLM_API_KEY=/{print $2}' /etc/vllm/r0.env >"$state/key"
}

start() {  # start SHAPE [ray]
  local shape=$1 backend=${2:-mp} log="$state/capture/vllm-$1-${2:-mp}.log"
  render "$shape" "$backend" || return 1
  if [ "$backend" = ray ]; then
    python3 "$dev/run_unit.py" start /etc/systemd/system/ray-head.service "$state/capture/ray-head.log" >"$state/ray.pid.json" || return 1
    "$runtime/bin/python" - <<'EOF' | tee "$state/capture/ray-resources.json"
import json, time, ray
for _ in range(60):
    try:
        ray.init(address="127.0.0.1:6379", log_to_driver=False)
        break
    except Exception:
        time.sleep(1)
for _ in range(60):
    if ray.cluster_resources().get("GPU", 0) >= 1:
        break
    time.sleep(1)
print(json.dumps({"cluster_resources": ray.cluster_resources(), "nodes": len(ray.nodes())}))
EOF
  fi
  local t0
  t0=$(date +%s.%N)
  python3 "$dev/run_unit.py" start /etc/systemd/system/vllm-r0.service "$log" >"$state/vllm.pid.json" || return 1
  event start "\"shape\": \"$shape\", \"backend\": \"$backend\", \"pid\": $(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["pid"])' "$state/vllm.pid.json")"
  nvidia-smi --query-gpu=timestamp,memory.used,utilization.gpu --format=csv,noheader -l 2 >"$state/capture/smi-$shape-$backend.csv" &
  echo $! >"$state/smi.pid"
  # The collection's readiness definition, with the server process standing in for the unit (no systemd here).
  local pid rc
  pid=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["pid"])' "$state/vllm.pid.json")
  PYTHONPATH=/tmp/collections python3 "$dev/wait_ready.py" http://127.0.0.1:8000 "$shape" 540 "$state/key" "$pid" \
    >"$state/capture/ready-$shape-$backend.json"
  rc=$?
  event ready "\"shape\": \"$shape\", \"backend\": \"$backend\", \"rc\": $rc, \"start_to_first_token_s\": $(python3 -c "import time; print(round(time.time() - $t0, 1))")"
  kill "$(cat "$state/smi.pid")" 2>/dev/null
  nvidia-smi --query-gpu=memory.used,memory.total --format=csv,noheader >"$state/capture/mem-ready-$shape-$backend.csv"
  grep -E "GPU KV cache size|Maximum concurrency|Model loading took|Available KV cache memory|Memory profiling|memory|CUDA graph|torch.compile|Graph capturing|init engine" "$log" \
    | cut -c1-400 >"$state/capture/memory-lines-$shape-$backend.txt"
  local total
  total=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
  PYTHONPATH=/tmp/collections python3 "$dev/vllm_memory.py" "$models/$shape/config.json" "$log" "$total" 0.9 8192 \
    | tee "$state/capture/compare-$shape-$backend.json"
  [ "$rc" -eq 0 ] || tail -60 "$log"
  return "$rc"
}

accept() {  # accept SHAPE: the role's load stages, then the independent client at the sweep's knee shape
  local shape=$1
  nvidia-smi --query-gpu=timestamp,memory.used,utilization.gpu --format=csv,noheader -l 1 >"$state/capture/smi-sweep-$shape.csv" &
  local smi=$!
  playbook -i "$dev/inventory-serve.yml" -e "@$state/vars-$shape-mp.json" -e "@$dev/accept-vars.yml" \
    --skip-tags preflight_host "$dev/accept.yml" >"$state/capture/accept-$shape.log" 2>&1
  local rc=$?
  kill "$smi" 2>/dev/null
  event accept "\"shape\": \"$shape\", \"rc\": $rc"
  local report
  report=$(find /tmp/acceptance -name report.json | sort | tail -1)
  [ -n "$report" ] && cp "$report" "$state/capture/report-$shape.json" && cp "$(dirname "$report")/report.md" "$state/capture/report-$shape.md"
  [ "$rc" -eq 0 ] || grep -E "fatal|FAILED|failed=" "$state/capture/accept-$shape.log" | tail -10
  # The second client, several processes, at two of the sweep's levels (the knee and the level below it) with each
  # step's own load (requests, input and output length); second_client.py holds each against the report's step (the
  # goal: within 10 % on tok/s and TTFT p50).
  local steps
  steps=$(python3 -c 'import json,sys; s=json.load(open(sys.argv[1]))["stages"]["sweep"]; c=[x["concurrency"] for x in s["ladder"]]; k=s.get("knee_concurrency") or c[-1]; i=c.index(k); print(" ".join("%d:%d:%d:%d" % (x["concurrency"], x["num_prompts"], x["input_len"], x["output_len"]) for x in s["ladder"][max(0, i - 1):i + 1]))' \
    "$state/capture/report-$shape.json" 2>/dev/null || echo 16:48:128:64)
  local step level requests input output
  for step in $steps; do
    IFS=: read -r level requests input output <<<"$step"
    "$runtime/bin/python" "$dev/independent_client.py" http://127.0.0.1:8000 "$shape" "$state/key" "$level" "$requests" "$input" "$output" \
      | tee "$state/capture/independent-$shape-c$level.json"
  done
  python3 "$dev/second_client.py" "$state/capture/report-$shape.json" "$state"/capture/independent-"$shape"-c*.json \
    | tee "$state/capture/second-client-$shape.json"
}

stop() {
  [ -f "$state/vllm.pid.json" ] && python3 "$dev/run_unit.py" stop "$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["pid"])' "$state/vllm.pid.json")" 60
  [ -f "$state/ray.pid.json" ] && python3 "$dev/run_unit.py" stop "$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["pid"])' "$state/ray.pid.json")" 30
  rm -f "$state/vllm.pid.json" "$state/ray.pid.json"
  sleep 3
  nvidia-smi --query-gpu=memory.used --format=csv,noheader >"$state/capture/mem-after-stop.csv"
  event stop
}

status=0
phase_name=$(printf '%s' "$*" | tr -c 'a-zA-Z0-9.' '_' | cut -c1-60)
while [ $# -gt 0 ]; do
  args=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do args+=("$1"); shift; done
  [ $# -gt 0 ] && shift
  case ${args[0]} in
    setup) setup ;;
    start) start "${args[@]:1}" ;;
    accept) accept "${args[@]:1}" ;;
    stop) stop ;;
    *) echo "unknown phase ${args[0]}"; false ;;
  esac || { status=$?; echo "phase ${args[*]} failed ($status)"; break; }
done
tar -czf "$OUT/$phase_name.tgz" -C "$state" capture 2>/dev/null
exit $status
