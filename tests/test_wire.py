import collections
import json
import random

import pytest

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
