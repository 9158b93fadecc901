"""Plain data across the sandbox boundary.

Only these exact types cross, recursively: None, bool, int, float, complex, str,
bytes, tuple, list, dict, set, frozenset. Subclasses do not (a ``str`` subclass
that equals anything is rejected, not converted), with one deliberate
exception: the stdlib containers that Python itself compares by content
against their base type (``collections.Counter``, ``defaultdict`` and
``OrderedDict`` against ``dict``; ``namedtuple`` classes against ``tuple``)
are sent as that base type, their content read through the base type's own
C methods (``dict.items``, ``tuple.__iter__``), so no method of the object is
trusted. MBPP's reference solutions for tasks 40, 88, 653 and 902 return
such values and ``==`` on them means content equality. Sessions that need to
refer to an object living in the sandbox use an opaque integer handle.

With ``numbers`` (the study's semantics, ``glyph.grading.STUDY``: its one file
compared a result with ``==`` on the real object), two exact stdlib number types
cross too: ``fractions.Fraction`` as its numerator and denominator (``q``) and
``decimal.Decimal`` as its ``str`` (``m``), which both name the value exactly.
``decode`` builds the real ``Fraction`` and ``Decimal`` from those ints and that
text, so ``==`` on the trusted side is the stdlib's own, between values no
submitted code made. Without ``numbers`` those tags are refused as any unknown
one, and ``encode`` rejects the types as not plain data (glyph's semantics).

``encode`` runs on the untrusted side (its type checks give honest code a clear
reason); ``decode`` runs on the trusted side and is the actual guarantee: it
only ever builds the plain types above, whatever bytes it is given, within
the bounds below, and raises ``WireError`` on anything else.

Bounds (the sender may write any bytes, bypassing ``encode``; each bound's
``WireError`` names it):

- ``loads``: at most ``MAX_TOKENS`` brackets, commas and colons in a message,
  counted in its raw bytes before ``json.loads`` builds anything. Every JSON
  value but the outermost follows one of them, so the JSON tree has at most
  ``MAX_TOKENS + 1`` values: measured, at most about 100 bytes a token (an
  empty set, ``{"s":[]}``, is 4 tokens and 250 bytes), 50 MiB, plus the text
  of its strings (the client bounds a run's results at
  ``Limits.result_bytes``, 16 MiB; a str takes up to 4 bytes a character).
- ``decode``: at most ``MAX_NODES`` values in the whole tree (each container,
  key and item counts one), nested at most ``MAX_DEPTH`` deep, at most
  ``MAX_DATA`` characters in all of its strs, handle names and the hex and
  base64 text of its ints, floats, complex numbers and bytes (``int(s, 16)``
  is linear in ``len(s)``), and at most ``MAX_SAME_HASH`` items of one set or
  frozenset, or keys of one dict, sharing a hash. Ints equal mod 2**61 - 1,
  and the floats, complex numbers, tuples and frozensets built from them,
  share one hash by the million, and each one added to a set compares with
  every earlier one: quadratic, in one C call (the count is by ``hash``,
  whatever the type). A decoded value then takes at most ``BYTES_PER_VALUE``
  bytes a value (an empty set; a list item takes 8, a dict entry about 100)
  plus 4 bytes a character of data (a UCS-4 str; an int or bytes takes less
  than its text): ``MAX_BYTES``, 45 MiB. Its strs are the JSON tree's own.
  ``decode`` reads every part of the tree (a handle's name must be a str),
  so a tree it accepts may be passed on as it is. A ``Fraction`` takes at
  most ``MAX_FRACTION_DATA`` characters of hex text for its two ints (its
  ``gcd`` is quadratic in their length: 64 Ki characters, the grader's whole
  answer cap, take milliseconds), and is one value whose ints count as data.

Stdlib only: this file is imported by the sandbox server.
"""

from __future__ import annotations

import base64
import collections
import json
import sys

MAX_DEPTH = 100
MAX_NODES = 1 << 17  # values in one decoded tree, a ceiling (the grader reads up to grading.ANSWER_BYTES)
MAX_TOKENS = 4 * MAX_NODES  # brackets, commas and colons in one message (a value takes 1 to 5)
MAX_DATA = 4 << 20  # characters of str, bytes and number text in one decoded tree
MAX_SAME_HASH = 64  # items of one set (keys of one dict) that may share a hash
MAX_FRACTION_DATA = 1 << 16  # hex characters of one Fraction's numerator and denominator together
BYTES_PER_VALUE = 232  # the most one decoded value takes: an empty set (216) and its reference, with slack
MAX_BYTES = BYTES_PER_VALUE * MAX_NODES + 4 * MAX_DATA  # the most one decoded value holds: 45 MiB


