"""Grade a solution against hidden tests that never enter the untrusted process.

How (and what it guarantees):

1. The tests are parsed here, on the trusted side, into a ``TestSuite``.
   A name in the tests is *solution-side* if the solution or the test setup
   code provides it (a free name that is not a builtin or stdlib module, or
   anything imported ``from solution``). Builtin and stdlib names are the
   real ones wherever a check's other side is evaluated, also where the
   solution rebinds them (a ``sys`` stand-in, its own ``round``): else the
   solution would compute the value it is compared with. The one exception
   is tests that name nothing of the solution but a builtin it redefines
   (MBPP 126 tests a function called ``sum``): that name is solution-side.

2. **Fast path** (every MBPP assert but MBPP 912's has this shape): each
   top-level statement is ``assert A == B`` with exactly one side
   solution-side, whose calls are all of the solution's, or an import.
   The solution-side expression (``remove_Occ("hello","l")``) is sent to a
   sandbox session that has run the solution, then the setup code and the
   tests' imports; it answers with plain data only (``sandbox.runtime.wire``:
   exact builtin types, decoded here by code that can build nothing else).
   The other side is a literal read here with ``ast.literal_eval``, or,
   when it is an expression over builtins and stdlib (``sys.getsizeof(...)``),
   evaluated once in a separate sandbox run that loads no submitted code.
   ``==`` is evaluated here, between two plain values.

3. **Referee path** (loops, helper variables, ``test_*`` functions, other
   comparisons, a builtin applied to the solution's result as in
   ``int(lobb_num(5, 3))``): the whole test program runs in a
   sandbox run that loads no submitted code (the referee), where each
   solution-side name is a proxy. Calls and attribute reads on proxies
   travel as plain data through this process to the solution session and
   back; non-plain results stay in the session behind opaque handles, and a
   proxy compares by identity, so the solution never evaluates a check. An
   exception the solution raises reaches the tests as its builtin class,
   but a StopIteration, which the tests' own iteration would take for its
   end (``all(map(solve, cases))`` true), arrives as a RuntimeError. The
   referee's reports are trusted: it runs only test code, as a different uid.

Either way the expected values, the asserts and the comparison are out of
the solution's reach: it can neither read them (they are not in its process,
nor in its filesystem view) nor influence the verdict except through the
plain values it returns. The outcome is the first failing check's class,
decided from structured facts (exception class, exit status, limits hit),
never from text the solution printed; under the study's semantics
(``glyph.semantics.STUDY``) the class is the study's, and a PASS still needs
this process's own ``==``.
"""

from __future__ import annotations

import ast
import builtins
import functools
import hashlib
import json
import re
import secrets
import symtable
import sys
import threading
import time
import warnings
from dataclasses import asdict, dataclass, field
from typing import Any

from glyph.errors import DataError
from glyph.outcomes import Outcome
from glyph.sandbox import Limits, Run, Sandbox, get_sandbox
from glyph.sandbox.runtime import wire
from glyph.semantics import (DETAIL_CAP, GLYPH, Semantics, ended_err, exc_text, failure_outcome, judge,
                             one_file_end, status_outcome)
from glyph.text import encodable, source_bytes

MAX_SOLUTION_BYTES = 8 << 20
MAX_PARSE_BYTES = 64 << 10
"""The most of a solution this process parses (``solution_bindings``): 49 times MBPP's longest reference
(1,331 bytes, mbpp_493); a parse holds the GIL and the parse lock, and takes about 1 KB of memory a line
(a 2 MiB solution of a million ``0`` lines: 1.6 GB and 4 s)."""
_BUILTINS = frozenset(dir(builtins))
_STDLIB = frozenset(sys.stdlib_module_names)

