"""verifiers' gold check for glyph-mbpp (``vf-validate glyph-mbpp``; ``validate``
at the pin; ``glyph.vfcompat``, 7.): the task's reference solution, put where
the agent's ``solution.py`` goes and read back from there as finalize reads
it, passes the suite the reward grades (``base`` or ``plus``), graded by
finalize's own call (``Regrader.hidden``) under the default harness's limits
and the task's profile's grading semantics.
A reference that does not pass is ``invalid`` (its outcome and the grader's
detail logged); a grading that raises (a sandbox fault) reads as ``error``.
It runs no agent program and no test service.
"""

from __future__ import annotations

import asyncio
import logging

from glyph import profiles
from glyph.agent.profiles.glyph import SOLUTION_FILE
from glyph.envs.mbpp.finalize import Regrader, TaskTests
from glyph.envs.mbpp.harness import limits_from_record
from glyph.outcomes import Outcome

logger = logging.getLogger(__name__)

MAX_SOLUTION_BYTES = 8 << 20


def task_tests(data) -> TaskTests:
    """The hidden suites of a ``GlyphData``, as finalize builds them."""
    return TaskTests(data.hidden_setup, tuple(data.visible_tests), tuple(data.hidden_tests),
                     None if data.plus_tests is None else tuple(data.plus_tests), data.hidden)


async def gold_outcome(task, runtime) -> tuple[str, str]:
    """``(outcome, detail)`` of the task's reference, written to and read back
    from ``runtime`` as ``solution.py``, on the suite the reward grades."""
    data = task.data
    await runtime.write(SOLUTION_FILE, data.reference.encode("utf-8", "surrogateescape"))
    raw = await runtime.read(SOLUTION_FILE, max_bytes=MAX_SOLUTION_BYTES)
    source = raw.decode("utf-8", "surrogateescape")
    tests = task_tests(data)
    rg = Regrader(tests, limits_from_record(None), semantics=profiles.get(data.profile).semantics)
    suites = await asyncio.to_thread(rg.hidden, source)
    return suites[tests.reward]


async def validate_task(task, runtime) -> bool:
    """``Task.validate`` for glyph-mbpp: True iff the reference passes."""
    outcome, detail = await gold_outcome(task, runtime)
    if outcome != Outcome.PASS.value:
        logger.warning("%s: the reference solution gets %s on the %s hidden tests: %s",
                       task.data.name, outcome, task.data.hidden, detail[-500:])
        return False
    return True
