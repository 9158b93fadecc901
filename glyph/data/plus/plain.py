"""Plain values: what a plus test's arguments and expected values may be.

What it guarantees: ``renders(v)`` holds only when ``repr(v)`` is a
Python literal that gives back a value equal to ``v`` with the same types
all the way down (None, bool, int, float, complex, str, bytes, and lists,
tuples, sets and dicts of them nested at most 20 deep; no nan or inf, no
frozenset, no int past the digit limit); ``same(a, b)`` is equality that
also asks for the same types, through lists, tuples and dict values. Pure
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