LARGEST_EXPECTED = {"bytes": 4706, "nodes": 257, "characters": 2836}
"""The measured fact the answer cap is sized from: the largest of the 49,244 literal expected values of
MBPP's tests (2,863) and of their plus tests (46,381, ``glyph data plus``, seed 42), as the answer line that
equals it takes on the wire (``bytes``: ``{"ev":"ret","id":0,"value":...}``, mbpp_493), in ``wire`` values
(``nodes``: mbpp_462) and in characters of str, bytes and number text (``characters``: mbpp_493); all three
are MBPP's own (a plus test's expected value is at most 400 characters of repr). ``tests/test_grading.py``
measures it again from the data (the plus tests too where ``$GLYPH_PLUS_PATH`` holds them)."""
ANSWER_BYTES = 1 << (8 * LARGEST_EXPECTED["bytes"] - 1).bit_length()
"""The longest answer line the trusted side reads (64 KiB): eight times the fact above, to the next power of
two. The sandbox sends a longer answer as its length only (``overcap``), and a line longer than this is
judged by its length alone, never parsed: an answer of ``ANSWER_BYTES`` decodes to at most a few MB
(``wire``'s docstring: under 100 bytes a JSON token, at most 232 bytes a value), one at a time in this
process (``_VERDICT_LOCK``). A suite whose own expected value would not fit is ``InvalidTests``."""
_VERDICT_LOCK = threading.Lock()


# CPython 3.11 before 3.11.8 can raise "SystemError: AST constructor recursion depth mismatch"
# when threads build ASTs at once (python/cpython#106905, fixed by PR #106906): the depth counter
# of the AST conversion is shared by the interpreter's threads. finalize grades from threads
# (asyncio.to_thread) and benchmarks/load.py hit it on honest rollouts: every parse of the trusted
# side goes through this lock. Parses outside glyph's code take no lock (3.11's traceback module
# parses source segments to place its carets, e.g. when verifiers logs a failed rollout in another
# thread), so a parse that still meets the mismatch is repeated: the counter is reset at the start
# of each conversion, and the error says nothing about the source.
_PARSE_LOCK = threading.Lock()
_PARSE_TRIES = 50


def parse(source: str | bytes, filename: str = "<unknown>", mode: str = "exec") -> ast.AST:
    """``ast.parse`` under the process-wide parse lock, repeated when another
    thread's parse broke the shared depth counter (see above)."""
    for attempt in range(_PARSE_TRIES):
        with _PARSE_LOCK:
            try:
                return ast.parse(source, filename, mode)
            except SystemError as exc:
                if "recursion depth mismatch" not in str(exc) or attempt + 1 == _PARSE_TRIES:
                    raise
        time.sleep(0.0005 * (attempt + 1))
    raise AssertionError("unreachable")


SERVER_RETRIES = 1
"""Gradings repeated when the sandbox server died (and was restarted) during one."""


class SandboxFault(RuntimeError):
    """The sandbox server died under the grading (killed, out of memory): the
    result says nothing about the solution, so it is raised, not graded."""


class InvalidTests(DataError):
    """The tests themselves are unusable (a bug in the task, not the solution)."""


# ---------------------------------------------------------------- results


@dataclass
class Check:
    index: int
    source: str
    line: int | None
    outcome: Outcome | None = None  # None: not run (an earlier check failed)
    detail: str = ""

    @property
    def passed(self) -> bool:
        return self.outcome is Outcome.PASS


@dataclass
class Grade:
    outcome: Outcome
    checks: list[Check]
    seconds: float
    detail: str = ""
    stdout: str = ""
    stderr: str = ""
    path: str = "fast"
    sandbox: dict | None = None
    """The sandbox mode and protections that graded it (``ServerInfo.record()``)."""

    @property
    def passed(self) -> bool:
        return self.outcome is Outcome.PASS

    def to_json(self) -> dict:
        d = asdict(self)
        d["passed"] = self.passed
        d["outcome"] = self.outcome.value
        for c, src in zip(d["checks"], self.checks):
            c["outcome"] = src.outcome.value if src.outcome else None
            c["passed"] = src.passed
        return d


# ---------------------------------------------------------------- test suites


