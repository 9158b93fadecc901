import collections
import json
import random
import re
import subprocess
import sys
import time
import tracemalloc

import pytest

from glyph.grading import ANSWER_BYTES
from glyph.redteam import DEMO_SOLUTION, attack, wire_bomb
from glyph.sandbox.runtime import wire

PLAIN = [None, True, False, 0, -1, 10 ** 5000, 1.5, float("inf"), -0.0, 3 + 4j, "", "héllo\udcff", b"\x00\xff",
         (), (1, (2, [3])), [1, "a", None], {"k": [1, 2], (1, 2): frozenset({1})}, {1, 2, "x"}, frozenset()]


@pytest.mark.parametrize("value", PLAIN, ids=lambda v: type(v).__name__)
def test_plain_values_round_trip_with_exact_types(value):
    back = wire.decode(json.loads(json.dumps(wire.encode(value))))
    assert back == value and type(back) is type(value)


def test_nan_round_trips_as_a_float():
    back = wire.decode(wire.encode(float("nan")))
    assert type(back) is float and back != back


class Sub(str):
    def __eq__(self, other):
        return True

    __hash__ = str.__hash__


class Obj:
    pass


@pytest.mark.parametrize("value", [Sub("x"), Obj(), [1, Obj()], {"a": Sub("b")}, True.__class__, print,
                                   bytearray(b"x"), range(3), collections.deque([1])])
def test_non_plain_values_are_rejected_with_the_type(value):
    with pytest.raises(wire.WireError, match="not plain data"):
        wire.encode(value)


def test_stdlib_content_compared_containers_become_their_base_type():
    Point = collections.namedtuple("Point", "x y")
    counter = wire.decode(wire.encode(collections.Counter("aab")))
    assert type(counter) is dict and counter == {"a": 2, "b": 1}
    assert type(wire.decode(wire.encode(collections.defaultdict(list, {1: [2]})))) is dict
    point = wire.decode(wire.encode(Point(1, 2)))
    assert type(point) is tuple and point == (1, 2)


def test_a_lying_dict_subclass_is_not_converted():
    class Liar(dict):
        def items(self):
            return [("k", "forged")]
    with pytest.raises(wire.WireError):
        wire.encode(Liar(k="real"))


def test_depth_is_bounded_both_ways():
    v = []
    for _ in range(wire.MAX_DEPTH + 5):
        v = [v]
    with pytest.raises(wire.WireError, match="deeper"):
        wire.encode(v)
    tree = []
    for _ in range(wire.MAX_DEPTH + 5):
        tree = [tree]
    with pytest.raises(wire.WireError, match="deeper"):
        wire.decode(tree)


@pytest.mark.parametrize("tree", [{"x": 1}, {"i": 5}, {"i": "zz"}, {"f": 1.0}, {"s": [[1]]}, {"d": [[[1], 2]]},
                                  {"d": [[1]]}, {"h": 3}, {"i": "0x1", "t": []}, {"b": "!!"}, 1, 1.5])
def test_malformed_trees_raise_wire_error(tree):
    with pytest.raises(wire.WireError):
        wire.decode(tree)


def test_handles_only_where_allowed():
    assert isinstance(wire.decode({"h": 3, "n": "Node"}, allow_handles=True), wire.Handle)
    with pytest.raises(wire.WireError):
        wire.decode({"h": 3})


def test_random_json_never_decodes_to_a_non_plain_type():
    rng = random.Random(0)
    tags = ["i", "f", "c", "b", "t", "s", "z", "d", "h", "n", "x"]

    def junk(depth=0):
        r = rng.random()
        if depth > 4 or r < 0.3:
            return rng.choice([None, True, 1, -2.5, "0x10", "abc", "AAAA", []])
        if r < 0.6:
            return [junk(depth + 1) for _ in range(rng.randint(0, 3))]
        return {rng.choice(tags): junk(depth + 1) for _ in range(rng.randint(1, 2))}

    allowed = {type(None), bool, int, float, complex, str, bytes, tuple, list, dict, set, frozenset}

    def check(v):
        assert type(v) in allowed
        if type(v) in (list, tuple, set, frozenset):
            for x in v:
                check(x)
        if type(v) is dict:
            for k, x in v.items():
                check(k)
                check(x)

    for _ in range(5000):
        try:
            check(wire.decode(junk()))
        except wire.WireError:
            pass


# ---------------------------------------------------------------- bounds: the sender may write any bytes

M = 2 ** 61 - 1  # sys.hash_info.modulus: hash(k * M) == 0 for every int k


def ints(values):
    return [{"i": hex(v)} for v in values]


