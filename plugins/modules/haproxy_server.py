#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmserve maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: haproxy_server
short_description: Drain, take out or put back one HAProxy server through the runtime API
version_added: 0.1.0
description:
  - Sets the admin state of one server of a backend through HAProxy's admin socket (C(set server <backend>/<server>
    state ...)), the change a rolling restart makes before and after each replica.
  - With O(wait=true), V(drain) and V(maint) wait until the server holds no session (requests in flight finish
    where they are), and V(ready) waits until its health checks pass and it takes traffic again.
  - Runtime state only; a reload of HAProxy resets it to the configuration.
author:
  - llmserve maintainers (@llmserve)
options:
  socket:
    description: HAProxy's admin socket (C(stats socket ... level admin)).
    type: path
    default: /run/haproxy/admin.sock
  backend:
    description: The backend that holds the server.
    type: str
    required: true
  server:
    description: The server's name in that backend.
    type: str
    required: true
  state:
    description: V(drain) takes no new requests and finishes the ones it holds, V(maint) takes none at all,
      V(ready) takes traffic once its checks pass. Omitted, the module only reads the server.
    type: str
    choices: [ready, drain, maint]
  wait:
    description: Wait for the sessions to end (V(drain), V(maint)) or for the checks to pass (V(ready)).
    type: bool
    default: true
  timeout:
    description: Seconds to wait before failing.
    type: int
    default: 600
attributes:
  check_mode:
    support: full
    description: Reads the server's state and reports whether it would change; sends no command and does not wait.
  diff_mode:
    support: full
    description: The admin state before and after.
"""

EXAMPLES = r"""
- name: Drain replica r0 and wait for its requests in flight
  llmserve.vllm_cluster.haproxy_server:
    backend: vllm_replicas
    server: r0
    state: drain

- name: Read r1's state and sessions
  llmserve.vllm_cluster.haproxy_server:
    backend: vllm_replicas
    server: r1
  register: r1_state

- name: Put r0 back once its checks pass
  llmserve.vllm_cluster.haproxy_server:
    backend: vllm_replicas
    server: r0
    state: ready
    timeout: 900
"""

RETURN = r"""
before:
  description: The server before the change.
  returned: always
  type: dict
  sample: {"admin": "ready", "op": "running", "sessions": 3, "queued": 0, "status": "UP"}
after:
  description: The server when the module finished (after its wait).
  returned: always
  type: dict
  sample: {"admin": "drain", "op": "running", "sessions": 0, "queued": 0, "status": "DRAIN"}
waited:
  description: Seconds spent waiting for sessions to end or checks to pass.
  returned: always
  type: float
  sample: 4.2
"""

import socket
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.llmserve.vllm_cluster.plugins.module_utils import _haproxy

POLL_SECONDS = 0.5


def ask(path, command):
    """One command on the runtime API (non-interactive: HAProxy answers and closes)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(10)
        conn.connect(path)
        conn.sendall(command.encode() + b"\n")
        chunks = []
        while True:
            chunk = conn.recv(65536)
            if not chunk:
                break
            chunks.append(chunk)
    return b"".join(chunks).decode("utf-8", "replace")


def read_server(path, backend, server):
    state = _haproxy.parse_servers_state(ask(path, "show servers state %s" % backend), backend, server)
    state.update(_haproxy.parse_stat(ask(path, "show stat"), backend, server))
    return state


def settled(state, wanted):
    if wanted == "ready":
        return state["op"] == "running" and state["admin"] == "ready"
    return state["sessions"] == 0 and state["queued"] == 0


def main():
    module = AnsibleModule(
        argument_spec={
            "socket": {"type": "path", "default": "/run/haproxy/admin.sock"},
            "backend": {"type": "str", "required": True},
            "server": {"type": "str", "required": True},
            "state": {"type": "str", "choices": list(_haproxy.ADMIN_STATES)},
            "wait": {"type": "bool", "default": True},
            "timeout": {"type": "int", "default": 600},
        },
        supports_check_mode=True,
    )
    params = module.params
    path, backend, server, wanted = params["socket"], params["backend"], params["server"], params["state"]
    try:
        before = read_server(path, backend, server)
    except (OSError, _haproxy.HaproxyError) as exc:
        module.fail_json(msg="cannot read %s/%s from HAProxy's admin socket %s: %s" % (backend, server, path, exc))
    changed = wanted is not None and before["admin"] != wanted
    result = {"changed": changed, "before": before, "after": before, "waited": 0.0,
              "diff": {"before": "admin state: %s\n" % before["admin"], "after": "admin state: %s\n" % (wanted or before["admin"])}}
    if module.check_mode or wanted is None:
        module.exit_json(**result)
    try:
        if changed:
            command = _haproxy.set_state_command(backend, server, wanted)
            _haproxy.check_answer(command, ask(path, command))
        started = time.monotonic()
        state = read_server(path, backend, server)
        while params["wait"] and not settled(state, wanted):
            if time.monotonic() - started > params["timeout"]:
                result.update(after=state, waited=round(time.monotonic() - started, 1))
                module.fail_json(
                    msg="%s/%s did not reach %s within %d s (timeout): %s" % (
                        backend, server, "passing checks" if wanted == "ready" else "zero sessions", params["timeout"], state),
                    **result)
            time.sleep(POLL_SECONDS)
            state = read_server(path, backend, server)
    except (OSError, _haproxy.HaproxyError) as exc:
        module.fail_json(msg="HAProxy's admin socket %s: %s" % (path, exc), **result)
    result.update(after=state, waited=round(time.monotonic() - started, 1))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