@dataclass(frozen=True)
class ProbeCheck:
    source: str
    line: int
    probe: str  # evaluated in the solution session
    expected: Any = None  # a literal, or the value of expected_expr
    expected_expr: str | None = None  # evaluated once in a clean run


@dataclass(frozen=True)
class TestSuite:
    """Compiled hidden tests. ``setup`` runs in the solution session after
    the solution (as in one file); ``checks`` is set for the fast path,
    ``program`` for the referee path."""

    setup: str
    checks: tuple[ProbeCheck, ...] = ()
    program: str | None = None
    names: tuple[str, ...] = ()
    stdlib: tuple[str, ...] = ()
    """The stdlib modules the tests name (the real ones wherever the expected side is evaluated)."""
    imports: tuple[str, ...] = ()
    """The tests' own import statements, but ``from solution``."""
    references: dict = field(default_factory=dict, compare=False, hash=False)
    """Each non-literal expected value by (its expression, whether numbers crossed as themselves)."""

    @property
    def path(self) -> str:
        return "fast" if self.program is None else "referee"


def module_bindings(tree: ast.Module) -> tuple[set[str], set[str]]:
    """Top-level names a module binds: (by def/class/assignment/from-import,
    by plain ``import M``)."""
    defined, imported = set(), set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defined.add(node.name)
        elif isinstance(node, ast.Import):
            for a in node.names:
                (defined if a.asname else imported).add((a.asname or a.name).split(".")[0])
        elif isinstance(node, ast.ImportFrom):
            defined.update(a.asname or a.name for a in node.names)
        else:
            for sub in ast.walk(node):
                if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
                    defined.add(sub.id)
    return defined, imported


def _free_names(source: str, filename: str) -> set[str]:
    """Names the program reads from its global scope but never binds there."""
    with _PARSE_LOCK:
        top = symtable.symtable(source, filename, "exec")
    bound = {s.get_name() for s in top.get_symbols()
             if s.is_assigned() or s.is_imported() or s.is_namespace()}
    free = set()
    stack = [top]
    while stack:
        table = stack.pop()
        for sym in table.get_symbols():
            name = sym.get_name()
            if sym.is_referenced() and (table is top or sym.is_global()) and name not in bound:
                free.add(name)
        stack.extend(table.get_children())
    return free


def solution_bindings(source: bytes | str, names: frozenset[str] | None = None) -> frozenset[str]:
    """Builtin and stdlib names the solution rebinds at top level (so that,
    as in one file, the tests see the solution's version). Empty when the
    source does not parse: grading will report the syntax error.

    ``names``: only these matter (the builtin and stdlib names the tests
    read: ``names_tests_read``), and the answer is bounded in time and memory:
    a source where none of them occurs as a word is not parsed at all, and
    one longer than ``MAX_PARSE_BYTES`` is not parsed either: each of them
    that occurs in it counts as rebound (the session then has whatever the
    solution's namespace holds under that name, as one file would)."""
    if names is not None:
        names = names & (_BUILTINS | _STDLIB)
        data = source.encode("utf-8", "surrogatepass") if isinstance(source, str) else source
        if not names:
            return frozenset()
        words = rb"\b(?:" + b"|".join(n.encode() for n in sorted(names)) + rb")\b"
        found = {m.decode() for m in re.findall(words, data)} & names
        if not found:
            return frozenset()
        if len(data) > MAX_PARSE_BYTES:
            return frozenset(found)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            defined, _ = module_bindings(parse(source))
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return frozenset()
    bound = defined & (_BUILTINS | _STDLIB)
    return frozenset(bound if names is None else bound & names)


