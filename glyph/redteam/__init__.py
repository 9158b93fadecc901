"""Adversarial non-solutions: the ways a policy (or a person) has tried to get
a reward without solving the task, or to damage the grader, and the demo
task they target.

* ``catalogue``: one solution graded once each (``ATTACKS``): lies about
  equality, reads of the tests, exits, floods, bombs on the result channel,
  a solution the trusted side must not parse whole;
* ``replies``: agent replies shaped to make a turn raise where the agent
  program applies it or the trusted side replays it (NUL bytes, lone
  surrogates, names past the system's limits, huge integers, JSON nested
  past the stack); each must end its rollout scored 0, never errored
  (``tests/test_hostile_replies.py``, and the ``hostile`` reference policy).

The attacks that need more than one grading (colluding copies, carryover,
the kernel channels and the verdict attacks over them) are test support, in
``testkit/redteam/`` beside the package. None of the solutions may pass;
``tests/test_redteam.py`` (as root) and ``tests/test_sandbox_unprivileged.py``
(``userns``, ``confined``) also check that each leaves no process and no
file behind and that the grader survives.
Stdlib only.
"""

from glyph.redteam.catalogue import (ATTACKS, DEMO_PROMPT, DEMO_SOLUTION, DEMO_TESTS, DEMO_WRONG,
    REFEREE_TESTS, Attack, aimed_at_a_listener, attack, wire_bomb)

__all__ = ["ATTACKS", "DEMO_PROMPT", "DEMO_SOLUTION", "DEMO_TESTS", "DEMO_WRONG", "REFEREE_TESTS", "Attack",
           "aimed_at_a_listener", "attack", "wire_bomb"]
