# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmserve maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Is a replica ready: the one definition deploy, rolling restarts and acceptance use. Pure; no I/O.

Ready means a real one-token completion answered 200 (not /health: the API server answers /health before the
engine has sampled once). The wait gives up early when the replica's unit shows that it never will: its process is
gone (the unit is inactive or failed), or systemd is restarting it (auto-restart, a new main PID, more restarts
than when the wait began). A CUDA engine that died at its first sample left the old wait polling a refused port for
540 s while systemd restarted it in a loop (shared/fixtures/gpu/h200-device-20261206).
"""

from __future__ import annotations

import json

UNIT_PROPERTIES = ("ActiveState", "SubState", "MainPID", "NRestarts", "ExecMainStatus", "LoadState")


def completion_request(url, model, key):
    """(url, body bytes, headers) of the one-token completion that proves readiness."""
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = "Bearer %s" % key
    body = json.dumps({"model": model, "prompt": "ready", "max_tokens": 1}).encode()
    return url.rstrip("/") + "/v1/completions", body, headers


def parse_unit_show(text):
    """``systemctl show --property=...`` output -> {name: value}, numbers as int."""
    state = {}
    for line in text.splitlines():
        name, sep, value = line.partition("=")
        if not sep:
            continue
        state[name] = int(value) if value.isdigit() else value
    return state


def never_ready(first, now):
    """Why the unit shows the replica will not answer (a sentence), or None while it may still come up.

    ``first`` is the unit's state when the wait began, ``now`` its state at this attempt.
    """
    if now.get("LoadState") == "not-found":
        return "the unit is not loaded (no such unit)"
    active, sub = now.get("ActiveState"), now.get("SubState")
    if active in ("inactive", "failed"):
        return "its process is gone: the unit is %s (%s, exit status %s)" % (active, sub, now.get("ExecMainStatus"))
    if sub == "auto-restart":
        return "systemd is restarting it: its process exited (status %s)" % now.get("ExecMainStatus")
    if now.get("NRestarts", 0) > first.get("NRestarts", 0):
        return "systemd restarted it %d time(s) since the wait began" % (now["NRestarts"] - first.get("NRestarts", 0))
    before, pid = first.get("MainPID", 0), now.get("MainPID", 0)
    if before and pid and pid != before:
        return "its main process changed (%d -> %d): it was restarted" % (before, pid)
    return None


def wait(probe, read_unit, clock, sleep, timeout, interval):
    """Poll ``probe()`` -> (ok, detail) until it answers, the unit shows it never will, or ``timeout`` passes.

    ``read_unit()`` -> the unit's state dict, or None where no unit is watched. Returns
    {ready, waited_s, attempts, detail, reason}: reason is None when ready, else why the wait ended.
    """
    started = clock()
    first = read_unit()
    attempts = 0
    while True:
        attempts += 1
        ok, detail = probe()
        waited = round(clock() - started, 2)
        if ok:
            return {"ready": True, "waited_s": waited, "attempts": attempts, "detail": detail, "reason": None}
        now = read_unit()
        reason = never_ready(first, now) if first is not None and now is not None else None
        if reason is None and waited >= timeout:
            reason = "no completion within %s s" % timeout
        if reason:
            return {"ready": False, "waited_s": waited, "attempts": attempts, "detail": detail, "reason": reason,
                    "unit": now}
        sleep(interval)
