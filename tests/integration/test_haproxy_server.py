"""haproxy_server through the real ansible CLI against a real HAProxy on loopback (tests/run-all.sh installs it).

Two replicas stand behind HAProxy: small HTTP servers in this process that answer /health and hold /slow open for
a few seconds, so a drain has a request in flight to wait for.
"""

import http.server
import json
import os
import shutil
import socket
import subprocess
import threading
import time
import urllib.request

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SLOW_SECONDS = 6


class Replica(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 (http.server's name)
        if self.path.startswith("/slow"):
            time.sleep(float(self.path.rsplit("/", 1)[-1]) if self.path.count("/") > 1 else SLOW_SECONDS)
        body = b"ok\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


class Quiet(http.server.ThreadingHTTPServer):
    def handle_error(self, request, client_address):
        pass  # HAProxy's health checks close their connections early


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def lb(tmp_path_factory):
    haproxy = shutil.which("haproxy") or "/usr/sbin/haproxy"
    assert os.path.exists(haproxy), "HAProxy is not installed: apt-get install haproxy (tests/run-all.sh does)"
    root = tmp_path_factory.mktemp("haproxy")
    servers = [Quiet(("127.0.0.1", 0), Replica) for _index in range(2)]
    for server in servers:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    front, sock = free_port(), str(root / "admin.sock")
    (root / "haproxy.cfg").write_text("""global
    stats socket %s mode 600 level admin
defaults
    mode http
    timeout connect 1s
    timeout client 30s
    timeout server 30s
frontend api
    bind 127.0.0.1:%d
    default_backend vllm_replicas
backend vllm_replicas
    balance leastconn
    option httpchk GET /health
    default-server inter 300ms fastinter 200ms rise 2 fall 2
%s""" % (sock, front, "".join("    server r%d 127.0.0.1:%d check\n" % (i, s.server_address[1]) for i, s in enumerate(servers))))
    proc = subprocess.Popen([haproxy, "-f", str(root / "haproxy.cfg"), "-db"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        for _attempt in range(50):
            if os.path.exists(sock):
                break
            time.sleep(0.1)
        yield {"socket": sock, "url": "http://127.0.0.1:%d" % front}
    finally:
        proc.terminate()  # only the HAProxy this fixture started, by its PID
        proc.wait(10)
        for server in servers:
            server.shutdown()


def module(lb, *args, check=False):
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    argv = ["ansible", "localhost", "-o", "-m", "llmserve.vllm_cluster.haproxy_server",
            "-a", " ".join(["socket=%s backend=vllm_replicas" % lb["socket"]] + list(args))] + (["--check"] if check else [])
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, check=False, cwd=REPO)
    status, _sep, payload = proc.stdout.partition(" => ")
    assert payload, proc.stdout + proc.stderr
    return status.split("|")[-1].strip().rstrip("!"), json.loads(payload)


def test_reads_a_server_until_its_checks_pass(lb):
    deadline = time.monotonic() + 20
    while True:
        status, result = module(lb, "server=r0")
        if result["before"]["op"] == "running" or time.monotonic() > deadline:
            break
        time.sleep(0.3)
    assert status == "SUCCESS" and not result["changed"]
    assert result["before"]["admin"] == "ready" and result["before"]["op"] == "running"


def test_drain_waits_for_the_request_in_flight_then_ready_waits_for_checks(lb):
    module(lb, "server=r1 state=maint wait=false")  # every new request goes to r0 now
    answers = []

    def slow_request():
        status = urllib.request.urlopen(lb["url"] + "/slow", timeout=30).status
        answers.append((status, time.monotonic()))
    slow = threading.Thread(target=slow_request)
    slow.start()
    time.sleep(0.5)
    status, result = module(lb, "server=r0 state=drain")
    returned = time.monotonic()
    slow.join()
    assert status == "CHANGED" and result["before"]["sessions"] == 1
    assert result["after"]["admin"] == "drain" and result["after"]["sessions"] == 0
    # The module came back only once the request in flight had its answer.
    assert result["waited"] > 0 and answers and answers[0][0] == 200 and answers[0][1] <= returned + 0.5
    # Check mode reports the change and sends nothing.
    status, result = module(lb, "server=r0 state=ready", check=True)
    assert status == "CHANGED" and result["changed"] and module(lb, "server=r0")[1]["before"]["admin"] == "drain"
    for name in ("r0", "r1"):
        status, result = module(lb, "server=%s state=ready timeout=30" % name)
        assert status == "CHANGED" and result["after"]["admin"] == "ready" and result["after"]["op"] == "running"
    status, result = module(lb, "server=r0 state=ready")
    assert status == "SUCCESS" and not result["changed"]


def test_drain_timeout_and_unknown_server_fail_with_the_reason(lb):
    module(lb, "server=r1 state=maint wait=false")
    slow = threading.Thread(target=lambda: urllib.request.urlopen(lb["url"] + "/slow/12", timeout=30).read())
    slow.start()
    time.sleep(0.5)
    status, result = module(lb, "server=r0 state=drain timeout=1")
    slow.join()
    assert status == "FAILED" and "did not reach zero sessions within 1 s" in result["msg"]
    status, result = module(lb, "server=r9 state=drain")
    assert status == "FAILED" and "no server r9 in backend vllm_replicas" in result["msg"]
    for name in ("r0", "r1"):
        module(lb, "server=%s state=ready timeout=30" % name)
