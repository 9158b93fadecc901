"""Plain values: what a plus test's arguments and expected values may be.

What it guarantees: ``renders(v)`` holds only when ``repr(v)`` is a
Python literal that gives back a value equal to ``v`` with the same types
all the way down (None, bool, int, float, complex, str, bytes, and lists,
tuples, sets and dicts of them nested at most 20 deep; no nan or inf, no
frozenset, no int past the digit limit); ``same(a, b)`` is equality that
also asks for the same types, through lists, tuples and dict values;
``literal(v)`` is ``repr(v)`` with every set's items in one canonical order
and ``in_order(v)`` iterates a set in that order, so that neither depends on
this process's hash seed (a set of strings iterates in hash order). Pure
functions of their arguments.
"""

from __future__ import annotations

import math

MAX_REPR = 400  # characters of an argument list or expected value

_SCALARS = (type(None), bool, int, float, complex, str, bytes)


def renders(value, depth: int = 0) -> bool:
    """Whether ``repr(value)`` is a literal that gives back an equal value of
    the same types (no nan/inf, no frozenset, no int past the digit limit)."""
    if depth > 20:
        return False
    t = type(value)
    if t is int:
        return value.bit_length() < 4000
    if t is float:
        return math.isfinite(value)
    if t is complex:
        return math.isfinite(value.real) and math.isfinite(value.imag)
    if t in _SCALARS:
        return True
    if t in (list, tuple, set):
        return all(renders(v, depth + 1) for v in value)
    if t is dict:
        return all(renders(k, depth + 1) and renders(v, depth + 1) for k, v in value.items())
    return False


def same(a, b) -> bool:
    """Equal, with the same types all the way down (``1 == True`` is not the same answer)."""
    if type(a) is not type(b):
        return False
    if type(a) in (list, tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if type(a) is dict:
        return a.keys() == b.keys() and all(same(v, b[k]) for k, v in a.items())
    return a == b


def literal(value) -> str:
    """``repr(value)`` of a plain value, but a set's items in ``in_order``'s
    order: the same text in every process, whatever its hash seed."""
    t = type(value)
    if t is set:
        return "{" + ", ".join(literal(v) for v in in_order(value)) + "}" if value else "set()"
    if t is list:
        return "[" + ", ".join(literal(v) for v in value) + "]"
    if t is tuple:
        inner = ", ".join(literal(v) for v in value)
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    if t is dict:
        return "{" + ", ".join(f"{literal(k)}: {literal(v)}" for k, v in value.items()) + "}"
    return repr(value)


def in_order(value) -> list:
    """The items of a list, tuple or set; a set's sorted, not in hash order: numbers by value,
    strings or bytes as themselves, anything else (mixed types, tuples) by its ``literal``."""
    if type(value) is not set:
        return list(value)
    kinds = {type(v) for v in value}
    if kinds <= {int, float} or kinds == {str} or kinds == {bytes}:
        return sorted(value)
    return sorted(value, key=literal)
