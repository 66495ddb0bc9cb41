"""The writer process's cost per row, by phase (issue 29 item 3): what bench P6's writer does
with each batch — unpickle, unpack (model/_packed.c), finish_rows (store/rows.py), insert
(store/writer.py) — on batches recorded in-process from many_events.py's loop.
Each replay runs in a fresh process that never imports JAX and has the cyclic GC off (as the
writer process), through the sqlite3 module and through store/_sqlite.c, alternated.
Usage: python bench/bench_writer.py [iterations] [repeats]
"""
from __future__ import annotations

import json
import os
import pickle
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PRAGMAS = [p for p in os.environ.get("BENCH_PRAGMAS", "").split(";") if p]


def record(iters: int) -> list[bytes]:
    import jax
    import jax.numpy as jnp

    from jaxplace_cli.capture.recorder import Recorder
    from jaxplace_cli.capture.recording import Recording

    rec = Recorder()
    rec.attach_writer(lambda: None, 10**9)
    recording = Recording(rec, "all")
    recording.start()

    @jax.jit  # the hooked jax.jit: its calls are recorded
    def wide(x, *scalars):
        return tuple(x * s for s in scalars)

    scalars = [1.0 + j / 64 for j in range(32)]
    x = jnp.ones((8, 8), jnp.float32)
    wide(x, *scalars)
    frames = []
    try:
        for i in range(iters):
            x = x * 0.5
            x = x + 0.25
            wide(x, *scalars)
            if i % 400 == 399:  # ~28k rows a batch, as the writer thread takes them
                frames.append(pickle.dumps(rec.take(), protocol=pickle.HIGHEST_PROTOCOL))
    finally:
        recording.stop()
    frames.append(pickle.dumps(rec.take(), protocol=pickle.HIGHEST_PROTOCOL))
    return frames


def replay(frames: list[bytes], path: Path) -> dict[str, float]:
    from jaxplace_cli.model.raw import batch_rows, packed_module, unpack
    from jaxplace_cli.store.rows import finish_rows
    from jaxplace_cli.store.writer import StoreWriter

    decoder = packed_module().Decoder()
    writer = StoreWriter(path, native=os.environ.get("BENCH_SQLITE") == "native")
    assert writer.native == (os.environ.get("BENCH_SQLITE") == "native"), "store/_sqlite.c not built"
    for pragma in PRAGMAS:  # experiments: BENCH_PRAGMAS="cache_size=-65536;wal_autocheckpoint=0"
        writer.conn.execute(f"PRAGMA {pragma}")
    t = {"unpickle": 0, "unpack": 0, "finish_rows": 0, "insert": 0}
    rows = 0
    for data in frames:
        t0 = time.perf_counter_ns()
        msg = pickle.loads(data)
        msg.pop("dispatched", None)
        rows += batch_rows(msg)
        t1 = time.perf_counter_ns()
        raw = unpack(msg, decoder)
        t2 = time.perf_counter_ns()
        done = finish_rows(raw)
        t3 = time.perf_counter_ns()
        writer.write(done)
        t4 = time.perf_counter_ns()
        for k, a, b in (("unpickle", t0, t1), ("unpack", t1, t2), ("finish_rows", t2, t3), ("insert", t3, t4)):
            t[k] += b - a
    writer.close()
    return {k: v / rows / 1000 for k, v in t.items()} | {"rows": rows}


def replay_main(path: str, repeats: int) -> None:
    """In a process of its own that never imports JAX, as the writer process (its GC sees
    only what the writer holds, not JAX's objects)."""
    import gc

    frames = pickle.loads(Path(path).read_bytes())
    gc.collect()
    gc.disable()  # what writer_child.serve does
    runs = []
    for _ in range(repeats):
        with tempfile.TemporaryDirectory() as d:
            runs.append(replay(frames, Path(d) / "events.db"))
    print(json.dumps(runs))


def main() -> None:
    iters = int(sys.argv[1]) if len(sys.argv) > 1 else 800
    repeats = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "frames.pickle"
        path.write_bytes(pickle.dumps(record(iters)))
        sides = {"sqlite3": [], "_sqlite.c": []}
        for _ in range(repeats):  # alternated, one replay each
            for side in sides:
                env = dict(os.environ, BENCH_SQLITE="python" if side == "sqlite3" else "native")
                out = subprocess.run([sys.executable, __file__, "--replay", str(path), "1"], env=env,
                                     capture_output=True, text=True, check=True).stdout
                sides[side] += json.loads(out)
    print(f"rows={sides['sqlite3'][0]['rows']} repeats={repeats} load={os.getloadavg()[0]:.2f}")
    for side, runs in sides.items():
        for k in ("unpickle", "unpack", "finish_rows", "insert"):
            v = [r[k] for r in runs]
            print(f"{side:9s} {k:12s} {statistics.median(v):.3f} µs/row [{min(v):.3f}-{max(v):.3f}]")
        total = [sum(r[k] for k in ("unpickle", "unpack", "finish_rows", "insert")) for r in runs]
        print(f"{side:9s} {'total':12s} {statistics.median(total):.3f} µs/row [{min(total):.3f}-{max(total):.3f}] "
              f"= {1000 / statistics.median(total):.0f}k rows/s on one core")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--replay"]:
        replay_main(sys.argv[2], int(sys.argv[3]))
    else:
        main()
