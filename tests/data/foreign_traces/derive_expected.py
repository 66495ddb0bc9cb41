"""Derive the expected numbers in tests/test_xplane.py straight from ProfileData.

Deliberately naive and independent of jaxplace_cli.xplane: it flattens every event into a
tuple, then counts with plain loops and a regex. Run it from the repo root:

    .venv/bin/python tests/data/foreign_traces/derive_expected.py

Rules it applies (the same physical rules the reader documents, written separately):
- device-side memcpy events (MemcpyH2D/D2H/D2D/P2P, CopyDeviceToDevice) are the transfers;
  size from memcpy_details 'size:N' (0 or absent = unknown);
- __amd_rocclr_copyBuffer* kernels are copies of unknown size; the host hipMemcpy* call with
  the same correlation_id says the direction (HtoD -> h2d), else d2d;
- host memcpy calls whose correlation_id matches no device copy count on their own;
- TPU: only the base tpu::System::TransferToDevice / TransferFromDevice events;
- offload: copy-start ops on 'XLA Ops' lines with S(5) in the operand (h2d) or result (d2h).
"""
import collections
import re
from pathlib import Path

from jax.profiler import ProfileData

HERE = Path(__file__).parent
KINDS = {"MemcpyH2D": "h2d", "MemcpyD2H": "d2h", "MemcpyD2D": "d2d", "MemcpyP2P": "d2d",
         "CopyDeviceToDevice": "d2d"}
ITEMSIZE = {"f32": 4, "bf16": 2, "f16": 2, "s32": 4, "u32": 4, "s8": 1, "u8": 1, "pred": 1}


def flat(path):
    out = []
    for p in ProfileData.from_file(str(path)).planes:
        for l in p.lines:
            for e in l.events:
                out.append((p.name, l.name, e.name, e.start_ns, e.duration_ns, dict(e.stats)))
    return out


def memcpy_size(stats):
    m = re.search(r"size:(\d+)", stats.get("memcpy_details", ""))
    return int(m.group(1)) if m and int(m.group(1)) > 0 else -1


def main():
    for f in sorted(HERE.glob("*/*.xplane.pb")):
        ev = flat(f)
        print("=====", f.parent.name, "events:", len(ev))
        dev = [x for x in ev if x[0].startswith("/device:")]
        host = [x for x in ev if x[0] == "/host:CPU"]
        api = {x[5]["correlation_id"]: x for x in host
               if x[2].startswith(("hipMemcpy", "cuMemcpy")) or x[2] in KINDS}
        tot = collections.defaultdict(lambda: [0, 0, 0])  # count, unknown, known bytes
        per = collections.Counter()
        blocking = collections.Counter()
        sizes = collections.Counter()
        seen = set()
        for x in dev:
            if x[2].startswith("__amd_rocclr_copyBuffer"):
                h = api.get(x[5]["correlation_id"])
                k, sz = ("h2d" if h and "HtoD" in h[2] else "d2d"), -1
            elif x[2] in KINDS:
                k, sz = KINDS[x[2]], memcpy_size(x[5])
                if "async:0" in x[5].get("memcpy_details", ""):
                    blocking[(k, x[0])] += 1
            else:
                continue
            seen.add(x[5]["correlation_id"])
            t = tot[k]
            t[0] += 1
            t[1] += sz < 0
            t[2] += max(sz, 0)
            per[(k, x[0])] += 1
            sizes[(k, sz)] += 1
        for c, x in api.items():
            if c not in seen:
                k = "h2d" if "HtoD" in x[2] or x[2] == "MemcpyH2D" else (
                    "d2h" if "DtoH" in x[2] or x[2] == "MemcpyD2H" else "d2d")
                sz = memcpy_size(x[5])
                t = tot[k]
                t[0] += 1
                t[1] += sz < 0
                t[2] += max(sz, 0)
                per[(k, "host-only")] += 1
        print("  host memcpy calls:", len(api), "paired with a device copy:", len(set(api) & seen),
              "device copies with a correlation_id:", len(seen))
        for x in host:
            if x[2] in ("tpu::System::TransferToDevice", "tpu::System::TransferFromDevice"):
                k = "h2d" if x[2].endswith("ToDevice") else "d2h"
                t = tot[k]
                t[0] += 1
                t[2] += x[5]["size"]
                per[(k, "device_ordinal=%d" % x[5]["device_ordinal"])] += 1
                sizes[(k, x[5]["size"])] += 1
        for k in sorted(tot):
            print("  %s: count=%d unknown=%d bytes=%d" % ((k,) + tuple(tot[k])))
        for k in sorted(per):
            print("     per device", k, per[k])
        for k in sorted(blocking):
            print("     async:0", k, blocking[k])
        for k in sorted(sizes):
            print("     size", k, sizes[k])
        off = collections.Counter()
        offbytes = 0
        for x in dev:
            if x[1] == "XLA Ops" and " copy-start(" in x[2]:
                lhs, operand = x[2].split(" copy-start(", 1)
                k = "h2d" if "S(5)" in operand else "d2h" if "S(5)" in lhs else None
                if k:
                    off[(k, x[0])] += 1
                    dt, dims = re.match(r"(\w+)\[([0-9,]+)\]", operand).groups()
                    n = ITEMSIZE[dt]
                    for d in dims.split(","):
                        n *= int(d)
                    offbytes += n
        if off:
            print("  offload copies", sum(off.values()), "bytes", offbytes)
            for k in sorted(off):
                print("     offload", k, off[k])
        ops, opn = collections.Counter(), collections.Counter()
        for x in dev:
            if "GPU" in x[0] and x[1].startswith("Stream #"):
                if x[2] in KINDS or x[2].startswith("__amd_rocclr_copyBuffer"):
                    continue
            elif "TPU" in x[0] and x[1] == "XLA Ops":
                if ("copy-start" in x[2] or "copy-done" in x[2]) and "S(5)" in x[2]:
                    continue
            else:
                continue
            ops[x[0]] += int(x[4])
            opn[x[0]] += 1
        print("  ops count", dict(sorted(opn.items())))
        print("  ops ns", dict(sorted(ops.items())))
        steps = collections.Counter(x[0] for x in dev if x[1] == "Steps")
        print("  Steps events per device", dict(steps))


if __name__ == "__main__":
    main()