@functools.lru_cache(maxsize=4096)
def names_tests_read(tests: str, filename: str = "<tests>") -> frozenset[str]:
    """The builtin and stdlib names the tests read from their global scope
    (the only ones ``solution_bindings`` need to look for); empty when the
    tests do not parse (``compile_tests`` says why)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            free = _free_names(tests, filename)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return frozenset()
    return frozenset(n for n in free if n in _BUILTINS or n in _STDLIB)


@functools.lru_cache(maxsize=4096)
def compile_tests(setup: str, tests: str, shadowed: frozenset[str] = frozenset(),
                  filename: str = "<tests>") -> TestSuite:
    """Parse hidden tests into a ``TestSuite``. ``shadowed``: builtin or
    stdlib names the solution rebinds (``solution_bindings``): solution-side
    only where the tests name nothing else of the solution (module docstring, 1.)."""
    try:
        with warnings.catch_warnings():  # e.g. invalid escapes in MBPP's asserts: not ours to report
            warnings.simplefilter("ignore")
            tree = parse(tests, filename)
            setup_tree = parse(setup, "<test setup>")
            free = _free_names(tests, filename)
    except SyntaxError as exc:
        raise InvalidTests(f"{exc.filename}:{exc.lineno}: the tests do not parse: {exc.msg}") from None
    setup_defined, _ = module_bindings(setup_tree)
    from_solution = {a.asname or a.name for node in tree.body if isinstance(node, ast.ImportFrom)
                     and node.module == "solution" for a in node.names}
    side = {n for n in free if n in setup_defined or (n not in _BUILTINS and n not in _STDLIB)} | from_solution
    if not side:  # the function under test has a builtin's name (MBPP 126 tests a ``sum`` of its own)
        side = {n for n in free if n in shadowed}
    stdlib = tuple(sorted(n for n in free if n in _STDLIB and n not in side))

    def solution_side(node: ast.AST) -> bool:
        return any(isinstance(n, ast.Name) and n.id in side for n in ast.walk(node))

    def calls_only_solution(node: ast.AST) -> bool:
        """Every call in ``node`` is of the solution's (``int(f(5))`` is not:
        the ``int`` would run in the solution's process)."""
        for n in ast.walk(node):
            if isinstance(n, ast.Call):
                root = n.func
                while isinstance(root, ast.Attribute):
                    root = root.value
                if isinstance(root, ast.Name) and root.id not in side:
                    return False
        return True

    checks, imports = [], []
    fast = True
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            imports.append(ast.unparse(node))
            continue
        if not (isinstance(node, ast.Assert) and isinstance(node.test, ast.Compare)
                and len(node.test.ops) == 1 and isinstance(node.test.ops[0], ast.Eq)):
            fast = False
            break
        left, right = node.test.left, node.test.comparators[0]
        if solution_side(left) == solution_side(right):
            fast = False
            break
        probe, other = (left, right) if solution_side(left) else (right, left)
        if not calls_only_solution(probe):
            fast = False
            break
        src = ast.get_source_segment(tests, node) or ast.unparse(node)
        try:
            checks.append(ProbeCheck(src, node.lineno, ast.unparse(probe), ast.literal_eval(other)))
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            checks.append(ProbeCheck(src, node.lineno, ast.unparse(probe), None, ast.unparse(other)))
    if fast and not checks:
        raise InvalidTests(f"{filename}: no checks found in the tests")
    for c in checks if fast else ():
        if c.expected_expr is None:
            _fits_the_cap(c.expected, f"{filename}:{c.line}")
    if fast:  # the session's namespace keeps the solution's own bindings (what it rebinds is not imported over)
        test_imports = "\n".join([f"import {m}" for m in stdlib if m not in shadowed] + imports)
        full_setup = setup + ("\n" + test_imports if test_imports else "")
        own = tuple(ast.unparse(n) for n in tree.body if isinstance(n, ast.Import)
                    or (isinstance(n, ast.ImportFrom) and n.module != "solution"))
        return TestSuite(setup=full_setup, checks=tuple(checks), stdlib=stdlib, imports=own)
    return TestSuite(setup=setup, program=tests, names=tuple(sorted(side - from_solution)), stdlib=stdlib)


def suite_for(setup: str, tests: str, solution: bytes | str, filename: str = "<tests>") -> TestSuite:
    shadowed = solution_bindings(solution, names_tests_read(tests, filename))
    return compile_tests(setup, tests, shadowed, filename)