class WireError(ValueError):
    """The data is not plain data (or not well-formed)."""


class Handle:
    """A reference to an object that stays inside the sandbox."""

    __slots__ = ("id", "type_name")

    def __init__(self, id: int, type_name: str = "") -> None:
        self.id = id
        self.type_name = type_name

    def __repr__(self) -> str:
        return f"<sandbox object {self.type_name or '?'} #{self.id}>"


def encode(value, handles=None, _depth: int = 0, numbers: bool = False):
    """Encode plain data to a JSON-able tree. With ``handles`` (a callable
    taking an object and returning an int id), non-plain objects become
    handles; without it they raise ``WireError`` naming the type. With
    ``numbers``, a ``Fraction`` or ``Decimal`` is plain data too."""
    if _depth > MAX_DEPTH:
        raise WireError(f"nested deeper than {MAX_DEPTH} levels")
    t = type(value)
    if value is None or t is bool or t is str:
        return value
    if t is int:
        return {"i": hex(value)}
    if t is float:
        return {"f": value.hex()}
    if t is complex:
        return {"c": [value.real.hex(), value.imag.hex()]}
    if t is bytes:
        return {"b": base64.b64encode(value).decode("ascii")}
    d = _depth + 1
    if t is list:
        return [encode(v, handles, d, numbers) for v in value]
    if t is tuple:
        return {"t": [encode(v, handles, d, numbers) for v in value]}
    if t is set:
        return {"s": [encode(v, handles, d, numbers) for v in value]}
    if t is frozenset:
        return {"z": [encode(v, handles, d, numbers) for v in value]}
    if t is dict:
        return {"d": [[encode(k, handles, d, numbers), encode(v, handles, d, numbers)]
                      for k, v in value.items()]}
    if t is Handle:
        return {"h": value.id}
    if t in _DICT_LIKE:
        return {"d": [[encode(k, handles, d, numbers), encode(v, handles, d, numbers)]
                      for k, v in dict.items(value)]}
    if _is_namedtuple(t):
        return {"t": [encode(v, handles, d, numbers) for v in tuple.__iter__(value)]}
    if numbers:
        number = _number(value, t)
        if number is not None:
            return number
    if handles is not None:
        return {"h": handles(value), "n": _type_name(value)}
    raise WireError(f"value of type {_type_name(value)} is not plain data")


_DICT_LIKE = (collections.Counter, collections.defaultdict, collections.OrderedDict)


def _number(value, t: type) -> dict | None:
    """A ``Fraction`` or ``Decimal`` (exact types) as its tree; None for any other. The modules are
    looked up, not imported: a run that made such a value has imported them."""
    fractions, decimal = sys.modules.get("fractions"), sys.modules.get("decimal")
    if fractions is not None and t is getattr(fractions, "Fraction", None):
        return {"q": [hex(value.numerator), hex(value.denominator)]}
    if decimal is not None and t is getattr(decimal, "Decimal", None):
        return {"m": str(value)}
    return None


def _is_namedtuple(t: type) -> bool:
    try:
        return t.__bases__ == (tuple,) and type(t.__dict__.get("_fields")) is tuple
    except Exception:  # a hostile metaclass: not a namedtuple
        return False


def _type_name(value) -> str:
    t = type(value)
    try:
        return f"{t.__module__}.{t.__qualname__}" if t.__module__ != "builtins" else t.__qualname__
    except Exception:  # a hostile metaclass; the name is only for messages
        return "<unnamed type>"


def decode(tree, allow_handles: bool = False, numbers: bool = False):
    """Build plain data from an ``encode`` tree; ``WireError`` on anything
    else, or when the tree goes over a bound (see the module docstring; the
    error names the bound). ``numbers``: a ``Fraction`` or ``Decimal`` tree
    is accepted (else refused as an unknown tag)."""
    return _Decoder(allow_handles, numbers).value(tree, 0)


