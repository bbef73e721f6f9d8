#!/usr/bin/env bash
# Source me: makes (or reuses) the pinned controller venv and puts it first on PATH.
# LLMSERVE_VENV picks the location; a venv is reused only when its stamp matches the
# hash of requirements/, so a changed pin always rebuilds it.
# Sourced, so it leaves the caller's shell options alone and returns non-zero on failure.
_repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
_hash=$(cat "$_repo"/requirements/*.txt | sha256sum | cut -c1-16)
LLMSERVE_VENV=${LLMSERVE_VENV:-$_repo/.venv}

_have_venv_support() { python3 -c 'import ensurepip, venv' >/dev/null 2>&1; }

if ! command -v python3 >/dev/null 2>&1 || ! _have_venv_support; then
  # Fresh Debian 12 ships python3 without venv/ensurepip.
  echo "installing python3-venv (Debian) ..." >&2
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3 python3-venv >/dev/null; } || return 1
fi

if [ "$(cat "$LLMSERVE_VENV/.llmserve-stamp" 2>/dev/null)" != "$_hash" ]; then
  echo "creating venv $LLMSERVE_VENV (requirements $_hash) ..." >&2
  rm -rf "$LLMSERVE_VENV"
  python3 -m venv "$LLMSERVE_VENV" || return 1
  "$LLMSERVE_VENV/bin/python" -m pip install -q --disable-pip-version-check \
    -c "$_repo/requirements/constraints.txt" -r "$_repo/requirements/test.txt" || return 1
  echo "$_hash" >"$LLMSERVE_VENV/.llmserve-stamp"
fi
# The runbook package (llmserve-runbook) from this checkout, editable; reinstalled only when it points elsewhere.
if [ "$("$LLMSERVE_VENV/bin/python" -c 'import llmserve_runbook, os; print(os.path.dirname(os.path.dirname(llmserve_runbook.__file__)))' 2>/dev/null)" != "$_repo/runbook" ]; then
  "$LLMSERVE_VENV/bin/python" -m pip install -q --disable-pip-version-check --no-deps -e "$_repo/runbook" >&2 || return 1
fi
export PATH="$LLMSERVE_VENV/bin:$PATH"
export LLMSERVE_VENV

# Resolve llmserve.vllm_cluster.* to this checkout (ansible.cfg's collections_path).
mkdir -p "$_repo/.ansible/collections/ansible_collections/llmserve" &&
  ln -sfn "$_repo" "$_repo/.ansible/collections/ansible_collections/llmserve/vllm_cluster" || return 1
unset _repo _hash
