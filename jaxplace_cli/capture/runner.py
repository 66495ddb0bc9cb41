"""Run a script or module exactly as ``python`` would, and say how it ended.

Same ``__name__`` (``"__main__"``), ``sys.argv``, ``sys.path[0]`` (the script's directory, the
cwd for ``-m``, ``''`` for ``-``: the program read from stdin), cwd, stdout/stderr. How it ends
is returned, not acted on, so the caller can save the recording first and then exit the way
python would have:
- ``sys.exit(n)`` -> exit code n (a non-int payload is printed to stderr, code 1);
- an uncaught exception -> python's traceback (via ``sys.excepthook``, without jaxplace's
  own frames) and code 1;
- Ctrl-C -> the traceback, then (after the script's threads and atexit handlers, as python)
  the process kills itself with SIGINT (shell: 130).
"""
from __future__ import annotations

import importlib.machinery
import os
import runpy
import signal
import sys
import types
from dataclasses import dataclass
from pathlib import Path

from jaxplace_cli.capture import frames, native
from jaxplace_cli.capture.shutdown import _flush_stdout, _text, wait_for_threads
from jaxplace_cli.model.errors import JaxplaceError
from jaxplace_cli.placement.errors import PolicyError

# jaxplace's package and runpy (python runs a script without it); not runpy's directory, the
# standard library, whose frames python shows (a json.loads error's own frames)
_OWN_FILES = (frames.OWN_DIR, runpy.__file__, frames.RUNPY, frames.SHIM)


class ScriptNotFound(JaxplaceError):
    """The script path or module name does not exist (a usage error, exit code 2)."""


@dataclass
class Outcome:
    status: str  # complete | failed | interrupted
    exit_code: int  # what python would exit with (130 for Ctrl-C)
    error: str = ""  # "ExcType: message" for failures
    exc_info: tuple | None = None  # kept to print the traceback after recording is saved
    exit_message: str | None = None  # sys.exit("text"): python prints it to stderr

    def print_exit_message(self) -> None:
        """``sys.exit("text")``'s text on stderr, as python writes it: to ``sys.stderr``, or to
        the process's own stderr (fd 2) when the script set it to None, never through the
        ``print`` the script may have replaced."""
        if self.exit_message is not None:
            _flush_stdout()  # python writes the script's pending output first
            _stderr_line(self.exit_message)
        self.exit_message = None

    def finish(self) -> None:
        """Print what python prints for this ending. Call after the recording is saved."""
        if self.exc_info is not None:
            etype, value, tb = self.exc_info
            self.exc_info = None
            if value is not None:
                value.__traceback__ = tb  # 3.11's default hook prints value.__traceback__
            _flush_stdout()
            hook = getattr(sys, "excepthook", _MISSING)
            if hook is _MISSING:  # the script deleted it: python's words, then the default display
                _stderr_line("sys.excepthook is missing")
                hook = sys.__excepthook__
            try:
                hook(etype, value, tb)
            except SystemExit as exc:  # the script's hook exits: with its code, as under python
                ended = _exit_outcome(exc)
                self.exit_code, self.exit_message = ended.exit_code, ended.exit_message
            except BaseException as err:  # noqa: BLE001 - the script's hook failed (or is None): as python says it
                err.__traceback__ = err.__traceback__.tb_next if err.__traceback__ else None  # not this frame
                _stderr_line("Error in sys.excepthook:")
                _default_hook(type(err), err, err.__traceback__)
                _stderr_line("\nOriginal exception was:")
                _default_hook(etype, value, tb)


_MISSING = object()


def _stderr_line(text: str) -> None:
    """A line where python writes one: sys.stderr, else the process's own (fd 2); nothing when
    both are closed (never the script's stdout, which print(file=None) would use), and never
    through ``builtins.print``, which the script may have replaced."""
    stream = sys.stderr if sys.stderr is not None else sys.__stderr__
    if stream is not None:
        try:
            stream.write(text + "\n")
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass


def _default_hook(etype, value, tb) -> None:
    try:
        sys.__excepthook__(etype, value, tb)
    except (OSError, ValueError):  # a closed or broken stderr: python too writes nothing
        pass


def resolve_target(script: str | None, module: str | None) -> tuple[str, str]:
    """Validate the target before anything runs: ('path', the path as typed), ('module', name)
    or ('stdin', '-')."""
    if module:
        import importlib.util

        # looked up where python -m looks first, the working directory (run_target puts it at
        # sys.path[0]): the `jaxplace` console script's own sys.path[0] is the venv's bin/
        saved = sys.path[:1]
        if not sys.flags.safe_path:  # PYTHONSAFEPATH / -P: python adds nothing before sys.path
            sys.path[:1] = [os.getcwd()]
        try:
            spec = importlib.util.find_spec(module)
        except (ImportError, ValueError) as exc:
            raise ScriptNotFound(f"No module named {module!r} ({exc})") from None
        finally:
            sys.path[:1] = saved
        if spec is None:
            raise ScriptNotFound(f"No module named {module!r}")
        places = spec.submodule_search_locations
        if places is not None and not any(os.path.exists(os.path.join(p, "__main__.py")) for p in places):
            # python's words (it gave runpy's traceback here); the package itself is not imported
            raise ScriptNotFound(f"No module named {module}.__main__; {module!r} is a package and cannot be "
                                 "directly executed")
        return "module", module
    assert script is not None
    if script == "-":  # python's `-`: the program is read from stdin
        if os.isatty(0):  # python would start its prompt: nothing to record there
            raise ScriptNotFound("`-` reads the script from stdin, which is a terminal; pipe or redirect "
                                 "one: jaxplace run - < train.py")
        return "stdin", "-"
    path = Path(script)
    if not path.exists():
        raise ScriptNotFound(f"can't open file {script!r}: no such file")
    if path.is_dir() and not (path / "__main__.py").exists():
        raise ScriptNotFound(f"can't find '__main__' module in {script!r}")
    return "path", script  # as typed (`./train.py` stays so in sys.argv[0] and __file__, as under python)


def _strip_own_frames(tb: types.TracebackType | None) -> types.TracebackType | None:
    """The traceback as python's reads: every entry up to ``run_target``'s is jaxplace's start
    (and runpy's, under ``python -m jaxplace_cli``), below it the hooks' frames go; runpy's
    frames below it stay, as python shows them (``-m``, a directory, the script's own
    ``runpy.run_path``). Without a ``run_target`` entry (before the script), all of ours go."""
    start, t = None, tb
    while t is not None:
        if t.tb_frame.f_code is run_target.__code__:
            start = t.tb_next
        t = t.tb_next
    if start is None:
        return frames.without(tb, _OWN_FILES + tuple(frames.LAUNCHERS))
    return frames.without(start, _HOOK_FILES)


# below the script's first frame only the hooks' frames are jaxplace's (and the console script's)
_HOOK_FILES = (frames.OWN_DIR, frames.SHIM)


def _plain(exc: BaseException) -> tuple:
    """The exc_info to print: our frames out of its traceback, out of its chain's (a cause
    raised through a hook: ``x.block_until_ready()`` showed ``jaxhooks/transfers.py``), and out
    of the traceback text in their messages (runpy's lines stay there: a child's traceback the
    script quotes is the child's)."""
    own = _HOOK_FILES + tuple(frames.LAUNCHERS)
    shown = frames.scrub_messages(exc, own)
    seen, e = {id(shown)}, shown.__cause__ or shown.__context__
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        e.__traceback__ = frames.without(e.__traceback__, own)
        e = e.__cause__ or e.__context__
    return (type(shown), shown, _strip_own_frames(shown.__traceback__))


