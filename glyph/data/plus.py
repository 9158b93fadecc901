"""Plus tests: differential tests generated from MBPP's reference solutions.

MBPP shows each task's three asserts to the agent and grades the same three,
so special-casing the shown inputs is rewarded and a bug they miss passes.
Like EvalPlus, this module derives more tests from the reference solution:

1. **Seeds.** Each visible assert ``assert P == E`` (compiled by
   ``glyph.grading``) has a *target call* inside its probe ``P``: the
   outermost call of a function the reference (or the test setup) defines.
   Its literal arguments are the seeds; a non-literal argument
   (``Pair(5, 24)``, ``1.0 / 3``) is kept as written.
2. **Type-aware mutation.** Per argument position a ``Profile`` of the seed
   values (types, int range and sign, string alphabet and character classes,
   lengths, records, sorted or rectangular containers) drives mutations:
   ints, floats, strings, lists, tuples, dicts, sets and nested values;
   sizes and edge values (empty, one element, negatives inside containers,
   duplicates, unicode letters). Each seed's edge values come first, then
   random stacked mutations, up to ``MAX_CANDIDATES`` distinct probes.
   What the seeds hold fixed stays fixed, so that a test stays inside the
   task's contract: a scalar's sign (all seeds > 0: it stays >= 1), a
   one-character string, an int equal to (or below) another argument's
   length, two int arguments in strict order in every seed, a record's
   arity (a short or mixed-type tuple), a matrix's shape, and a sorted
   input where the task's text says "sorted".
3. **Keep only what the reference answers deterministically.** Every
   candidate probe runs against the reference solution in glyph's sandbox
   (never in this process), under ``SEEDS`` sandbox servers, each started
   with its own random hash seed (checked distinct), in a different order
   in each (so state kept between calls shows), each probe under a time
   limit scaled from the reference's own time on the visible tests
   (``probe_limit``; killed just past it). A candidate is kept only if
   every run returns plain data (the sandbox's wire types) that a Python
   literal reproduces, equal (same types) across all runs, within the
   limit, without raising. A task whose reference answers any candidate
   differently between runs keeps no plus test at all: its outputs depend on
   hash order, state or chance, and a seed not tried could reorder a kept
   one. Two more rules drop answers a correct solution need not share: an
   empty argument's answer unless it is natural (``_natural``: None, a bool,
   zero, empty), and an unsorted sequence where every visible answer is a
   sorted one (the order may be a set's, which a solution that sorts would
   not reproduce).
4. **At most ``MAX_KEPT`` per task**, deduplicated by their probe, chosen
   round-robin over distinct expected values (so a predicate's tests are not
   all ``False``) while the reference's total time on them stays within
   ``PLUS_BUDGET_FACTOR`` times its time on the visible tests (or
   ``PLUS_BUDGET_FLOOR_S``), so grading with them costs about what grading
   the visible tests does. They are written as ordinary
   ``assert P' == LITERAL`` lines: the grader's fast path grades them, the
   literal read on the trusted side. Before a task's file is written,
   glyph's grader grades the reference on the visible tests followed by the
   plus tests under yet another hash seed; a line it fails is dropped (none
   does in practice; the count is recorded).

Resumable: one file per task (``mbpp_<id>.py`` in the output folder), written
atomically, whose header records the generator version, the seed and a hash
of the task's reference, setup and tests; a file whose header matches is
reused. Candidates are drawn from ``random.Random(f"{seed}:{task_id}")``, so
a rerun generates the same candidates; which survive can differ only where
a time limit is near.

What it does not do: there is no written contract per task (EvalPlus
wrote one for each), so a precondition neither the seeds, the rules in 2.
nor the reference shows can still be crossed, and the test then demands the
reference's answer outside the task's contract. Float results are compared
exactly, as MBPP's own asserts compare them. Arguments that are not
literals are never mutated.
"""

from __future__ import annotations

