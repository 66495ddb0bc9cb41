"""The rules file (docs/policies.md): strict parsing up front, first-match-wins at run time."""
from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass, field
from pathlib import Path

from jaxplace_cli.model.sizes import parse_size
from jaxplace_cli.model.untrusted import load_toml
from jaxplace_cli.placement.devices import check_name
from jaxplace_cli.placement.errors import PolicyLoadError
from jaxplace_cli.placement.opinfo import OpInfo, canonical

MATCHERS = ("op", "kind", "site", "function", "pass", "dtype", "shape", "min_bytes", "occurrence")
TARGETS = ("device", "devices")
KINDS = ("jit", "jnp", "method", "prim", "eqn")
PASSES = ("forward", "backward", "any")
# line numbers of at most 10 ASCII digits: a 5,000-digit one would not even convert to an int
_SITE = re.compile(r"^(?P<file>[^:]+):(?P<start>[0-9]{1,10})(?:-(?P<end>[0-9]{1,10}))?$")
JAX_DECIDES = "jax"


@dataclass
class Rule:
    index: int  # 1-based position in the file (what `placed` reports)
    ops: list[str] = field(default_factory=list)
    kinds: list[str] = field(default_factory=list)
    site_file: str | None = None
    site_lines: tuple[int, int] | None = None
    function: str | None = None
    pass_: str = "any"
    dtype: str | None = None
    shape: tuple | None = None
    min_bytes: int = 0
    occurrence: int | None = None
    devices: list[str] = field(default_factory=list)  # [] with jax_decides
    jax_decides: bool = False

    def matches(self, info: OpInfo) -> bool:
        if self.ops and not any(_op_matches(p, info) for p in self.ops):
            return False
        if self.kinds and info.kind not in self.kinds:
            return False
        if self.site_file is not None:
            if not _file_matches(self.site_file, info.file):
                return False
            if self.site_lines and not (self.site_lines[0] <= info.line <= self.site_lines[1]):
                return False
        if self.function is not None and not fnmatch.fnmatchcase(info.function, self.function):
            return False
        if self.pass_ == "backward" and not info.backward:
            return False
        if self.pass_ == "forward" and info.backward:
            return False
        if self.dtype is not None and self.dtype not in {str(d) for d in info.dtypes} | {str(info.dtype)}:
            return False
        if self.shape is not None and self.shape not in (tuple(s) for s in info.shapes):
            return False
        if self.min_bytes and info.nbytes < self.min_bytes:
            return False
        if self.occurrence is not None and info.occurrence != self.occurrence:
            return False
        return True


def _op_matches(pattern: str, info: OpInfo) -> bool:
    names = {info.name, info.raw_name, info.raw_name.rsplit(".", 1)[-1]}
    pats = {pattern, canonical(pattern)}
    return any(fnmatch.fnmatchcase(n, p) for n in names for p in pats)


def _file_matches(pattern: str, path: str) -> bool:
    path = path.replace("\\", "/")
    return fnmatch.fnmatchcase(path, pattern) or fnmatch.fnmatchcase(path, "*/" + pattern.lstrip("/"))


@dataclass
class RuleSet:
    path: str
    rules: list[Rule]
    default: Rule | None
    aliases: dict[str, list[str]] = field(default_factory=dict)  # name -> candidates, first present wins


def _as_list(value, key: str, where: str) -> list:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return value
    raise PolicyLoadError(f"{where}: {key} must be a string or a non-empty list of strings")


def _targets(table: dict, where: str, aliases: dict) -> tuple[list[str], bool]:
    present = [k for k in TARGETS if k in table]
    if len(present) != 1:
        raise PolicyLoadError(f"{where}: give exactly one of device = \"cpu:0\" or devices = [...]")
    names = _as_list(table[present[0]], present[0], where)
    if present[0] == "device" and len(names) != 1:
        raise PolicyLoadError(f"{where}: device takes one device name; use devices = [...] for a set")
    if names == [JAX_DECIDES]:
        return [], True
    return [n if n in aliases else check_name(n, f"{where}: {present[0]}") for n in names], False