def _no_assert_rewrite_warning() -> None:
    """``jaxplace run -m pytest``: pytest rewrites the asserts of the plugins it loads and
    warns when a plugin's package is already imported — jaxplace's is (it runs the script),
    and under python it is not. A project that turns warnings into errors (JAX's own
    ``filterwarnings = error``) would then stop at startup. The marker pytest reads in the
    package docstring says not to rewrite it (the plugin has no asserts to rewrite)."""
    pkg = sys.modules.get("jaxplace_cli")
    if pkg is not None and "PYTEST_DONT_REWRITE" not in (pkg.__doc__ or ""):
        pkg.__doc__ = (pkg.__doc__ or "") + "\n\nPYTEST_DONT_REWRITE"


def run_target(kind: str, target: str, args: list[str]) -> Outcome:
    """Execute the target in this process as ``__main__``; never raises for script errors."""
    _no_assert_rewrite_warning()
    # sys.argv and sys.path[0] stay the script's after its body returns, as under python: its
    # atexit handlers, its excepthook and threads still running then see them (they saw
    # jaxplace's command line and the venv's bin/, and a late `import` beside the script failed)
    sys.orig_argv = _orig_argv(kind, target, args)  # before sys.argv, from which it is worked out
    sys.argv = [target, *args]  # for -m, runpy replaces argv[0] with the module's file
    if kind == "module":
        first = os.getcwd()
    elif kind == "stdin":
        first = ""  # python's sys.path[0] for `-`
    else:
        # python's sys.path[0]: a directory or zip app itself, else the directory of the
        # script's real file (a symlinked script imports its neighbours of the link's target)
        first = os.path.abspath(target) if _runs_as_path(target) else os.path.dirname(os.path.realpath(target))
    if sys.flags.safe_path:  # PYTHONSAFEPATH / -P: python puts nothing there (jaxplace's start neither)
        if _runs_as_path(target) and kind == "path":
            sys.path.insert(0, first)  # a directory or zip app is still its own sys.path[0]
    elif sys.path:
        sys.path[0] = first
    else:
        sys.path.insert(0, first)
    try:
        if kind == "module":
            # as python -m runs it: in __main__'s own namespace, which stays sys.modules["__main__"]
            # after the body (runpy.run_module put the launcher's back: atexit saw jaxplace's)
            _fresh_main()
            _on_python_stack(runpy._run_module_as_main, target, True)
        elif kind == "stdin":
            _exec_source(_read_stdin(), "<stdin>", importlib.machinery.BuiltinImporter)
        elif _runs_as_path(target):
            # as python runs a directory or zip app: its __main__ found on sys.path[0] (set above,
            # absolute), argv left as typed (runpy.run_path would make argv[0] its own path)
            _fresh_main()  # its namespace, not jaxplace's launcher's
            _on_python_stack(runpy._run_module_as_main, "__main__", False)
        else:
            _exec_script(target)
        return Outcome("complete", 0)
    except SystemExit as exc:
        return _exit_outcome(exc)
    except PolicyError as exc:  # jaxplace's own error, not the script's: one line, exit 2
        return Outcome("failed", 2, f"PolicyError: {exc}", exit_message=f"jaxplace: error: {exc}")
    except KeyboardInterrupt as exc:
        return Outcome("interrupted", 130, "KeyboardInterrupt", _plain(exc))
    except BaseException as exc:  # noqa: BLE001 - we report it exactly like python
        info = _plain(exc)
        text = _text(exc)
        msg = f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"
        return Outcome("failed", 1, msg, info)


def _orig_argv(kind: str, target: str, args: list[str]) -> list[str]:
    """``sys.orig_argv`` as python would have it: the interpreter and its options as given,
    then the script's command line (a script re-executing itself with ``os.execv(sys.executable,
    sys.orig_argv)`` re-ran jaxplace, whose --out then existed: exit 2)."""
    orig = list(getattr(sys, "orig_argv", None) or [])
    k = len(orig) - len(sys.argv)  # jaxplace's own argv is the tail of orig_argv
    if not orig or k < 1:
        return orig
    options = orig[1:k]
    if options and options[-1] == "-m":  # python -m jaxplace_cli
        options = options[:-1]
    return [orig[0], *options, *(["-m", target] if kind == "module" else [target]), *args]