import ast
import hashlib
import json
import math
import os
import random
import threading
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from glyph.grading import (InvalidTests, ProbeCheck, module_bindings, compile_tests, grade, parse,
                           solution_bindings)
from glyph.sandbox import Limits, Run, Sandbox, SandboxUnavailable
from glyph.sandbox.runtime import wire
from glyph.data.mbpp import DataError, MbppTask

GENERATOR = 1  # bump whenever the same task and seed would give other tests
MAX_KEPT = 50
MAX_CANDIDATES = 160  # distinct candidate inputs per task
SEEDS = 3  # sandbox servers, each with its own hash seed
PROBE_FLOOR_S = 0.05  # a probe may always take this long (wall clock, IPC included)
PROBE_FACTOR = 10  # ... or this many times the slowest visible test
PROBE_CAP_S = 1.0  # ... but never longer
TASK_BUDGET_S = 20.0  # wall clock for one task's runs, after which it keeps what it has
MAX_HANGS = 30  # probes killed at their limit before a task stops trying more
PLUS_BUDGET_FACTOR = 2  # the kept tests may cost the reference this many times the visible tests' time ...
PLUS_BUDGET_FLOOR_S = 0.1  # ... or this long, whichever is more
MAX_REPR = 400  # characters of an argument list or expected value
MAX_LEN = 40  # elements of a generated container, characters of a generated string
SESSION_LIMITS = Limits(cpu_s=30, wall_s=60, memory_bytes=512 << 20)
ENV_VAR = "GLYPH_PLUS_PATH"
DEFAULT_DIR = Path("artifacts") / "plus"
_HASH_PROBE = "hash('glyph plus tests')"


# ---------------------------------------------------------------- seeds


@dataclass(frozen=True)
class Fixed:
    """An argument that is not a literal: kept as its source."""

    source: str


@dataclass(frozen=True)
class Seed:
    """One visible test's probe, split around its target call."""

    probe: str
    tree: ast.expr  # the probe
    path: tuple  # where the target call sits in ``tree`` (attribute names and indexes)
    args: tuple  # literal values or Fixed
    keywords: tuple  # (name, value or Fixed)

    @property
    def signature(self) -> tuple:
        return (ast.dump(_at(self.tree, self.path).func), len(self.args), tuple(k for k, _ in self.keywords),
                _template(self))


def task_hash(task: MbppTask) -> str:
    """What a task's plus tests depend on: its reference, setup and tests."""
    blob = json.dumps([task.code, task.test_setup_code, list(task.test_list)])
    return hashlib.sha256(blob.encode()).hexdigest()


def _literal(node: ast.expr):
    value = ast.literal_eval(node)
    if not _renders(value):
        raise ValueError("not reproduced by its literal")
    return value


def _at(tree: ast.AST, path: tuple) -> ast.AST:
    for step in path:
        tree = getattr(tree, step) if isinstance(step, str) else tree[step]
    return tree


def _find_call(tree: ast.AST, names: set[str], path: tuple = ()) -> tuple | None:
    """Path to the outermost call of one of ``names`` (breadth first)."""
    queue = [(tree, path)]
    while queue:
        node, p = queue.pop(0)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in names:
            return p
        for name, value in ast.iter_fields(node):
            if isinstance(value, ast.AST):
                queue.append((value, p + (name,)))
            elif isinstance(value, list):
                queue += [(v, p + (name, i)) for i, v in enumerate(value) if isinstance(v, ast.AST)]
    return None


def _template(seed: Seed) -> str:
    tree = _replace(seed.tree, seed.path, ast.Name("_CALL_"))
    return ast.unparse(tree)


def _replace(tree: ast.expr, path: tuple, new: ast.AST) -> ast.expr:
    import copy
    tree = copy.deepcopy(tree)
    if not path:
        return new
    parent = _at(tree, path[:-1])
    if isinstance(path[-1], str):
        setattr(parent, path[-1], new)
    else:
        parent[path[-1]] = new
    return tree