# ---------------------------------------------------------------- grading


def grade(solution: bytes | str, setup: str, tests: str, *, limits: Limits = Limits(),
          sandbox: Sandbox | None = None, filename: str = "<tests>", semantics: Semantics = GLYPH) -> Grade:
    """Grade ``solution`` against ``setup`` + ``tests`` (Python source) under ``semantics``
    (``glyph.semantics``: ``GLYPH`` or ``STUDY``)."""
    t0 = time.perf_counter()
    source = source_bytes(solution) if isinstance(solution, str) else solution
    if len(source) > MAX_SOLUTION_BYTES:
        return Grade(Outcome.OTHER, [], time.perf_counter() - t0,
                     f"solution is {len(source)} bytes, over the {MAX_SOLUTION_BYTES}-byte limit")
    suite = suite_for(setup, tests, source, filename)
    sandbox = sandbox or get_sandbox()
    grader = _fast if suite.program is None else _referee
    for _ in range(SERVER_RETRIES + 1):
        restarts = sandbox.restarts
        result = _encodable(grader(sandbox, suite, source, limits, semantics))
        if sandbox.restarts == restarts:
            break
    else:  # the server died under every attempt: a fault of the grader, never the solution's outcome
        raise SandboxFault(f"the sandbox server died during each of {SERVER_RETRIES + 1} gradings; last: "
                           f"{result.outcome.value}: {result.detail}")
    result.seconds = time.perf_counter() - t0
    result.path = suite.path
    result.sandbox = sandbox.protections().record()
    return result


def grading_key(setup: str, tests: str, limits: Limits, semantics: Semantics = GLYPH) -> str:
    """The sha256 of what ``grade`` depends on besides the solution: the setup
    code, the tests (the text ``grade`` is given), every limit and the
    semantics. Two gradings of one source under one key are the same grading:
    the test service records the key of each it ran, and finalize takes a
    recorded grade only under its own key (``glyph.envs.mbpp.finalize``)."""
    blob = json.dumps([setup, tests, asdict(limits), semantics.name], sort_keys=True)  # ASCII: \ud800 escaped
    return hashlib.sha256(blob.encode("ascii")).hexdigest()


def _encodable(g: Grade) -> Grade:
    """``g`` with its text made encodable (``glyph.text.encodable``): its details
    (exception messages, reprs, the referee's reports) and output come from
    runs of model code, which can put a lone surrogate in any of them."""
    g.detail, g.stdout, g.stderr = encodable(g.detail), encodable(g.stdout), encodable(g.stderr)
    for c in g.checks:
        c.source, c.detail = encodable(c.source), encodable(c.detail)
    return g


def _open_solution(sandbox: Sandbox, source: bytes, setup: str, limits: Limits,
                   probes: list[str] | None = None, sem: Semantics = GLYPH,
                   marker: str = "") -> tuple[Run, Grade | None]:
    """Open a solution session (that answers ``probes`` at once, in order,
    after ``ready``) under ``sem``; a Grade if it failed before being ready."""
    blobs = {"source": source, "setup": setup.encode()}
    if probes is not None:
        blobs["probes"] = wire.dumps({"probes": probes})
    header = {"mode": "solution", "answer_bytes": ANSWER_BYTES, **sem.header()}
    if marker:  # under as_main: the line the run prints last, as the study's file did
        header["marker"] = marker
    run = sandbox.open(header, blobs, limits)
    msg = run.recv()
    if msg is not None and msg.get("ev") == "ready":
        return run, None
    status = run.finish(kill=True)
    run.release()
    if msg is not None and msg.get("ev") == "error" and type(msg.get("exc")) is dict:
        info, phase = msg["exc"], msg.get("phase")
        outcome = failure_outcome(info, sem, compiling=phase == "compile")
        where = {"compile": "compiling the solution", "load": "loading the solution",
                 "setup": "running the test setup code"}.get(phase, "starting")
        detail = f"{exc_text(info)} (while {where})"
    else:
        outcome, detail = status_outcome(status, run.protocol_error, sem, run.stderr)
    return run, _with_output(Grade(outcome, [], 0.0, detail), run)


