"""What a sandbox run executes, after the server has confined the process.

Two modes, chosen by the payload header:

``solution``
    Compiles the submitted source (a compile error is reported before any
    submitted code runs), executes it as module ``solution``, then the test
    setup code in the same namespace (as one file would), reports ``ready``,
    answers every expression of its ``probes`` blob in order (all of a
    suite's checks, sent at once: what it is asked never depends on an
    answer), then serves requests until the request pipe ends: ``eval`` (an
    expression from the tests, e.g. ``remove_Occ("hello","l")``), and for
    referee sessions ``get`` / ``call`` / ``getattr``, whose non-plain
    results stay here behind integer handles. An answer whose line would be
    longer than the header's ``answer_bytes`` is replaced by its length
    (``overcap``): the trusted side reads no longer answer. Everything this
    process says is untrusted: it may lie, but it can only send plain data
    (see ``wire``), never an object.

``referee``
    Runs a trusted test program (no submitted code is ever loaded here) in
    which every name the solution defines is a proxy: calls and attribute
    reads travel as plain data through the trusted client to a ``solution``
    session and back. No check changes what the program asks next: an
    ``assert`` records its result and never raises (an exception while
    evaluating it is its failure; its message only where it calls nothing,
    and then at every assert); ``and``/``or``/``not`` inside an assert
    evaluate every operand; ``all`` and ``any`` read their whole iterable; a
    top-level statement or ``test_*`` function that raises is recorded and
    the next one runs. When the program has ended it says ``ran``, and only
    once told ``report`` (the solution session is gone by then) does it
    describe each check (values' reprs, tracebacks) and say ``done``. Its
    reports are trusted.

One file (the header's ``as_main``, ``numbers`` and ``printed``): the PREDICT
study's semantics, ``glyph.semantics.STUDY``; what a run under them does is
``onefile``'s docstring.

Messages are JSON lines: this process writes to fd ``result_fd`` and reads
requests from ``request_fd``. Stdlib only.
"""

from __future__ import annotations

import ast
import builtins
import io
import linecache
import operator
import os
import sys
import traceback
import types

if __package__:  # imported as glyph.sandbox.runtime.worker
    from . import onefile, wire
else:  # a sibling of server.py, which is started as a script
    import onefile
    import wire

TEXT_CAP = 2000


class Channel:
    def __init__(self, result_fd: int, request_fd: int) -> None:
        self.result_fd = result_fd
        self.request_fd = request_fd
        self.buf = b""

    def send(self, msg: dict) -> None:
        self.send_line(wire.dumps(msg))

    def send_line(self, data: bytes) -> None:
        _flush_std()
        view = memoryview(data)
        while view:
            n = os.write(self.result_fd, view)
            view = view[n:]

    def recv(self) -> dict:
        while b"\n" not in self.buf:
            chunk = os.read(self.request_fd, 1 << 16)
            if not chunk:
                _exit()
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        # From the trusted client. A value it relays from the solution was decoded there, within
        # wire's bounds; its strings' escapes (\u002c) may come back as raw commas: no token bound.
        return wire.loads(line, max_tokens=None)


_STD: list = []


def _flush_std() -> None:
    for stream in _STD:
        try:
            stream.flush()
        except BaseException:  # a solution may have broken its streams; output is best effort
            pass


def _exit(code: int = 0) -> None:
    _flush_std()
    os._exit(code)


def _text(value, cap: int = TEXT_CAP) -> str:
    try:
        s = value if type(value) is str else str(value)
        s = s if type(s) is str else "<unprintable>"
    except BaseException:  # hostile __str__
        s = "<unprintable>"
    return s if len(s) <= cap else s[:cap] + f"... [{len(s) - cap} more chars]"


def exception_info(exc: BaseException) -> dict:
    """Plain facts about an exception, for classification on the trusted side:
    the nearest builtin exception class in its MRO, its own name, message and
    a truncated traceback."""
    try:
        mro = type(exc).__mro__
        base = next(c.__name__ for c in mro if c.__module__ == "builtins")
        name = type(exc).__qualname__
    except BaseException:
        base, name = "BaseException", "<unnamed>"
    try:
        tb = "".join(traceback.format_exception(exc))
    except BaseException:
        tb = ""
    info = {"type": _text(name, 200), "base": base, "msg": _text(exc), "tb": _text(tb, 4000)}
    if isinstance(exc, SyntaxError):
        info["line"] = exc.lineno if type(exc.lineno) is int else None
    return info


