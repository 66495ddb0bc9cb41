"""Issue 26: the first minutes of a new user, at the command line (items 2-5 of the CLI part;
the install is tests/test_first_minutes_install.py).

Reading commands run in this process (``cli``); so do ``jaxplace`` alone and the usage errors of
``run``/``launch``, which end before anything is imported or run (``_main``). Two ``jaxplace
run`` subprocesses: the verdict at a run's end, and options written after the script.
"""
from __future__ import annotations

import contextlib
import io
import os
import pty
import re
import select
import subprocess
import sys

import pytest
from conftest import SAMPLES, child_env, cli, jaxplace, python

COMMANDS = ("run", "launch", "audit", "devices", "suggest", "diff", "report", "export", "view")


def _main(*args) -> subprocess.CompletedProcess:
    """``jaxplace ARGS`` through ``cli.main.main`` here: for what ends before any work starts."""
    from jaxplace_cli.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    code = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(list(args))
        except SystemExit as exc:
            code = exc.code or 0
    return subprocess.CompletedProcess(args, code, out.getvalue(), err.getvalue())


# -- help and errors (item 5) ---------------------------------------------------------------------

def test_jaxplace_alone_lists_the_commands():
    """As memray does: the commands, and exit 2 (no command is a usage error)."""
    proc = _main()
    assert proc.returncode == 2 and proc.stdout == ""
    listed = re.findall(r"^  (\w+) ", proc.stderr.split("Commands:")[1], re.M)
    assert tuple(listed) == COMMANDS, proc.stderr


@pytest.mark.parametrize("command", [c for c in COMMANDS if c not in ("run", "launch")])
def test_help_names_every_value_alike(command):
    """One style: a value is an uppercase name (PATH, N, FILE, SIZE), never typer's type labels
    (`<int range>`, `<list[str]>`, `path <path>`)."""
    proc = _main(command, "--help")
    assert proc.returncode == 0, proc.stderr
    assert not re.search(r"<(int|float|str|path|list|bool|text)\b[^>]*>", proc.stdout), proc.stdout
    for name, value in re.findall(r"^  (?:-\w, )?(--[\w-]+) (\S+)(?: {2,}|$)", proc.stdout, re.M):
        assert re.fullmatch(r"[A-Z][A-Z_]*", value), (name, value)
    assert not re.search(r"^  [a-z]+ ", proc.stdout.split("Arguments:")[-1].split("Options:")[0], re.M)


@pytest.mark.parametrize("args, says", [
    (("report", "RUN", "--top", "0"), "--top must be 1 or more, not 0"),
    (("audit", "RUN", "--top=abc"), "--top must be a whole number, not 'abc'"),
    (("audit", "RUN", "--max-findings", "0"), "--max-findings must be 1 or more, not 0"),
    (("view", "RUN", "--port", "70000"), "--port must be 65535 or less, not 70000"),
])
def test_an_option_out_of_range_is_said_in_jaxplace_words(args, says):
    proc = _main(*args)
    assert (proc.returncode, proc.stdout, proc.stderr) == (2, "", f"jaxplace: error: {says}\n")


def test_suggest_on_a_missing_path_says_it_does_not_exist(tmp_path):
    proc = cli("suggest", tmp_path / "nope")
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == (f"jaxplace: error: {tmp_path / 'nope'} does not exist; pass a run directory "
                           "made by `jaxplace run`\n")


@pytest.mark.parametrize("command", ["run", "launch"])
def test_run_and_launch_say_which_option_was_meant(command, tmp_path):
    args = ["-n", "2"] if command == "launch" else []
    proc = _main(command, *args, "--devcies", "2", tmp_path / "train.py")
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr == ("jaxplace: error: unrecognized arguments: --devcies (did you mean '--devices'?)\n")


# -- options after the script (item 2) ------------------------------------------------------------

ARGPARSE_SCRIPT = """\
import argparse, sys
print(sys.argv[1:])
parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int)
parser.parse_args()
"""


