"""SYSTEMD STAND-IN for the GPU device, which has no systemd: run a unit the roles rendered as systemd would.

Reads the unit's [Service] section and executes its ExecStart (continuation lines joined, $VAR and ${VAR}
expanded from the unit's environment, as systemd does) with Environment= and EnvironmentFile= (a leading
'-' makes a missing file fine; later files win), User=/Group=, WorkingDirectory= and StateDirectory=.
It does not apply the sandboxing directives (ProtectSystem=, DevicePolicy=, ...): those need systemd.

  python3 run_unit.py start UNIT_FILE LOG_FILE   start detached, print {"pid": ...}
  python3 run_unit.py stop PID [TIMEOUT_S]       SIGTERM the process group, SIGKILL what is left after TIMEOUT_S
  python3 run_unit.py show UNIT_FILE             print the argv, environment and user it would run with
"""

import grp
import json
import os
import pwd
import re
import shlex
import signal
import subprocess
import sys
import time

_VAR = re.compile(r"\$\{(\w+)\}|\$(\w+)")


def parse_unit(text):
    """[Service] settings as {key: [values in order]}, continuation lines joined."""
    section, settings, pending = None, {}, ""
    for raw in text.splitlines():
        line = pending + raw.strip() if pending else raw.strip()
        if line.endswith("\\"):
            pending = line[:-1].strip() + " "
            continue
        pending = ""
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line
            continue
        if section == "[Service]" and "=" in line:
            key, value = line.split("=", 1)
            settings.setdefault(key.strip(), []).append(value.strip())
    return settings


def _env_file(path):
    env = {}
    with open(path) as handle:
        for line in handle:
            line = line.strip()
            if line and not line.startswith("#") and "=" in line:
                key, value = line.split("=", 1)
                env[key.strip()] = value.strip().strip('"')
    return env


def unit_environment(settings, base=None):
    """Environment= first, then every EnvironmentFile= in order (systemd: the files win)."""
    env = dict(base or {})
    for value in settings.get("Environment", []):
        for item in shlex.split(value):
            key, _sep, val = item.partition("=")
            env[key] = val
    for value in settings.get("EnvironmentFile", []):
        optional = value.startswith("-")
        path = value[1:] if optional else value
        if not os.path.exists(path):
            if optional:
                continue
            raise SystemExit("EnvironmentFile %s is missing (systemd would refuse to start the unit)" % path)
        env.update(_env_file(path))
    return env


def exec_argv(settings, env):
    """ExecStart as argv, with $VAR / ${VAR} expanded from the unit's environment."""
    starts = [value for value in settings.get("ExecStart", []) if value]
    if len(starts) != 1:
        raise SystemExit("expected one ExecStart, found %d" % len(starts))
    words = shlex.split(starts[0].lstrip("-@+!"))
    return [_VAR.sub(lambda m: env.get(m.group(1) or m.group(2), ""), word) for word in words]


def plan(unit_file):
    with open(unit_file) as handle:
        settings = parse_unit(handle.read())
    env = unit_environment(settings, {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                                      "LANG": "C.UTF-8"})
    # The device's own rules for NVLink multicast hold whatever the unit says.
    env.update({"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"})
    user = (settings.get("User") or ["root"])[-1]
    group = (settings.get("Group") or [user])[-1]
    return {"argv": exec_argv(settings, env), "env": env, "user": user, "group": group,
            "cwd": (settings.get("WorkingDirectory") or ["/"])[-1].lstrip("-"),
            "state_dirs": [os.path.join("/var/lib", d) for v in settings.get("StateDirectory", []) for d in v.split()]}


def _ids(user, group):
    return pwd.getpwnam(user).pw_uid, grp.getgrnam(group).gr_gid


def start(unit_file, log_file):
    spec = plan(unit_file)
    uid, gid = _ids(spec["user"], spec["group"])
    for directory in spec["state_dirs"]:
        os.makedirs(directory, exist_ok=True)
        os.chown(directory, uid, gid)

    def demote():
        os.setsid()
        os.setgroups([])
        os.setgid(gid)
        os.setuid(uid)

    log = open(log_file, "ab")
    proc = subprocess.Popen(spec["argv"], env=spec["env"], cwd=spec["cwd"], stdout=log, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, preexec_fn=demote)
    print(json.dumps({"pid": proc.pid, "argv": spec["argv"], "user": spec["user"]}))


def stop(pid, timeout=60.0):
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            os.killpg(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.5)
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def main(argv):
    if argv[:1] == ["start"] and len(argv) == 3:
        start(argv[1], argv[2])
    elif argv[:1] == ["stop"] and len(argv) in (2, 3):
        stop(int(argv[1]), float(argv[2]) if len(argv) == 3 else 60.0)
    elif argv[:1] == ["show"] and len(argv) == 2:
        spec = plan(argv[1])
        spec["env"] = dict((k, "<hidden>" if "KEY" in k else v) for k, v in spec["env"].items())
        print(json.dumps(spec, indent=1))
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
