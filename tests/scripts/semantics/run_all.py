"""Run the semantics programs (prog_*.py) and, with ``--samples DIR``, every sample script
of DIR, then every ``PATH[::ARGS]`` given, in one process, each under a ``== name ==`` header:
one `python` / `jaxplace run` start covers them all. A program that raises prints one ``!!``
line and the next one still runs, so a test can say which program differs. Sample scripts and
paths run as ``__main__`` with their own ``sys.argv`` (like ``python SCRIPT ARGS``); their
exit codes are printed.

    python run_all.py [--samples DIR] [NAME ...] [PATH.py[::ARGS] ...]
"""
import importlib
import os
import pathlib
import runpy
import sys
import time

HERE = pathlib.Path(__file__).parent
args = sys.argv[1:]
samples = None
if args[:1] == ["--samples"]:
    samples, args = pathlib.Path(args[1]), args[2:]
paths = [a for a in args if a.partition("::")[0].endswith(".py")]
args = [a for a in args if a not in paths]
names = args or sorted(p.stem[5:] for p in HERE.glob("prog_*.py"))
# Fewer steps than the samples' defaults: the same code paths, a fraction of the time.
SAMPLE_ARGS = {"mlp_clean.py": ["--steps", "4"], "mlp_host_sync.py": ["--steps", "4"]}


def report(name, exc):
    msg = str(exc).splitlines()[0] if str(exc) else ""
    print(f"!! {name} raised {type(exc).__name__}: {msg}", flush=True)


T0 = time.perf_counter()


def took(name):  # JAXPLACE_SEMANTICS_TIMES=1: how long each one took, on stderr
    global T0
    now = time.perf_counter()
    if os.environ.get("JAXPLACE_SEMANTICS_TIMES"):
        print(f"{name}: {now - T0:.2f} s", file=sys.stderr)
    T0 = now


for name in names:
    print(f"== {name} ==", flush=True)
    try:
        importlib.import_module(f"prog_{name}").main()
    except Exception as exc:  # noqa: BLE001 - report and go on with the next program
        report(name, exc)
    sys.stdout.flush()
    took(name)

scripts = [(f"sample {p.name}", p, SAMPLE_ARGS.get(p.name, [])) for p in sorted(samples.glob("*.py"))] if samples else []
for entry in paths:
    path, _, extra = entry.partition("::")
    path = pathlib.Path(path)
    scripts.append((f"program {path.name}{' ' + extra if extra else ''}", path, extra.split()))

for name, path, argv in scripts:
    print(f"== {name} ==", flush=True)
    saved = sys.argv
    sys.argv = [str(path), *argv]
    try:
        runpy.run_path(str(path), run_name="__main__")
    except SystemExit as exc:
        print(f"exit {exc.code!r}", flush=True)
    except Exception as exc:  # noqa: BLE001
        report(name, exc)
    finally:
        sys.argv = saved
    sys.stdout.flush()
    took(name)
