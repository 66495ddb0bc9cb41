"""Baselines: compare two audits (run directories or saved ``audit --format json`` files).

Both sides are reduced to the documented JSON schema first, so a baseline saved months ago
compares with a fresh run. Sites are matched by a stable identity (file name, function, kind,
API and the source text of the line, with its position among identical ones): absolute paths
differ between machines, and an edit elsewhere in the file moves line numbers, not identities.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from jaxplace_cli.model.errors import JaxplaceError
from jaxplace_cli.model.events import TRANSFER_KINDS
from jaxplace_cli.model.paths import site_name
from jaxplace_cli.model.sizes import MAX_SIZE
from jaxplace_cli.model.untrusted import MAX_BASELINE_BYTES, load_json


class DiffInputError(JaxplaceError):
    """A side of the diff cannot be read (one line, exit 2)."""


@dataclass
class KindDelta:
    kind: str
    base_count: int
    new_count: int
    base_bytes: int
    new_bytes: int

    @property
    def bytes_pct(self) -> float | None:
        if self.base_bytes == 0:
            return None if self.new_bytes == 0 else float("inf")
        return 100.0 * (self.new_bytes - self.base_bytes) / self.base_bytes

    @property
    def count_pct(self) -> float | None:
        if self.base_count == 0:
            return None if self.new_count == 0 else float("inf")
        return 100.0 * (self.new_count - self.base_count) / self.base_count


@dataclass
class SiteDelta:
    key: str  # "train.py:41 d2h float()"
    base_count: int
    new_count: int
    base_bytes: int
    new_bytes: int
    status: str  # "new" | "vanished" | "changed" | "same" | "moved" | "unlisted" (see compare)
    file: str = ""  # full path (the new side's when both have it)
    line: int = 0
    moved_from: int = 0  # a moved site: its line in the base


@dataclass
class Diff:
    base: str
    new: str
    kinds: list[KindDelta]
    sites: list[SiteDelta] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)  # sides that lost data (rules/loss.py): no gate passes
    steps: dict = field(default_factory=dict)  # "base"/"new" -> per_step_of(side) (the HTML diff's bars)


def per_step_of(doc: dict) -> dict | None:
    """A side's per-step transfers ``{"warmup", "kinds": {kind: {"counts", "bytes"}}}``, or None
    when it has none; a saved audit is input: anything not lists of integers is left out."""
    steps = doc.get("steps")
    per = steps.get("per_step") if isinstance(steps, dict) else None
    if not isinstance(per, dict):
        return None
    kinds = {}
    for k in TRANSFER_KINDS:
        v = per.get(k)
        if isinstance(v, dict) and all(isinstance(v.get(c), list) and all(type(x) is int for x in v[c])
                                       for c in ("counts", "bytes")):
            kinds[k] = {"counts": v["counts"], "bytes": v["bytes"]}
    warmup = steps.get("warmup")
    if not any(v["counts"] or v["bytes"] for v in kinds.values()):
        return None  # a run without steps
    return {"warmup": warmup if type(warmup) is int else 0, "kinds": kinds}


def lost_data(doc: dict, name: str) -> list[str]:
    """The side's ``recording-incomplete`` finding as a sentence (a saved audit is input:
    anything else in its findings is ignored)."""
    found = doc.get("findings")
    return [f"{name}: {str(f.get('message', ''))[:400]}" for f in (found if isinstance(found, list) else [])
            if isinstance(f, dict) and f.get("rule") == "recording-incomplete"][:1]


def load_side(path: Path, min_bytes: int) -> dict:
    path = Path(path)
    if path.is_file():
        data = load_json(path, "saved audit", MAX_BASELINE_BYTES, DiffInputError)
        if not isinstance(data, dict) or data.get("schema_version") != 1 or "transfers" not in data:
            raise DiffInputError(f"{path} is not a `jaxplace audit --format json` file of schema version 1")
        check_saved_audit(data, str(path))
        return data
    from jaxplace_cli.analysis.audit import JOB, RUN, Audit
    from jaxplace_cli.analysis.findings import RuleConfig

    audit = Audit(path, RuleConfig(min_bytes=min_bytes), top_sites=10_000)  # InputError: one line
    if audit.kind not in (RUN, JOB):
        raise DiffInputError(f"{path} is not a jaxplace run directory or a saved audit JSON")
    return audit.document()


def check_saved_audit(data: dict, where: str) -> None:
    """The fields ``compare`` reads, with their types and ranges: a saved audit is input (a
    baseline from a pull request). A missing ``totals``, a count that is text, a negative or
    absurd size is one line naming the field (NaN and Infinity never parse: model/untrusted.py),
    never a silently passed ``--fail-on-increase``."""
    t = _field(data, "transfers", dict, where)
    _count(t.get("min_bytes", 0), "transfers.min_bytes", where)
    totals = _field(t, "totals", dict, where, "transfers.")
    for kind, v in totals.items():
        name = f"transfers.totals.{kind}"
        if not isinstance(v, dict):
            raise DiffInputError(f"{where}: field {name!r} must be an object with count and bytes")
        for key in ("count", "bytes"):
            _count(v.get(key, 0), f"{name}.{key}", where)
    for i, s in enumerate(_field(t, "sites", list, where, "transfers.")):
        name = f"transfers.sites[{i}]"
        if not isinstance(s, dict):
            raise DiffInputError(f"{where}: field {name!r} must be an object")
        for key, kind in (("file", str), ("kind", str), ("api", str), ("line", int),
                          ("count", int), ("bytes", int)):
            if key not in s:
                raise DiffInputError(f"{where}: field {name}.{key!r} is missing")
            if kind is int:
                _count(s[key], f"{name}.{key}", where)
            elif not isinstance(s[key], str):
                raise DiffInputError(f"{where}: field '{name}.{key}' must be a string")


def _field(obj: dict, key: str, kind: type, where: str, prefix: str = ""):
    if key not in obj:
        raise DiffInputError(f"{where}: field '{prefix}{key}' is missing; not a saved `jaxplace audit --format json`")
    if not isinstance(obj[key], kind):
        raise DiffInputError(f"{where}: field '{prefix}{key}' must be {'an object' if kind is dict else 'a list'}")
    return obj[key]


def _count(value, name: str, where: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_SIZE:
        shown = repr(value)[:40]
        raise DiffInputError(f"{where}: field {name!r} must be an integer from 0 to {MAX_SIZE:,}, not {shown}")


def _site_key(s: dict) -> str:
    return f"{site_name(s['file'], s['line'])} {s['kind']} {s['api']}"


def _index(doc: dict) -> dict:
    """Sites at one line, kind and API (their implicit/blocking variants summed): loc ->
    ``[count, bytes, file, line, function, source]``."""
    out: dict = {}
    for s in doc["transfers"]["sites"]:
        e = out.setdefault(_site_key(s), [0, 0, s["file"], s["line"], "", ""])
        e[0] += s["count"]
        e[1] += s["bytes"]
        f, src = s.get("function"), s.get("source")
        e[4] = f[:200] if isinstance(f, str) else e[4]
        e[5] = src[:500] if isinstance(src, str) else e[5]
    return out


def _identities(index: dict, use_text: bool) -> dict:
    """identity -> loc: the file's name, function, kind, API and (``use_text``) the line's
    source text, with its position among sites of the same identity in line order — what an
    edit elsewhere in the file does not change (issue 26)."""
    groups: dict = {}
    for loc, e in index.items():
        kind_api = loc.split(" ", 1)[1]
        key = (site_name(e[2]), e[4], kind_api, e[5] if use_text else "")
        groups.setdefault(key, []).append((e[3], loc))
    return {key + (k,): loc for key, locs in groups.items() for k, (_, loc) in enumerate(sorted(locs))}


def _longest_in_order(lines: list[int]) -> set[int]:
    """Indexes of a longest strictly increasing subsequence of ``lines``."""
    import bisect

    tails: list[int] = []
    tail_at: list[int] = []
    prev = [-1] * len(lines)
    for i, x in enumerate(lines):
        k = bisect.bisect_left(tails, x)
        if k == len(tails):
            tails.append(x)
            tail_at.append(i)
        else:
            tails[k], tail_at[k] = x, i
        prev[i] = tail_at[k - 1] if k else -1
    out, i = set(), tail_at[-1] if tail_at else -1
    while i >= 0:
        out.add(i)
        i = prev[i]
    return out


def match_sites(bi: dict, ni: dict) -> dict:
    """base loc -> new loc for the sites both sides have. By identity (``_identities``; the
    source text when both sides recorded it for every site), then a line whose text moved to
    another function of the file."""
    use_text = all(e[5] for e in bi.values()) and all(e[5] for e in ni.values())
    b_id, n_id = _identities(bi, use_text), _identities(ni, use_text)
    pairs = {b_id[k]: n_id[k] for k in b_id.keys() & n_id.keys()}
    if use_text:
        loose: dict = {}
        taken = set(pairs.values())
        for loc, e in ni.items():
            if loc not in taken:
                loose.setdefault((site_name(e[2]), loc.split(" ", 1)[1], e[5]), []).append(loc)
        for loc, e in sorted(bi.items(), key=lambda kv: kv[1][3]):
            if loc not in pairs:
                cands = loose.get((site_name(e[2]), loc.split(" ", 1)[1], e[5]))
                if cands:
                    pairs[loc] = cands.pop(0)
    return pairs


def moved(pairs: dict, bi: dict, ni: dict) -> set[str]:
    """New locs of matched sites whose line moved relative to the other matched sites of its
    file (not on a longest run that kept its order), or into another function: a comment
    added above shifts every line and moves none."""
    by_file: dict = {}
    for b, n in pairs.items():
        by_file.setdefault(site_name(bi[b][2]), []).append((bi[b][3], ni[n][3], n, bi[b][4] != ni[n][4]))
    out = set()
    for items in by_file.values():
        items.sort()
        keep = _longest_in_order([nl for _, nl, _, _ in items])
        out |= {n for i, (_, _, n, other_fn) in enumerate(items) if i not in keep or other_fn}
    return out


def compare(base: dict, new: dict, base_name: str = "base", new_name: str = "new") -> Diff:
    """Per kind and per site. Sites are matched by stable identity (``match_sites``): a site
    whose line moved is ``moved`` (its key names the new line), never vanished and new."""
    kinds = []
    for k in TRANSFER_KINDS:
        b = base["transfers"]["totals"].get(k, {"count": 0, "bytes": 0})
        n = new["transfers"]["totals"].get(k, {"count": 0, "bytes": 0})
        kinds.append(KindDelta(k, b["count"], n["count"], b["bytes"], n["bytes"]))
    bi, ni = _index(base), _index(new)
    cut_b, cut_n = truncated(base), truncated(new)
    notes = [f"{name} lists only its top {len(doc['transfers']['sites'])} transfer sites (audit --top); "
             f"a site missing from it is 'unlisted', not new or vanished — save baselines with "
             f"`jaxplace audit RUN --format json --top 1000`"
             for name, doc, cut in ((base_name, base, cut_b), (new_name, new, cut_n)) if cut]
    if base["transfers"].get("min_bytes") != new["transfers"].get("min_bytes"):
        notes.append(f"the sides count transfers from different sizes ({base['transfers'].get('min_bytes')} "
                     f"and {new['transfers'].get('min_bytes')} bytes): deltas mix what each leaves out")
    pairs = match_sites(bi, ni)
    shifted = moved(pairs, bi, ni)
    sites = []
    for loc, (bc, bb, bf, bl, _, _) in bi.items():
        if loc in pairs:
            nloc = pairs[loc]
            nc, nb, nf, nl = ni[nloc][:4]
            status = "moved" if nloc in shifted else "same" if (bc, bb) == (nc, nb) else "changed"
            sites.append(SiteDelta(nloc, bc, nc, bb, nb, status, nf, nl, bl if status == "moved" else 0))
        else:
            sites.append(SiteDelta(loc, bc, 0, bb, 0, "unlisted" if cut_n else "vanished", bf, bl))
    matched = set(pairs.values())
    for loc, (nc, nb, nf, nl, _, _) in ni.items():
        if loc not in matched:
            sites.append(SiteDelta(loc, 0, nc, 0, nb, "unlisted" if cut_b else "new", nf, nl))
    sites.sort(key=lambda s: (-(abs(s.new_bytes - s.base_bytes)), s.key))
    lost = lost_data(base, base_name) + lost_data(new, new_name)
    return Diff(base_name, new_name, kinds, sites, notes + lost, lost,
                {"base": per_step_of(base), "new": per_step_of(new)})


def truncated(doc: dict) -> bool:
    """Whether a saved audit lists fewer transfer sites than it counted: its sites are the
    top ``--top`` of the same population (transfers of at least min_bytes) as its totals."""
    t = doc["transfers"]
    listed = sum(s["count"] for s in t["sites"])
    return listed < sum(v.get("count", 0) for v in t["totals"].values())


def increases_over(diff: Diff, pct: float) -> list[str]:
    """Sentences for every kind whose bytes or count grew by more than ``pct`` percent, and
    for a side that lost data (a gate never passes on it)."""
    out = list(diff.lost)
    for k in diff.kinds:
        for what, p, before, after in (("bytes", k.bytes_pct, k.base_bytes, k.new_bytes),
                                       ("transfers", k.count_pct, k.base_count, k.new_count)):
            if p is not None and p > pct:
                growth = "from none" if p == float("inf") else f"+{p:.1f}%"
                out.append(f"{k.kind} {what} grew {growth} ({before:,} -> {after:,}), more than the allowed {pct:g}%")
    return out


def to_dict(diff: Diff) -> dict:
    return {
        "schema_version": 1, "base": diff.base, "new": diff.new,
        "kinds": {k.kind: {"base": {"count": k.base_count, "bytes": k.base_bytes},
                           "new": {"count": k.new_count, "bytes": k.new_bytes},
                           "bytes_pct": k.bytes_pct if k.bytes_pct != float("inf") else None,
                           "count_pct": k.count_pct if k.count_pct != float("inf") else None}
                  for k in diff.kinds},
        "sites": [{"site": s.key, "status": s.status, "base": {"count": s.base_count, "bytes": s.base_bytes},
                   "new": {"count": s.new_count, "bytes": s.new_bytes},
                   **({"moved_from": s.moved_from} if s.status == "moved" else {})} for s in diff.sites],
        "notes": list(diff.notes),
    }
