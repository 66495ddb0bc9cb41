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
    import io
    import tokenize

    declared = source.startswith(b"\xef\xbb\xbf")
    for i, line in enumerate(source.split(b"\n", 2)[:2]):
        if declared or tokenize.cookie_re.match(line.decode("latin-1")):
            declared = True
            break
        if i == 0 and not tokenize.blank_re.match(line):  # a bytes pattern
            break  # a coding line counts on line 2 only below a blank or comment line
    encoding = tokenize.detect_encoding(io.BytesIO(source).readline)[0] if declared else "utf-8"
    for lineno, line in enumerate(source.splitlines(), 1):  # \n, \r\n and \r, as python's
        nul = line.find(b"\0")
        text = line[:nul] if nul >= 0 else line  # python checks a line's bytes as far as a NUL
        if not declared:
            try:
                text.decode("utf-8")
            except UnicodeDecodeError as exc:
                return SyntaxError(f"Non-UTF-8 code starting with '\\x{text[exc.start]:02x}' in file {filename} "
                                   f"on line {lineno}, but no encoding declared; "
                                   f"see https://peps.python.org/pep-0263/ for details")
        if nul >= 0:  # the line as far as the NUL, no column
            return SyntaxError("source code cannot contain null bytes",
                               (filename, lineno, None, text.decode(encoding, "replace")))
    return None