def _read_payload(fd: int) -> tuple[dict, dict]:
    size = os.fstat(fd).st_size + 1  # the client's memfd, written whole: one read and the EOF
    chunks = []
    while True:
        chunk = os.read(fd, size)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(fd)
    data = b"".join(chunks)
    head, _, rest = data.partition(b"\n")
    header = wire.loads(head)
    blobs, pos = {}, 0
    for name, size in header["blobs"]:
        blobs[name] = rest[pos:pos + size]
        pos += size
    return header, blobs


def main(payload_fd: int, result_fd: int, request_fd: int) -> None:
    header, blobs = _read_payload(payload_fd)
    one = onefile.Session(header, _flush_std)
    if one.as_main:
        out, err = one.streams()
    else:
        out = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding="utf-8", errors="backslashreplace")
        err = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), encoding="utf-8", errors="backslashreplace")
        sys.stdout, sys.stderr = out, err
    sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False), encoding="utf-8")
    if one.as_main:
        sys.__stdin__ = sys.stdin
    _STD[:] = [out, err]
    chan = Channel(result_fd, request_fd)
    if header["mode"] == "solution":
        _solution(header, blobs, chan, one)
    else:
        _referee(header, blobs, chan)
    _exit(0)


# ---------------------------------------------------------------- solution


def _solution(header: dict, blobs: dict, chan: Channel, one: onefile.Session) -> None:
    source, numbers, said = blobs["source"], bool(header.get("numbers")), one.said

    def failure(exc: BaseException, compiling: bool = False) -> dict:
        return one.failure(exception_info(exc), exc, compiling)

    try:
        code = compile(source, "solution.py", "exec", dont_inherit=True)
        setup = compile(blobs.get("setup", b""), "<test setup>", "exec", dont_inherit=True)
    except (SyntaxError, ValueError, MemoryError, RecursionError, OverflowError) as exc:
        info = failure(exc, compiling=True)
        info["base"] = "SyntaxError"  # null bytes raise ValueError in 3.11; still a compile failure
        chan.send({"ev": "error", "phase": "compile", "exc": info})
        return
    text = source.decode("utf-8", "replace")
    linecache.cache["solution.py"] = (len(text), None, text.splitlines(True), "solution.py")
    mod = types.ModuleType("__main__" if one.as_main else "solution")
    mod.__file__ = "solution.py"
    sys.modules["solution"] = mod
    one.load(mod)
    for phase, obj in (("load", code), ("setup", setup)):
        try:
            exec(obj, mod.__dict__)
        except BaseException as exc:  # the submitted code's failure is a result to report
            chan.send({"ev": "error", "phase": phase, "exc": failure(exc)})
            return
    chan.send({"ev": "ready"})
    cap = header.get("answer_bytes")

    def answer(rid, tree) -> None:
        line = wire.dumps(said({"ev": "ret", "id": rid, "value": tree}))
        if cap is not None and len(line) > cap:
            line = wire.dumps(said({"ev": "ret", "id": rid, "overcap": len(line)}))
        chan.send_line(line)

    ns = mod.__dict__
    probes = wire.loads(blobs["probes"], max_tokens=None)["probes"] if "probes" in blobs else None
    for rid, expr in enumerate(probes or ()):
        try:
            value = eval(compile(expr, f"<check {rid}>", "eval", dont_inherit=True), ns)
            tree = wire.encode(value, numbers=numbers)
        except wire.WireError as exc:
            chan.send(said({"ev": "ret", "id": rid, "notplain": _text(exc, 200)}))
            continue
        except BaseException as exc:  # the submitted code's failure is a result to report
            chan.send({"ev": "ret", "id": rid, "exc": failure(exc)})
            continue
        answer(rid, tree)
    if one.as_main and probes is not None:  # the run ends as the study's file did (onefile.Session.end)
        chan.send(one.end())
        _exit(0)
    handles: list = []

    def handle_of(obj) -> int:
        handles.append(obj)
        return len(handles) - 1

    def resolve(value):
        if type(value) is wire.Handle:
            return handles[value.id]
        if type(value) in (list, tuple):
            return type(value)(resolve(v) for v in value)
        return value

    def plain(tree):
        return wire.decode(tree, allow_handles=True, numbers=numbers)

    while True:
        req = chan.recv()
        op, rid = req.get("op"), req.get("id")
        if op == "exit":
            if one.as_main:
                chan.send(one.end())
            return
        try:
            if op == "eval":
                value = eval(compile(req["expr"], f"<check {rid}>", "eval", dont_inherit=True), ns)
                try:
                    tree = wire.encode(value, numbers=numbers)
                except wire.WireError as exc:
                    chan.send(said({"ev": "ret", "id": rid, "notplain": str(exc)}))
                    continue
            elif op == "get":
                value = ns[req["name"]] if req["name"] in ns else _missing(req["name"])
                tree = wire.encode(value, handle_of, numbers=numbers)
            elif op == "call":
                fn = resolve(plain(req["fn"]))
                args = [resolve(plain(a)) for a in req["args"]]
                kwargs = {k: resolve(plain(v)) for k, v in req["kwargs"]}
                tree = wire.encode(fn(*args, **kwargs), handle_of, numbers=numbers)
            elif op == "getattr":
                obj = resolve(plain(req["obj"]))
                tree = wire.encode(getattr(obj, req["name"]), handle_of, numbers=numbers)
            else:
                raise ValueError(f"unknown request {op!r}")
        except BaseException as exc:  # the submitted code's failure is a result to report
            chan.send({"ev": "ret", "id": rid, "exc": failure(exc)})
            continue
        answer(rid, tree)


