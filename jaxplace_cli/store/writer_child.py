"""The writer process itself (started by store/writer_process.py's WriterProcess, which says the
protocol): frames from its stdin into the store, one JSON line of account at the end, then the
parent's after-run calls."""
from __future__ import annotations

import importlib
import json
import pickle
import sys
from pathlib import Path

from jaxplace_cli.store.writer_process import _HEADER, DISPATCHED, RESERVE, _rows


def serve(path: str, native: str = "") -> None:
    """The writer process: frames from stdin into the store at ``path``, then one JSON line.

    Without the cyclic GC between batches: every row is a fresh tuple and a batch holds ~30k of
    them, so collections kept scanning live rows (bench/bench_writer.py: unpack + finish_rows
    3.6 -> 0.9 µs a row, issue 29). Rows are freed by reference counting; what little cyclic
    garbage there is (an exception's traceback) is collected every 64 batches."""
    import gc

    from jaxplace_cli.model.raw import packed_module, unpack
    from jaxplace_cli.store.rows import finish_rows
    from jaxplace_cli.store.writer import StoreWriter, drop_reserve, make_reserve

    packed = packed_module()
    decoder = packed.Decoder() if packed is not None else None  # one per run: strings carry over

    written = lost = 0
    error = ""
    writer = None
    reserve = Path(path).with_name(RESERVE)
    try:
        writer = StoreWriter(Path(path), native=native == "native")
        make_reserve(reserve)
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}"
    stdin = sys.stdin.buffer
    gc.collect()
    gc.disable()
    batches = 0
    linger = False
    while True:
        batches += 1
        if batches % 64 == 0:
            gc.collect()
        msg = _read_frame(stdin)
        if msg is None:  # EOF, or a frame cut short: the script's process died (killed)
            break
        if type(msg) is tuple:
            if msg[0] == "close":
                linger = len(msg) > 1 and msg[1] is True
                break
            if msg[0] == "preload":
                _preload(msg[1])
                continue
            if msg[0] == "meta" and writer is not None:
                try:
                    writer.set_meta(msg[1], msg[2])
                except Exception:
                    pass
            continue
        dispatched = msg.pop(DISPATCHED, None)
        n = _rows(msg)
        if writer is not None and dispatched is not None:
            writer.dispatched = {t: max(writer.dispatched[t], int(dispatched.get(t, 0))) for t in writer.dispatched}
        if writer is None:
            lost += n
            continue
        try:
            writer.write(finish_rows(unpack(msg, decoder)), writer.dispatched)
        except Exception as exc:  # disk full, directory removed: count it and keep draining
            lost += n
            if not error:  # the first failure is the cause; later ones repeat it
                error = f"{type(exc).__name__}: {exc}"
    committed = None
    if writer is not None:
        written, committed = writer.rows_written, writer.committed
        writer.final_progress(error, reserve)  # the counts as they end (room made on a full disk)
        try:
            writer.close()
        except Exception:
            pass
    drop_reserve(reserve)
    _say({"rows_written": written, "lost_rows": lost, "error": error, "peak_rss_kb": _peak_rss_kb(),
          "committed": committed, "sqlite": "" if writer is None else writer.sqlite})
    if linger:  # the parent has work for us (WriterProcess.call) until ("end",) or our input ends
        gc.enable()
        _answer_calls(stdin)


def _peak_rss_kb() -> int:
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak // 1024 if sys.platform == "darwin" else peak  # bytes there, KiB on Linux


def _say(answer: dict) -> None:
    """One JSON line to the parent (WriterProcess reads it)."""
    sys.stdout.write(json.dumps(answer) + "\n")
    sys.stdout.flush()


def _read_frame(stdin):
    """The next frame, or None at the end of the input (or in the middle of a frame)."""
    head = stdin.read(_HEADER)
    if len(head) < _HEADER:
        return None
    size = int.from_bytes(head, "little")
    data = stdin.read(size)
    return pickle.loads(data) if len(data) == size else None


def _preload(modules) -> None:
    for name in modules:
        if isinstance(name, str):
            try:
                importlib.import_module(name)
            except Exception:  # the call that needs it will say why
                pass


def _answer_calls(stdin) -> None:
    """``("call", module, function, kwargs)`` frames, one JSON line each, until ``("end",)``
    or the end of the input. What a call writes on stderr is dropped: nobody reads this
    process's stderr while it works (a full pipe would stop it), and its warnings are not the
    script's."""
    while True:
        msg = _read_frame(stdin)
        if type(msg) is tuple and len(msg) == 6 and msg[0] == "print":
            _print(*msg[1:])  # the last thing asked: the parent is exiting
            return
        if type(msg) is not tuple or len(msg) != 4 or msg[0] != "call":
            return
        _, module, function, kwargs = msg
        try:
            answer = {"result": _call(module, function, kwargs)}
        except BaseException as exc:  # noqa: BLE001 - said to the parent, which decides
            answer = {"error": f"{type(exc).__name__}: {exc}"}
        try:
            _say(answer)
        except (TypeError, ValueError) as exc:
            _say({"error": f"unanswerable result: {exc}"})


def _call(module, function, kwargs):
    """``module.function(**kwargs)``, a ``jaxplace_cli`` one only, its stderr dropped."""
    import contextlib
    import io

    if not (isinstance(module, str) and module.startswith("jaxplace_cli.")):
        raise ValueError(f"not a jaxplace module: {module!r}")
    with contextlib.redirect_stderr(io.StringIO()):
        return getattr(importlib.import_module(module), function)(**kwargs)


def _print(module, function, kwargs, encoding, fallback) -> None:
    """``("print", module, function, kwargs, encoding, fallback)``: the lines the call returns,
    encoded for the parent's stderr and ended by a NUL, which the parent writes out after its
    interpreter's teardown (store/writer_process.py ``print_at_exit``); ``fallback`` where the
    call fails or returns something else than lines."""
    try:
        lines = _call(module, function, kwargs)
        if not (isinstance(lines, list) and all(isinstance(line, str) for line in lines)):
            raise TypeError("not lines")
    except BaseException:  # noqa: BLE001 - the parent's fallback line says where to look
        lines = [fallback] if isinstance(fallback, str) and fallback else []
    codec, errors = encoding if isinstance(encoding, tuple) and len(encoding) == 2 else ("utf-8", "replace")
    try:
        data = "".join(line + "\n" for line in lines).encode(codec, errors)
    except (LookupError, UnicodeError, TypeError):
        data = "".join(line + "\n" for line in lines).encode("utf-8", "replace")
    sys.stdout.buffer.write(data.replace(b"\0", b"") + b"\0")
    sys.stdout.flush()
