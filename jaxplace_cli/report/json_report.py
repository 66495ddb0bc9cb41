"""``--format json``: the audit document (analysis/document.py) as JSON."""
from __future__ import annotations

import json

from jaxplace_cli.analysis import AuditResult
from jaxplace_cli.analysis.document import to_dict


def render(result: AuditResult, options=None) -> str:
    return json.dumps(to_dict(result), indent=2) + "\n"