def _missing(name: str):
    raise NameError(f"name {name!r} is not defined")


# ---------------------------------------------------------------- referee


class RemoteError(Exception):
    """An exception raised by solution code, re-raised in the referee."""

    info: dict = {}


_remote_classes: dict[str, type] = {}


# Exceptions that the tests' own iteration takes as its end: ``all(map(solve, cases))`` would stop,
# true, at a StopIteration raised by ``solve``. Raised by the solution, they reach the tests as a
# RuntimeError (as PEP 479 does for a generator), so the check fails with the solution's exception.
_ENDS_ITERATION = ("StopIteration", "StopAsyncIteration")


def _remote_exception(info: dict) -> BaseException:
    base = getattr(builtins, info.get("base", ""), None)
    if not (isinstance(base, type) and issubclass(base, Exception)):
        base = Exception
    if base.__name__ in _ENDS_ITERATION:
        base = RuntimeError
    cls = _remote_classes.get(base.__name__)
    if cls is None:
        try:
            cls = type(base.__name__, (base, RemoteError), {})
        except TypeError:
            cls = type(base.__name__, (RemoteError,), {})
        _remote_classes[base.__name__] = cls
    exc = cls(f"{info.get('type')}: {info.get('msg')}")
    exc.info = info
    return exc


class SessionGone(BaseException):
    """The solution session ended under a call (its limits, its channel): the
    program stops there. A BaseException, so that no check takes it for
    the solution's own error."""


class RPC:
    def __init__(self, chan: Channel, numbers: bool = False) -> None:
        self.chan = chan
        self.n = 0
        self.numbers = numbers

    def request(self, op: str, **fields):
        self.n += 1
        self.chan.send({"ev": "rpc", "op": op, "id": self.n, **fields})
        resp = self.chan.recv()
        if resp.get("gone"):
            raise SessionGone()
        if "exc" in resp:
            raise _remote_exception(resp["exc"])
        return self.wrap(wire.decode(resp["value"], allow_handles=True, numbers=self.numbers))

    def wrap(self, value):
        if type(value) is wire.Handle:
            return Remote(self, value)
        if type(value) in (list, tuple):
            return type(value)(self.wrap(v) for v in value)
        if type(value) is dict:
            return {k: self.wrap(v) for k, v in value.items()}
        return value

    def encode(self, value):
        try:
            return wire.encode(value, _no_local_objects, numbers=self.numbers)
        except wire.WireError as exc:
            raise TypeError(f"the tests passed a non-plain value to the solution: {exc}") from None


def _no_local_objects(obj) -> int:
    if type(obj) is Remote:
        return object.__getattribute__(obj, "_handle").id
    raise wire.WireError(f"value of type {type(obj).__name__} cannot be sent to the solution")


