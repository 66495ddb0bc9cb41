"""A minimal XSpace (``*.xplane.pb``) writer for tests: planes -> lines -> events -> stats.

Field numbers from tsl/profiler/protobuf/xplane.proto. Enough to build traces with chosen
names, stats and sizes (huge strings, odd values) without TensorFlow or the proto module.
"""


def _varint(n: int) -> bytes:
    n &= (1 << 64) - 1  # negative int64 values are 10-byte two's complement varints
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _key(field: int, wire: int) -> bytes:
    return _varint(field << 3 | wire)


def f_int(field: int, n: int) -> bytes:
    return _key(field, 0) + _varint(n)


def f_bytes(field: int, data) -> bytes:
    if isinstance(data, str):
        data = data.encode("utf-8", "surrogatepass")
    return _key(field, 2) + _varint(len(data)) + data


def stat(metadata_id: int, value) -> bytes:
    """XStat: str -> str_value (5), bytes -> bytes_value (6), int -> int64_value (4)."""
    if isinstance(value, str):
        v = f_bytes(5, value)
    elif isinstance(value, (bytes, bytearray)):
        v = f_bytes(6, bytes(value))
    else:
        v = f_int(4, value)
    return f_int(1, metadata_id) + v


def event(metadata_id: int, offset_ps: int, duration_ps: int, stats=()) -> bytes:
    return (f_int(1, metadata_id) + f_int(2, offset_ps) + f_int(3, duration_ps)
            + b"".join(f_bytes(4, s) for s in stats))


def line(line_id: int, name: str, events, timestamp_ns: int = 0) -> bytes:
    return (f_int(1, line_id) + f_bytes(2, name) + f_int(3, timestamp_ns)
            + b"".join(f_bytes(4, e) for e in events))


def plane(plane_id: int, name: str, lines, event_names: dict, stat_names: dict, stats=()) -> bytes:
    """``event_names``/``stat_names``: metadata id -> name (map fields 4 and 5); ``stats``: the
    plane's own stats (field 6, from :func:`stat`), such as a TPU plane's ``core_details``."""
    out = f_int(1, plane_id) + f_bytes(2, name) + b"".join(f_bytes(3, ln) for ln in lines)
    for i, n in event_names.items():
        out += f_bytes(4, f_int(1, i) + f_bytes(2, f_int(1, i) + f_bytes(2, n)))
    for i, n in stat_names.items():
        out += f_bytes(5, f_int(1, i) + f_bytes(2, f_int(1, i) + f_bytes(2, n)))
    return out + b"".join(f_bytes(6, s) for s in stats)


def space(planes) -> bytes:
    return b"".join(f_bytes(1, p) for p in planes)


def small_gpu_trace() -> bytes:
    """Two GPUs: an h2d, a d2h and a d2d memcpy with sizes, and a host plane."""
    names = {1: "MemcpyH2D", 2: "MemcpyD2H", 3: "MemcpyD2D"}
    stats = {1: "memcpy_details", 2: "correlation_id"}
    events = [event(1, 1000, 500, [stat(1, "size:4096 dest:0 async:1"), stat(2, 7)]),
              event(2, 3000, 500, [stat(1, "size:2048 dest:0 async:0")]),
              event(3, 5000, 500, [stat(1, "size:1024 dest:1 async:1")])]
    return space([plane(1, "/device:GPU:0", [line(1, "Stream #1(MemcpyH2D)", events)], names, stats),
                  plane(2, "/device:GPU:1", [], {}, {}),
                  plane(3, "/host:CPU", [], {}, {})])


def tpu_trace(core_details: bytes) -> bytes:
    """A TPU-shaped trace: ``/device:TPU:0`` (an ``XLA Ops`` line with two ops of 300 and 200 ns,
    a ``Steps`` line with one step, the plane stat ``core_details`` as given) and a host plane
    with one ``tpu::System::TransferToDevice`` of 4096 bytes to ``device_ordinal`` 0 and one
    ``TransferFromDevice`` of 1024 bytes from it. Whatever ``core_details`` holds, the one TPU
    plane is ``tpu:0`` and both transfers are its."""
    tpu = plane(1, "/device:TPU:0",
                [line(1, "XLA Ops", [event(1, 1000, 300_000), event(2, 2000, 200_000)]),
                 line(2, "Steps", [event(3, 0, 1_000_000)])],
                {1: "fusion.1", 2: "convolution.2", 3: "1"}, {1: "core_details"},
                [stat(1, core_details)])
    host = plane(2, "/host:CPU",
                 [line(1, "tpu_runtime", [event(1, 500, 100_000, [stat(1, 4096), stat(2, 0)]),
                                          event(2, 4000, 100_000, [stat(1, 1024), stat(2, 0)])])],
                 {1: "tpu::System::TransferToDevice", 2: "tpu::System::TransferFromDevice"},
                 {1: "size", 2: "device_ordinal"})
    return space([tpu, host])


def _fill(unit: bytes, total: int) -> bytes:
    """``unit`` repeated so that ``tpu_trace`` of it is at least ``total`` bytes (and less than
    ``total`` + len(unit) + 16)."""
    overhead = len(tpu_trace(b"")) + 9  # + the longer length prefixes of a multi-MiB field
    return unit * ((total - overhead) // len(unit) + 1)


# Huge core_details stats, by shape. Bytes >= 0x80 must be valid UTF-8 (ProfileData drops a
# bytes stat that is not), so 'é' (c3 a9) makes long varints.
HUGE_CORE_DETAILS = {
    # one varint that never ends: decoded with unbounded shifts, a 4 MiB one took ~10 minutes
    "one endless varint": "é".encode(),
    # a valid proto of 9-byte varint values (~2^57), and one of 2M one-byte fields
    "max-length varints": b"\x08" + "éééé".encode() + b"\x01",
    "2M small fields": b"\x10\x05",
}


def huge_core_details_trace(shape: str, total: int = 4 * 2**20) -> bytes:
    """A TPU trace (:func:`tpu_trace`) of ``total`` bytes, nearly all of it a ``core_details``
    stat of the given shape (a key of ``HUGE_CORE_DETAILS``)."""
    return tpu_trace(_fill(HUGE_CORE_DETAILS[shape], total))
