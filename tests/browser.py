"""A real headless Chromium for the HTML report's tests, driven over the DevTools protocol.

Debian's ``chromium`` package; ``find_chromium()`` installs it with apt-get when it is missing
and this is a root shell with apt (the test set-up), else returns None and the tests skip
saying why. The protocol runs over ``--remote-debugging-pipe`` (fds 3 and 4 of the browser,
NUL-separated JSON): no port, no websocket library, nothing listening.
"""
from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zlib

NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def _which():
    return next((p for p in map(shutil.which, NAMES) if p), None)


def find_chromium() -> tuple[str | None, str]:
    """(path, '') or (None, why not)."""
    exe = _which()
    if exe:
        return exe, ""
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        return None, "chromium is not installed and this is not a root shell with apt-get to install it"
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for argv in (["apt-get", "update"], ["apt-get", "install", "-y", "--no-install-recommends", "chromium"]):
        proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=900)
        if proc.returncode != 0:
            return None, f"`{' '.join(argv)}` failed: {(proc.stderr or proc.stdout).strip().splitlines()[-1:]}"
    exe = _which()
    return (exe, "") if exe else (None, "apt-get installed chromium but no chromium binary is on PATH")


class Browser:
    """One headless Chromium; ``open(url)`` gives a Page. Use as a context manager."""

    def __init__(self, exe: str, width: int = 1280, height: int = 1000):
        self.profile = tempfile.mkdtemp(prefix="jaxplace-chromium-")
        to_r, self._to_w = os.pipe()  # we write commands, the browser reads fd 3
        self._from_r, from_w = os.pipe()  # the browser writes fd 4
        args = [exe, "--headless=new", "--no-sandbox", "--disable-gpu", "--remote-debugging-pipe",
                f"--user-data-dir={self.profile}", "--no-first-run", "--no-default-browser-check",
                "--disable-extensions", "--disable-background-networking", "--disable-component-update",
                "--disable-sync", "--disable-default-apps", "--mute-audio", "--hide-scrollbars",
                f"--window-size={width},{height}", "about:blank"]
        # a small Python puts the pipe ends on fds 3 and 4 (whatever their numbers here), then
        # becomes the browser
        boot = ("import os, sys; r, w = int(sys.argv[1]), int(sys.argv[2]); os.dup2(r, 3); os.dup2(w, 4); "
                "[os.close(f) for f in (r, w) if f not in (3, 4)]; os.execv(sys.argv[3], sys.argv[3:])")
        self.proc = subprocess.Popen([sys.executable, "-c", boot, str(to_r), str(from_w), *args],
                                     pass_fds=(to_r, from_w), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_r)
        os.close(from_w)
        self._buf = b""
        self._id = 0
        self.events: list[dict] = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self) -> None:
        try:
            self.send("Browser.close", timeout=10)
        except Exception:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for fd in (self._to_w, self._from_r):
            try:
                os.close(fd)
            except OSError:
                pass
        shutil.rmtree(self.profile, ignore_errors=True)

    def _read_message(self, deadline: float) -> dict:
        import select

        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._from_r], [], [], left)[0]:
                raise TimeoutError("no answer from chromium")
            chunk = os.read(self._from_r, 1 << 20)
            if not chunk:
                raise EOFError("chromium closed the DevTools pipe")
            self._buf += chunk
        msg, self._buf = self._buf.split(b"\0", 1)
        return json.loads(msg)

    def send(self, method: str, params: dict | None = None, session: str | None = None, timeout: float = 60):
        self._id += 1
        msg = {"id": self._id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._to_w, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            m = self._read_message(deadline)
            if m.get("id") == self._id:
                if "error" in m:
                    raise RuntimeError(f"{method}: {m['error']}")
                return m.get("result", {})
            self.events.append(m)

    def wait_event(self, method: str, timeout: float = 60) -> dict:
        deadline = time.monotonic() + timeout
        for i, m in enumerate(self.events):
            if m.get("method") == method:
                return self.events.pop(i)
        while True:
            m = self._read_message(deadline)
            if m.get("method") == method:
                return m
            self.events.append(m)

    def open(self, url: str) -> Page:
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        page = Page(self, session)
        for domain in ("Page", "Runtime", "Log", "Network"):
            page.send(f"{domain}.enable")
        self.events.clear()
        page.send("Page.navigate", {"url": url})
        self.wait_event("Page.loadEventFired")
        page.send("Page.bringToFront")  # a background tab gets no mouse input
        return page


class Page:
    def __init__(self, browser: Browser, session: str):
        self.browser, self.session = browser, session

    def send(self, method: str, params: dict | None = None):
        return self.browser.send(method, params, self.session)

    def eval(self, expression: str):
        r = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True})
        if "exceptionDetails" in r:
            raise RuntimeError(f"{expression}: {r['exceptionDetails']}")
        return r["result"].get("value")

    def mouse(self, kind: str, x: float, y: float) -> None:
        params = {"type": kind, "x": x, "y": y}
        if kind in ("mousePressed", "mouseReleased"):
            params.update(button="left", clickCount=1)
        self.send("Input.dispatchMouseEvent", params)

    def center_of(self, selector: str) -> tuple[float, float]:
        box = self.eval(f"(() => {{ const e = document.querySelector({json.dumps(selector)}); e.scrollIntoView("
                        "{block: 'center'}); const r = e.getBoundingClientRect(); return [r.left + r.width / 2, "
                        "r.top + Math.min(r.height / 2, 12)]; })()")
        return box[0], box[1]

    def screenshot(self, selector: str | None = None) -> bytes:
        params = {"format": "png"}
        if selector:
            r = self.eval(f"(() => {{ const e = document.querySelector({json.dumps(selector)}); e.scrollIntoView(); "
                          "const r = e.getBoundingClientRect(); return [r.left + scrollX, r.top + scrollY, r.width, r.height]; })()")
            params["clip"] = {"x": r[0], "y": r[1], "width": r[2], "height": r[3], "scale": 1}
            params["captureBeyondViewport"] = True
        return base64.b64decode(self.send("Page.captureScreenshot", params)["data"])

    def problems(self) -> list[str]:
        """Console errors, uncaught exceptions and error log entries so far."""
        out = []
        for m in self.browser.events:
            p = m.get("params", {})
            if m.get("method") == "Runtime.exceptionThrown":
                out.append(f"exception: {p.get('exceptionDetails', {}).get('exception', {}).get('description')}")
            elif m.get("method") == "Runtime.consoleAPICalled" and p.get("type") in ("error", "warning", "assert"):
                out.append(f"console.{p['type']}: {[a.get('value', a.get('description')) for a in p.get('args', [])]}")
            elif m.get("method") == "Log.entryAdded" and p.get("entry", {}).get("level") in ("error", "warning"):
                out.append(f"log {p['entry']['level']}: {p['entry'].get('text')} {p['entry'].get('url', '')}")
        return out

    def requests(self) -> list[str]:
        return [m["params"]["request"]["url"] for m in self.browser.events
                if m.get("method") == "Network.requestWillBeSent"]


def png_pixels(data: bytes) -> tuple[int, int, list[bytes]]:
    """(width, height, rows of RGB(A) bytes) of an 8-bit, non-interlaced PNG (what Chromium writes)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, ihdr = 8, b"", None
    while pos < len(data):
        n = int.from_bytes(data[pos:pos + 4], "big")
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            ihdr = body
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    w, h = int.from_bytes(ihdr[0:4], "big"), int.from_bytes(ihdr[4:8], "big")
    depth, color, interlace = ihdr[8], ihdr[9], ihdr[12]
    assert depth == 8 and color in (2, 6) and interlace == 0, (depth, color, interlace)
    bpp = 3 if color == 2 else 4
    raw, stride, rows, prev = zlib.decompress(idat), w * bpp, [], bytearray(w * bpp)
    for y in range(h):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(b"".join(bytes(line[j:j + 3]) for j in range(0, stride, bpp)))  # RGB
        prev = line
    return w, h, rows