def test_the_node_budget_is_over_the_whole_tree():
    wire.decode([None] * (wire.MAX_NODES - 1))  # the list and its items: just the budget
    with pytest.raises(wire.WireError, match=r"more than \d+ values \(wire.MAX_NODES\)"):
        wire.decode([None] * wire.MAX_NODES)
    half = [[None] * (wire.MAX_NODES // 2)]
    with pytest.raises(wire.WireError, match="MAX_NODES"):  # spread over siblings, still counted once
        wire.decode({"t": half + half})


def test_the_depth_error_names_the_bound():
    tree = None
    for _ in range(wire.MAX_DEPTH + 1):
        tree = [tree]
    with pytest.raises(wire.WireError, match=r"MAX_DEPTH"):
        wire.decode(tree)


@pytest.mark.parametrize("tree", [["x" * wire.MAX_DATA, "y"], {"i": "1" * (wire.MAX_DATA + 1)},
                                  {"b": "A" * (wire.MAX_DATA + 4)},
                                  {"f": "0x1." + "0" * wire.MAX_DATA + "p0"},
                                  {"h": 1, "n": "N" * (wire.MAX_DATA + 1)}])
def test_the_data_budget_covers_str_bytes_numbers_and_handle_names(tree):
    with pytest.raises(wire.WireError, match=r"characters of str, bytes and number data \(wire.MAX_DATA\)"):
        wire.decode(tree, allow_handles=True)


def test_data_just_under_the_budget_decodes():
    assert len(wire.decode(["x" * (wire.MAX_DATA - 8), {"i": "0xff"}])[0]) == wire.MAX_DATA - 8
    assert wire.decode({"i": "f" * (wire.MAX_DATA // 2)}) == 16 ** (wire.MAX_DATA // 2) - 1


def test_a_handle_name_must_be_a_str():
    with pytest.raises(wire.WireError):
        wire.decode({"h": 1, "n": [[]] * 10}, allow_handles=True)


COLLIDING = {  # MAX_SAME_HASH + 1 distinct items with one hash, each kind
    "ints": lambda n: ints(k * M for k in range(1, n + 1)),
    "negative ints": lambda n: ints(-k * M for k in range(1, n + 1)),
    "complex": lambda n: [{"c": [float(-1000003 * k).hex(), float(k).hex()]} for k in range(1, n + 1)],
    "tuples": lambda n: [{"t": ints([k * M])} for k in range(1, n + 1)],
    "frozensets": lambda n: [{"z": ints([k * M])} for k in range(1, n + 1)],
}


@pytest.mark.parametrize("kind", COLLIDING)
@pytest.mark.parametrize("tag", ["s", "z", "d"])
def test_more_than_a_few_items_sharing_a_hash_are_refused(kind, tag):
    n = wire.MAX_SAME_HASH
    items = COLLIDING[kind](n + 1)
    assert len({hash(v) for v in wire.decode(items)}) == 1
    wrap = (lambda xs: {"d": [[x, None] for x in xs]}) if tag == "d" else (lambda xs: {tag: xs})
    assert len(wire.decode(wrap(items[:n]))) == n  # just under the bound: decodes
    match = r"more than \d+ (items of one set|keys of one dict) share a hash \(wire.MAX_SAME_HASH\)"
    with pytest.raises(wire.WireError, match=match):
        wire.decode(wrap(items))


def test_honest_equal_hashes_decode():
    assert wire.decode({"s": ints([0, M, -1, -2])}) == {0, M, -1, -2}  # 0 ~ M and -1 ~ -2 share a hash
    assert wire.decode({"s": ints(range(10_000))}) == set(range(10_000))


def test_a_hash_collision_bomb_is_refused_in_seconds():
    # 100,000 colliding ints: building the set took minutes (each one compared with every earlier one)
    tree = {"ev": "ret", "id": 0, "value": {"s": ints(k * M for k in range(1, 100_001))}}
    t0 = time.perf_counter()
    with pytest.raises(wire.WireError, match="MAX_SAME_HASH"):
        wire.decode(wire.loads(json.dumps(tree))["value"])
    assert time.perf_counter() - t0 < 2


def test_loads_counts_tokens_before_parsing():
    ok = b'{"v":[' + b"[]," * (wire.MAX_TOKENS // 2 - 2) + b"[]]}"
    assert len(wire.loads(ok)["v"]) == wire.MAX_TOKENS // 2 - 1
    bomb = b'{"v":[' + b"[]," * (wire.MAX_TOKENS // 2) + b"[]]}"
    with pytest.raises(wire.WireError, match=r"more than \d+ JSON tokens \(wire.MAX_TOKENS\)"):
        wire.loads(bomb)
    with pytest.raises(wire.WireError, match="MAX_TOKENS"):
        wire.loads(bomb.decode())
    with pytest.raises(wire.WireError, match="MAX_TOKENS"):  # UTF-16 and UTF-32, as json.loads reads them
        wire.loads(bomb.decode().encode("utf-32"))
    assert len(wire.loads(bomb, max_tokens=None)["v"]) == wire.MAX_TOKENS // 2 + 1
    with pytest.raises(wire.WireError, match="not JSON"):  # nesting under the token bound: RecursionError
        wire.loads(b'{"v":' + b"[" * 100_000 + b"]" * 100_000 + b"}")


WORST = {  # the largest decoded value per value of the tree, at the node budget
    "empty sets": lambda n: [{"s": []}] * (n - 1),
    "a set of ints": lambda n: {"s": ints(range(10 ** 6, 10 ** 6 + n - 1))},
    "dicts of one item": lambda n: [{"d": [ints([k, k])]} for k in range(10 ** 6, 10 ** 6 + (n - 1) // 3)],
}


@pytest.mark.parametrize("shape", WORST)
def test_a_decoded_value_stays_under_the_documented_bound(shape):
    tree = WORST[shape](wire.MAX_NODES)
    tracemalloc.start()
    try:
        value = wire.decode(tree)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert value and peak < wire.BYTES_PER_VALUE * wire.MAX_NODES


# ---------------------------------------------------------------- bombs through the real sandbox

GRADE_ONE = r'''
import json, sys, time
from glyph.grading import grade
from glyph.redteam import DEMO_TESTS, REFEREE_TESTS
from glyph.sandbox import Limits, Sandbox
source, referee = json.loads(sys.stdin.read())

def high_water_kb():  # since this process's exec: ru_maxrss keeps the parent's (pytest's) from before it
    return next(int(x.split()[1]) for x in open("/proc/self/status") if x.startswith("VmHWM:"))

sb = Sandbox(pool=0)
sb.protections()
grade("def remove_first_last(s, ch): return s", "", DEMO_TESTS, sandbox=sb)  # warm: the honest baseline
before = high_water_kb()
t0 = time.perf_counter()
g = grade(source, "", REFEREE_TESTS if referee else DEMO_TESTS, limits=Limits(cpu_s=2, wall_s=4), sandbox=sb)
print(json.dumps({"outcome": g.outcome.value, "path": g.path, "detail": g.detail,
                  "seconds": time.perf_counter() - t0,
                  "grew_kb": high_water_kb() - before}))
sb.close()
'''
NEAR_CAP = wire_bomb(f'return [{{"s": []}}] * {(ANSWER_BYTES - 64) // 9}')  # under the answer cap: judged
TRAILING = DEMO_SOLUTION + """
import sys
worker, wire = sys.modules["worker"], sys.modules["wire"]
send, junk = worker.Channel.send_line, b'{"ev":"x","v":[' + b"[]," * (wire.MAX_TOKENS // 2 - 8) + b'[]]}\\n'
worker.Channel.send_line = lambda self, line: send(self, line + junk * 20 if b'"id":2' in line else line)
"""  # right, then 15 MB of messages while the grader waits for the run to end: not parsed
OVER_CAP = "an answer of [0-9]+ bytes, over the answer cap"
BOMBS = {  # source, referee path, the grade's outcome, what its detail says
    **{a.name: (a.source, a.referee, "OTHER", why) for a, why in (
        (attack("wire_hash_collision_set"), OVER_CAP),
        (attack("wire_hash_collision_dict"), OVER_CAP),
        (attack("wire_node_bomb"), OVER_CAP),
        (attack("wire_relay_bomb"), OVER_CAP))},
    "near_cap_fast": (NEAR_CAP, False, "ASSERTION_FAILURE", r"got \[set\(\), set\(\)"),
    "near_cap_referee": (NEAR_CAP, True, "ASSERTION_FAILURE", r"AssertionError: got \[set\(\), set\(\)"),
    "trailing_messages": (TRAILING, False, "PASS", "^$"),
}


@pytest.mark.parametrize("name", BOMBS)
def test_a_bomb_on_the_result_channel_is_refused_fast_and_small(name):
    """Graded in a fresh grader process each: its peak RSS is a high-water mark."""
    source, referee, outcome, detail = BOMBS[name]
    p = subprocess.run([sys.executable, "-c", GRADE_ONE], input=json.dumps([source, referee]), text=True,
                       capture_output=True, timeout=120, check=False)
    assert p.returncode == 0, p.stderr[-2000:]
    g = json.loads(p.stdout.splitlines()[-1])
    assert (g["path"], g["outcome"]) == ("referee" if referee else "fast", outcome), g["detail"]
    assert re.search(detail, g["detail"]), g["detail"]
    assert g["seconds"] < 10
    assert g["grew_kb"] < 128 * 1024, f"the grader grew by {g['grew_kb'] // 1024} MiB"
