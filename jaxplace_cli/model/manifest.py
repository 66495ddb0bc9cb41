"""The manifest of a run (``run.json``): what ``jaxplace run`` writes and every reader trusts
only after ``Manifest.from_dict`` has checked it.

A run directory can come from anywhere (a colleague, a bug report), so ``run.json`` is input:
on main before this module, a field of the wrong type, a list where a table belongs or an
absurd number ended 29 commands in an internal error (exit 3). Here every field has a type
and a range; a manifest that breaks one is one line naming the file and the field (exit 2).
Fields a manifest may lack (older runs, the minimal one ``jaxplace_cli.budget()`` writes) take
their defaults; ``schema_version`` and ``status`` are required. Keys this jaxplace does not
know are ignored (a newer writer of the same schema version may add some).
"""
from __future__ import annotations

import dataclasses
import math
import types
import typing
from dataclasses import dataclass, field

from jaxplace_cli.model.errors import JaxplaceError

MANIFEST_SCHEMA_VERSION = 1
STATUSES = ("running", "complete", "failed", "interrupted", "terminated")
INT_RANGE = (-(2**63), 2**63 - 1)  # what SQLite and every reader can hold
COUNT = {"min": 0}  # metadata of a field that counts something
OPTIONAL_COUNT = {"min": 0, "omit_none": True}  # ... and is left out of run.json when unknown
MAX_LIST = 1 << 20  # entries in one list field (devices, argv, hook names)


class ManifestError(JaxplaceError):
    """A run.json that breaks the manifest's types or ranges (exit code 2)."""


@dataclass
class Target:
    kind: str = "path"  # path | module | stdin (`jaxplace run -`) | child
    name: str = ""


@dataclass
class Device:
    name: str
    platform: str = ""
    id: int = 0
    kind: str = ""
    process: int = field(default=0, metadata=COUNT)
    memory_bytes: int | None = field(default=None, metadata=COUNT)


@dataclass
class Writer:
    kind: str = "thread"  # process | thread (a thread has no pid or peak of its own)
    pid: int | None = field(default=None, metadata=OPTIONAL_COUNT)
    peak_rss_kb: int | None = field(default=None, metadata=OPTIONAL_COUNT)
    # how the store was written: "c" (store/_sqlite.c), "module" (Python's sqlite3), "" (unsaid)
    sqlite: str = ""


@dataclass
class Events:
    ops: int = field(default=0, metadata=COUNT)
    transfers: int = field(default=0, metadata=COUNT)
    # events (ops + transfers) recorded but not in the store: ``ops``/``transfers`` are what
    # the recorder made, the store's own ``progress`` table what was committed (issue 25)
    lost_rows: int = field(default=0, metadata=COUNT)
    write_error: str = ""
    writer: Writer = field(default_factory=Writer)
    # back-pressure (capture/recorder.py): how often, and for how long in all, the script's
    # dispatching threads waited for the writer because the backlog was over its limit
    backpressure_waits: int = field(default=0, metadata=COUNT)
    backpressure_s: float = field(default=0.0, metadata={"min": 0})
    # calls whose recording failed (capture/recorder.py: Recorder.recording_failed): the
    # program kept its results, the run's rows miss those calls; the first failure's text
    recording_errors: int = field(default=0, metadata=COUNT)
    recording_error: str = ""


@dataclass
class Hooks:
    installed: list[str] = field(default_factory=list)
    unavailable: list[str] = field(default_factory=list)


@dataclass
class Trace:
    mode: str = "off"
    state: str = "off"
    seconds: float = field(default=0.0, metadata=COUNT)
    max_ops: int = field(default=0, metadata=COUNT)
    traced_ops: int = field(default=0, metadata=COUNT)
    files: list[str] = field(default_factory=list)
    note: str = ""
    cut: str = ""  # why the window closed: ops | seconds | watchdog | own trace | end ("": not cut)
    steps: list[int] | None = None  # [first, last] marked steps inside the window (None: no step marked)


@dataclass
class Placement:
    policy: str = ""
    decisions: int = field(default=0, metadata=COUNT)
    fallbacks: int = field(default=0, metadata=COUNT)
    granularity: str = "unit"
    on_error: str = ""
    devices: list[str] | None = None


@dataclass
class DevicesOverride:
    """``--devices N`` asked for N CPU devices but the script set ``jax_num_cpu_devices``."""

    requested: int | None = field(default=None, metadata=COUNT)
    used: int = field(default=0, metadata=COUNT)
    note: str = ""