def seeds_of(task: MbppTask) -> tuple[list[Seed], list[ProbeCheck], str]:
    """The visible tests' seeds, their compiled checks, and the session
    setup the grader uses for them. A check without a target call gives no seed."""
    suite = compile_tests(task.test_setup_code, task.tests(), solution_bindings(task.code))
    if suite.program is not None:
        return [], [], suite.setup
    defined = set()
    for source in (task.code, task.test_setup_code):
        try:
            defined |= module_bindings(parse(source))[0]
        except SyntaxError:
            pass
    seeds = []
    for check in suite.checks:
        tree = parse(check.probe, mode="eval").body
        path = _find_call(tree, defined)
        if path is None:
            continue
        call = _at(tree, path)

        def value(node):
            try:
                return _literal(node)
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                return Fixed(ast.unparse(node))

        if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
            continue
        seeds.append(Seed(check.probe, tree, path, tuple(value(a) for a in call.args),
                          tuple((k.arg, value(k.value)) for k in call.keywords)))
    return seeds, list(suite.checks), suite.setup


def render(seed: Seed, args: tuple, keywords: tuple) -> str:
    """The probe with the target call's arguments replaced."""
    def node(v):
        return parse(v.source if isinstance(v, Fixed) else repr(v), mode="eval").body

    call = _at(seed.tree, seed.path)
    new = ast.Call(call.func, [node(a) for a in args], [ast.keyword(k, node(v)) for k, v in keywords])
    return ast.unparse(_replace(seed.tree, seed.path, new))


# ---------------------------------------------------------------- plain literal values

_SCALARS = (type(None), bool, int, float, complex, str, bytes)


def _renders(value, depth: int = 0) -> bool:
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
        return all(_renders(v, depth + 1) for v in value)
    if t is dict:
        return all(_renders(k, depth + 1) and _renders(v, depth + 1) for k, v in value.items())
    return False


