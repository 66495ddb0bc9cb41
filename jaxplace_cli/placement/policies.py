"""Policies: objects with ``decide(info) -> device | device name | None`` and a ``label``.

``load_policy`` accepts every form of docs/policies.md and does all the checking it can
before the user's script starts (file syntax, unknown keys, callable import and signature).
"""
from __future__ import annotations

import abc
import importlib
import inspect
import itertools
import os
import runpy
import threading

from jaxplace_cli.placement.devices import check_name, static_check
from jaxplace_cli.placement.errors import PolicyLoadError
from jaxplace_cli.placement.opinfo import OpInfo
from jaxplace_cli.placement.rules import RuleSet, parse_rules


class Policy(abc.ABC):
    label = "policy"
    granular = True  # may be consulted per primitive under --granularity op

    @abc.abstractmethod
    def decide(self, info: OpInfo):
        """The device for the op ``info`` describes: a Device, a name, or None (JAX decides)."""

    def named_devices(self) -> list[list[str]]:
        """The device names this policy can answer, known before the run: each entry lists
        alternatives (an alias: the first present wins), one of which must exist."""
        return []


class Default(Policy):
    label = "default"

    def decide(self, info: OpInfo):
        return None


class Pin(Policy):
    def __init__(self, device: str):
        self.device = check_name(device, "--policy pin")
        self.label = f"pin:{self.device}"

    def decide(self, info: OpInfo):
        return self.device

    def named_devices(self) -> list[list[str]]:
        return [[self.device]]


class RoundRobin(Policy):
    """``rr``: independent work (host/uncommitted inputs) cycles over the devices; work on
    data that already lives on a device follows it. ``rr-strict``: every op cycles."""

    def __init__(self, strict: bool):
        self.strict = strict
        self.label = "rr-strict" if strict else "rr"
        self._next = itertools.count()

    def decide(self, info: OpInfo):
        devices = info.devices
        if not self.strict:
            homes: dict = {}
            for dev, placed, nbytes in info.extra.get("inputs", ()):
                if placed and dev in devices:
                    homes[dev] = homes.get(dev, 0) + nbytes
            if homes:
                return max(homes, key=lambda d: (homes[d], -devices.index(d)))
        return devices[next(self._next) % len(devices)]


class Rules(Policy):
    def __init__(self, ruleset: RuleSet):
        self.ruleset = ruleset
        self.label = f"rules:{os.path.basename(ruleset.path)}"
        self._cycles: dict[int, itertools.count] = {}
        self._lock = threading.Lock()
        self.last_rule = ""

    def decide(self, info: OpInfo):
        for rule in self.ruleset.rules:
            if rule.matches(info):
                info.extra["rule"] = f"rule {rule.index}"
                return self._target(rule, info)
        if self.ruleset.default is not None:
            info.extra["rule"] = "default rule"
            return self._target(self.ruleset.default, info)
        info.extra["rule"] = "no rule"
        return None

    def _target(self, rule, info: OpInfo):
        if rule.jax_decides:
            return None
        names = rule.devices
        if len(names) == 1:
            return self._alias(names[0], info)
        with self._lock:
            counter = self._cycles.setdefault(rule.index, itertools.count())
            i = next(counter)
        return self._alias(names[i % len(names)], info)

    def _alias(self, name: str, info: OpInfo):
        """An alias names candidates; the first present one is used and the substitution noted."""
        cands = self.ruleset.aliases.get(name)
        if not cands:
            return name
        from jaxplace_cli.model.events import device_label

        present = {device_label(d) for d in info.devices} | {d.platform for d in info.devices}
        for i, c in enumerate(cands):
            if c in present:
                if i:
                    info.extra["note"] = f"alias {name}: {', '.join(cands[:i])} not present, using {c}"
                return c
        return cands[0]  # none present: resolution reports the error


# -- Python callables ------------------------------------------------------------------------

_INFO_NAMES = {"info", "op_info", "opinfo"}
_FIELD_VALUES = {
    "op": lambda i: i.name, "name": lambda i: i.name, "op_name": lambda i: i.name,
    "dtype": lambda i: i.dtype, "shape": lambda i: i.shape, "shapes": lambda i: i.shapes,
    "dtypes": lambda i: i.dtypes, "args": lambda i: i.args, "nbytes": lambda i: i.nbytes,
    "file": lambda i: i.file, "line": lambda i: i.line, "function": lambda i: i.function,
    "backward": lambda i: i.backward, "kind": lambda i: i.kind, "occurrence": lambda i: i.occurrence,
    "devices": lambda i: i.devices,
}


class CallablePolicy(Policy):
    """Binds the user's callable by parameter names: ``(op, *args)``, ``(op, dtype, shape)``,
    ``(op, shape)``, ``(info)``, or any mix of OpInfo field names."""

    def __init__(self, fn, label: str):
        self.fn = fn
        self.label = label
        self._bind = _binder(fn, label)

    def decide(self, info: OpInfo):
        args, kwargs = self._bind(info)
        return self.fn(*args, **kwargs)


