"""`jaxplace view`: the run's ``jax.profiler`` trace in XProf, served on 127.0.0.1 only.

XProf's own entry point (``xprof --logdir``, ``xprof.server.start_server``) binds a wildcard
address (``::`` / ``0.0.0.0``: every interface of the machine) and starts a gRPC worker
service on ``0.0.0.0:50051``. This command uses neither: it loads XProf's profile plugin
(``ProfilePluginLoader``) itself and serves the plugin's routes from a cheroot server bound
to ``127.0.0.1`` — the only socket it opens — without the route that makes the server
capture a profile from another address (``/capture_profile``). Ctrl-C stops it cleanly.

``--tensorboard`` runs TensorBoard instead (when installed), with ``--host 127.0.0.1``.

Quiet (issue 26: 239 lines of XProf logs for four page loads): everything XProf and its C++
converters write to stderr goes to a new ``jaxplace-xprof-*.log`` in the temp directory, never
into the directory served (it is input: a ``xprof.log`` planted there as a symlink would have
been followed and appended to). File descriptor 2 is pointed there while XProf loads and
serves; jaxplace's own lines go to the terminal's stderr, and an error restores it before it
is said. A clean stop (Ctrl-C, SIGTERM) removes the log, so views leave nothing behind; an
error keeps it for reading. The sessions are looked for at most ``MAX_SESSION_DEPTH`` levels down, without
recursion (a tree 1,100 levels deep raised RecursionError in ``glob('**')`` and then hung on
the server left running). The URL printed opens the trace viewer
on the newest trace session, which works offline; XProf's other tools draw their charts with
Google Charts from www.gstatic.com and show none without a network.
"""
from __future__ import annotations

import sys
from pathlib import Path

import typer

from jaxplace_cli.model.errors import UsageError

HOST = "127.0.0.1"
PREFIX = "/data/plugin/profile"
BLOCKED = ("/capture_profile",)  # would make the server reach out to another address


def view(
    path: Path = typer.Argument(..., metavar="PATH", help="A jaxplace run directory, a launch job directory (every process's "
                                          "trace) or a jax.profiler log dir."),
    port: int = typer.Option(8791, "--port", min=0, max=65535, metavar="PORT",
                             help="Port on 127.0.0.1 (0: any free port; a busy port falls back to a free one)."),
    tensorboard: bool = typer.Option(False, "--tensorboard", help="Serve with TensorBoard instead of XProf (needs tensorboard)."),
) -> None:
    """Serve the run's jax.profiler trace in XProf, on 127.0.0.1 only.

    XProf's trace viewer, op profile and memory tools over the run's trace window; prints the
    URL; Ctrl-C stops it.

    For jaxplace's own timeline of every op and transfer: jaxplace report RUN -o report.html.
    """
    logdir = profile_logdir(path)
    if tensorboard:
        raise typer.Exit(_tensorboard(logdir, port))
    url_of = trace_viewer_url(logdir)  # before the server: an error here leaves none running
    with QuietStderr() as out:
        server = xprof_server(logdir, port, out)
        try:
            # one write, both lines whole: a Ctrl-C as soon as the URL shows must not cut the log's path
            out.write(f"jaxplace: XProf for {path} at {url_of(server.bind_addr[1])}  (listening on {HOST} "
                      f"only; Ctrl-C to stop)\njaxplace: {OFFLINE}; XProf's own messages go to {out.log} "
                      "(removed when it stops)\n")
            out.flush()
            _stop_on_signals()
            server.serve()
        except KeyboardInterrupt:
            pass
        finally:
            server.stop()
        print("jaxplace: XProf stopped", file=out, flush=True)
        out.discard = True


MAX_SESSION_DEPTH = 8  # plugins/profile/<session> of the dir or of a job's proc-<i>/: 3-4 levels
OFFLINE = ("offline, the trace viewer works (served from the installed xprof); XProf's other tools "
           "draw their charts with Google Charts from www.gstatic.com and show none without a network")