@dataclass
class Manifest:
    schema_version: int = MANIFEST_SCHEMA_VERSION
    status: str = field(default="running", metadata={"choices": STATUSES})
    tool: str = "jaxplace"
    tool_version: str = ""
    target: Target = field(default_factory=Target)
    argv: list[str] = field(default_factory=list)
    command: list[str] = field(default_factory=list)
    cwd: str = ""
    python: str = ""
    host: str = ""
    pid: int | None = field(default=None, metadata=COUNT)
    policy: str = "default"
    simulated_devices: int | None = field(default=None, metadata={"min": 1, "max": 1 << 16})
    started: str = ""
    ended: str = ""
    exit_code: int | None = None
    error: str = ""
    jax_version: str | None = None
    jaxlib_version: str | None = None
    record: str | None = None
    # the capture hot path that ran: "native" (capture/_native.c) or "python" (capture/native.py)
    capture: str | None = field(default=None, metadata={"choices": ("native", "python")})
    hooks: Hooks = field(default_factory=Hooks)
    devices: list[Device] = field(default_factory=list)
    events: Events = field(default_factory=Events)
    trace: Trace | None = None
    placement: Placement | None = None
    follow_children: bool = False
    parent_pid: int | None = field(default=None, metadata=COUNT)
    devices_override: DevicesOverride | None = None
    distributed: dict | None = None  # a process of a jax.distributed job (capture/distributed.py)
    warnings: list[str] = field(default_factory=list)  # said on stderr after the run, kept here

    REQUIRED: typing.ClassVar[tuple[str, ...]] = ("schema_version", "status")

    @property
    def complete(self) -> bool:
        """The recording process ended and finalised the run (whatever the script did)."""
        return self.status in ("complete", "failed", "interrupted", "terminated")

    @property
    def device_names(self) -> list[str]:
        return [d.name for d in self.devices]

    def to_dict(self) -> dict:
        return _plain(self)

    @classmethod
    def from_dict(cls, data, where: str) -> Manifest:
        """``data`` (parsed ``run.json``) checked field by field; ``where`` names the file."""
        if not isinstance(data, dict):
            raise ManifestError(f"{where}: a manifest is a JSON object, not {_json_type(data)}")
        for key in cls.REQUIRED:
            if key not in data:
                raise ManifestError(f"{where}: field {key!r} is missing; this is not a jaxplace manifest")
        return _build(cls, data, where, "")


def _plain(value):
    """``dataclasses.asdict``, leaving out ``omit_none`` fields that are None."""
    if dataclasses.is_dataclass(value):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)
                if not (f.metadata.get("omit_none") and getattr(value, f.name) is None)}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


# -- the checks: one generic walk over the dataclasses' type hints --------------------------

_HINTS: dict[type, dict] = {}


def _hints(cls) -> dict:
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


def _build(cls, data: dict, where: str, prefix: str):
    hints = _hints(cls)
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.name not in data:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise ManifestError(f"{where}: field {prefix + f.name!r} is missing")
            continue
        kwargs[f.name] = _value(hints[f.name], data[f.name], where, prefix + f.name, f.metadata)
    return cls(**kwargs)


def _value(hint, value, where: str, name: str, meta):
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType) and type(None) in args:
        if value is None:
            return None
        (hint,) = [a for a in args if a is not type(None)]
        origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is list:
        if not isinstance(value, list):
            _wrong(where, name, "a list", value)
        if len(value) > MAX_LIST:
            raise ManifestError(f"{where}: field {name!r} has {len(value):,} entries (at most {MAX_LIST:,})")
        return [_value(args[0], v, where, f"{name}[{i}]", meta) for i, v in enumerate(value)]
    if hint is dict:  # a free-form section (its JSON was bounded in depth and size when read)
        if not isinstance(value, dict):
            _wrong(where, name, "an object", value)
        return value
    if dataclasses.is_dataclass(hint):
        if not isinstance(value, dict):
            _wrong(where, name, "an object", value)
        return _build(hint, value, where, name + ".")
    if hint is bool:
        if not isinstance(value, bool):
            _wrong(where, name, "true or false", value)
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            _wrong(where, name, "an integer", value)
        _range(value, where, name, meta)
        return value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            _wrong(where, name, "a finite number", value)
        _range(value, where, name, meta)
        return float(value)
    if hint is str:
        if not isinstance(value, str):
            _wrong(where, name, "a string", value)
        if "choices" in meta and value not in meta["choices"]:
            raise ManifestError(f"{where}: field {name!r} is {_show(value)}; expected one of "
                                f"{', '.join(meta['choices'])}")
        return value
    raise TypeError(f"manifest field {name}: no check for {hint!r}")  # a bug of this module


def _range(value, where: str, name: str, meta) -> None:
    lo, hi = meta.get("min", INT_RANGE[0]), meta.get("max", INT_RANGE[1])
    if not lo <= value <= hi:
        raise ManifestError(f"{where}: field {name!r} is {_show(value)}; expected a value from "
                            f"{lo:,} to {hi:,}")


def _wrong(where: str, name: str, expected: str, value) -> None:
    raise ManifestError(f"{where}: field {name!r} must be {expected}, not {_json_type(value)}")


def _json_type(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return f"the number {_show(value)}"
    if isinstance(value, str):
        return f"the string {_show(value)}"
    return "a list" if isinstance(value, list) else "an object"


def _show(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
