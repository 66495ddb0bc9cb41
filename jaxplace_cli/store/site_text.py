"""The source text of each site's line (``site-text`` markers, capture/recorder.py), for
``diff``'s stable site identity (issue 26). Runs recorded before have none."""
from __future__ import annotations

from jaxplace_cli.model.events import MARKER_SITE_TEXT
from jaxplace_cli.model.untrusted import parse_value


def site_texts(store) -> dict[tuple[str, int], str]:
    """(file, line) -> the line's stripped source text, for the sites that have one. A marker
    jaxplace could not have written is skipped: the text only ever refines a match by line."""
    sites = store.sites()
    out = {}
    for (value,) in store.conn.execute("SELECT value FROM markers WHERE kind = ?", (MARKER_SITE_TEXT,)):
        try:
            sid, text = parse_value(value) if isinstance(value, str) and len(value) < 10_000 else (0, "")
        except (ValueError, TypeError):
            continue
        s = sites.get(sid) if isinstance(sid, int) else None
        if s is not None and isinstance(text, str) and text:
            out[(s.file, s.line)] = text[:500]
    return out
