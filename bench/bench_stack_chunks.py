"""What a call at the end of one of CPython 3.11's 16 KiB frame chunks costs on this machine
(bench/README.md, round 18): the same tiny call made in a loop from each stack depth 0..N;
at the depths where it starts a new chunk, CPython maps one and unmaps it on every return.
Prints the cheapest and the dearest depth's time per call, and their ratio.
Usage: python bench/bench_stack_chunks.py [max_depth] [calls]
"""
from __future__ import annotations

import sys
import time


def leaf(a, b, c, d):
    return a


def loop(calls: int) -> float:
    t = time.perf_counter()
    for _ in range(calls):
        leaf(1, 2, 3, 4)
    return time.perf_counter() - t


def at_depth(depth: int, calls: int) -> float:
    if depth:
        return at_depth(depth - 1, calls)
    return min(loop(calls) for _ in range(3))


def main() -> None:
    top = int(sys.argv[1]) if len(sys.argv) > 1 else 400
    calls = int(sys.argv[2]) if len(sys.argv) > 2 else 20_000
    per = {d: at_depth(d, calls) / calls * 1e9 for d in range(top)}
    cheap, dear = min(per, key=per.get), max(per, key=per.get)
    print(f"python {sys.version.split()[0]}: {calls:,} calls at each depth 0..{top - 1}: "
          f"cheapest {per[cheap]:.0f} ns a call (depth {cheap}), dearest {per[dear]:.0f} ns "
          f"(depth {dear}): x{per[dear] / per[cheap]:.0f}")
    slow = sorted(d for d, v in per.items() if v > 5 * per[cheap])
    print(f"depths over 5x the cheapest: {slow[:20]}{' ...' if len(slow) > 20 else ''}")


if __name__ == "__main__":
    main()
