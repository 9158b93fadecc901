"""Candidate probes: type-aware mutations of the seeds' arguments.

What it guarantees: ``candidates`` is a function of the seeds and its
seed (the same candidates in the same order on every run, in any
process, whatever its hash seed: sets are iterated and written in
``plain.literal``'s order); it gives at most ``n`` distinct probes, none
a visible one, the seeds' edge values first; every argument it writes is a plain value
(``plain.renders``) and an argument list is at most ``MAX_REPR``
characters; ``Fixed`` arguments are never mutated. The mutations keep
what the seeds hold fixed (the rules in 2. of ``glyph.data.plus.generate``).
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field

from glyph.data.plus.plain import MAX_REPR, in_order, renders
from glyph.data.plus.seeds import Fixed, Seed, render

MAX_CANDIDATES = 160  # distinct candidate inputs per task
MAX_LEN = 40  # elements of a generated container, characters of a generated string

_LOWER_EXTRA = "éßñüç"
_UPPER_EXTRA = "ÉÑÜÇ"


@dataclass
class Profile:
    """What the seeds show about the values at one position."""

    samples: list
    types: set = field(default_factory=set)
    ints: list = field(default_factory=list)
    floats: list = field(default_factory=list)
    alphabet: str = ""
    classes: frozenset = frozenset()
    lengths: list = field(default_factory=list)
    items: list | None = None  # per position, for tuples of one length (records)
    elem: Profile | None = None
    keys: Profile | None = None
    values: Profile | None = None
    sorted_asc: bool = False
    sorted_desc: bool = False
    rect: bool = False  # a list of equal-length sequences (a matrix)
    char: bool = False  # every seed string is one character
    in_container: bool = False

    @property
    def allow_negative(self) -> bool:
        nums = self.ints + self.floats
        return self.in_container or any(v < 0 for v in nums)

    @property
    def positive(self) -> bool:
        """A scalar every seed gives as > 0 stays > 0 (a count, a size, an index from 1)."""
        nums = self.ints + self.floats
        return not self.in_container and bool(nums) and all(v > 0 for v in nums)


def _classes(s: str) -> set:
    out = set()
    for c in s:
        out.add("lower" if c.islower() else "upper" if c.isupper() else "digit" if c.isdigit()
                else "space" if c.isspace() else "punct" if c.isascii() else "other")
    return out


def profile(values: list, in_container: bool = False, sorted_inputs: bool = True) -> Profile:
    """``sorted_inputs``: whether a sorted container in every seed is taken
    as a precondition (only when the task's text says "sorted": otherwise
    seeds are often sorted by accident, and keeping them sorted would hide
    the unsorted inputs a wrong solution fails)."""
    p = Profile(samples=list(values), in_container=in_container)
    p.types = {type(v) for v in values}
    p.ints = [v for v in values if type(v) is int]
    p.floats = [v for v in values if type(v) is float]
    strs = [v for v in values if type(v) is str]
    if strs:
        p.alphabet = "".join(sorted(set("".join(strs))))
        p.classes = frozenset(set().union(*(_classes(s) for s in strs)))
        p.lengths = [len(s) for s in strs]
        p.char = len(strs) == len(values) and all(len(s) == 1 for s in strs)
    seqs = [v for v in values if type(v) in (list, tuple, set)]
    if seqs:
        p.lengths += [len(v) for v in seqs]
        tuples = [v for v in seqs if type(v) is tuple]
        if tuples and len(tuples) == len(values) and len({len(t) for t in tuples}) == 1 and len(tuples[0]) <= 6 \
                and _mixed_or_short(tuples):
            p.items = [profile([t[i] for t in tuples], True, sorted_inputs) for i in range(len(tuples[0]))]
        elems = [e for v in seqs for e in in_order(v)]
        if elems:
            p.elem = profile(elems, True, sorted_inputs)
        ordered = [list(v) for v in seqs if type(v) is not set and len(v) >= 2]
        if ordered and len(seqs) == len(values) and sorted_inputs:
            try:
                p.sorted_asc = all(v == sorted(v) for v in ordered) and any(len(set(map(repr, v))) > 1 for v in ordered)
                p.sorted_desc = not p.sorted_asc and all(v == sorted(v, reverse=True) for v in ordered) \
                    and any(len(set(map(repr, v))) > 1 for v in ordered)
            except TypeError:
                pass
        rows = [v for v in seqs if type(v) is list and v and all(type(r) in (list, tuple) for r in v)]
        p.rect = bool(rows) and len(rows) == len(values) and all(len({len(r) for r in v}) == 1 for v in rows) \
            and any(len(v) > 1 for v in rows)
    dicts = [v for v in values if type(v) is dict]
    if dicts:
        p.lengths += [len(d) for d in dicts]
        ks = [k for d in dicts for k in d]
        vs = [v for d in dicts for v in d.values()]
        if ks:
            p.keys, p.values = profile(ks, True, sorted_inputs), profile(vs, True, sorted_inputs)
    return p


def _mixed_or_short(tuples: list) -> bool:
    """A tuple is a record (fixed arity) when its items differ in type or it is short."""
    return any(len({type(x) for x in t}) > 1 for t in tuples) or len(tuples[0]) <= 3


# ---------------------------------------------------------------- mutation


class Mutator:
    """Type-aware mutations of one value at a profiled position."""

    def __init__(self, rng: random.Random) -> None:
        self.r = rng

    # -- numbers
    def int_(self, v: int, p: Profile) -> int:
        r = self.r
        seen = p.ints or [v]
        lo, hi = min(seen), max(seen)
        big = max(100, 4 * max(abs(lo), abs(hi)))
        options = [v + 1, v - 1, v + r.randint(2, 10), v * 2, v // 2, 0, 1, 2, r.choice(seen),
                   r.randint(min(lo, 0), max(hi * 2, 10)), lo - 1, hi + 1]
        if p.allow_negative:
            options += [-v, -abs(v) - 1, r.randint(-max(abs(hi), 10), -1)]
        x = r.choice(options)
        if not p.allow_negative:
            x = abs(x)
        if p.positive and x == 0:
            x = 1
        return max(-big, min(big, x))

    def float_(self, v: float, p: Profile) -> float:
        r = self.r
        seen = p.floats or [v]
        lo, hi = min(seen), max(seen)
        options = [v + 0.5, v - 0.5, v * 2, v / 2, 0.0, 1.0, float(int(v)), r.uniform(min(lo, 0), max(hi * 2, 1)),
                   r.choice(seen) + r.choice([0.25, 1.5, 3])]
        if p.allow_negative:
            options += [-v, r.uniform(-max(abs(hi), 10), 0)]
        x = round(r.choice(options), 2)
        x = abs(x) if not p.allow_negative else x
        return 0.5 if p.positive and x == 0 else x

    # -- strings
    def _char(self, p: Profile) -> str:
        r = self.r
        pool = p.alphabet or "abc"
        classes = p.classes
        extra = ""
        if "lower" in classes:
            extra += "abcdefghijklmnopqrstuvwxyz"
        if "upper" in classes:
            extra += "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
        if "digit" in classes:
            extra += "0123456789"
        if "punct" in classes:
            extra += ".,!?-_@#"
        return r.choice(pool if r.random() < 0.6 or not extra else extra)

    def _unicode(self, p: Profile) -> str | None:
        pool = (_LOWER_EXTRA if "lower" in p.classes else "") + (_UPPER_EXTRA if "upper" in p.classes else "")
        return self.r.choice(pool) if pool else None

    def str_(self, s: str, p: Profile, keep_len: bool = False) -> str:
        r = self.r
        i = r.randrange(len(s) + 1)
        ops = ["replace", "swap", "shuffle"] if len(s) > 1 else ["replace", "replace", "unicode_replace"]
        if not keep_len:
            ops += ["empty", "single", "drop", "dup", "insert", "insert", "reverse", "repeat", "unicode"]
            if "space" in p.classes:
                ops += ["drop_word", "dup_word"]
            if {"lower", "upper"} <= p.classes:
                ops += ["swapcase"]
        op = r.choice(ops)
        if op == "empty":
            return ""
        if op == "single":
            return self._char(p)
        if op == "drop" and s:
            j = r.randrange(len(s))
            return s[:j] + s[j + 1:]
        if op == "dup" and s:
            j = r.randrange(len(s))
            return s[:j + 1] + s[j:]
        if op == "insert":
            return s[:i] + self._char(p) + s[i:]
        if op == "replace" and s:
            j = r.randrange(len(s))
            return s[:j] + self._char(p) + s[j + 1:]
        if op == "swap" and len(s) > 1:
            j = r.randrange(len(s) - 1)
            return s[:j] + s[j + 1] + s[j] + s[j + 2:]
        if op == "shuffle":
            return "".join(r.sample(s, len(s)))
        if op == "reverse":
            return s[::-1]
        if op == "repeat":
            return (s + (" " if "space" in p.classes else "") + s)[:MAX_LEN]
        if op == "unicode":
            u = self._unicode(p)
            return s[:i] + u + s[i:] if u else s
        if op == "unicode_replace" and s:
            u = self._unicode(p)
            return u if u else self._char(p)
        if op in ("drop_word", "dup_word"):
            words = s.split(" ")
            j = r.randrange(len(words))
            words = words[:j] + words[j + 1:] if op == "drop_word" else words[:j + 1] + words[j:]
            return " ".join(words)
        if op == "swapcase":
            return s.swapcase()
        return s

    # -- containers
    def new_element(self, p: Profile | None):
        if p is None or not p.samples:
            return self.r.randint(0, 9)
        return self.value(self.r.choice(p.samples), p)

    def seq(self, v, p: Profile, keep_len: bool = False):
        r = self.r
        kind = type(v)
        items = in_order(v)
        if p.items is not None and len(items) == len(p.items):  # a record: its arity is part of it
            j = r.randrange(len(items))
            items[j] = self.value(items[j], p.items[j])
            return kind(items)
        ops = ["mutate", "mutate", "mutate_all", "reverse", "shuffle", "swap"]
        if not keep_len:
            ops += ["empty", "single", "drop", "dup", "insert", "insert", "extend", "grow"]
        if p.elem is not None and p.elem.types & {int, float}:
            ops.append("negate")
        if p.rect and not keep_len and (p.elem is None or p.elem.items is None):  # a matrix, not records
            ops += ["drop_col", "dup_col", "drop", "dup"]
        op = r.choice(ops)
        elem = p.elem
        inner_keep = p.rect
        if op == "empty":
            items = []
        elif op == "single" and items:
            items = [r.choice(items)]
        elif op == "drop" and items:
            del items[r.randrange(len(items))]
        elif op == "dup" and items:
            j = r.randrange(len(items))
            items.insert(r.randrange(len(items) + 1), items[j])
        elif op == "insert":
            new = self.new_element(elem) if not inner_keep or not items else \
                self.value(r.choice(items), elem, keep_len=True)
            items.insert(r.randrange(len(items) + 1), new)
        elif op == "grow":
            for _ in range(r.randint(2, max(3, max(p.lengths or [3])))):
                new = self.new_element(elem) if not inner_keep or not items else \
                    self.value(r.choice(items), elem, keep_len=True)
                items.insert(r.randrange(len(items) + 1), new)
        elif op == "extend" and p.samples:
            other = r.choice(p.samples)
            if type(other) in (list, tuple, set):
                items += in_order(other)
        elif op == "mutate" and items:
            j = r.randrange(len(items))
            items[j] = self.value(items[j], elem, keep_len=inner_keep)
        elif op == "mutate_all":
            items = [self.value(x, elem, keep_len=inner_keep) if r.random() < 0.5 else x for x in items]
        elif op == "reverse":
            items.reverse()
        elif op == "shuffle":
            r.shuffle(items)
        elif op == "swap" and len(items) > 1:
            i, j = r.sample(range(len(items)), 2)
            items[i], items[j] = items[j], items[i]
        elif op == "negate":
            idx = [i for i, x in enumerate(items) if type(x) in (int, float) and x]
            if idx:
                for i in r.sample(idx, r.randint(1, len(idx))):
                    items[i] = -items[i]
        elif op in ("drop_col", "dup_col") and items and all(type(row) in (list, tuple) for row in items):
            width = len(items[0])
            if width:
                c = r.randrange(width)
                if op == "drop_col":
                    items = [type(row)(x for k, x in enumerate(row) if k != c) for row in items]
                else:
                    items = [type(row)(list(row[:c + 1]) + list(row[c:])) for row in items]
        items = items[:MAX_LEN]
        if p.sorted_asc or p.sorted_desc:
            try:
                items.sort(reverse=p.sorted_desc)
            except TypeError:
                pass
        if kind is set:
            try:
                return set(items)
            except TypeError:
                return v
        return kind(items)

    def dict_(self, d: dict, p: Profile) -> dict:
        r = self.r
        items = list(d.items())
        op = r.choice(["drop", "add", "add", "mutate", "mutate", "rekey", "empty", "single"])
        if op == "empty":
            items = []
        elif op == "single" and items:
            items = [r.choice(items)]
        elif op == "drop" and items:
            del items[r.randrange(len(items))]
        elif op == "add" and p.keys is not None:
            items.append((self.new_element(p.keys), self.new_element(p.values)))
        elif op == "mutate" and items and p.values is not None:
            j = r.randrange(len(items))
            items[j] = (items[j][0], self.value(items[j][1], p.values))
        elif op == "rekey" and items and p.keys is not None:
            j = r.randrange(len(items))
            items[j] = (self.value(items[j][0], p.keys), items[j][1])
        try:
            return dict(items[:MAX_LEN])
        except TypeError:
            return d

    def value(self, v, p: Profile | None, keep_len: bool = False):
        if p is None:
            p = profile([v])
        t = type(v)
        if t is bool:
            return not v
        if t is int:
            return self.int_(v, p)
        if t is float:
            return self.float_(v, p)
        if t is complex:
            return complex(self.float_(v.real, profile([v.real], True)), self.float_(v.imag, profile([v.imag], True)))
        if t is str:
            return self.str_(v, p, keep_len or (p.char and len(v) == 1))[:MAX_LEN]
        if t in (list, tuple, set):
            return self.seq(v, p, keep_len)
        if t is dict:
            return self.dict_(v, p)
        return v

    # -- edge values: the systematic part
    def edges(self, v, p: Profile) -> list:
        t = type(v)
        out: list = []
        if t is bool:
            out = [not v]
        elif t is int:
            out = [0, 1, v + 1, v - 1, v * 2] + ([-v, -1] if p.allow_negative else [])
            if not p.allow_negative:
                out = [x for x in out if x >= (1 if p.positive else 0)]
        elif t is float:
            out = [0.0, round(v + 0.5, 2), round(v * 2, 2)] + ([-v] if p.allow_negative else [])
            if p.positive:
                out = [x for x in out if x > 0]
        elif t is str and p.char and len(v) == 1:
            out = [c for c in (self._char(p), self._unicode(p)) if c]
        elif t is str:
            out = ["", v[:1], v + v[-1:], v[::-1]]
            u = self._unicode(p)
            if u:
                out.append(v[: len(v) // 2] + u + v[len(v) // 2:])
        elif t in (list, tuple, set) and p.items is None:
            items = in_order(v)
            out = [[], items[:1], items + items[:1], items[1:]]
            if p.elem is not None and p.elem.types & {int, float}:
                out.append([-x if type(x) in (int, float) else x for x in items])
                out.append(items + [-x for x in items[:1] if type(x) in (int, float)])
            if p.elem is not None and p.elem.types == {str}:
                out += [[self.str_(x, p.elem) if i == 0 else x for i, x in enumerate(items)]]
                u = self._unicode(p.elem)
                if u and items:
                    out.append([u + items[0]] + items[1:])
            cast = []
            for o in out:
                if p.sorted_asc or p.sorted_desc:
                    try:
                        o = sorted(o, reverse=p.sorted_desc)
                    except TypeError:
                        pass
                try:
                    cast.append(set(o) if t is set else t(o))
                except TypeError:
                    pass
            out = cast
        elif t is dict:
            out = [{}, dict(list(v.items())[:1])]
        return out


# ---------------------------------------------------------------- candidates


@dataclass(frozen=True)
class Candidate:
    probe: str
    edge: bool
    empty: bool = False  # an argument is empty: only a natural answer is kept (``natural``)


def _relations(seeds: list[Seed]) -> list[tuple]:
    """What the seeds hold between argument positions: ``("eq", j, i)``
    int j == len(arg i); ``("lt"|"le", j, i)`` 0 <= int j < (<=) len(arg i);
    ``("order", a, b)`` int a < int b in every seed (kept as a <= b)."""
    n = len(seeds[0].args)
    rel = []

    def all_seeds(pred):
        try:
            return all(pred(s.args) for s in seeds)
        except (TypeError, IndexError):
            return False

    sized = [i for i in range(n) if all_seeds(lambda a, i=i: type(a[i]) in (list, tuple, set, dict, str))]
    ints = [j for j in range(n) if all_seeds(lambda a, j=j: type(a[j]) is int)]
    for j in ints:
        for i in sized:
            if all_seeds(lambda a: a[j] == len(a[i])):
                rel.append(("eq", j, i))
                break
        else:
            for i in sized:
                if all_seeds(lambda a: 0 <= a[j] < len(a[i])):
                    rel.append(("lt", j, i))
                    break
                if all_seeds(lambda a: 0 <= a[j] <= len(a[i])):
                    rel.append(("le", j, i))
                    break
    for a in ints:
        for b in ints:
            if a < b and all_seeds(lambda x: x[a] < x[b]):
                rel.append(("order", a, b))
            elif a < b and all_seeds(lambda x: x[a] > x[b]):
                rel.append(("order", b, a))
    return rel


def _apply_relations(args: list, rel: list[tuple], rng: random.Random, moved: set[int]) -> list | None:
    for kind, j, i in rel:
        if kind == "order":
            if type(args[j]) is int and type(args[i]) is int and args[j] > args[i]:
                args[j], args[i] = args[i], args[j]
            continue
        if type(args[j]) is not int or type(args[i]) not in (list, tuple, set, dict, str):
            return None
        n = len(args[i])
        if kind == "eq":
            args[j] = n
        elif kind == "lt" and not 0 <= args[j] < n:
            if n == 0:
                return None
            args[j] = rng.randrange(n) if j in moved or i not in moved else min(max(args[j], 0), n - 1)
        elif kind == "le" and not 0 <= args[j] <= n:
            args[j] = rng.randint(0, n) if j in moved or i not in moved else min(max(args[j], 0), n)
    return args


def candidates(seeds: list[Seed], seed: int | str, n: int = MAX_CANDIDATES,
               sorted_inputs: bool = False) -> list[Candidate]:
    """Up to ``n`` distinct candidate probes: the systematic edge values of
    each argument of each seed first, then random stacked mutations.
    ``sorted_inputs``: the task's text says its inputs are sorted."""
    rng = random.Random(seed)
    mut = Mutator(rng)
    groups: dict[tuple, list[Seed]] = {}
    for s in seeds:
        groups.setdefault(s.signature, []).append(s)
    # each visible probe as recorded and as ``render`` writes it
    seen = {s.probe for s in seeds} | {render(s, s.args, s.keywords) for s in seeds}
    out: list[Candidate] = []

    def add(s: Seed, args: list, kws: list, moved: set[int], rel, edge: bool) -> None:
        args = _apply_relations(list(args), rel, rng, moved)
        if args is None or not all(isinstance(a, Fixed) or renders(a) for a in args):
            return
        if not all(isinstance(v, Fixed) or renders(v) for _, v in kws):
            return
        if len(repr(args)) + len(repr(kws)) > MAX_REPR:
            return
        probe = render(s, tuple(args), tuple(kws))
        if probe not in seen:
            seen.add(probe)
            empty = any(type(a) in (str, list, tuple, dict, set) and not a for a in args)
            out.append(Candidate(probe, edge, empty))

    plans = []
    for group in groups.values():
        n_args = len(group[0].args)
        profiles = [profile([s.args[i] for s in group if not isinstance(s.args[i], Fixed)], False, sorted_inputs)
                    for i in range(n_args)]
        kw_profiles = [profile([s.keywords[i][1] for s in group if not isinstance(s.keywords[i][1], Fixed)],
                               False, sorted_inputs) for i in range(len(group[0].keywords))]
        rel = _relations(group)
        plans.append((group, profiles, kw_profiles, rel))
    for group, profiles, kw_profiles, rel in plans:
        for s in group:
            for i, a in enumerate(s.args):
                if isinstance(a, Fixed):
                    continue
                for e in mut.edges(a, profiles[i]):
                    args = list(s.args)
                    args[i] = e
                    add(s, args, list(s.keywords), {i}, rel, True)
    attempts = 0
    while len(out) < n and attempts < 30 * n and plans:
        attempts += 1
        group, profiles, kw_profiles, rel = rng.choice(plans)
        s = rng.choice(group)
        args, kws = list(s.args), list(s.keywords)
        mutable = [i for i, a in enumerate(args) if not isinstance(a, Fixed)]
        kw_mutable = [i for i, (_, v) in enumerate(kws) if not isinstance(v, Fixed)]
        if not mutable and not kw_mutable:
            break
        moved: set[int] = set()
        for _ in range(rng.choice([1, 1, 1, 2, 3])):
            if kw_mutable and (not mutable or rng.random() < 0.3):
                k = rng.choice(kw_mutable)
                kws[k] = (kws[k][0], mut.value(kws[k][1], kw_profiles[k]))
                continue
            i = rng.choice(mutable)
            if rng.random() < 0.1 and len(group) > 1:
                other = rng.choice(group).args[i]
                if not isinstance(other, Fixed):
                    args[i] = other
            args[i] = mut.value(args[i], profiles[i])
            moved.add(i)
        add(s, args, kws, moved, rel, False)
    return out[:n]


def says_sorted(text: str) -> bool:
    """The task's text calls its inputs sorted (``candidates(sorted_inputs=...)``)."""
    return re.search(r"\bsorted\b", text, re.IGNORECASE) is not None