def test_the_script_keeps_what_follows_it_and_a_double_dash_as_python_does(tmp_path):
    """Everything after the script is the script's, a `--` included: python passes it on."""
    from jaxplace_cli.cli.run import parse

    script = tmp_path / "train.py"
    script.write_text("import sys; print(sys.argv[1:])\n")
    for args in (["--", "--steps", "5"], ["--steps", "5", "--", "--policy", "rr"], ["--policy=rr", "-q"]):
        ns = parse([str(script), *args])
        assert ns["args"] == args
        assert python(script, *args).stdout == f"{args}\n"  # what python gives the script
    assert parse([str(script), "--steps", "5", "--", "--policy", "rr"])["misplaced"] == []
    assert parse([str(script), "--policy=rr", "-q", "--help"])["misplaced"] == ["--policy=rr"]
    assert parse([str(script), "--policy", "rr", "--devices", "4", "--out", "-x"])["misplaced"] == \
        ["--policy", "rr", "--devices", "4", "--out"]


def test_jaxplace_options_after_the_script_are_named_and_no_empty_run_is_offered(tmp_path):
    """`jaxplace run train.py --policy rr --devices 4`: python's rule gives them to the script
    (whose argparse fails before any JAX work); run says where they went, and offers no audit
    of the empty run."""
    script = tmp_path / "train.py"
    script.write_text(ARGPARSE_SCRIPT)
    proc = jaxplace("run", "--no-trace", "--out", tmp_path / "run", script, "--policy", "rr", "--devices", "4")
    plain = python(script, "--policy", "rr", "--devices", "4")
    assert (proc.returncode, proc.stdout) == (plain.returncode, plain.stdout) == (2, "['--policy', 'rr', '--devices', '4']\n")
    lines = proc.stderr.splitlines()
    assert lines[1] == (f"jaxplace: --policy rr --devices 4 came after {script} and went to the script; "
                        "put jaxplace options before it")
    assert plain.stderr.splitlines() == lines[2:4]  # the script's own usage error, as python printed it
    assert lines[4:] == ["jaxplace: failed (exit 2): recorded 0 ops, transfers: h2d 0, d2h 0, d2d 0",
                         f"jaxplace: the script ended (failed, exit 2) before any JAX work was recorded: "
                         f"nothing to audit in {tmp_path / 'run'}"]
    assert "audit it" not in proc.stderr and "jaxplace audit" not in proc.stderr


# -- run ends with the verdict (item 3) -----------------------------------------------------------

def test_run_ends_with_the_audit_verdict_and_each_finding(tmp_path, sample_run):
    out = tmp_path / "run"
    proc = jaxplace("run", "--no-trace", "--devices", "2", "--out", out, SAMPLES / "pingpong_eager.py",
                    cwd=tmp_path)  # a finding's file is shown below the working directory: here, in full
    assert proc.returncode == 0, proc.stderr
    quiet = sample_run("pingpong_eager", devices=2)  # the same, with -q
    assert proc.stdout == quiet.stdout and "jaxplace" not in proc.stdout  # stdout is the script's alone
    # wide enough that the text report cannot wrap its first line (its width is the terminal's)
    first = cli("audit", out, "--format", "text", env={"COLUMNS": "400"}).stdout.splitlines()[0]
    assert first.startswith("findings: 1 error · biggest transfer cost: 8.0 MiB d2d at pingpong_eager.py:25")
    lines = proc.stderr.splitlines()
    assert f"jaxplace: {first}" in lines, (first, proc.stderr)
    i = lines.index(f"jaxplace: {first}")
    error = lines[i + 1]
    assert error.startswith(f"jaxplace:   error {SAMPLES / 'pingpong_eager.py'}:25 pingpong: data bounced "
                            "between cpu:0 and cpu:1: 8 returns to a device it had left"), error
    assert error.endswith(" (cost: 8× · 8.0 MiB)"), error
    assert lines[i + 2:] == [f"jaxplace: run saved to {out}; details: jaxplace audit {out}; "
                             f"HTML: jaxplace report {out}"]
    # -q: the verdict in one line (a clean run, or a failed script, stays silent: test_report_layout,
    # test_tracebacks)
    assert quiet.stderr == f"jaxplace: {first} (jaxplace audit {quiet.run})\n"


