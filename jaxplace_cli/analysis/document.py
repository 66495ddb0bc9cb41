"""The audit as a document: the documented, versioned schema (docs/audit-json-schema.md).

What ``--format json`` prints, what ``diff`` compares (a saved audit JSON or a run read now
are the same kind of thing), and what other renderers may read. Bump
``AUDIT_SCHEMA_VERSION`` on any incompatible change and update the document.
"""
from __future__ import annotations

from dataclasses import asdict

from jaxplace_cli.analysis import AuditResult

AUDIT_SCHEMA_VERSION = 1


def to_dict(result: AuditResult) -> dict:
    s = result.summary
    m = result.manifest
    return {
        "schema_version": AUDIT_SCHEMA_VERSION,
        "source": result.source,
        "path": result.path,
        "run": {
            "status": m.status if m else None,
            "exit_code": m.exit_code if m else None,
            "argv": m.argv if m else [],
            "policy": m.policy if m else None,
            "jax_version": m.jax_version if m else None,
        },
        "devices": s.devices,
        "ops": {
            "total": s.ops_total,
            "errors": s.op_errors,
            "by_device": _by_device(s),
        },
        "transfers": {
            "min_bytes": s.min_bytes,
            "totals": {k: {"count": v.count, "bytes": v.bytes} for k, v in s.totals.items()},
            "small": {k: {"count": v.count, "bytes": v.bytes} for k, v in s.small.items()},
            "unknown_size": dict(s.unknown_size),
            "sites": [
                {"kind": t.kind, "file": t.file, "line": t.line, "function": t.function,
                 "count": t.count, "bytes": t.bytes, "implicit": t.implicit,
                 "blocking": t.blocking, "api": t.api, "routes": t.routes,
                 **_source(result, t)}
                for t in s.sites
            ],
            "routes": _routes(s),
            "offload": _offload(s),
        },
        "steps": _steps(result),
        "findings": [asdict(f) for f in result.findings],
        "budget": None if result.budget is None else {
            "source": result.budget.source, "passed": result.budget.passed,
            "limits": result.budget.limits,
            "breaches": [asdict(b) for b in result.budget.breaches]},
        "notes": list(result.notes),
        "rules": {"checked": list(result.rules_checked),
                  "unsupported": dict(result.rules_unsupported)},
        "trace": asdict(result.trace) if result.trace is not None else None,
        "hosts": [_host(h) for h in result.hosts],
        "suggestion": _suggestion(result.suggestion),
        **_distributed(result),
        **_memory(result),
    }


def _source(result: AuditResult, t) -> dict:
    """``{"source": text}`` of a site's line where the run recorded it (absent otherwise:
    older runs, traces): ``diff`` matches sites by it."""
    text = result.site_texts.get((t.file, t.line))
    return {"source": text} if text else {}


def _memory(result: AuditResult) -> dict:
    """Device memory (issue 27); absent from the audit of a run recorded before it."""
    if result.memory is None:
        return {}
    from jaxplace_cli.analysis.memory import as_dict

    return {"memory": as_dict(result.memory)}


def _distributed(result: AuditResult) -> dict:
    """A jax.distributed job's per-process view; absent from the audit of a single run."""
    if result.distributed is None:
        return {}
    from jaxplace_cli.analysis.distributed import job_dict

    return {"distributed": job_dict(result.distributed)}


def _suggestion(sg) -> dict | None:
    if sg is None:
        return None
    return {"summary": sg.summary, "device": sg.device, "ops": list(sg.ops), "site": sg.site,
            "saved_bytes": sg.saved_bytes, "saved_transfers": sg.saved_transfers,
            "saved_round_trips": sg.saved_round_trips, "needs_code_change": sg.needs_code_change,
            "policy": sg.policy}


def _by_device(s) -> dict:
    return {d.device: {"count": d.count, "dispatch_ns": d.dispatch_ns, "device_ns": d.device_ns,
                       "top": [{"name": n, "count": c} for n, c in d.top]}
            for d in s.ops_by_device}


def _routes(s) -> list[dict]:
    return [asdict(r) for r in s.routes]


def _offload(s) -> dict:
    return {"totals": {k: {"count": v.count, "bytes": v.bytes} for k, v in s.offload.items()},
            "unknown_size": dict(s.offload_unknown_size)}


def _host(h) -> dict:
    s = h.summary
    return {
        "host": h.host,
        "path": h.path,
        "source": h.source,
        "devices": list(s.devices),
        "step_count": h.step_count,
        "ops": {"total": s.ops_total, "by_device": _by_device(s)},
        "transfers": {
            "totals": {k: {"count": v.count, "bytes": v.bytes} for k, v in s.totals.items()},
            "small": {k: {"count": v.count, "bytes": v.bytes} for k, v in s.small.items()},
            "unknown_size": dict(s.unknown_size),
            "routes": _routes(s),
            "offload": _offload(s),
        },
        "notes": list(h.notes),
    }


def _steps(result: AuditResult) -> dict | None:
    info = result.steps
    if info is None:
        return None
    return {
        "method": info.method,
        "detail": info.detail,
        "count": len(info.steps),
        "warmup": info.warmup,
        "steady_state": {k: v.summary(info.warmup) for k, v in result.step_transfers.items()},
        "per_step": {k: {"counts": v.counts, "bytes": v.bytes} for k, v in result.step_transfers.items()},
    }
