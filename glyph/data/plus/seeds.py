"""Seeds: a task's visible asserts, each split around its target call.

What it guarantees: a seed's literal arguments are plain values
(``plain.renders``), any other argument is kept as its source (``Fixed``),
and ``render`` gives back the seed's probe with only the target call's
arguments replaced. A visible assert whose probe calls no function the
reference or the setup defines, or calls it with ``*args`` or
``**kwargs``, gives no seed.
"""

from __future__ import annotations

import ast
import copy
from dataclasses import dataclass

from glyph.data.mbpp import MbppTask
from glyph.data.plus.plain import literal, renders
from glyph.grading import ProbeCheck, compile_tests, module_bindings, parse, solution_bindings


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


def _literal(node: ast.expr):
    value = ast.literal_eval(node)
    if not renders(value):
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
        return parse(v.source if isinstance(v, Fixed) else literal(v), mode="eval").body

    call = _at(seed.tree, seed.path)
    new = ast.Call(call.func, [node(a) for a in args], [ast.keyword(k, node(v)) for k, v in keywords])
    return ast.unparse(_replace(seed.tree, seed.path, new))