def parse_rules(path: str | Path) -> RuleSet:
    path = Path(path)
    # bounded: a regular file of at most 1 MiB (model/untrusted.py); a FIFO or /dev/zero is refused
    data = load_toml(path, "policy file", PolicyLoadError)
    unknown = set(data) - {"version", "rule", "default", "aliases"}
    if unknown:
        raise PolicyLoadError(f"{path}: unknown top-level key {sorted(unknown)[0]!r} "
                              "(allowed: version, rule, default, aliases)")
    if data.get("version", 1) != 1:
        raise PolicyLoadError(f"{path}: version {data.get('version')!r} is not supported (this jaxplace reads version 1)")
    aliases = {}
    if not isinstance(data.get("aliases", {}), dict):
        raise PolicyLoadError(f"{path}: aliases must be a table: [aliases] name = [\"gpu:0\", \"cpu:1\"]")
    for name, cands in data.get("aliases", {}).items():
        aliases[name] = [check_name(c, f"{path}: aliases.{name}") for c in _as_list(cands, f"aliases.{name}", str(path))]
    raw_rules = data.get("rule", [])
    if not isinstance(raw_rules, list):
        raise PolicyLoadError(f"{path}: rules are written as [[rule]] tables")
    rules = [_parse_rule(i + 1, r, f"{path}: rule {i + 1}", aliases) for i, r in enumerate(raw_rules)]
    default = None
    if "default" in data:
        d = data["default"]
        if not isinstance(d, dict) or set(d) - set(TARGETS):
            bad = sorted(set(d) - set(TARGETS))[0] if isinstance(d, dict) else "default"
            raise PolicyLoadError(f"{path}: [default] has unknown key {bad!r} (allowed: device, devices)")
        devices, jax_decides = _targets(d, f"{path}: [default]", aliases)
        default = Rule(0, devices=devices, jax_decides=jax_decides)
    return RuleSet(str(path), rules, default, aliases)


def _parse_rule(index: int, table, where: str, aliases: dict) -> Rule:
    if not isinstance(table, dict):
        raise PolicyLoadError(f"{where}: a rule must be a table")
    unknown = set(table) - set(MATCHERS) - set(TARGETS)
    if unknown:
        key = sorted(unknown)[0]
        raise PolicyLoadError(f"{where}: unknown key {key!r} (matchers: {', '.join(MATCHERS)}; "
                              f"targets: device, devices)")
    devices, jax_decides = _targets(table, where, aliases)
    rule = Rule(index, devices=devices, jax_decides=jax_decides)
    if "op" in table:
        rule.ops = _as_list(table["op"], "op", where)
    if "kind" in table:
        rule.kinds = _as_list(table["kind"], "kind", where)
        bad = [k for k in rule.kinds if k not in KINDS]
        if bad:
            raise PolicyLoadError(f"{where}: kind {bad[0]!r} is not one of {', '.join(KINDS)}")
    if "site" in table:
        m = _SITE.match(str(table["site"]))
        if not m:
            raise PolicyLoadError(f"{where}: site {str(table['site'])[:60]!r} must look like \"train.py:31\" or "
                                  "\"train.py:31-33\"")
        start = int(m.group("start"))
        rule.site_file, rule.site_lines = m.group("file"), (start, int(m.group("end") or start))
    if "function" in table:
        functions = _as_list(table["function"], "function", where)
        if len(functions) != 1:  # one pattern (globs allowed); a second one would be ignored
            raise PolicyLoadError(f"{where}: function takes one name or glob, e.g. \"loss_*\"")
        rule.function = functions[0]
    if "pass" in table:
        if table["pass"] not in PASSES:
            raise PolicyLoadError(f"{where}: pass must be one of {', '.join(PASSES)}, not {table['pass']!r}")
        rule.pass_ = table["pass"]
    if "dtype" in table:
        rule.dtype = str(table["dtype"])
    if "shape" in table:
        shape = table["shape"]
        if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
                                                  for d in shape):
            raise PolicyLoadError(f"{where}: shape must be a list of non-negative integers")
        rule.shape = tuple(shape)
    if "min_bytes" in table:
        try:
            rule.min_bytes = parse_size(table["min_bytes"])
        except ValueError as exc:
            raise PolicyLoadError(f"{where}: min_bytes: {exc}") from None
    if "occurrence" in table:
        occ = table["occurrence"]
        if not isinstance(occ, int) or isinstance(occ, bool) or occ < 0:
            raise PolicyLoadError(f"{where}: occurrence must be a non-negative integer")
        rule.occurrence = occ
    return rule