def _binder(fn, label: str):
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return lambda info: ((info,), {})
    params = list(sig.parameters.values())
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(positional) == 1 and (positional[0].name in _INFO_NAMES or positional[0].annotation is OpInfo
                                 or positional[0].annotation == "OpInfo"):
        return lambda info: ((info,), {})
    plan = []
    for p in params:
        if p.kind == p.VAR_POSITIONAL:
            plan.append(("*", None))
        elif p.kind == p.VAR_KEYWORD:
            continue
        elif p.name in _FIELD_VALUES:
            plan.append(("kw" if p.kind == p.KEYWORD_ONLY else "pos", p.name))
        elif p.name in _INFO_NAMES:
            plan.append(("kw" if p.kind == p.KEYWORD_ONLY else "pos", "__info__"))
        elif p.default is p.empty:
            raise PolicyLoadError(
                f"policy {label}: cannot bind parameter {p.name!r}; name parameters after OpInfo "
                f"fields ({', '.join(sorted(_FIELD_VALUES))}) or take one `info` argument")

    def bind(info: OpInfo):
        args, kwargs = [], {}
        for how, name in plan:
            if how == "*":
                args.extend(info.args)
                continue
            value = info if name == "__info__" else _FIELD_VALUES[name](info)
            if how == "kw":
                kwargs[name] = value
            else:
                args.append(value)
        return tuple(args), kwargs

    return bind


def _load_callable(spec: str):
    target, _, attr = spec.rpartition(":")
    if not target or not attr:
        raise PolicyLoadError(f"--policy {spec!r}: write FILE.py:NAME or package.module:NAME")
    if target.endswith(".py") or os.sep in target:
        if not os.path.isfile(target):
            raise PolicyLoadError(f"--policy {spec!r}: policy file {target} does not exist")
        try:
            namespace = runpy.run_path(target, run_name="jaxplace_policy")
        except Exception as exc:
            raise PolicyLoadError(f"--policy {spec!r}: loading {target} raised {type(exc).__name__}: {exc}") from None
        if attr not in namespace:
            raise PolicyLoadError(f"--policy {spec!r}: {target} defines no {attr!r}")
        obj = namespace[attr]
    else:
        try:
            module = importlib.import_module(target)
        except Exception as exc:
            raise PolicyLoadError(f"--policy {spec!r}: cannot import {target}: {type(exc).__name__}: {exc}") from None
        if not hasattr(module, attr):
            raise PolicyLoadError(f"--policy {spec!r}: module {target} has no {attr!r}")
        obj = getattr(module, attr)
    if isinstance(obj, type):  # a placer class: instantiate it (stateful RoundRobinPlacer)
        try:
            obj = obj()
        except Exception as exc:
            raise PolicyLoadError(f"--policy {spec!r}: {attr}() raised {type(exc).__name__}: {exc}") from None
    if not callable(obj):
        raise PolicyLoadError(f"--policy {spec!r}: {attr} is not callable")
    return obj


def check_before_run(policy: Policy, devices: list[str] | None, simulated: int | None,
                     on_error: str = "raise") -> None:
    """Everything about the devices that can be checked before the script starts (and before
    a run directory exists): ``--devices SPEC``, and the device a ``pin:`` policy sends every op
    to. PolicyLoadError on the first that cannot exist here.

    Not checked: a rules file's devices (a rule that never matches may name a device this
    machine lacks; one that matches fails at its first op, naming it, or falls back), and
    anything under ``--on-policy-error fallback`` (``pin:gpu:0`` with fallback is how one
    command runs on GPU machines and CPU-only CI alike)."""
    static_check(devices, "--devices", simulated)
    if on_error == "fallback":
        return
    for alternatives in policy.named_devices():
        errors = []
        for name in alternatives:
            try:
                static_check([name], f"--policy {policy.label}", simulated)
                break
            except PolicyLoadError as exc:
                errors.append(exc)
        else:
            if errors:
                raise errors[0]


def load_policy(policy) -> Policy:
    """A Policy from a ``--policy`` string, a Policy, or a Python callable."""
    if isinstance(policy, Policy):
        return policy
    if policy is None:
        return Default()
    if callable(policy) and not isinstance(policy, str):
        name = getattr(policy, "__name__", type(policy).__name__)
        return CallablePolicy(policy, f"callable {name}")
    if not isinstance(policy, str):
        raise PolicyLoadError(f"a policy is a string, a callable or a Policy, not {type(policy).__name__}")
    spec = policy.strip()
    if spec in ("", "default"):
        return Default()
    if spec == "rr":
        return RoundRobin(strict=False)
    if spec == "rr-strict":
        return RoundRobin(strict=True)
    if spec.startswith("pin:"):
        return Pin(spec[4:])
    if spec.endswith(".toml"):
        return Rules(parse_rules(spec))
    if ":" in spec:
        return CallablePolicy(_load_callable(spec), f"callable {spec}")
    raise PolicyLoadError(f"unknown policy {spec!r}: use default, pin:DEVICE, rr, rr-strict, "
                          "FILE.toml, FILE.py:NAME or module:NAME")