def _with_output(g: Grade, run: Run) -> Grade:
    g.stdout = run.stdout[-2000:].decode("utf-8", "replace")
    g.stderr = run.stderr[-2000:].decode("utf-8", "replace")
    return g


def _references(sandbox: Sandbox, suite: TestSuite, limits: Limits, sem: Semantics = GLYPH) -> None:
    """Evaluate the non-literal expected values once, in a run with no
    submitted code (so their values are trusted)."""
    pending = list(dict.fromkeys(c.expected_expr for c in suite.checks
                                 if c.expected_expr is not None
                                 and (c.expected_expr, sem.numbers) not in suite.references))
    if not pending:
        return
    clean = Semantics("references", numbers=sem.numbers)  # no submitted code: only how values cross
    run, failed = _open_solution(sandbox, b"", _imports_only(suite), limits, pending, clean)
    if failed:
        raise InvalidTests(f"the tests' expected values could not be computed: {failed.detail}")
    try:
        for i, expr in enumerate(pending):
            resp = run.recv(max_tokens=None)
            if resp is not None and "overcap" in resp:
                raise InvalidTests(f"{expr}: its expected value takes {resp['overcap']} bytes on the wire, "
                                   f"over the answer cap (grading.ANSWER_BYTES, {ANSWER_BYTES} bytes)")
            if resp is None or resp.get("id") != i or "value" not in resp:
                raise InvalidTests(f"expected value {expr!r} could not be computed: {resp}")
            try:
                value = wire.decode(resp["value"], numbers=sem.numbers)
            except wire.WireError as exc:
                raise InvalidTests(f"expected value {expr!r} could not be decoded: {exc}") from None
            _fits_the_cap(value, expr)
            suite.references[(expr, sem.numbers)] = value
    finally:
        run.finish(kill=True)
        run.release()


def _fits_the_cap(expected: Any, what: str) -> None:
    """``InvalidTests`` if an answer equal to ``expected`` would be longer
    than ``ANSWER_BYTES``: a right answer would be read as over the cap."""
    size = len(wire.dumps({"ev": "ret", "id": 0, "value": wire.encode(expected, numbers=True)}))
    if size > ANSWER_BYTES:
        raise InvalidTests(f"{what}: its expected value takes {size} bytes on the wire, over the answer cap "
                           f"(grading.ANSWER_BYTES, {ANSWER_BYTES} bytes)")


def _imports_only(suite: TestSuite) -> str:
    """What the clean run evaluating the expected values imports: every
    stdlib module the tests name (the real one, also where the solution
    rebinds that name) and the tests' own imports."""
    return "\n".join([f"import {m}" for m in suite.stdlib] + list(suite.imports))


