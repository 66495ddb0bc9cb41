"""A finding's severities, worst first: the one order that a budget's ``fail_on``, the verdict
line and every report sort and count by."""
from __future__ import annotations

ERROR, WARNING, INFO = "error", "warning", "info"
SEVERITIES = (ERROR, WARNING, INFO)
