# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmserve maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""HAProxy's runtime API, parsed: server admin/operational state and live sessions. Pure; no socket I/O.

``show servers state`` carries the admin bits and the check-driven operational state; ``show stat`` carries
the sessions a server holds now (``scur``) and its queue (``qcur``). A drain waits for ``scur`` to reach 0.
"""

from __future__ import annotations

import csv

# srv_admin_state bits (HAProxy's SRV_ADMF_*): forced, inherited, config and resolver maintenance; drain.
_MAINT_BITS = 0x01 | 0x02 | 0x04 | 0x20
_DRAIN_BITS = 0x08 | 0x10
# srv_op_state (SRV_ST_*).
OP_STATES = {0: "stopped", 1: "starting", 2: "running", 3: "stopping"}
ADMIN_STATES = ("ready", "drain", "maint")


class HaproxyError(Exception):
    """An answer from the runtime API that names no such server or cannot be read."""


def admin_name(bits):
    if bits & _MAINT_BITS:
        return "maint"
    if bits & _DRAIN_BITS:
        return "drain"
    return "ready"


def parse_servers_state(text, backend, server):
    """{admin, op, admin_bits} of one server from ``show servers state <backend>``."""
    header = None
    for line in text.splitlines():
        if line.startswith("# "):
            header = line[2:].split()
            continue
        fields = line.split()
        if header is None or len(fields) < len(header) - 1:
            continue
        row = dict(zip(header, fields))
        if row.get("be_name") == backend and row.get("srv_name") == server:
            bits, op_state = int(row["srv_admin_state"]), int(row["srv_op_state"])
            return {"admin": admin_name(bits), "admin_bits": bits, "op": OP_STATES.get(op_state, str(op_state))}
    raise HaproxyError("no server %s in backend %s: %s" % (server, backend, text.strip()[:300] or "empty answer"))


def stat_rows(text):
    """``show stat`` (the stats page's CSV) as one dict per proxy or server row."""
    lines = text.splitlines()
    if not lines or not lines[0].startswith("# "):
        raise HaproxyError("show stat: unexpected answer %r" % text[:200])
    return list(csv.DictReader([lines[0][2:]] + lines[1:]))


def parse_stat(text, backend, server):
    """{sessions, queued, status} of one server from ``show stat`` (CSV)."""
    for row in stat_rows(text):
        if row.get("pxname") == backend and row.get("svname") == server:
            return {"sessions": int(row.get("scur") or 0), "queued": int(row.get("qcur") or 0),
                    "status": row.get("status", "")}
    raise HaproxyError("show stat names no server %s in backend %s" % (server, backend))


def set_state_command(backend, server, state):
    if state not in ADMIN_STATES:
        raise HaproxyError("state must be one of %s, not %r" % (", ".join(ADMIN_STATES), state))
    return "set server %s/%s state %s" % (backend, server, state)


def check_answer(command, answer):
    """The runtime API answers a successful ``set server`` with an empty line; anything else is its error."""
    if answer.strip():
        raise HaproxyError("%s: %s" % (command, answer.strip()))
