"""``--verify``: replay the script under the suggested policy and compare with the prediction.

The comparison is with ``Plan.expected``: the run's own measurement changed only where the
policy changes something (``predict.expected``), so transfers the script makes under any
placement are carried over exactly. The replay is a real ``python -m jaxplace_cli run --policy FILE`` subprocess in the recorded
run's working directory (so relative paths and the rules' ``file:line`` keys mean the same),
with the same simulated device count and script arguments. The new run is then measured
exactly like the original one.
"""
from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from jaxplace_cli.model.events import TRANSFER_KINDS
from jaxplace_cli.placement.devices import without_device_count
from jaxplace_cli.suggest.plan import Plan
from jaxplace_cli.suggest.predict import Traffic, measure


@dataclass
class Verification:
    ok: bool  # the command ran and produced a readable run
    match: bool  # transfers equal the prediction (kind by kind, site by site), device peaks within 1 %
    run_dir: str
    command: list
    measured: Traffic | None = None
    rows: list = field(default_factory=list)  # (kind, site, predicted [n, b], measured [n, b])
    error: str = ""
    stdout: str = ""  # the script's own output under the policy (results must not change)
    # (device, predicted peak, measured peak, limit or None, "ok" | "DIFFERENT" | "OVER LIMIT")
    memory_rows: list = field(default_factory=list)
    transfers_match: bool = False  # the transfer rows alone (``match`` also needs the memory rows)


def verify(plan: Plan, policy_path: Path, script: str, out_dir: Path, cwd: str | None = None,
           timeout: float = 600.0) -> Verification:
    cwd = cwd or _recorded_cwd(plan.cwd)
    args = plan.run_command(str(Path(policy_path).resolve()), script, str(Path(out_dir).resolve()))
    # -P: the working directory is not put first on sys.path (it is the recorded run's, which is
    # input: a jaxplace_cli/ package there would run instead of jaxplace)
    cmd = [sys.executable, "-P", "-m", "jaxplace_cli", *args[1:2], "--no-trace", "--quiet", *args[2:]]
    env = dict(os.environ)
    # the replay's device count is the recorded run's (``--devices``, or none simulated); the
    # other XLA flags of this environment stay (they were dropped with it before)
    flags = without_device_count(env.get("XLA_FLAGS", ""))
    if flags:
        env["XLA_FLAGS"] = " ".join(flags)
    else:
        env.pop("XLA_FLAGS", None)
    try:
        proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Verification(False, False, str(out_dir), cmd, error=f"replay failed: {exc}")
    from jaxplace_cli.analysis.run import InputError, open_run

    try:
        run = open_run(Path(out_dir))
    except InputError as exc:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or [str(exc)]
        return Verification(False, False, str(out_dir), cmd, error=f"replay exited {proc.returncode}: {tail[0]}")
    got = measure(run, cwd=plan.cwd)
    rows = compare(plan.expected or plan.predicted, got)
    transfers = all(p == m for _, _, p, m in rows)
    mem = memory_rows(plan, run)
    match = transfers and all(r[4] == "ok" for r in mem)
    err = "" if proc.returncode == 0 else f"the script exited {proc.returncode} under the policy"
    return Verification(True, match and proc.returncode == 0, str(out_dir), cmd, got, rows, err, proc.stdout, mem,
                        transfers)


def _recorded_cwd(cwd) -> str | None:
    """The recorded run's working directory when it is one here (an absolute path to a
    directory: ``os.getcwd()`` gives nothing else); else None, this process's own."""
    return cwd if isinstance(cwd, str) and os.path.isabs(cwd) and os.path.isdir(cwd) else None


MEMORY_TOLERANCE = 0.01  # predicted and measured peaks may differ by 1 % of the larger


def memory_rows(plan: Plan, run) -> list:
    """Each device's predicted peak against the re-run's measured one (its audit ``memory``,
    analysis/memory.py): ``DIFFERENT`` beyond ``MEMORY_TOLERANCE``, ``OVER LIMIT`` when the
    measured peak exceeds ``--memory-limit``. Empty when the plan predicts no memory."""
    from jaxplace_cli.analysis.memory import memory_report
    from jaxplace_cli.store.reader import reading
    from jaxplace_cli.suggest.memory_limit import UNLIMITED

    m = plan.memory
    if m is None:
        return []
    with reading(run.path):
        report = memory_report(run)
    got = {d.device: d.peak_bytes for d in report.devices} if report is not None else {}
    out = []
    for i, dev in enumerate(m.devices):
        pred, meas = int(m.predicted[i]), got.get(dev, 0) if report is not None else None
        limit = None if m.limit is None or m.limit[i] >= UNLIMITED else int(m.limit[i])
        if meas is None:
            verdict = "DIFFERENT"  # the re-run recorded no memory (jaxplace older than the plan?)
        elif limit is not None and meas > limit:
            verdict = "OVER LIMIT"
        elif abs(pred - meas) > MEMORY_TOLERANCE * max(pred, meas):
            verdict = "DIFFERENT"
        else:
            verdict = "ok"
        out.append((dev, pred, meas if meas is not None else 0, limit, verdict))
    return out


def compare(pred: Traffic, got: Traffic) -> list:
    """Rows for every kind total ("*"), every site either side has, and every host route
    (``host>cpu:1``: where the host legs went) either side has."""
    rows = []
    for kind in TRANSFER_KINDS:
        rows.append((kind, "*", list(pred.totals.get(kind, [0, 0])), list(got.totals.get(kind, [0, 0]))))
    keys = sorted(set(pred.sites) | set(got.sites))
    for kind, site in keys:
        rows.append((kind, site, list(pred.sites.get((kind, site), [0, 0])),
                     list(got.sites.get((kind, site), [0, 0]))))
    for kind, route in sorted(set(pred.routes) | set(got.routes)):
        rows.append((kind, route, list(pred.routes.get((kind, route), [0, 0])),
                     list(got.routes.get((kind, route), [0, 0]))))
    return rows