class Remote:
    """An object that lives in the solution session. Calls and attribute reads
    are forwarded; nothing else is (its comparisons are by identity: the
    solution never decides whether a check passes)."""

    __slots__ = ("_rpc", "_handle")

    def __init__(self, rpc: RPC, handle: wire.Handle) -> None:
        object.__setattr__(self, "_rpc", rpc)
        object.__setattr__(self, "_handle", handle)

    def __call__(self, *args, **kwargs):
        rpc = object.__getattribute__(self, "_rpc")
        handle = object.__getattribute__(self, "_handle")
        return rpc.request("call", fn={"h": handle.id}, args=[rpc.encode(a) for a in args],
                           kwargs=[[k, rpc.encode(v)] for k, v in kwargs.items()])

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        rpc = object.__getattribute__(self, "_rpc")
        handle = object.__getattribute__(self, "_handle")
        return rpc.request("getattr", obj={"h": handle.id}, name=name)

    def __repr__(self) -> str:
        return repr(object.__getattribute__(self, "_handle"))


def _contains_check(node: ast.AST) -> bool:
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, ast.Assert):
            return True
        if not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            stack.extend(ast.iter_child_nodes(n))
    return False


_OPS = {ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=",
        ast.Is: "is", ast.IsNot: "is not", ast.In: "in", ast.NotIn: "not in"}
_OP_FNS = {"==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le, ">": operator.gt,
           ">=": operator.ge, "is": operator.is_, "is not": operator.is_not,
           "in": lambda a, b: a in b, "not in": lambda a, b: a not in b}
_NO_THUNK = (ast.NamedExpr, ast.Yield, ast.YieldFrom, ast.Await)  # a lambda would change what these mean


def _name(name: str) -> ast.Name:
    return ast.Name(name, ast.Load())


def _thunk(node: ast.expr) -> ast.Lambda:
    args = ast.arguments(posonlyargs=[], args=[], vararg=None, kwonlyargs=[], kw_defaults=[], kwarg=None,
                         defaults=[])
    return ast.Lambda(args, node)


def _thunkable(node: ast.AST) -> bool:
    for n in ast.walk(node):
        if isinstance(n, _NO_THUNK):
            return False
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "super" and not n.args:
            return False
    return True


class _Blind(ast.NodeTransformer):
    """The test program made blind to its own checks' results, where that
    keeps its meaning: each ``assert`` becomes a call that records the
    check and returns (``assert A op B``: both sides, then the comparison;
    any other: its truth), inside a ``try`` whose handler records an
    exception raised evaluating it as the check's failure; its message is
    evaluated at every assert where it calls nothing, else never (it could
    call the solution only when the check fails).
    ``and``, ``or`` and ``x if c else y`` evaluate every operand (each in a
    lambda; an exception of one the short circuit would have skipped is
    dropped) and then take the value Python would; not where a lambda
    would change the meaning (a walrus, ``yield``, ``await``, a bare
    ``super()``, a class body's own scope)."""

    def visit_ClassDef(self, node: ast.ClassDef) -> ast.ClassDef:
        kept = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Assert)
        node.body = [self.visit(n) if isinstance(n, kept) else n for n in node.body]
        return node

    def visit_Assert(self, node: ast.Assert) -> ast.Try:
        test = self.visit(node.test)
        line = ast.Constant(node.lineno)
        # A message that can call nothing (no call, no attribute read: no request to the solution) is
        # evaluated at every assert, passed or failed (an exception it raises is dropped); any other
        # is never evaluated: it could reach the solution only when the check fails.
        msg = ast.Call(_name("__glyph_message__"), [_thunk(node.msg)], []) if node.msg is not None \
            and _calls_nothing(node.msg) else ast.Constant(None)
        if isinstance(test, ast.Compare) and len(test.ops) == 1 and type(test.ops[0]) in _OPS:
            args = [test.left, ast.Constant(_OPS[type(test.ops[0])]), test.comparators[0], line, msg]
            call = ast.Call(_name("__glyph_compare__"), args, [])
        else:
            call = ast.Call(_name("__glyph_truth__"), [test, line, msg], [])
        record = ast.Expr(ast.Call(_name("__glyph_raised__"), [_name("__glyph_exc__"), line], []))
        handler = ast.ExceptHandler(_name("__glyph_Exception__"), "__glyph_exc__", [record])
        return ast.copy_location(ast.Try([ast.Expr(call)], [handler], [], []), node)

    def visit_BoolOp(self, node: ast.BoolOp) -> ast.expr:
        self.generic_visit(node)
        if not _thunkable(node):
            return node
        args = [ast.Constant(isinstance(node.op, ast.And))] + [_thunk(v) for v in node.values]
        return ast.copy_location(ast.Call(_name("__glyph_boolop__"), args, []), node)

    def visit_IfExp(self, node: ast.IfExp) -> ast.expr:
        self.generic_visit(node)
        if not _thunkable(node):
            return node
        args = [_thunk(node.test), _thunk(node.body), _thunk(node.orelse)]
        return ast.copy_location(ast.Call(_name("__glyph_ifexp__"), args, []), node)