class _Decoder:
    """One ``decode``: the budgets left for the whole tree."""

    __slots__ = ("allow_handles", "data", "nodes", "numbers")

    def __init__(self, allow_handles: bool, numbers: bool = False) -> None:
        self.allow_handles = allow_handles
        self.numbers = numbers
        self.nodes = MAX_NODES
        self.data = MAX_DATA

    def text(self, s) -> str:
        if type(s) is not str:
            raise TypeError(f"expected str, not {type(s).__name__}")
        self.data -= len(s)
        if self.data < 0:
            raise WireError(f"more than {MAX_DATA} characters of str, bytes and number data (wire.MAX_DATA)")
        return s

    def value(self, tree, depth: int):
        if depth > MAX_DEPTH:
            raise WireError(f"nested deeper than {MAX_DEPTH} levels (wire.MAX_DEPTH)")
        self.nodes -= 1
        if self.nodes < 0:
            raise WireError(f"more than {MAX_NODES} values (wire.MAX_NODES)")
        t = type(tree)
        if tree is None or t is bool:
            return tree
        if t is str:
            return self.text(tree)
        d = depth + 1
        if t is list:
            return [self.value(v, d) for v in tree]
        if t is not dict or len(tree) not in (1, 2):
            raise WireError(f"malformed value: {type(tree).__name__}")
        tag = next(iter(tree))
        body = tree[tag]
        if len(tree) == 2 and (tag != "h" or "n" not in tree):
            raise WireError("malformed value: extra keys")
        try:
            if tag == "i":
                return int(self.text(body), 16)
            if tag == "f":
                return float.fromhex(self.text(body))
            if tag == "c" and type(body) is list and len(body) == 2:
                return complex(float.fromhex(self.text(body[0])), float.fromhex(self.text(body[1])))
            if tag == "b":
                return base64.b64decode(self.text(body).encode("ascii"), validate=True)
            if tag in ("t", "s", "z") and type(body) is list:
                items = [self.value(v, d) for v in body]
                if tag == "t":
                    return tuple(items)
                _few_share_a_hash(items, "items of one set")
                return set(items) if tag == "s" else frozenset(items)
            if tag == "d" and type(body) is list:
                for pair in body:
                    if type(pair) is not list or len(pair) != 2:
                        raise WireError("malformed dict item")
                keys = [self.value(pair[0], d) for pair in body]
                _few_share_a_hash(keys, "keys of one dict")
                return dict(zip(keys, [self.value(pair[1], d) for pair in body]))
            if tag == "h" and self.allow_handles and type(body) is int:
                return Handle(body, self.text(tree.get("n", "")))
            if tag == "q" and self.numbers and type(body) is list and len(body) == 2:
                return self.fraction(*body)
            if tag == "m" and self.numbers:
                import decimal
                return decimal.Decimal(self.text(body))
        except WireError:
            raise
        except (ValueError, TypeError, OverflowError, AttributeError, ArithmeticError) as exc:
            raise WireError(f"malformed value for tag {tag!r}: {exc}") from None
        raise WireError(f"unknown or disallowed tag {tag!r}")

    def fraction(self, numerator, denominator):
        import fractions
        n, d = self.text(numerator), self.text(denominator)
        if len(n) + len(d) > MAX_FRACTION_DATA:
            raise WireError(f"a Fraction of more than {MAX_FRACTION_DATA} hex characters "
                            "(wire.MAX_FRACTION_DATA)")
        return fractions.Fraction(int(n, 16), int(d, 16))  # ZeroDivisionError: malformed


def _few_share_a_hash(items: list, what: str) -> None:
    """``WireError`` if more than ``MAX_SAME_HASH`` of ``items`` share a hash:
    building the set or dict would compare each such item with every earlier
    one (quadratic, in one C call). The hashes themselves are plain ints,
    distinct keys of the count: counting is linear."""
    if len(items) <= MAX_SAME_HASH:
        return
    counts: dict[int, int] = {}
    for item in items:
        h = hash(item)  # TypeError for an unhashable item: a malformed value
        n = counts.get(h, 0) + 1
        if n > MAX_SAME_HASH:
            raise WireError(f"more than {MAX_SAME_HASH} {what} share a hash (wire.MAX_SAME_HASH)")
        counts[h] = n


# Every JSON value but the outermost follows one of these (and a key follows "{" or ","); in the
# UTF-16 and UTF-32 that json.loads also reads, each of these characters still holds its byte.
_SEPARATORS = ("[", "{", ",", ":")
_SEPARATORS_B = tuple(s.encode() for s in _SEPARATORS)


def loads(line: bytes | str, max_tokens: int | None = MAX_TOKENS):
    """Parse one JSON message; ``WireError`` if it is not a JSON object, or
    if it has more than ``max_tokens`` brackets, commas and colons (counted
    before parsing: an upper bound on the JSON values it would build).
    ``None``: no bound, for messages from the trusted side."""
    if max_tokens is not None:
        seps = _SEPARATORS_B if isinstance(line, (bytes, bytearray)) else _SEPARATORS
        if sum(map(line.count, seps)) > max_tokens:
            raise WireError(f"message has more than {max_tokens} JSON tokens (wire.MAX_TOKENS)")
    try:
        msg = json.loads(line)
    except (ValueError, RecursionError) as exc:
        raise WireError(f"not JSON: {exc}") from None
    if type(msg) is not dict:
        raise WireError("message is not an object")
    return msg


def dumps(msg: dict) -> bytes:
    return json.dumps(msg, separators=(",", ":")).encode() + b"\n"
