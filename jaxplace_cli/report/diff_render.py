"""Renderers for `jaxplace diff`: a Diff -> text, JSON (``diff.to_dict``), markdown, GitHub
annotations or JUnit XML, registered in report/base.py. Like the audit renderers they only
present; ``options.failures`` are the ``--fail-on-increase`` sentences, already decided by
``diff.increases_over``. Every string
that came from a side (paths, site keys, notes) passes the ``model.safe`` function of its
target."""
from __future__ import annotations

import os
import xml.etree.ElementTree as ET

from jaxplace_cli.analysis.diff import Diff
from jaxplace_cli.model.safe import code_span, plain, xml
from jaxplace_cli.model.safe import markdown as md
from jaxplace_cli.model.sizes import human_bytes
from jaxplace_cli.report.github import _line as _annotation


def _pct(p) -> str:
    if p is None:
        return ""
    return " (from none)" if p == float("inf") else f" ({p:+.1f}%)"


def _changed(d: Diff):
    return [s for s in d.sites if s.status != "same"]


def _from(s) -> str:
    """`` (was line 12)`` for a moved site: the same code, at another place in its file."""
    return f" (was line {s.moved_from})" if s.status == "moved" else ""


def text(d: Diff, options) -> str:
    out = [f"jaxplace diff  {plain(d.base)}  ->  {plain(d.new)}"]
    for k in d.kinds:
        out.append(f"  {k.kind}: {k.base_count} -> {k.new_count} transfers, "
                   f"{human_bytes(k.base_bytes)} -> {human_bytes(k.new_bytes)}{_pct(k.bytes_pct)}")
    for s in _changed(d):
        out.append(f"  [{s.status}] {plain(s.key)}{_from(s)}: {s.base_count} -> {s.new_count} transfers, "
                   f"{human_bytes(s.base_bytes)} -> {human_bytes(s.new_bytes)}")
    if not _changed(d):
        out.append("  no site changed")
    out += [f"  note: {plain(n)}" for n in d.notes]
    return "\n".join(out) + "\n"


def markdown(d: Diff, options) -> str:
    failures = options.failures
    out = [f"## jaxplace diff: {code_span(d.base)} → {code_span(d.new)}", ""]
    out += [f"- :x: {md(f)}" for f in failures] + ([""] if failures else [])
    out += ["| kind | count | bytes | change |", "|---|---:|---:|---:|"]
    for k in d.kinds:
        out.append(f"| {k.kind} | {k.base_count:,} → {k.new_count:,} | "
                   f"{human_bytes(k.base_bytes)} → {human_bytes(k.new_bytes)} | {_pct(k.bytes_pct).strip(' ()')} |")
    changed = _changed(d)
    if changed:
        out += ["", "| site | status | count | bytes |", "|---|---|---:|---:|"]
        for s in changed[:30]:
            out.append(f"| {code_span(s.key, table=True)} | {s.status}{_from(s)} | {s.base_count:,} → {s.new_count:,} | "
                       f"{human_bytes(s.base_bytes)} → {human_bytes(s.new_bytes)} |")
        if len(changed) > 30:
            out.append(f"| … and {len(changed) - 30} more | | | |")
    out += [""] + [f"> {md(n)}" for n in d.notes] if d.notes else []
    return "\n".join(out) + "\n"


def github(d: Diff, options) -> str:
    """A warning on each new or grown site (on its line), an error per failed limit. Sites are
    matched by stable identity (analysis/diff.py): an unchanged program gets none, whatever
    lines an edit elsewhere moved."""
    failures = options.failures
    out = []
    for s in d.sites:
        if s.status == "new" or (s.status in ("changed", "moved") and s.new_bytes > s.base_bytes):
            what = "new transfer site" if s.status == "new" else "transfers grew"
            out.append(_annotation("warning", f"jaxplace diff: {what}: {s.key}: {s.base_count} -> "
                                   f"{s.new_count} transfers, {human_bytes(s.base_bytes)} -> "
                                   f"{human_bytes(s.new_bytes)}", s.file, s.line))
    out += [_annotation("error", f"jaxplace diff: {f}", "", 0) for f in failures]
    return "\n".join(out) + ("\n" if out else "")


def junit(d: Diff, options) -> str:
    """One testcase per transfer kind; it fails when --fail-on-increase judged it grown."""
    failures = options.failures
    suite = ET.Element("testsuite", name="jaxplace diff", tests=str(len(d.kinds)), failures="0", errors="0")
    n_failed = 0
    for k in d.kinds:
        case = ET.SubElement(suite, "testcase", classname="jaxplace.diff", name=f"diff.{k.kind}")
        mine = [f for f in failures if f.startswith(f"{k.kind} ")]
        if mine:
            n_failed += 1
            fail = ET.SubElement(case, "failure", message=xml(mine[0]), type="increase")
            fail.text = xml("\n".join(mine))
        out = ET.SubElement(case, "system-out")
        out.text = xml(f"{k.base_count} -> {k.new_count} transfers, {k.base_bytes:,} -> {k.new_bytes:,} bytes"
                       + os.linesep.join([""] + [f"[{s.status}] {s.key}" for s in _changed(d)
                                                 if f" {k.kind} " in s.key]))
    suite.set("failures", str(n_failed))
    return ET.tostring(suite, encoding="unicode", xml_declaration=True) + "\n"


def json_doc(d: Diff, options) -> str:
    import json

    from jaxplace_cli.analysis.diff import to_dict

    return json.dumps(to_dict(d), indent=2) + "\n"