class QuietStderr:
    """File descriptor 2 pointed at a new temporary file, ``log`` (XProf's Python loggers hold
    ``sys.stderr``; its C++ converters write to the descriptor), the terminal's stderr kept as
    the stream this yields. Never a file in the directory served: that is input."""

    def __init__(self):
        self.log: Path | None = None
        self._saved = -1
        self.discard = False  # set after a clean stop: the log is removed on exit

    def __enter__(self):
        import os
        import tempfile

        fd, name = tempfile.mkstemp(prefix="jaxplace-xprof-", suffix=".log")  # O_EXCL: a new file
        self.log = Path(name)
        sys.stderr.flush()
        self._saved = os.dup(2)
        self._out = os.fdopen(os.dup(2), "w", buffering=1)
        os.dup2(fd, 2)
        os.close(fd)
        return self

    def write(self, text: str) -> int:
        return self._out.write(text)

    def flush(self) -> None:
        self._out.flush()

    def __exit__(self, *exc):
        import os

        sys.stderr.flush()
        os.dup2(self._saved, 2)  # before an error is said: it goes to the terminal
        os.close(self._saved)
        self._out.close()
        if self.discard and exc[0] is None:
            try:
                self.log.unlink()
            except OSError:
                pass
        return False


def trace_viewer_url(logdir: Path):
    """``port -> URL`` of XProf's trace viewer on the newest session (XProf names a session
    below a sub-directory, a launch job's ``proc-<i>``, ``proc-<i>/<session>``); the root
    without one."""
    from urllib.parse import quote

    sessions = sorted(_sessions(logdir), key=lambda p: (p.name, str(p)), reverse=True)
    if not sessions:
        return lambda port: f"http://{HOST}:{port}/"
    top = sessions[0].parent.parent.parent.relative_to(logdir)
    run = sessions[0].name if str(top) == "." else f"{top.as_posix()}/{sessions[0].name}"
    # a frontend route lives under the plugin's prefix (``make_app``); measured in Chromium:
    # this URL opens the Trace Viewer tool on that session, "/" opens the Overview Page
    return lambda port: f"http://{HOST}:{port}{PREFIX}/trace_viewer?run={quote(run, safe='')}&tag=trace_viewer"


def _sessions(logdir: Path, max_depth: int = MAX_SESSION_DEPTH) -> list[Path]:
    """Every ``plugins/profile/<session>/`` directory at most ``max_depth`` levels below
    ``logdir``: breadth first, no recursion, symlinked directories not followed."""
    import os

    found, level = [], [Path(logdir)]
    for _ in range(max_depth):
        below = []
        for d in level:
            try:
                with os.scandir(d) as entries:
                    subs = [Path(e.path) for e in entries if e.is_dir(follow_symlinks=False)]
            except OSError:
                continue
            if d.name == "profile" and d.parent.name == "plugins":
                found.extend(subs)
            below.extend(subs)
        level = below
    return found


def _stop_on_signals() -> None:
    """Ctrl-C (SIGINT) and SIGTERM end ``serve()`` with a KeyboardInterrupt, even where the
    shell started us with SIGINT ignored (a background job): the server is then stopped
    cleanly (sockets closed, worker threads joined)."""
    import signal

    def stop(signum, frame):
        raise KeyboardInterrupt

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, stop)


