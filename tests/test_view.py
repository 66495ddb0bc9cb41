"""`jaxplace view` (issue 16): XProf over the run's trace, on 127.0.0.1 only, stopped by Ctrl-C.

The process's listening sockets are read from /proc: 127.0.0.1 is the only address it listens
on (xprof's own server would listen on every interface, and start a gRPC service on 0.0.0.0)."""
from __future__ import annotations

import gzip
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest
from conftest import SCRIPTS, child_env, jaxplace


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("view") / "run"
    proc = jaxplace("run", "--devices", "2", "--out", out, SCRIPTS / "visual_train.py")
    assert proc.returncode == 0, proc.stderr
    assert list(out.glob("plugins/profile/*/*.xplane.pb")), "the trace window wrote no trace"
    return out


def listening(pid: int) -> list[tuple[str, int]]:
    """(address, port) of every TCP socket ``pid`` listens on, from /proc."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            m = re.match(r"socket:\[(\d+)\]", os.readlink(f"/proc/{pid}/fd/{fd}"))
        except OSError:
            continue
        if m:
            inodes.add(m.group(1))
    out = []
    for table in ("tcp", "tcp6"):
        with open(f"/proc/{pid}/net/{table}") as fh:
            next(fh)
            for line in fh:
                f = line.split()
                if f[3] != "0A" or f[9] not in inodes:  # 0A = LISTEN
                    continue
                addr, port = f[1].split(":")
                raw = bytes.fromhex(addr)
                if table == "tcp":
                    out.append((".".join(str(b) for b in raw[::-1]), int(port, 16)))
                else:  # four little-endian 32-bit words
                    words = b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4))
                    import ipaddress

                    out.append((str(ipaddress.IPv6Address(words)), int(port, 16)))
    return out


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=60) as r:
            body = r.read()
            return r.status, gzip.decompress(body) if r.headers.get("Content-Encoding") == "gzip" else body
    except urllib.error.HTTPError as exc:
        return exc.code, b""


def start_view(path) -> tuple[subprocess.Popen, str]:
    """`jaxplace view PATH --port 0` in a subprocess, and the URL it says it serves."""
    proc = subprocess.Popen([sys.executable, "-m", "jaxplace_cli", "view", str(path), "--port", "0"],
                            env=child_env(), stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    url, seen, deadline = None, [], time.monotonic() + 120
    while url is None and time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        seen.append(line)
        m = re.search(r"(http://127\.0\.0\.1:\d+/)", line)
        url = m.group(1) if m else None
    if url is None:
        proc.kill()
        proc.wait()
    assert url, "".join(seen)
    return proc, url


def test_view_serves_xprof_on_localhost_only_and_stops_on_sigint(run_dir):
    proc, url = start_view(run_dir)
    try:
        status, body = _get(url)
        assert status == 200 and b"<html" in body.lower()
        status, body = _get(url + "data/plugin/profile/runs")
        assert status == 200
        session = next(run_dir.glob("plugins/profile/*")).name
        assert session in json.loads(body)
        assert _get(url + "data/plugin/profile/capture_profile")[0] == 404  # no reaching out
        socks = listening(proc.pid)
        port = int(url.rsplit(":", 1)[1].strip("/"))
        assert socks == [("127.0.0.1", port)]
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0
        assert "XProf stopped" in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_view_without_a_trace_says_why(tmp_path):
    out = tmp_path / "run"
    proc = jaxplace("run", "--devices", "2", "--no-trace", "-q", "--out", out, SCRIPTS / "visual_train.py")
    assert proc.returncode == 0, proc.stderr
    proc = jaxplace("view", out)
    assert proc.returncode == 2
    assert proc.stderr.startswith("jaxplace: error: ") and "--trace" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_view_tensorboard_when_not_installed(run_dir):
    import importlib.util

    if importlib.util.find_spec("tensorboard") is not None:
        pytest.skip("TensorBoard is installed here: --tensorboard would start it")
    proc = jaxplace("view", run_dir, "--tensorboard")
    assert proc.returncode == 2
    assert proc.stderr.startswith("jaxplace: error: TensorBoard is not installed")