def _fast(sandbox: Sandbox, suite: TestSuite, source: bytes, limits: Limits, sem: Semantics = GLYPH) -> Grade:
    """Every probe sent at once; the run killed once it has answered them all
    (or ended; under ``as_main`` it ends itself, as one file did, by its wall
    limit); each answer judged after that, here."""
    _references(sandbox, suite, limits, sem)
    checks = [Check(i, c.source, c.line) for i, c in enumerate(suite.checks)]
    marker = secrets.token_hex(16) if sem.as_main else ""  # the study's: a random line printed last
    probes = [c.probe for c in suite.checks]
    run, failed = _open_solution(sandbox, source, suite.setup, limits, probes, sem, marker)
    if failed:
        failed.checks = checks
        return failed
    try:
        run.gather(len(checks) + sem.as_main)  # under as_main, the answers and then the run's end
        status = run.finish(kill=not sem.as_main)
        answers = list(run.messages)[:len(checks)]
        end = list(run.messages)[len(checks):len(checks) + 1]
        failed_yet = False
        for i, (spec, check, line) in enumerate(zip(suite.checks, checks, answers)):
            with _VERDICT_LOCK:  # one answer decoded at a time in this process
                expected = spec.expected if spec.expected_expr is None else \
                    suite.references[(spec.expected_expr, sem.numbers)]
                check.outcome, check.detail = judge(line, i, spec, expected, sem, ANSWER_BYTES,
                                                    not failed_yet)
            failed_yet = failed_yet or check.outcome is not Outcome.PASS
    finally:
        run.release()
    if len(answers) < len(checks):  # the run ended (or broke its channel) under this probe
        ended = checks[len(answers)]
        ended.outcome, ended.detail = status_outcome(status, run.protocol_error, sem, run.stderr)
    first = next((c for c in checks if c.outcome is not Outcome.PASS), None)
    outcome, detail = (Outcome.PASS, "") if first is None else (first.outcome, first.detail)
    if first is None and sem.as_main:
        outcome, detail = one_file_end(end[0] if end else None, status, run, sem, ANSWER_BYTES, marker,
                                       len(run.stdout) < limits.output_bytes)
    return _with_output(Grade(outcome, checks, 0.0, detail), run)


_RPC_OPS = {"get": ("name",), "call": ("fn", "args", "kwargs"), "getattr": ("obj", "name")}


def _relay(req: dict, s: Run, n: int, sem: Semantics = GLYPH) -> tuple[dict | None, str | None]:
    """Forward one referee request to the solution session: the sanitized
    answer for the referee, or (None, why the session is over: None when it
    ended by itself, its status says why)."""
    op = req.get("op")
    if op not in _RPC_OPS or any(k not in req for k in _RPC_OPS[op]):
        raise _RefereeFault(f"the referee sent a malformed request {op!r}")
    fwd = {"op": op, "id": n, **{k: req[k] for k in _RPC_OPS[op]}}
    if not s.send(fwd):
        return None, None
    line = s.recv_line()
    if line is None:
        return None, None
    if len(line) > ANSWER_BYTES:
        return None, f"the solution sent an answer of {len(line)} bytes, over the answer cap ({ANSWER_BYTES})"
    try:
        resp = wire.loads(line)
    except wire.WireError as exc:
        return None, f"malformed message from the solution: {exc}"
    if resp.get("ev") != "ret" or resp.get("id") != n:
        return None, "the solution session answered out of turn"
    if type(resp.get("exc")) is dict:
        info = resp["exc"]
        clean = {"type": str(info.get("type"))[:200], "base": str(info.get("base"))[:100],
                 "msg": str(info.get("msg"))[:DETAIL_CAP]}
        if sem.rules:  # the rule strings it says were printed, and whether a traceback was: nothing else
            printed = info.get("printed") if type(info.get("printed")) is list else []
            clean["printed"] = sorted({p for p in printed if type(p) is str and p in sem.needles})
            clean["traceback"] = info.get("traceback") is not False
        return {"exc": clean}, None
    if "overcap" in resp:
        return None, (f"the solution sent an answer of {resp['overcap']!s:.20} bytes, over the answer cap "
                      f"({ANSWER_BYTES})")
    # Decoded only to check it (within wire's bounds; decode reads every part of the tree): the tree
    # goes on to the referee as it came. Re-encoding the value would build a second, larger tree.
    try:
        wire.decode(resp.get("value"), allow_handles=True, numbers=sem.numbers)
    except wire.WireError as exc:
        return None, f"malformed result from the solution: {exc}"
    return {"value": resp.get("value")}, None


class _RefereeFault(Exception):
    """The referee (trusted: it runs only test code) broke its protocol."""


