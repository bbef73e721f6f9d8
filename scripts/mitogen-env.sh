#!/usr/bin/env bash
# Source me after scripts/venv.sh: every ansible-playbook (and llmserve-runbook) run from this shell then uses
# Mitogen's linear strategy, which runs modules through one persistent interpreter per host instead of an SSH
# round trip and a fresh Python per task. Plays keep the linear strategy's order and failure handling.
#   source scripts/venv.sh && source scripts/mitogen-env.sh
# Unset ANSIBLE_STRATEGY (and ANSIBLE_STRATEGY_PLUGINS) to go back to Ansible's own.
_plugins=$(python3 -c 'import ansible_mitogen, os; print(os.path.join(os.path.dirname(ansible_mitogen.__file__), "plugins", "strategy"))' 2>/dev/null) || {
  echo "mitogen is not installed in this Python ($(command -v python3)): source scripts/venv.sh first" >&2
  unset _plugins
  return 1
}
export ANSIBLE_STRATEGY_PLUGINS=$_plugins ANSIBLE_STRATEGY=mitogen_linear
unset _plugins