def profile_logdir(path: Path) -> Path:
    """The directory XProf reads: it holds ``plugins/profile/<session>/*.xplane.pb``, or for a
    launch job each process's run does (``proc-<i>/plugins/...``: XProf walks below its log
    dir and lists each process's sessions under ``proc-<i>``)."""
    from jaxplace_cli.store.layout import is_job_dir

    path = Path(path)
    if not path.exists():
        raise UsageError(f"{path} does not exist; pass a run directory made by `jaxplace run`")
    if path.is_file():
        raise UsageError(f"{path} is a file; XProf reads a directory holding plugins/profile/<session>/*.xplane.pb "
                         "(a jaxplace run directory or a jax.profiler log dir)")
    below = "proc-*/plugins/profile/*/*.xplane.pb" if is_job_dir(path) else "plugins/profile/*/*.xplane.pb"
    traces = sorted(path.glob(below))
    if not traces:
        raise UsageError(f"{path} holds no jax.profiler trace ({below}): the run was recorded "
                         "with --trace off, or the trace window did not open; rerun with --trace window (the "
                         f"default) or --trace full. jaxplace's own timeline: jaxplace report {path}")
    return path.resolve()


def make_app(plugin):
    """WSGI app over the plugin's routes (as ``xprof.server.make_wsgi_app``, less ``BLOCKED``)."""
    apps = {route: app for route, app in plugin.get_plugin_apps().items() if route not in BLOCKED}

    def not_found(environ, start_response):
        start_response("404 Not Found", [("Content-Type", "text/plain")])
        return [b"Not Found"]

    def application(environ, start_response):
        route = environ.get("PATH_INFO", "")
        under = route == PREFIX or route.startswith(PREFIX + "/")
        if under:
            route = route[len(PREFIX):]
        if route != "/" and route.endswith("/"):
            route = route[:-1]
        if route in apps:
            handler = apps[route]
        elif route in ("", "/") or (under and "." not in route.rsplit("/", 1)[-1] and route not in BLOCKED):
            handler = plugin.default_handler  # a frontend route, e.g. /trace_viewer on reload
        else:
            handler = not_found
        return handler(environ, start_response)

    return application


def xprof_server(logdir: Path, port: int, out=None):
    """A cheroot server bound (not yet serving) to 127.0.0.1:``port`` with XProf's plugin;
    ``out``: where jaxplace's own lines go (default stderr)."""
    import logging

    try:
        from cheroot import wsgi
        from xprof import profile_plugin_loader
        from xprof.standalone import base_plugin, plugin_event_multiplexer
    except ImportError as exc:
        raise UsageError(f"XProf is not importable ({exc}); install it with: pip install xprof") from None
    logging.getLogger("tensorboard.plugins.profile").setLevel(logging.WARNING)
    context = base_plugin.TBContext(str(logdir), plugin_event_multiplexer.DataProvider(str(logdir)),
                                    base_plugin.TBContext.Flags(False))
    context.hide_capture_profile_button = True
    context.enable_tab_name_label = False
    context.src_prefix = None
    plugin = profile_plugin_loader.ProfilePluginLoader().load(context)
    if plugin is None:
        raise UsageError(f"XProf's profile plugin could not be loaded (see {getattr(out, 'log', 'the warning above')})")
    app = make_app(plugin)
    for p in dict.fromkeys((port, 0)):
        server = wsgi.Server((HOST, p), app)
        try:
            server.prepare()  # binds and listens
            if p != port:
                print(f"jaxplace: port {port} is busy; using {server.bind_addr[1]}", file=out or sys.stderr)
            return server
        except OSError as exc:
            last = exc
    raise UsageError(f"cannot listen on {HOST}: {last}")


def _tensorboard(logdir: Path, port: int) -> int:
    import importlib.util
    import subprocess

    if importlib.util.find_spec("tensorboard") is None:
        raise UsageError("TensorBoard is not installed (pip install tensorboard); without --tensorboard, "
                         "jaxplace view serves the trace with XProf")
    argv = [sys.executable, "-m", "tensorboard.main", "--logdir", str(logdir), "--host", HOST,
            "--port", str(port or 6006)]
    print(f"jaxplace: TensorBoard at http://{HOST}:{port or 6006}/#profile  (Ctrl-C to stop)", file=sys.stderr)
    proc = subprocess.Popen(argv)
    try:
        return proc.wait()
    except KeyboardInterrupt:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        return 0
