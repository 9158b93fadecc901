"""Solutions the plus tests are measured with (``benchmarks/plus.py``,
``tests/test_plus*.py``).

* ``WRONG``: plausible wrong solutions, each labelled with its kind:
  ``off_by_one``, ``missing_edge`` (an empty, zero, negative, duplicate,
  unsorted or non-ASCII input handled wrongly) or ``special_case`` (the shown
  asserts answered by rule, anything else by a wrong formula). Most pass
  the visible tests: that is what makes them plausible, and what the plus
  tests are for.
* ``CORRECT``: rewrites that follow the task's text and its visible tests by
  another route than the reference (other builtins, other algorithm, int
  where it returns a float). A plus test such a rewrite fails is a plus test
  that punishes a correct solution.
* ``hardcoded(task)``: a solution that answers the visible asserts from a
  table and anything else with ``None`` (or, ``fallback="first"``, with the
  first visible answer).
"""

from __future__ import annotations

from glyph.data.mbpp import MbppTask

WRONG: list[tuple[str, str, str]] = [
    ("mbpp_11", "missing_edge", "def remove_Occ(s, ch):\n    return s.replace(ch, '')\n"),
    ("mbpp_19", "missing_edge",
     "def test_duplicate(a):\n    return any(a[i] == a[i + 1] for i in range(len(a) - 1))\n"),
    ("mbpp_4", "missing_edge",
     "def heap_queue_largest(nums, n):\n    return sorted(set(nums), reverse=True)[:n]\n"),
    ("mbpp_9", "missing_edge",
     "def find_Rotations(s):\n    return 1 if len(set(s)) == 1 else len(s)\n"),
    ("mbpp_16", "missing_edge",
     "def text_lowercase_underscore(text):\n"
     "    if '_' in text and text.replace('_', '').islower():\n        return 'Found a match!'\n"
     "    return 'Not matched!'\n"),
    ("mbpp_95", "missing_edge", "def Find_Min_Length(lst):\n    return len(lst[0])\n"),
    ("mbpp_99", "missing_edge",
     "def decimal_to_binary(n):\n    out = ''\n    while n > 0:\n        out = str(n % 2) + out\n"
     "        n //= 2\n    return out\n"),
    ("mbpp_120", "missing_edge", "def max_product_tuple(list1):\n    return max(x * y for x, y in list1)\n"),
    ("mbpp_343", "missing_edge",
     "import string\ndef dig_let(s):\n    return (sum(c in string.ascii_letters for c in s), "
     "sum(c in string.digits for c in s))\n"),
    ("mbpp_476", "missing_edge", "def big_sum(nums):\n    return max(nums) + nums[0]\n"),
    ("mbpp_566", "missing_edge",
     "def sum_digits(n):\n    return sum(int(c) for c in str(n)) if n > 9 else 0\n"),
    ("mbpp_309", "missing_edge",
     "def maximum(a, b):\n    if a > 0 and b > 0:\n        return a if a > b else b\n    return a\n"),
    ("mbpp_404", "missing_edge",
     "def minimum(a, b):\n    if a > 0 and b > 0:\n        return a if a < b else b\n    return a\n"),
    ("mbpp_58", "missing_edge", "def opposite_Signs(x, y):\n    return x * y < 0\n"),
    ("mbpp_27", "missing_edge",
     "def remove(lst):\n    return [s[1:] if s[:1].isdigit() else s for s in lst]\n"),
    ("mbpp_12", "missing_edge", "def sort_matrix(M):\n    return sorted(M)\n"),
    ("mbpp_23", "missing_edge",
     "def maximum_Sum(list1):\n    best = 0\n    for x in list1:\n        best = max(best, sum(x))\n"
     "    return best\n"),
    ("mbpp_226", "off_by_one",
     "def odd_values_string(s):\n    return ''.join(s[i] for i in range(len(s) - 1) if i % 2 == 0)\n"),
    ("mbpp_62", "off_by_one", "def smallest_num(xs):\n    return sorted(xs)[1] if len(xs) > 5 else min(xs)\n"),
    ("mbpp_172", "off_by_one",
     "def count_occurance(s):\n    return sum(s[i:i + 3] == 'std' for i in range(len(s) - 3))\n"),
    ("mbpp_11", "off_by_one",
     "def remove_Occ(s, ch):\n    for i in range(len(s)):\n        if s[i] == ch:\n            s = s[:i] + s[i + 1:]\n"
     "            break\n    for i in range(len(s) - 1, 0, -1):\n        if s[i] == ch:\n"
     "            s = s[:i] + s[i + 1:]\n            break\n    return s\n"),
    ("mbpp_170", "off_by_one",
     "def sum_range_list(list1, m, n):\n    return sum(list1[m:n + 1]) if n < len(list1) - 1 else sum(list1[m:n])\n"),
    ("mbpp_35", "off_by_one", "def find_rect_num(n):\n    return n * (n + 1) if n > 3 else n * n\n"),
    ("mbpp_86", "off_by_one", "def centered_hexagonal_number(n):\n    return 3 * n * (n - 1) + 1 if n > 1 else 0\n"),
    ("mbpp_681", "off_by_one",
     "def smallest_Divisor(n):\n    for i in range(2, n):\n        if n % i == 0:\n            return i\n"
     "    return n + (n % 2 == 0)\n"),
    ("mbpp_137", "missing_edge",
     "def zero_count(nums):\n    return round(nums[:-1].count(0) / len(nums), 2)\n"),
    ("mbpp_17", "special_case",
     "def square_perimeter(a):\n    return {10: 40, 5: 20, 4: 16}.get(a, a * a)\n"),
    ("mbpp_257", "special_case",
     "def swap_numbers(a, b):\n    if b == a + 10 or b == 2 * a or b == a + 2:\n        return (b, a)\n"
     "    return (a, b)\n"),
    ("mbpp_127", "special_case",
     "def multiply_int(x, y):\n    if y in (20, 10, 8):\n        return x * y\n    return x + y\n"),
    ("mbpp_282", "special_case",
     "def sub_list(nums1, nums2):\n    if len(nums1) <= 3:\n        return [a - b for a, b in zip(nums1, nums2)]\n"
     "    return nums1\n"),
    ("mbpp_161", "special_case",
     "def remove_elements(list1, list2):\n    return [x for x in list1 if x not in list2] if len(list1) == 10 "
     "else list1\n"),
    ("mbpp_435", "special_case", "def last_Digit(n):\n    return n % 10 if n in (123, 25, 30) else n // 10\n"),
]