def _runs_as_path(target: str) -> bool:
    """A directory or a zip file (a zipapp): runpy runs its ``__main__``, as python does."""
    if os.path.isdir(target):
        return True
    if target.endswith(".py"):
        return False
    import zipfile

    return zipfile.is_zipfile(target)


def _fresh_main() -> types.ModuleType:
    """A new ``__main__`` as python's start makes it (with ``__annotations__``: a script may
    read it), installed in ``sys.modules``."""
    import builtins

    main = types.ModuleType("__main__")
    main.__dict__.update(__annotations__={}, __builtins__=builtins, __package__=None, __spec__=None,
                         __loader__=importlib.machinery.BuiltinImporter)
    sys.modules["__main__"] = main
    return main


def _exec_script(target: str) -> None:
    """Execute a script file as ``__main__`` the way ``python FILE`` does: ``__file__`` is the
    path joined to the working directory, not normalised (``/work/./train.py``), ``sys.argv[0]``
    stays as typed (``runpy.run_path`` would change it)."""
    import io

    path = target if os.path.isabs(target) else os.path.join(os.getcwd(), target)
    with io.open_code(path) as fh:
        source = fh.read()
    _exec_source(source, path, importlib.machinery.SourceFileLoader("__main__", path))


def _exec_source(source: bytes, filename: str, loader) -> None:
    if b"\0" in source or not _utf8(source):  # python's tokenizer may refuse it: its words
        from jaxplace_cli.capture.script_errors import file_tokenizer_error

        python_says = file_tokenizer_error(source, filename)
        if python_says is not None:
            raise python_says
    code = compile(source, filename, "exec", dont_inherit=True)  # a coding cookie or BOM is honoured
    main = _fresh_main()
    main.__dict__.update(__file__=filename, __cached__=None, __loader__=loader)
    _on_python_stack(exec, code, main.__dict__)


def _utf8(source: bytes) -> bool:
    try:
        source.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _on_python_stack(fn, *args):
    """``fn(*args)`` with the script's frames where python puts them: CPython 3.11 maps and
    unmaps a 16 KiB chunk of frames each time a call crosses one's end, and where that happens
    depends on the stack below the script (capture/_native.c ``fresh_stack_call``, with the
    measured counts). A plain call without the extension."""
    mod = native.module()
    call = getattr(mod, "fresh_stack_call", None) if mod is not None else None
    return call(fn, *args) if call is not None else fn(*args)


def _read_stdin() -> bytes:
    """The whole program from file descriptor 0, as python reads ``-`` before running it (the
    script's own reads of stdin then find its end, as under python)."""
    chunks = []
    while True:
        try:
            chunk = os.read(0, 1 << 16)
        except OSError:  # closed: an empty program, as python runs one
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks)


def _exit_outcome(exc: SystemExit) -> Outcome:
    code = exc.code
    if code is None:
        return Outcome("complete", 0)
    if isinstance(code, bool):  # sys.exit(True) exits 1, as python; run.json holds an int
        code = int(code)
    if isinstance(code, int):
        return Outcome("complete" if code == 0 else "failed", code, "" if code == 0 else f"SystemExit: {code}")
    # python prints a non-int payload to stderr and exits 1
    return Outcome("failed", 1, f"SystemExit: {code}", exit_message=str(code))


def exit_like_python(outcome: Outcome) -> int:
    """The code to exit with. For Ctrl-C, python waits for the script's threads and runs its
    atexit handlers, then dies of SIGINT (the parent sees a signal death): the same here, the
    atexit handlers run now since the process then kills itself (they were skipped: a handler
    saving a checkpoint on Ctrl-C never ran)."""
    if outcome.status == "interrupted":
        _flush_all()
        wait_for_threads()
        import atexit

        atexit._run_exitfuncs()  # each failure printed as python prints it ("Exception ignored in atexit callback")
        _flush_all()
        try:
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)
        except (OSError, ValueError):
            pass
        return 130
    outcome.print_exit_message()
    return outcome.exit_code


def _flush_all() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (AttributeError, OSError, ValueError):  # closed (None) or broken
            pass
