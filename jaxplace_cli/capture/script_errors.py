"""The error python gives a script it cannot read (the runner compiles the script's bytes,
python reads the file through its tokenizer: the two word these failures differently)."""
from __future__ import annotations


def file_tokenizer_error(source: bytes, filename: str) -> SyntaxError | None:
    """The SyntaxError python gives a script it cannot read, or None. python reads a script
    through its file tokenizer, which stops at the first line that is not UTF-8 when no
    encoding is declared (no BOM, no coding line; a comment too) or that holds a NUL byte,
    whatever syntax error comes before it; ``compile`` of the bytes words both differently
    ("(unicode error) 'utf-8' codec can't decode ...", "source code string cannot contain null
    bytes") and passes a bad byte in a comment."""
    try:
        return _tokenizer_error(source, filename)
    except Exception:  # noqa: BLE001 - never in the way of the error compile gave
        return None


def _tokenizer_error(source: bytes, filename: str) -> SyntaxError | None:
    import tokenize

    lines = source.splitlines()  # \n, \r\n and \r, as python's tokenizer reads them
    encoding = "utf-8-sig" if source.startswith(b"\xef\xbb\xbf") else None
    for i, line in enumerate(lines[:2] if encoding is None else ()):
        cookie = tokenize.cookie_re.match(line.decode("latin-1"))
        if cookie:
            encoding = cookie.group(1)  # one python does not know: LookupError, compile's words
            break
        if i == 0 and not tokenize.blank_re.match(line):  # a bytes pattern
            break  # a coding line counts on line 2 only below a blank or comment line
    for lineno, line in enumerate(lines, 1):
        nul = line.find(b"\0")
        text = line[:nul] if nul >= 0 else line  # python checks a line's bytes as far as a NUL
        if encoding is None:  # undeclared: UTF-8 or python's error
            try:
                text.decode("utf-8")
            except UnicodeDecodeError as exc:
                return SyntaxError(f"Non-UTF-8 code starting with '\\x{text[exc.start]:02x}' in file {filename} "
                                   f"on line {lineno}, but no encoding declared; "
                                   f"see https://peps.python.org/pep-0263/ for details")
        if nul >= 0:  # the line as far as the NUL, no column
            return SyntaxError("source code cannot contain null bytes",
                               (filename, lineno, None, text.decode(encoding or "utf-8", "replace")))
    return None