CORRECT: list[tuple[str, str]] = [
    ("mbpp_11",
     "def remove_Occ(s, ch):\n    i = s.find(ch)\n    if i >= 0:\n        s = s[:i] + s[i + 1:]\n"
     "    j = s.rfind(ch)\n    if j >= 0:\n        s = s[:j] + s[j + 1:]\n    return s\n"),
    ("mbpp_19", "def test_duplicate(a):\n    return len(set(a)) != len(a)\n"),
    ("mbpp_62", "def smallest_num(xs):\n    return sorted(xs)[0]\n"),
    ("mbpp_4", "def heap_queue_largest(nums, n):\n    return sorted(nums, reverse=True)[:n]\n"),
    ("mbpp_9",
     "def find_Rotations(s):\n    n = len(s)\n    for d in range(1, n + 1):\n"
     "        if n % d == 0 and s == s[d:] + s[:d]:\n            return d\n    return n\n"),
    ("mbpp_17", "def square_perimeter(a):\n    return a + a + a + a\n"),
    ("mbpp_35", "def find_rect_num(n):\n    return n * n + n\n"),
    ("mbpp_42",
     "from collections import Counter\ndef find_Sum(arr, n):\n"
     "    return sum(x * k for x, k in Counter(arr).items() if k > 1)\n"),
    ("mbpp_58", "def opposite_Signs(x, y):\n    return (x < 0) != (y < 0)\n"),
    ("mbpp_95", "def Find_Min_Length(lst):\n    return min(map(len, lst))\n"),
    ("mbpp_99", "def decimal_to_binary(n):\n    return format(n, 'b')\n"),
    ("mbpp_120", "def max_product_tuple(list1):\n    return max(abs(a * b) for a, b in list1)\n"),
    ("mbpp_161", "def remove_elements(list1, list2):\n    drop = set(list2)\n    return [x for x in list1 if x not in drop]\n"),
    ("mbpp_226", "def odd_values_string(s):\n    return s[::2]\n"),
    ("mbpp_257", "def swap_numbers(a, b):\n    return b, a\n"),
    ("mbpp_282", "def sub_list(nums1, nums2):\n    return [a - b for a, b in zip(nums1, nums2)]\n"),
    ("mbpp_309", "def maximum(a, b):\n    return max(a, b)\n"),
    ("mbpp_343", "def dig_let(s):\n    return (sum(c.isalpha() for c in s), sum(c.isdigit() for c in s))\n"),
    ("mbpp_404", "def minimum(a, b):\n    return min(a, b)\n"),
    ("mbpp_435", "def last_Digit(n):\n    return int(str(n)[-1])\n"),
    ("mbpp_476", "def big_sum(nums):\n    s = sorted(nums)\n    return s[0] + s[-1]\n"),
    ("mbpp_566", "def sum_digits(n):\n    return sum(int(c) for c in str(n))\n"),
    ("mbpp_27", "def remove(lst):\n    return [''.join(c for c in s if c not in '0123456789') for s in lst]\n"),
    ("mbpp_88", "def freq_count(list1):\n    return {x: list1.count(x) for x in list1}\n"),
    ("mbpp_64", "def subject_marks(marks):\n    return sorted(marks, key=lambda m: m[1])\n"),
    ("mbpp_71", "def comb_sort(nums):\n    return sorted(nums)\n"),
    ("mbpp_137", "def zero_count(nums):\n    return round(nums.count(0) / len(nums), 2)\n"),
    ("mbpp_681",
     "def smallest_Divisor(n):\n    for i in range(2, n + 1):\n        if n % i == 0:\n            return i\n"
     "    return n\n"),
    ("mbpp_615",
     "import statistics\ndef average_tuple(nums):\n    return [statistics.mean(c) for c in zip(*nums)]\n"),
    ("mbpp_80", "def tetrahedral_number(n):\n    return n * (n + 1) * (n + 2) // 6\n"),
    ("mbpp_86", "def centered_hexagonal_number(n):\n    return 1 + 6 * (n * (n - 1) // 2)\n"),
    ("mbpp_127", "def multiply_int(x, y):\n    return x * y\n"),
    ("mbpp_240", "def replace_list(list1, list2):\n    return list1[:-1] + list2\n"),
    ("mbpp_23", "def maximum_Sum(list1):\n    return max(sum(x) for x in list1)\n"),
    ("mbpp_12", "def sort_matrix(M):\n    return sorted(M, key=lambda row: sum(row))\n"),
]


def hardcoded(task: MbppTask, fallback: str = "none") -> str | None:
    """A solution that answers the visible asserts from a table and anything
    else with ``None`` (``fallback="first"``: the first visible answer).
    None when a visible assert is not a plain call with literal arguments."""
    from glyph.data.plus.seeds import Fixed, seeds_of

    seeds, checks, _ = seeds_of(task)
    if not seeds or len(seeds) != len(checks):
        return None
    names = {seed.tree.func.id for seed in seeds if not seed.path}
    if len(names) != 1 or any(seed.path or seed.keywords for seed in seeds):
        return None
    table = []
    for seed, check in zip(seeds, checks):
        if check.expected_expr is not None or any(isinstance(a, Fixed) for a in seed.args):
            return None
        table.append((tuple(seed.args), check.expected))
    default = repr(checks[0].expected) if fallback == "first" else "None"
    return (f"_ANSWERS = {table!r}\n\ndef {names.pop()}(*args):\n"
            f"    return next((answer for shown, answer in _ANSWERS if shown == args), {default})\n")
