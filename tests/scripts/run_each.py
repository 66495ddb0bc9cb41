"""Run each program given on the command line in this one process, as python would run it as
``__main__`` (its own sys.argv), and print its stdout and how it ended:

    == PROGRAM
    <its stdout>
    -- exit 0 | exit N | ExceptionType: first line of the message

One process for many programs keeps the same-as-python acceptance test fast (JAX is imported
once); its output under `jaxplace run` must equal its output under python."""
import contextlib
import io
import runpy
import sys

for entry in sys.argv[1:]:
    path, _, args = entry.partition("::")
    sys.argv = [path, *args.split()]
    buf = io.StringIO()
    ended = "exit 0"
    with contextlib.redirect_stdout(buf):
        try:
            runpy.run_path(path, run_name="__main__")
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) or exc.code is None else 1
            ended = f"exit {code or 0}"
        except BaseException as exc:  # noqa: BLE001 - reported, as python would end with it
            lines = str(exc).splitlines()
            ended = f"{type(exc).__name__}: {lines[0] if lines else ''}"
    print(f"== {entry}\n{buf.getvalue()}-- {ended}", flush=True)
