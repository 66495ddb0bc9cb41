"""The live status line of `jaxplace run` (issue 16), on a real pseudo-terminal: drawn on
stderr's last row, outside the scroll region, so the script's own lines stay whole and in
order (checked on a terminal emulator's screen, pyte); nothing when stderr is not a
terminal, nothing with --quiet."""
from __future__ import annotations

import fcntl
import os
import pty
import struct
import subprocess
import sys
import termios

import pyte
from conftest import SCRIPTS, child_env

LINES = 30  # tests/scripts/progress_lines.py prints "line 0" .. "line 29"
ROWS, COLS = 24, 120


def _run(tmp_path, *options, stderr_tty=True):
    """`jaxplace run` with stdout (and stderr) on a pty: (exit code, pty bytes, stderr pipe bytes)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", ROWS, COLS, 0, 0))
    proc = subprocess.Popen([sys.executable, "-m", "jaxplace_cli", "run", *options, "--out", tmp_path / "run",
                             SCRIPTS / "progress_lines.py"], stdin=slave, stdout=slave,
                            stderr=slave if stderr_tty else subprocess.PIPE, env=child_env(), close_fds=True)
    os.close(slave)
    out = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: every writer closed the pty
            break
        if not chunk:
            break
        out += chunk
    err = proc.stderr.read() if proc.stderr else b""
    os.close(master)
    return proc.wait(timeout=120), out, err


def test_status_line_on_a_terminal_never_mixes_into_the_output(tmp_path):
    code, out, _ = _run(tmp_path)
    assert code == 0
    text = out.decode()
    assert f"\x1b[1;{ROWS - 1}r" in text and "\x1b[r" in text  # region set, then reset
    assert "busiest: progress_lines.py:15 h2d" in text  # the upload's line
    assert " ops · h2d " in text
    screen = pyte.HistoryScreen(COLS, ROWS, history=500)
    stream = pyte.ByteStream(screen)
    seen = []
    # feed chunk by chunk and check the screen as it goes: the script's lines are never hit
    for part in out.split(b"\n"):
        stream.feed(part + b"\n")
        rows = [line.rstrip() for line in screen.display]
        seen.append(rows)
        ours = [r for r in rows if r.startswith("line ")]
        assert all(r in {f"line {i}" for i in range(LINES)} for r in ours), rows
    history = ["".join(c.data for c in line.values()).rstrip() for line in screen.history.top]
    lines = [r for r in history + [r.rstrip() for r in screen.display] if r.startswith("line ")]
    assert lines == [f"line {i}" for i in range(LINES)]
    assert any(r[-1].startswith("jaxplace · ") for r in seen)  # drawn on the last row
    assert not screen.display[-1].startswith("jaxplace · ")  # and erased at the end
    assert any("jaxplace: complete (exit 0)" in r for r in screen.display)


def test_no_status_when_stderr_is_not_a_terminal(tmp_path):
    code, out, err = _run(tmp_path, stderr_tty=False)
    assert code == 0
    assert b"\x1b" not in out and b"\x1b" not in err
    assert b"jaxplace \xc2\xb7" not in err and b"jaxplace: complete" in err
    assert out.decode().replace("\r\n", "\n") == "".join(f"line {i}\n" for i in range(LINES))


def test_no_status_with_quiet(tmp_path):
    code, out, _ = _run(tmp_path, "--quiet")
    assert code == 0
    assert b"\x1b" not in out and b"jaxplace \xc2\xb7" not in out
    text, script = out.decode().replace("\r\n", "\n"), "".join(f"line {i}\n" for i in range(LINES)) + "done 31.0\n"
    # after the script, -q prints the verdict only when it has a warning or an error (issue 26);
    # this script's one finding is an info (its jitted step gets new host data each call: a loader)
    assert text == script


def _pty(argv) -> tuple[int, bytes]:
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", ROWS, COLS, 0, 0))
    proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=child_env(), close_fds=True)
    os.close(slave)
    out = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    os.close(master)
    return proc.wait(timeout=120), out


def test_report_shows_its_stages_on_a_terminal(tmp_path, sample_run):
    run = sample_run("pingpong_eager", devices=2).run  # any run: recorded once for the session
    code, out = _pty([sys.executable, "-m", "jaxplace_cli", "report", run, "-o", tmp_path / "r.html"])
    assert code == 0
    # drawn when it starts and, last, when it stops (stages in between may pass within a refresh)
    assert b"jaxplace: opening" in out and b"jaxplace: writing the page" in out
    screen = pyte.Screen(COLS, ROWS)
    pyte.ByteStream(screen).feed(out)
    text = " ".join("".join(screen.display).split())  # (a long path wraps)
    assert text == (f"jaxplace: report written to {tmp_path / 'r.html'} ({os.path.getsize(tmp_path / 'r.html') / 1024:.1f} "
                    "KiB); open it in a browser")  # the progress line is gone: transient