def _calls_nothing(node: ast.AST) -> bool:
    return _thunkable(node) and not any(isinstance(n, (ast.Call, ast.Attribute)) for n in ast.walk(node))


class _NoMessage:
    """A message that raised (a test's own name it lacks): the check is told as if it had none."""


def _message(thunk):
    try:
        return thunk()
    except Exception:  # dropped, as Python would never have evaluated it on a pass
        return _NoMessage


def _settle(thunks) -> list:
    """Each thunk's (True, value) or (False, exception)."""
    out = []
    for thunk in thunks:
        try:
            out.append((True, thunk()))
        except Exception as exc:  # kept: raised only if the short circuit would have reached it
            out.append((False, exc))
    return out


def _boolop(is_and: bool, *thunks):
    """``a and b and ...`` (or ``or``) with every operand evaluated."""
    settled = _settle(thunks)
    for ok, value in settled[:-1]:
        if not ok:
            raise value
        if bool(value) is not is_and:
            return value
    ok, value = settled[-1]
    if not ok:
        raise value
    return value


def _ifexp(test, body, orelse):
    """``body() if test() else orelse()`` with all three evaluated."""
    (t_ok, t), (b_ok, b), (o_ok, o) = _settle((test, body, orelse))
    if not t_ok:
        raise t
    ok, value = (b_ok, b) if t else (o_ok, o)
    if not ok:
        raise value
    return value


def _exhaust(iterable, decide) -> bool | None:
    """Read the whole of ``iterable``; the first item for which ``decide``
    is true, as ``all`` or ``any`` would stop at it: True if there was one.
    An exception before that item is raised; one after it is dropped."""
    found = False
    it = iter(iterable)
    while True:
        try:
            item = next(it)
        except StopIteration:
            return found
        except Exception:
            if not found:
                raise
            continue
        if not found and decide(item):
            found = True


def _all(iterable) -> bool:
    """``all``, reading the whole iterable (``_exhaust``)."""
    return not _exhaust(iterable, lambda item: not item)


def _any(iterable) -> bool:
    """``any``, reading the whole iterable (``_exhaust``)."""
    return _exhaust(iterable, bool)


class Checks:
    """The checks of the program's current unit (a top-level statement or a
    ``test_*`` function): its first failure, kept as found (values,
    exception) and described only at ``report``."""

    def __init__(self) -> None:
        self.failure: tuple | None = None

    def compare(self, left, op: str, right, line: int, msg=None) -> None:
        if not _OP_FNS[op](left, right) and self.failure is None:
            self.failure = ("compare", line, left, op, right, msg)

    def truth(self, value, line: int, msg=None) -> None:
        if not value and self.failure is None:
            self.failure = ("truth", line, msg)

    def raised(self, exc: BaseException, line: int) -> None:
        if self.failure is None:
            self.failure = ("raised", line, exc)