# -- report: --force, --open (item 4) -------------------------------------------------------------

def test_report_never_replaces_a_file_without_force(tmp_path, sample_run):
    run = sample_run("pingpong_eager", devices=2).run
    page = tmp_path / "r.html"
    page.write_text("mine")
    proc = cli("report", run, "-o", page)
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr == f"jaxplace: error: {page} exists; pass --force to replace it, or -o another file\n"
    assert page.read_text() == "mine"
    default = cli("report", run, cwd=tmp_path)  # ./<run name>.html: the same rule
    assert default.returncode == 0 and (tmp_path / "run.html").exists()
    again = cli("report", run, cwd=tmp_path)
    assert again.returncode == 2 and again.stderr.startswith("jaxplace: error: run.html exists; pass --force")
    forced = cli("report", run, "-o", page, "--force", "--open")  # not a terminal: no browser
    assert forced.returncode == 0, forced.stderr
    assert page.read_text().startswith("<!doctype html>")
    assert forced.stderr.splitlines()[0] == "jaxplace: --open: not on a terminal, so no browser was started"


def test_report_open_starts_the_browser_on_a_terminal(tmp_path, sample_run):
    """$BROWSER (which Python's webbrowser honours) is a command that writes the URL it got."""
    run = sample_run("pingpong_eager", devices=2).run
    page, seen = tmp_path / "r.html", tmp_path / "browser-saw"
    env = child_env(BROWSER=f"/bin/sh -c 'echo %s > {seen}'")
    leader, follower = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "jaxplace_cli", "report", str(run), "-o", str(page), "--open"],
                            stdin=subprocess.DEVNULL, stdout=follower, stderr=follower, env=env)
    os.close(follower)
    text = b""
    while True:
        ready, _, _ = select.select([leader], [], [], 120)
        try:
            chunk = os.read(leader, 4096) if ready else b""
        except OSError:  # EIO: the child closed the terminal
            chunk = b""
        if not chunk:
            break
        text += chunk
    os.close(leader)
    assert proc.wait(timeout=120) == 0, text
    assert seen.read_text().strip() == page.resolve().as_uri()
    assert b"opened in your browser" in text


def test_the_verdict_lines_name_each_error_and_warning_once():
    """The five worst error/warning findings, then how many more; infos are left to audit."""
    from jaxplace_cli.analysis.rules.base import Finding
    from jaxplace_cli.report.run_lines import finding_lines

    class Result:
        findings = [Finding("r", "info", "an info", "/x/a.py", 1)] + [
            Finding(f"w{i}", "warning", f"warn {i}", "/x/a.py", 10 + i, count=i, bytes=1024 * i) for i in range(6)
        ] + [Finding("e", "error", "bad", "", 0)]

    lines = finding_lines(Result())
    assert lines[0] == "jaxplace:   error (whole program) e: bad"
    assert lines[1] == "jaxplace:   warning /x/a.py:15 w5: warn 5 (cost: 5× · 5.0 KiB)"
    assert len(lines) == 6 and lines[-1] == "jaxplace:   ... and 2 more (jaxplace audit lists them)"


def test_readme_first_screen_says_how_to_reach_jaxplace():
    from conftest import REPO

    first = "\n".join((REPO / "README.md").read_text().splitlines()[:15])
    assert "source .venv/bin/activate" in first and ".venv/bin/jaxplace" in first
    for doc in ("README.md", "docs/ci.md"):
        assert "pip install jaxplace" not in (REPO / doc).read_text()
    make = (REPO / "Makefile").read_text()
    assert make.count("$(HOW_TO_USE)") == 2  # install and demo end with it
