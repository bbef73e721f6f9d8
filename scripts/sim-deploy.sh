#!/usr/bin/env bash
# README command one: a fresh Debian 12 machine to a running, load-balanced vLLM service on the
# simulated 3-host cluster, a chat completion through HAProxy, then the staged acceptance test;
# prints the endpoint and where the acceptance report is.
#   scripts/sim-deploy.sh          bring the rig up (if it is not), deploy, prove it
#   tests/sim/rig.sh down          take it down again
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
# shellcheck source=scripts/venv.sh
source scripts/venv.sh
start=$SECONDS
tests/sim/wheelhouse.sh
tests/sim/tiny-model.sh >/dev/null
[ -d "${LLMSERVE_SIM_STATE:-/run/llmserve-sim}/nodes" ] || tests/sim/rig.sh up 3
ansible-playbook playbooks/deploy.yml -i inventories/sim
record=$repo/artifacts/deploy.json
endpoint=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["endpoint"])' "$record")
key=$(python3 -c 'import sys, yaml; print(yaml.safe_load(open(sys.argv[1]))["vllm_cluster_api_key"])' inventories/sim/group_vars/all.yml)
echo "=== a chat completion through HAProxy"
# The key goes to curl on stdin (a header file), not on its command line.
printf 'Authorization: Bearer %s\n' "$key" | curl -sS --fail-with-body -m 60 -H @- -H 'Content-Type: application/json' \
  -d '{"model": "tiny-llama", "messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 16}' \
  "$endpoint/chat/completions"
echo
deployed=$((SECONDS - start))
echo "=== deployed in $deployed s; now the staged acceptance test (playbooks/acceptance.yml)"
accepted=0
ansible-playbook playbooks/acceptance.yml -i inventories/sim || accepted=$?
report=$(find "$repo/artifacts/acceptance" -mindepth 1 -maxdepth 1 -type d 2>/dev/null | sort | tail -1)
echo "=== deployed in $deployed s, accepted in $((SECONDS - start - deployed)) s"
echo "endpoint: $endpoint (OpenAI-compatible; key: vllm_cluster_api_key in inventories/sim/group_vars/all.yml)"
echo "record:   $record"
echo "acceptance report: $report/report.html (report.json, report.md)"
exit "$accepted"
