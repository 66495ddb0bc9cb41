"""The one place where text that came from an input becomes output.

Everything ``audit``, ``diff`` and ``suggest`` read is untrusted (docs/security.md): a trace's
plane names, a manifest's argv, a site path or a device name may hold terminal escape
sequences (clear the screen, set the window title), rich markup (``[link=...]``, a stray
``[/]`` that crashes the render), Markdown that breaks out of a table, or characters XML
forbids. Renderers pass every input string through the function for their target; they never
print one raw.
"""
from __future__ import annotations

import re

# C0 and C1 controls and DEL (\t and \n are handled per target), and the invisible Unicode
# format characters that reorder or hide text on screen ("Trojan Source": bidi embeddings,
# overrides and isolates; zero-width joiners/spaces; Unicode line separators; the BOM), and lone surrogates (JSON's
# "\\ud800" decodes to one; writing it to a UTF-8 stream would raise)
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2028\u2029\u2060-\u2069\ufeff\ud800-\udfff]")
_LINE_BREAKS = re.compile(r"[\r\n\u2028\u2029\x85]")
_XML_ILLEGAL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff\ud800-\udfff]")


def _visible(m: re.Match) -> str:
    c = ord(m.group())
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def plain(text, one_line: bool = True) -> str:
    """For a terminal or a log line: control characters shown as ``\\x1b`` (never sent), line
    breaks too when ``one_line``."""
    text = str(text)
    if one_line:
        text = _LINE_BREAKS.sub(lambda m: "\\n" if m.group() == "\n" else _visible(m), text)
    return _CONTROL.sub(_visible, text)


def rich(text, one_line: bool = True) -> str:
    """For rich markup: ``plain`` and every ``[`` escaped, so input can never open a tag."""
    from rich.markup import escape

    return escape(plain(text, one_line))


def markdown(text) -> str:
    """For a Markdown table cell or line: one line, no raw HTML or entities, no links, and
    table pipes, emphasis and backticks escaped (a path with backticks and newlines cannot end
    the table). An ``_`` between letters or digits is left alone: GFM never reads it as
    emphasis, and ``device_put`` stays readable in the source."""
    text = plain(text)
    text = re.sub(r"([\\`*\[\]<|#~&])", r"\\\1", text)
    return re.sub(r"(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])", r"\\_", text)


def code_span(text, table: bool = False) -> str:
    """``text`` as a Markdown code span that input cannot close: the fence is one backtick
    longer than the longest run of backticks inside. In a table cell (``table``) a ``|``
    would still end the cell (GFM splits rows before it reads code spans): it is escaped,
    which GFM shows as a plain ``|`` inside the span."""
    text = plain(text)
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") or not text.strip() else ""
    if table:
        text = text.replace("|", "\\|")
    return f"{fence}{pad}{text}{pad}{fence}"


def xml(text) -> str:
    """For XML (JUnit): ``plain`` but keeping line breaks (a test's output has lines), then the
    characters XML 1.0 forbids removed; escaping ``<&`` is the XML writer's."""
    return _XML_ILLEGAL.sub("", plain(text, one_line=False))


def comment(text) -> str:
    """For one ``#`` comment line of a file jaxplace writes (TOML, shell): one line, always."""
    return plain(text)
