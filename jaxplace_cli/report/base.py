"""The ``Renderer`` protocol and the one registry of output formats (pyinstrument's
``renderers/base.py``: a renderer is a format name, the file extensions that pick it, and a
``render`` method).

Every output a command prints or writes goes through ``renderer(kind, fmt).render(obj,
options)``; ``kind`` says what is rendered:

* ``audit``: an ``analysis.AuditResult`` (``jaxplace audit``, ``report``);
* ``diff``: an ``analysis.diff.Diff`` (``jaxplace diff``; ``options.failures`` are its
  ``--fail-on-increase`` sentences);
* ``suggest``: a ``report.suggest_render.PlanReport``; ``graph``: a ``GraphReport``.

Renderer modules are imported when a format is used (rich costs ~0.1 s), so the registry is
cheap to read for ``--format`` checks and ``-o`` extensions.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class Options:
    """What shapes a rendering beyond the object itself; each renderer reads what applies."""

    width: int | None = None  # text and rich: columns (default: report.text_width())
    max_findings: int | None = None  # text, rich, markdown: sites listed per rule
    verbose: bool = False  # text, rich, markdown: every finding and related site
    failures: tuple = ()  # diff: the --fail-on-increase sentences, already decided
    timeline: object = None  # html: the run's analysis.timeline.Timeline (None: no timeline)
    sources: dict | None = None  # html: (file, line) -> source line (Audit.sources(); None: none)


class Renderer(Protocol):
    kind: str
    name: str
    extensions: tuple[str, ...]

    def render(self, obj, options: Options) -> str: ...


@dataclass(frozen=True)
class Registered:
    """A renderer known by name: ``target`` (``module:function`` under ``report/``) is
    imported on first use and called as ``function(obj, options)``."""

    kind: str
    name: str
    extensions: tuple[str, ...]
    target: str

    def render(self, obj, options: Options | None = None) -> str:
        module, _, function = self.target.partition(":")
        fn = getattr(importlib.import_module(f"jaxplace_cli.report.{module}"), function)
        return fn(obj, options or Options())


REGISTRY: tuple[Registered, ...] = (
    Registered("audit", "rich", (), "terminal:render_rich"),
    Registered("audit", "text", (".txt",), "terminal:render_text"),
    Registered("audit", "json", (".json",), "json_report:render"),
    Registered("audit", "markdown", (".md",), "markdown:render_report"),
    Registered("audit", "junit", (".xml",), "junit:render_report"),
    Registered("audit", "sarif", (".sarif",), "sarif:render_report"),
    Registered("audit", "github", (), "github:render_report"),
    Registered("audit", "html", (".html", ".htm"), "html:render_report"),
    Registered("diff", "text", (".txt",), "diff_render:text"),
    Registered("diff", "json", (".json",), "diff_render:json_doc"),
    Registered("diff", "markdown", (".md",), "diff_render:markdown"),
    Registered("diff", "github", (), "diff_render:github"),
    Registered("diff", "junit", (".xml",), "diff_render:junit"),
    Registered("diff", "html", (".html", ".htm"), "diff_html:render"),
    Registered("suggest", "text", (), "suggest_render:plan_text"),
    Registered("suggest", "json", (), "suggest_render:plan_doc"),
    Registered("suggest", "markdown", (), "suggest_render:plan_markdown"),
    Registered("graph", "text", (), "suggest_render:graph_text"),
    Registered("graph", "json", (), "suggest_render:graph_doc"),
)


def formats(kind: str) -> tuple[str, ...]:
    """The ``--format`` names for ``kind``, in the registry's order."""
    return tuple(r.name for r in REGISTRY if r.kind == kind)


def extensions(kind: str) -> dict[str, str]:
    """File extension -> format name for ``kind`` (what ``-o FILE`` picks)."""
    return {ext: r.name for r in REGISTRY if r.kind == kind for ext in r.extensions}


def renderer(kind: str, name: str) -> Registered:
    """The renderer of ``kind`` named ``name``; KeyError when there is none."""
    for r in REGISTRY:
        if r.kind == kind and r.name == name:
            return r
    raise KeyError((kind, name))
