"""Findings: the rule registry and ``run_rules``. The rules live in ``analysis/rules/``.

Every finding names the user's file:line (when the source can know it), what it costs
(count, bytes, time) and how to fix it. Rules over a jaxplace run need what only a run
records (user sites, buffer identities, compile signatures); a foreign trace supports only
some of them — ``NEEDS_RUN`` says why the others cannot run there (analysis/trace_audit.py).
"""
from __future__ import annotations

from jaxplace_cli.analysis.rules.balance import idle_device, imbalance
from jaxplace_cli.analysis.rules.base import ERROR, INFO, SEVERITIES, WARNING, Finding, RuleConfig
from jaxplace_cli.analysis.rules.fwd_bwd import fwd_bwd_split
from jaxplace_cli.analysis.rules.incompatible import incompatible_devices
from jaxplace_cli.analysis.rules.loss import loss_findings
from jaxplace_cli.analysis.rules.memory import memory_growth, memory_imbalance, replicated
from jaxplace_cli.analysis.rules.pingpong import pingpong
from jaxplace_cli.analysis.rules.placement import policy_fallback
from jaxplace_cli.analysis.rules.recompile import recompile
from jaxplace_cli.analysis.rules.transfers import host_sync_in_loop, implicit_h2d_in_loop, uncommitted_copy
from jaxplace_cli.analysis.rules.uploads import repeated_put


def host_offload(run, cfg) -> list[Finding]:
    """XLA host-offload copies are compiled into the program and visible only in a profiler
    trace (``copy-start`` to/from memory space S(5)); a jaxplace run's own events never hold
    them, so on a run this rule finds nothing. See analysis/trace_audit.py."""
    return []


RULES = {
    "pingpong": pingpong,
    "host-sync-in-loop": host_sync_in_loop,
    "implicit-h2d-in-loop": implicit_h2d_in_loop,
    "repeated-put": repeated_put,
    "uncommitted-copy": uncommitted_copy,
    "incompatible-devices": incompatible_devices,
    "fwd-bwd-split": fwd_bwd_split,
    "recompile": recompile,
    "imbalance": imbalance,
    "idle-device": idle_device,
    "host-offload": host_offload,
    "policy-fallback": policy_fallback,
    "memory-growth": memory_growth,
    "replicated": replicated,
    "memory-imbalance": memory_imbalance,
}
# Rules over the memory rows (issue 27): a run recorded before them neither checks nor lists
# them (its audit stays as it was: tests/test_golden_runs.py).
MEMORY_RULES = ("memory-growth", "replicated", "memory-imbalance")

# rule -> (short description, full description): SARIF's rule metadata, the docs' index
# (docs/rules.md has one section per rule, anchored by its id).
RULE_DOCS = {
    "pingpong": ("Data bounced between devices",
                 "Data left a device and came back to it along the data flow (A -> B -> A): every "
                 "return leg is a transfer a placement on one device would not make."),
    "host-sync-in-loop": ("Host waits for the device in a loop",
                          "A blocking device-to-host read (float(loss), .item(), printing) repeated at "
                          "one line: each read stalls the host until the device catches up."),
    "implicit-h2d-in-loop": ("Host data uploaded implicitly in a loop",
                             "NumPy or Python data passed to a JAX call at one line, call after call: "
                             "each call uploads it again."),
    "repeated-put": ("The same host array put on a device in a loop",
                     "jax.device_put of the same NumPy array at one line, call after call: each put "
                     "copies it again, where one put before the loop would do."),
    "uncommitted-copy": ("Uncommitted array copied again and again",
                         "An uncommitted array used with arrays committed to another device is "
                         "copied there on every use; it never moves. Or a new uncommitted array "
                         "from one line each step, copied once each: a copy per step."),
    "incompatible-devices": ("Call failed: arguments on incompatible devices",
                             "A jitted call got arguments committed to different devices; the finding "
                             "names each argument, where it was created and where it was committed."),
    "fwd-bwd-split": ("Backward pass on another device than its forward",
                      "Backward-pass ops read the forward pass's residuals from another device: "
                      "every step ships them across."),
    "recompile": ("Jitted function compiled again and again",
                  "A jitted function compiled more times than the threshold; the finding says what "
                  "changed between consecutive signatures."),
    "imbalance": ("Devices unevenly loaded",
                  "Of the work spread over devices, the busiest device spent several times the time "
                  "of the least busy one."),
    "idle-device": ("Devices left idle that the program could use",
                    "A device ran no op while the script spread its work over other devices, or while "
                    "independent chains of one jit function all ran on JAX's default device."),
    "host-offload": ("XLA host-offload copies",
                     "Copies between device and host memory compiled into the program (profiler "
                     "traces only)."),
    "memory-growth": ("Device memory grows every step",
                      "Live device memory on a device rose at every steady-state step: arrays made "
                      "at the named line stay referenced (a leak)."),
    "replicated": ("Same array held whole on several devices",
                   "An array replicated over several devices: every copy past the first costs its "
                   "bytes of device memory."),
    "memory-imbalance": ("Device memory unevenly used",
                         "One device's peak of live arrays is several times another's."),
    "recording-incomplete": ("The recording lost events",
                             "Events the recorder made are not in the store (the process was killed, "
                             "the disk was full, the writer died): totals and findings are lower "
                             "bounds, and no budget passes."),
    "policy-fallback": ("Placement policy could not place ops",
                        "With --on-policy-error fallback, the policy failed for these ops and JAX "
                        "decided where they ran."),
}

# Rules a foreign trace cannot support, and what they need that only `jaxplace run` records.
NEEDS_RUN = {
    "pingpong": "buffer identities along the data flow",
    "host-sync-in-loop": "the user's source line of each device-to-host read",
    "implicit-h2d-in-loop": "which uploads were implicit (numpy arguments) and their lines",
    "repeated-put": "which host array each jax.device_put carried",
    "uncommitted-copy": "buffer identities and committed/uncommitted state",
    "incompatible-devices": "the failing call and its arguments' origins",
    "fwd-bwd-split": "forward/backward ops linked by buffer identities",
    "recompile": "compile events with call signatures",
    "policy-fallback": "a placement policy applied by jaxplace",
}


def selected(select: list[str] | None = None, ignore: list[str] | None = None) -> list[str]:
    """Rule ids to run, in registry order: ``--rule`` (all if none) minus ``--ignore``."""
    return [r for r in RULES if (not select or r in select) and r not in (ignore or [])]


def sort_findings(findings: list[Finding]) -> list[Finding]:
    order = {s: i for i, s in enumerate(SEVERITIES)}
    return sorted(findings, key=lambda f: (order[f.severity], -f.bytes, -f.count))


def run_rules(run, cfg: RuleConfig, select: list[str] | None = None,
              ignore: list[str] | None = None) -> list[Finding]:
    # lost data is said whatever rules were chosen (analysis/rules/loss.py)
    findings = loss_findings(run)
    for name in selected(select, ignore):
        findings.extend(RULES[name](run, cfg))
    return sort_findings(findings)


__all__ = ["ERROR", "INFO", "NEEDS_RUN", "RULE_DOCS", "RULES", "SEVERITIES", "WARNING", "Finding",
           "RuleConfig", "run_rules", "selected", "sort_findings", "fwd_bwd_split",
           "host_offload", "host_sync_in_loop", "idle_device", "imbalance",
           "implicit_h2d_in_loop", "incompatible_devices", "pingpong", "recompile",
           "uncommitted_copy"]