def _referee(sandbox: Sandbox, suite: TestSuite, source: bytes, limits: Limits,
             sem: Semantics = GLYPH) -> Grade:
    """The test program runs in the referee, the solution in its session;
    every call relayed here, whatever the checks found (the referee records
    them and goes on: ``runtime/worker.py``). Once the program has ended the
    session is killed (under ``as_main``: told to end as one file would, and
    its end read), and only then does the referee describe its checks."""
    marker = secrets.token_hex(16) if sem.as_main else ""
    s, failed = _open_solution(sandbox, source, suite.setup, limits, None, sem, marker)
    if failed:
        return failed
    referee = {"mode": "referee", "names": list(suite.names), "stdlib": list(suite.stdlib),
               **{k: v for k, v in sem.header().items() if k != "as_main"}}
    r = sandbox.open(referee, {"program": suite.program.encode()}, limits)
    reports: list[dict] = []
    gone: tuple[Outcome, str] | None = None  # the session's end, where it ended under a call
    end: bytes | None = None  # under as_main, the session's end, where it said one
    outcome, detail, n = Outcome.PASS, "", 0
    try:
        while True:
            msg = r.recv(max_tokens=None)
            ev = None if msg is None else msg.get("ev")
            if ev == "rpc" and gone is None:
                n += 1
                answer, why = _relay(msg, s, n, sem)
                if answer is None:
                    status = s.finish(kill=True)
                    gone = (Outcome.OTHER, why) if why else \
                        status_outcome(status, s.protocol_error, sem, s.stderr)
                    answer = {"gone": True}
                r.send(answer)
            elif ev == "rpc":
                r.send({"gone": True})
            elif ev == "ran":
                if s.status is None and sem.as_main and s.send({"op": "exit"}):
                    end = s.recv_line()
                if s.status is None:
                    s.finish(kill=not sem.as_main)
                r.send({"op": "report"})
            elif ev == "check":
                reports.append(msg)
            elif ev == "done":
                break
            else:
                why = status_outcome(r.finish(kill=True), r.protocol_error)[1] if msg is None else \
                    f"the referee sent {ev!r}"
                raise _RefereeFault(why)
    except _RefereeFault as exc:
        outcome, detail = Outcome.OTHER, f"the referee: {exc}"
        if msg is None and r.status is not None:
            outcome = status_outcome(r.status, r.protocol_error)[0]
        reports = []
    finally:
        for run in (r, s):
            if run.status is None:
                run.finish(kill=True)
            run.release()
    err = ended_err(end, s.stderr, sem, ANSWER_BYTES)  # the rule strings in the session's stderr
    checks = [_reported_check(i, m, gone, sem, err) for i, m in enumerate(reports)]
    first = next((c for c in checks if c.outcome is not Outcome.PASS), None)
    if first is not None:
        outcome, detail = first.outcome, first.detail
    elif gone is not None:
        outcome, detail = gone
    elif outcome is Outcome.PASS and not checks:
        outcome, detail = Outcome.OTHER, "the tests ran no check"
    elif outcome is Outcome.PASS and sem.as_main:
        outcome, detail = one_file_end(end, s.status, s, sem, ANSWER_BYTES, marker,
                                       len(s.stdout) < limits.output_bytes)
    if outcome is not Outcome.PASS and (first is None) and checks:
        checks.append(Check(len(checks), "(test program)", None, outcome, detail))
    return _with_output(Grade(outcome, checks, 0.0, detail), s)


def _reported_check(i: int, msg: dict, gone: tuple[Outcome, str] | None, sem: Semantics = GLYPH,
                    err: list[str] = ()) -> Check:
    """Check ``i`` from the referee's report; under ``rules`` a failure's class also reads ``err``."""
    c = Check(i, str(msg.get("source")), msg.get("line") if type(msg.get("line")) is int else None)
    if msg.get("passed"):
        c.outcome = Outcome.PASS
    elif msg.get("gone") and gone is not None:
        c.outcome, c.detail = gone
    else:
        info = msg.get("exc") if type(msg.get("exc")) is dict else {}
        c.outcome = failure_outcome(info, sem, also=err)
        c.detail = exc_text(info) + (" (raised by the solution)" if msg.get("remote") else "")
    return c
