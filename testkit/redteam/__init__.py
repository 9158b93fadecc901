"""Attacks that need more than one grading, for the tests and benchmarks that prove the sandbox
holds (the one-grading catalogue and the hostile replies ship in ``glyph.redteam``; ``glyph demo``
and the reference policies use them).

* ``colluding``: copies graded at once that pool what they learn over abstract unix sockets;
* ``carryover``: state one grading plants for the next;
* ``channels`` and ``verdicts``: kernel state no namespace separates (the page cache, the fork,
  pid and inode counters, ``flock()``), and the attacks that would carry verdicts over it,
  between gradings and between copies graded at once, with the grader before verdict blindness
  as their control.

None may pass: ``tests/test_redteam.py`` (as root) and ``tests/test_sandbox_unprivileged.py``
(``userns``, ``confined``).
"""

from testkit.redteam.carryover import CARRY_TESTS, carryover
from testkit.redteam.colluding import COLLUDE_TESTS, collude, colluding_copies

__all__ = ["CARRY_TESTS", "COLLUDE_TESTS", "carryover", "collude", "colluding_copies"]