def _same(a, b) -> bool:
    """Equal, with the same types all the way down (``1 == True`` is not the same answer)."""
    if type(a) is not type(b):
        return False
    if type(a) in (list, tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if type(a) is dict:
        return a.keys() == b.keys() and all(_same(v, b[k]) for k, v in a.items())
    return a == b


# ---------------------------------------------------------------- profiles


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
        elems = [e for v in seqs for e in v]
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
        items = list(v)
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
                items += list(other)
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
            items = list(v)
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
    empty: bool = False  # an argument is empty: only a natural answer is kept (``_natural``)


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
    seen = {s.probe for s in seeds}
    out: list[Candidate] = []

    def add(s: Seed, args: list, kws: list, moved: set[int], rel, edge: bool) -> None:
        args = _apply_relations(list(args), rel, rng, moved)
        if args is None or not all(isinstance(a, Fixed) or _renders(a) for a in args):
            return
        if not all(isinstance(v, Fixed) or _renders(v) for _, v in kws):
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


# ---------------------------------------------------------------- running the reference


@dataclass
class Answer:
    """One probe's fate in one run: ``value`` set when it answered plain data."""

    ok: bool
    value: Any = None
    seconds: float = 0.0
    why: str = ""


class Runner:
    """Evaluates probes against a reference in one sandbox server: a
    session per batch, a fresh one after a probe is killed or fails the run."""

    def __init__(self, sandbox: Sandbox) -> None:
        self.sandbox = sandbox

    def _open(self, source: bytes, setup: str) -> Run | None:
        run = self.sandbox.open({"mode": "solution"}, {"source": source, "setup": setup.encode()}, SESSION_LIMITS)
        msg = run.recv()
        if msg is not None and msg.get("ev") == "ready":
            return run
        run.finish(kill=True)
        return None

    def evaluate(self, source: str, setup: str, probes: list[str], limit_s: float,
                 deadline: float, hangs: list[int]) -> list[Answer]:
        answers: list[Answer] = []
        run: Run | None = None
        src = source.encode()
        for probe in probes:
            if time.monotonic() > deadline or len(hangs) >= MAX_HANGS:
                answers.append(Answer(False, why="skipped"))
                continue
            if run is None:
                run = self._open(src, setup)
                if run is None:
                    answers.append(Answer(False, why="the reference did not load"))
                    continue
            t0 = time.perf_counter()
            resp, killed = None, False
            if run.send({"op": "eval", "id": len(answers), "expr": probe}):
                try:
                    resp = run.recv(timeout=limit_s + 0.02)  # a probe over the limit is dropped anyway
                except TimeoutError:
                    killed = True
            seconds = time.perf_counter() - t0
            if killed or resp is None:
                if killed:
                    hangs.append(1)
                answers.append(Answer(False, seconds=seconds, why="killed at its limit" if killed else "the run ended"))
                run.finish(kill=True)
                run = None
                continue
            if resp.get("ev") != "ret" or resp.get("id") != len(answers):
                answers.append(Answer(False, why="out of turn"))
                run.finish(kill=True)
                run = None
                continue
            if "exc" in resp:
                answers.append(Answer(False, seconds=seconds, why="raised"))
            elif "notplain" in resp:
                answers.append(Answer(False, seconds=seconds, why="not plain data"))
            else:
                try:
                    value = wire.decode(resp.get("value"))
                except wire.WireError:
                    answers.append(Answer(False, seconds=seconds, why="malformed"))
                    continue
                if seconds > limit_s:
                    answers.append(Answer(False, value, seconds, why="over the time limit"))
                elif not _renders(value) or len(repr(value)) > MAX_REPR:
                    answers.append(Answer(False, value, seconds, why="no literal reproduces it"))
                else:
                    answers.append(Answer(True, value, seconds))
        if run is not None:
            run.send({"op": "exit"})
            run.finish()
        return answers


class SeedSandboxes:
    """``SEEDS`` sandbox servers whose hash seeds differ (checked)."""

    def __init__(self, n: int = SEEDS, pool: int = 1, mode: str | None = None) -> None:
        self.sandboxes: list[Sandbox] = []
        hashes: set[int] = set()
        try:
            while len(self.sandboxes) < n:
                sb = Sandbox(mode=mode, pool=pool)
                h = self._hash(sb)
                if h in hashes:  # the same random seed twice: start another
                    sb.close()
                    continue
                hashes.add(h)
                self.sandboxes.append(sb)
        except BaseException:
            self.close()
            raise

    @staticmethod
    def _hash(sb: Sandbox) -> int:
        run = sb.open({"mode": "solution"}, {"source": b"", "setup": b""}, Limits(cpu_s=5, wall_s=10))
        ready = run.recv()
        resp = run.recv() if ready and ready.get("ev") == "ready" and \
            run.send({"op": "eval", "id": 0, "expr": _HASH_PROBE}) else None
        run.finish(kill=True)
        if resp is None or "value" not in resp:
            raise SandboxUnavailable(f"the sandbox did not answer {_HASH_PROBE}: {resp}")
        return wire.decode(resp["value"])

    def close(self) -> None:
        for sb in self.sandboxes:
            sb.close()


# ---------------------------------------------------------------- one task


@dataclass
class TaskResult:
    task_id: int
    tests: list[str]
    stats: dict


def probe_limit(seed_seconds: list[float]) -> float:
    """Per-probe time limit: scaled from the reference's slowest visible test."""
    return min(PROBE_CAP_S, max(PROBE_FLOOR_S, PROBE_FACTOR * max(seed_seconds, default=0.0)))


def _select(kept: list[tuple[Candidate, Any, float]], budget_s: float, limit: int = MAX_KEPT
            ) -> list[tuple[Candidate, Any, float]]:
    """Round-robin over distinct expected values, each in candidate order,
    while the reference's total time on the chosen stays within ``budget_s``."""
    groups: dict[str, list] = {}
    for item in kept:
        groups.setdefault(repr(item[1]), []).append(item)
    queues = list(groups.values())
    out: list = []
    spent = 0.0
    while len(out) < limit and queues:
        for q in list(queues):
            if len(out) >= limit:
                break
            item = q.pop(0)
            if spent + item[2] <= budget_s:
                out.append(item)
                spent += item[2]
            if not q:
                queues.remove(q)
    order = {id(item[0]): i for i, item in enumerate(kept)}
    return sorted(out, key=lambda item: order[id(item[0])])


def generate_task(task: MbppTask, seed: int, runners: list[Runner], grade_sandbox: Sandbox | None = None
                  ) -> TaskResult:
    t0 = time.perf_counter()
    stats: dict = {"candidates": 0, "kept": 0}
    try:
        seeds, checks, setup = seeds_of(task)
    except InvalidTests as exc:
        stats["note"] = f"invalid tests: {exc}"
        return TaskResult(task.task_id, [], stats)
    if not seeds:
        stats["note"] = "no visible test calls a function the reference defines with literal arguments"
        return TaskResult(task.task_id, [], stats)
    cands = candidates(seeds, f"{seed}:{task.task_id}", sorted_inputs=says_sorted(task.text))
    stats["candidates"] = len(cands)
    if not cands:
        stats["note"] = "no literal argument to mutate"
        return TaskResult(task.task_id, [], stats)
    deadline = time.monotonic() + TASK_BUDGET_S
    hangs: list[int] = []
    # The reference's time on the visible probes scales the limit and the budget.
    calib = runners[0].evaluate(task.code, setup, [s.probe for s in seeds], PROBE_CAP_S, deadline, hangs)
    limit = probe_limit([a.seconds for a in calib])
    budget = max(PLUS_BUDGET_FLOOR_S, PLUS_BUDGET_FACTOR * sum(a.seconds for a in calib))
    stats["limit_s"] = round(limit, 3)
    probes = [c.probe for c in cands]
    first = runners[0].evaluate(task.code, setup, probes, limit, deadline, hangs)
    alive = [i for i, a in enumerate(first) if a.ok]
    why = {}
    for a in first:
        if not a.ok:
            why[a.why] = why.get(a.why, 0) + 1
    hash_sensitive = False
    rng = random.Random(f"{seed}:{task.task_id}:order")
    for k, runner in enumerate(runners[1:]):
        order = alive[::-1] if k == 0 else rng.sample(alive, len(alive))
        again = runner.evaluate(task.code, setup, [probes[i] for i in order], limit, deadline, hangs)
        survivors = set()
        for i, a in zip(order, again):
            if not a.ok:
                why[a.why] = why.get(a.why, 0) + 1
            elif not _same(a.value, first[i].value):
                hash_sensitive = True
                why["differs between runs"] = why.get("differs between runs", 0) + 1
            else:
                survivors.add(i)
        alive = [i for i in alive if i in survivors]
    if hash_sensitive:
        stats["note"] = "the reference's answers differ between runs (hash order or state): no plus tests"
        alive = []
    odd = [i for i in alive if cands[i].empty and not _natural(first[i].value)]
    if odd:
        why["empty input, answer not natural"] = len(odd)
        alive = [i for i in alive if i not in set(odd)]
    if _sorted_outputs(checks):
        unsorted = [i for i in alive if type(first[i].value) in (list, tuple) and not _is_sorted(first[i].value)]
        if unsorted:
            why["unsorted, where every visible answer is sorted"] = len(unsorted)
            alive = [i for i in alive if i not in set(unsorted)]
    stats["dropped"] = dict(sorted(why.items()))
    chosen = _select([(cands[i], first[i].value, first[i].seconds) for i in alive], budget)
    lines = [f"assert {c.probe} == {v!r}" for c, v, _ in chosen]
    lines = [ln for ln in lines if _fast_check(ln, task)]
    lines, dropped = _confirm(task, lines, grade_sandbox)
    if dropped:
        stats["failed_final_grade"] = dropped
    stats["kept"] = len(lines)
    if not lines and "note" not in stats:
        stats["note"] = "no candidate kept (see dropped)"
    stats["edge"] = sum(1 for c, _, _ in chosen if c.edge and f"assert {c.probe} == " in "\n".join(lines))
    stats["seconds"] = round(time.perf_counter() - t0, 3)
    return TaskResult(task.task_id, lines, stats)


def says_sorted(text: str) -> bool:
    import re
    return re.search(r"\bsorted\b", text, re.IGNORECASE) is not None


def _natural(v) -> bool:
    """An answer to an empty input that any implementation would give: None,
    a bool, zero, an empty value, or a sequence of such. (The reference's
    ``-100000`` for the maximum row sum of no rows is its own choice, a
    correct solution may raise instead: no test should demand it.)"""
    if v is None or type(v) is bool:
        return True
    if type(v) in (int, float, complex, str, bytes, dict, set):
        return not v
    if type(v) in (list, tuple):
        return all(_natural(x) for x in v)
    return False


def _is_sorted(v) -> bool:
    try:
        return list(v) == sorted(v)
    except TypeError:
        return False


def _sorted_outputs(checks: list[ProbeCheck]) -> bool:
    """Every visible answer that is a sequence of several distinct items is
    sorted: then the order may be an accident (a set's iteration order), and
    a plus answer that is not sorted would fail a solution that sorts."""
    seqs = [c.expected for c in checks if c.expected_expr is None and type(c.expected) in (list, tuple)
            and len(set(map(repr, c.expected))) > 1]
    return bool(seqs) and all(_is_sorted(v) for v in seqs)


def _fast_check(line: str, task: MbppTask) -> bool:
    """The line compiles to one fast-path check with a literal expected value."""
    try:
        suite = compile_tests(task.test_setup_code, line, solution_bindings(task.code))
    except InvalidTests:
        return False
    return suite.program is None and len(suite.checks) == 1 and suite.checks[0].expected_expr is None


def _confirm(task: MbppTask, lines: list[str], sandbox: Sandbox | None) -> tuple[list[str], int]:
    """Grade the reference on the visible tests + ``lines`` with glyph's
    grader; drop a line it fails (a few rounds), or all if it keeps failing."""
    dropped = 0
    base = len(task.test_list)
    for _ in range(3):
        if not lines:
            return lines, dropped
        g = grade(task.code, task.test_setup_code, "\n".join(list(task.test_list) + lines), sandbox=sandbox,
                  limits=Limits(cpu_s=20, wall_s=40))
        if g.passed:
            return lines, dropped
        bad = next((c.index for c in g.checks if c.outcome is not None and not c.passed), None)
        if bad is None or bad < base:
            return [], dropped + len(lines)
        del lines[bad - base]
        dropped += 1
    return [], dropped + len(lines)


# ---------------------------------------------------------------- files


def file_name(task_id: int) -> str:
    return f"mbpp_{task_id}.py"


def header(task: MbppTask, seed: int, stats: dict) -> dict:
    return {"task": task.id, "generator": GENERATOR, "seed": seed, "task_sha256": task_hash(task), **stats}


def write_file(folder: Path, task: MbppTask, seed: int, result: TaskResult) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / file_name(task.task_id)
    meta = header(task, seed, {k: v for k, v in result.stats.items() if k not in ("seconds", "limit_s")})
    text = (f"# glyph plus tests for {task.id}: differential tests from its reference solution "
            f"(`glyph data plus`)\n# {json.dumps(meta, ensure_ascii=False)}\n"
            + "".join(line + "\n" for line in result.tests))
    tmp = path.with_name(path.name + f".tmp{os.getpid()}.{threading.get_ident()}")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
    return path


def read_file(path: Path) -> tuple[dict, list[str]]:
    """(header, assert lines) of a plus file; ``DataError`` if malformed."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"{path}: unreadable ({exc})") from None
    lines = text.splitlines()
    try:
        meta = json.loads(lines[1][2:])
    except (IndexError, ValueError):
        raise DataError(f"{path}: no glyph plus header") from None
    if not isinstance(meta, dict):
        raise DataError(f"{path}: no glyph plus header")
    return meta, [ln for ln in lines[2:] if ln.strip()]


def current(folder: Path, task: MbppTask, seed: int | None = None) -> list[str] | None:
    """The plus tests in ``folder`` for ``task``, or None when there is no
    file for it, or it was generated for another reference, generator or seed."""
    path = folder / file_name(task.task_id)
    if not path.is_file():
        return None
    meta, lines = read_file(path)
    if meta.get("task_sha256") != task_hash(task) or meta.get("generator") != GENERATOR:
        return None
    if seed is not None and meta.get("seed") != seed:
        return None
    return lines


def resolve_dir(path: str | os.PathLike | None = None) -> Path:
    """The plus tests' folder: ``path``, else ``$GLYPH_PLUS_PATH``, else ``artifacts/plus``."""
    return Path(path or os.environ.get(ENV_VAR) or DEFAULT_DIR)


def load_tests(folder: str | os.PathLike | None, task: MbppTask) -> list[str]:
    """A task's plus tests for grading; ``DataError`` naming what to run when absent or stale."""
    d = resolve_dir(folder)
    lines = current(d, task)
    if lines is None:
        raise DataError(f"{d / file_name(task.task_id)}: no current plus tests for {task.id}; "
                        f"run `glyph data plus --out {d.parent}`")
    return lines


# ---------------------------------------------------------------- all tasks


def generate(tasks: Iterable[MbppTask], folder: Path, seed: int = 42, jobs: int | None = None,
             progress: bool = True, sandbox_mode: str | None = None) -> dict:
    """Generate (or reuse) the plus tests of ``tasks`` into ``folder``; return a summary."""
    from rich.progress import track

    tasks = list(tasks)
    jobs = jobs or min(2, os.cpu_count() or 1)
    t0 = time.perf_counter()
    todo = [t for t in tasks if current(folder, t, seed) is None]
    results: dict[int, dict] = {}
    if todo:
        seeds = SeedSandboxes(SEEDS, pool=jobs, mode=sandbox_mode)
        grader = Sandbox(mode=sandbox_mode, pool=jobs)
        try:
            runners = [Runner(sb) for sb in seeds.sandboxes]

            def one(task: MbppTask) -> dict:
                result = generate_task(task, seed, runners, grader)
                write_file(folder, task, seed, result)
                return result.stats

            with ThreadPoolExecutor(jobs) as pool:
                for task, stats in track(zip(todo, pool.map(one, todo)), total=len(todo),
                                         description="generating plus tests", disable=not progress):
                    results[task.task_id] = stats
        finally:
            grader.close()
            seeds.close()
    return summarize(folder, tasks, seed, generated=len(todo), seconds=time.perf_counter() - t0)


def summarize(folder: Path, tasks: list[MbppTask], seed: int, generated: int = 0, seconds: float = 0.0) -> dict:
    """Counts over ``tasks``' current plus files (``DataError`` if one is missing or stale)."""
    kept, notes = {}, {}
    for t in tasks:
        lines = current(folder, t, seed)
        if lines is None:
            raise DataError(f"{folder / file_name(t.task_id)}: missing, or generated for another task "
                            f"version, generator or seed")
        kept[t.id] = len(lines)
        meta, _ = read_file(folder / file_name(t.task_id))
        if meta.get("note"):
            notes[t.id] = meta["note"]
    n = len(kept)
    return {"generator": GENERATOR, "seed": seed, "tasks": n, "generated": generated,
            "reused": n - generated, "with_tests": sum(1 for v in kept.values() if v),
            "tests": sum(kept.values()), "mean_kept": round(sum(kept.values()) / n, 2) if n else 0.0,
            "max_kept": MAX_KEPT, "hash_seeds": SEEDS, "kept": kept, "notes": notes,
            "seconds": round(seconds, 1)}
