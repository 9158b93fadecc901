"""Text that model code controls, made safe to store, send and print: the one
rule for every place such text enters a grade, a record, a report, a prompt
or a store. Stdlib only (layer 0): the grader and the agent program use it
in the runtime too.

Model code can put any ``str`` in an exception message or a returned value,
including a lone surrogate (``raise ValueError("\\udcff")``); JSON carries it
(``json.dumps`` writes ``\\udcff``, ``json.loads`` gives it back), but nothing
that encodes UTF-8 can take it: printing, a UTF-8 file, pydantic's and
msgspec's JSON. ``encodable`` writes each such code point as its escape, in
ASCII, and leaves every other string as it is.

Control characters (NUL, ESC, ...) are valid UTF-8, and every store glyph
writes keeps them (JSON escapes them; ``json``, msgspec and pydantic read
them back; no store of glyph's rejects NUL), so ``encodable`` leaves them:
they are part of the text. Only a terminal gives them a meaning (an ESC
sequence can clear the screen or recolour a verdict), so ``printable``
escapes them too, for what glyph prints to one.
"""

from __future__ import annotations

import re
from typing import Any


def encodable(text: str) -> str:
    """``text`` with every code point UTF-8 cannot encode (the lone surrogates,
    U+D800..U+DFFF) written as its Python escape, six ASCII characters
    (``"\\udcff"`` becomes backslash, ``u``, ``d``, ``c``, ``f``, ``f``). Any
    other text is returned unchanged (astral characters, emoji, NUL
    included). Stable: the result is encodable, so a second call returns it
    as it is; a backslash already in the text is not doubled, so an escape
    written by the model reads the same as one written here."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def encodable_data(value: Any) -> Any:
    """``value`` (JSON-like data: dicts, lists, tuples, strings, numbers...)
    with every string in it, dict keys included, made ``encodable``
    (containers rebuilt, a tuple as a plain tuple); any other value as it is."""
    if isinstance(value, str):
        return encodable(value)
    if isinstance(value, dict):
        return {encodable_data(k): encodable_data(v) for k, v in value.items()}
    if isinstance(value, list):
        return [encodable_data(v) for v in value]
    if isinstance(value, tuple):
        return tuple(encodable_data(v) for v in value)
    return value


# C0 and C1 controls but newline and tab, DEL, and the bidirectional overrides
# and isolates (they reorder what a terminal shows: "Trojan Source").
_TERMINAL_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _escape(m: re.Match) -> str:
    cp = ord(m.group())
    return f"\\x{cp:02x}" if cp <= 0xFF else f"\\u{cp:04x}"


def printable(text: str) -> str:
    """``encodable(text)`` with the characters a terminal acts on (controls
    but newline and tab, bidirectional overrides) escaped as ``\\xNN`` or
    ``\\uNNNN``: for printing text that model code controls."""
    return _TERMINAL_UNSAFE.sub(_escape, encodable(text))


def source_bytes(text: str) -> bytes:
    """The bytes of source text as a workspace holds it: UTF-8, with
    ``surrogateescape`` (so bytes read with it round-trip). Text that
    surrogateescape cannot encode (a lone surrogate outside U+DC80..U+DCFF,
    from a JSON escape) gets UTF-8 with ``surrogatepass``: bytes that are not
    valid UTF-8, so Python refuses to compile them. Never raises, so a hash
    or a grading of such text is a result, not a crash."""
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogatepass")
