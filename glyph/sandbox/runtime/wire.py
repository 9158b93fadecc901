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

``encode`` runs on the untrusted side (its type checks give honest code a clear
reason); ``decode`` runs on the trusted side and is the actual guarantee: it
only ever builds the plain types above, whatever bytes it is given, within a
depth bound, and raises ``WireError`` on anything else.

Stdlib only: this file is imported by the sandbox server.
"""

from __future__ import annotations

import base64
import collections
import json

MAX_DEPTH = 100


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


def encode(value, handles=None, _depth: int = 0):
    """Encode plain data to a JSON-able tree. With ``handles`` (a callable
    taking an object and returning an int id), non-plain objects become
    handles; without it they raise ``WireError`` naming the type."""
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
        return [encode(v, handles, d) for v in value]
    if t is tuple:
        return {"t": [encode(v, handles, d) for v in value]}
    if t is set:
        return {"s": [encode(v, handles, d) for v in value]}
    if t is frozenset:
        return {"z": [encode(v, handles, d) for v in value]}
    if t is dict:
        return {"d": [[encode(k, handles, d), encode(v, handles, d)] for k, v in value.items()]}
    if t is Handle:
        return {"h": value.id}
    if t in _DICT_LIKE:
        return {"d": [[encode(k, handles, d), encode(v, handles, d)] for k, v in dict.items(value)]}
    if _is_namedtuple(t):
        return {"t": [encode(v, handles, d) for v in tuple.__iter__(value)]}
    if handles is not None:
        return {"h": handles(value), "n": _type_name(value)}
    raise WireError(f"value of type {_type_name(value)} is not plain data")


_DICT_LIKE = (collections.Counter, collections.defaultdict, collections.OrderedDict)


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


def decode(tree, allow_handles: bool = False, _depth: int = 0):
    """Build plain data from an ``encode`` tree; ``WireError`` on anything else."""
    if _depth > MAX_DEPTH:
        raise WireError(f"nested deeper than {MAX_DEPTH} levels")
    t = type(tree)
    if tree is None or t is bool or t is str:
        return tree
    d = _depth + 1
    if t is list:
        return [decode(v, allow_handles, d) for v in tree]
    if t is not dict or len(tree) not in (1, 2):
        raise WireError(f"malformed value: {type(tree).__name__}")
    tag = next(iter(tree))
    body = tree[tag]
    if len(tree) == 2 and (tag != "h" or "n" not in tree):
        raise WireError("malformed value: extra keys")
    try:
        if tag == "i" and type(body) is str:
            return int(body, 16)
        if tag == "f" and type(body) is str:
            return float.fromhex(body)
        if tag == "c" and type(body) is list and len(body) == 2:
            return complex(float.fromhex(body[0]), float.fromhex(body[1]))
        if tag == "b" and type(body) is str:
            return base64.b64decode(body.encode("ascii"), validate=True)
        if tag in ("t", "s", "z") and type(body) is list:
            items = [decode(v, allow_handles, d) for v in body]
            return tuple(items) if tag == "t" else set(items) if tag == "s" else frozenset(items)
        if tag == "d" and type(body) is list:
            out = {}
            for pair in body:
                if type(pair) is not list or len(pair) != 2:
                    raise WireError("malformed dict item")
                out[decode(pair[0], allow_handles, d)] = decode(pair[1], allow_handles, d)
            return out
        if tag == "h" and allow_handles and type(body) is int:
            name = tree.get("n", "")
            return Handle(body, name if type(name) is str else "")
    except WireError:
        raise
    except (ValueError, TypeError, OverflowError, AttributeError) as exc:
        raise WireError(f"malformed value for tag {tag!r}: {exc}") from None
    raise WireError(f"unknown or disallowed tag {tag!r}")


def loads(line: bytes | str):
    """Parse one JSON message; ``WireError`` if it is not a JSON object."""
    try:
        msg = json.loads(line)
    except (ValueError, RecursionError) as exc:
        raise WireError(f"not JSON: {exc}") from None
    if type(msg) is not dict:
        raise WireError("message is not an object")
    return msg


def dumps(msg: dict) -> bytes:
    return json.dumps(msg, separators=(",", ":")).encode() + b"\n"
