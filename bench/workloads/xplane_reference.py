"""P5 reference: what reading a ``.xplane.pb`` costs with JAX's own parser.

``jax.profiler.ProfileData.from_file(PATH)`` and one pass over every event of every line of
every plane, reading each event's name, start, duration and stats — the floor for any tool
that reads the trace. The bench compares ``jaxplace audit PATH`` (whole process) with this
script (whole process, same imports: both load JAX's native parser).

    python bench/workloads/xplane_reference.py PATH.xplane.pb
"""
from __future__ import annotations

import sys

from _common import emit, now


def main() -> None:
    if len(sys.argv) != 2:
        raise SystemExit("usage: xplane_reference.py PATH.xplane.pb")
    from jax.profiler import ProfileData

    t0 = now()
    data = ProfileData.from_file(sys.argv[1])
    t_parse = now() - t0
    planes = lines = events = stats = 0
    total_ns = 0
    for plane in data.planes:
        planes += 1
        for line in plane.lines:
            lines += 1
            for ev in line.events:
                events += 1
                _ = ev.name  # touch the name: the reference reads what the audit reads
                total_ns += ev.duration_ns + (ev.start_ns > 0)
                for _stat in ev.stats:
                    stats += 1
    emit({"workload": "xplane_reference", "planes": planes, "lines": lines, "events": events,
          "stats": stats, "parse_s": t_parse, "loop_s": now() - t0})


if __name__ == "__main__":
    main()