def _failure_info(failure: tuple, needles=(), source: str = "") -> tuple[dict, bool]:
    """(exception facts, raised by the solution) of a unit's first failure. ``needles``
    (``printed``): the facts also say which of them the study's file would have printed for it
    (a traceback through the unit's ``source``; an exception of the solution's adds what its
    session found in its own part of that traceback and its stderr)."""
    kind = failure[0]
    if kind in ("compare", "truth"):
        given = failure[-1]
        if given is not None and given is not _NoMessage:  # the assert's own message, as Python shows it
            msg = _text(given)
        elif kind == "compare":
            _, _, left, op, right, _ = failure
            msg = f"got {_text(_repr(left), 300)}, expected {op} {_text(_repr(right), 300)}"
        else:
            msg = ""
        info, remote = {"type": "AssertionError", "base": "AssertionError", "msg": msg, "tb": ""}, False
        own = "" if given is None or given is _NoMessage else f": {_text(given, 1 << 20)}"
        shown = f"AssertionError{own}\n"
    else:
        exc = failure[2]
        remote = isinstance(exc, RemoteError)
        info = dict(exc.info) if remote else exception_info(exc)
        shown = "" if remote else onefile.printed(exc)
    if needles:  # no traceback where the solution's SystemExit ended the study's file
        traced = not remote or info.get("traceback") is not False
        text = f"Traceback (most recent call last):\n{source}\n{shown}" if traced else ""
        theirs = info.get("printed") if remote and type(info.get("printed")) is list else []
        info["printed"] = sorted({n for n in needles if n in text} | {n for n in theirs if n in needles})
    return info, remote


def _repr(value) -> str:
    try:
        return repr(value)
    except BaseException:  # an int past the digit limit, a hostile object's repr
        return "<unrepresentable>"


def _referee(header: dict, blobs: dict, chan: Channel) -> None:
    program = blobs["program"].decode("utf-8")
    needles = tuple(header.get("printed") or ())
    rpc = RPC(chan, bool(header.get("numbers")))
    checks = Checks()
    ns: dict = {"__name__": "__glyph_tests__", "__builtins__": builtins, "__glyph_compare__": checks.compare,
                "__glyph_truth__": checks.truth, "__glyph_raised__": checks.raised,
                "__glyph_Exception__": Exception, "__glyph_boolop__": _boolop, "__glyph_ifexp__": _ifexp,
                "__glyph_message__": _message,
                "all": _all, "any": _any}
    for name in header.get("stdlib", []):
        ns[name] = __import__(name)

    class SolutionModule(types.ModuleType):
        def __getattr__(self, name: str):
            if name.startswith("__"):
                raise AttributeError(name)
            try:
                return rpc.request("get", name=name)
            except RemoteError as exc:
                if exc.info.get("base") == "NameError":  # as a real module: ImportError on import
                    raise AttributeError(f"module 'solution' has no attribute {name!r}") from None
                raise

    sys.modules["solution"] = SolutionModule("solution")
    tree = ast.parse(program, "<tests>")
    has_check = [_contains_check(node) for node in tree.body]
    tree = ast.fix_missing_locations(_Blind().visit(tree))
    lines = program.splitlines()
    units: list[tuple[ast.AST, str | None, tuple | None]] = []  # (node, test function name, first failure)

    def run(node: ast.AST, name: str | None, call, check: bool) -> bool:
        """Run one unit; False once the solution session is gone."""
        checks.failure = None
        gone = False
        try:
            call()
        except SessionGone:
            gone = True
            checks.raised(SessionGone(), node.lineno)
        except BaseException as exc:  # a unit that raises is a failed check; the next unit runs all the same
            checks.raised(exc, node.lineno)
        if check or checks.failure is not None:
            units.append((node, name, checks.failure))
        return not gone

    going = True
    for name in header.get("names", []):
        try:
            ns[name] = rpc.request("get", name=name)
        except RemoteError:
            pass  # the solution lacks it: the test gets a NameError where it uses it
        except SessionGone:
            going = False
            break
    for node, check in zip(tree.body, has_check):
        if not going:
            break
        code = compile(ast.Module(body=[node], type_ignores=[]), "<tests>", "exec")
        going = run(node, None, lambda code=code: exec(code, ns), check)
    tests = [node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name.startswith("test")]
    for node in tests if going else ():
        if not run(node, node.name, lambda name=node.name: ns[name](), True):
            break
    chan.send({"ev": "ran"})
    chan.recv()  # "report": the solution session is gone (or the request pipe's end: _exit)
    for node, name, failure in units:
        source = "\n".join(lines[node.lineno - 1:node.end_lineno])
        msg = {"ev": "check", "line": node.lineno, "passed": failure is None,
               "source": _text(name or source, 500)}
        if failure is not None:
            if isinstance(failure[-1], SessionGone):
                msg["gone"] = True
            else:
                msg["exc"], msg["remote"] = _failure_info(failure, needles, source)
        chan.send(msg)
    chan.send({"ev": "done"})
