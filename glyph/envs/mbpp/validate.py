"""verifiers' gold check for glyph-mbpp: the task's reference solution,
put where the agent's ``solution.py`` goes, passes the hidden tests the
reward grades.

``vf-validate glyph-mbpp`` (verifiers 0.4.0) and ``validate glyph-mbpp``
(the pin, 0.3.1.dev62) run ``Task.setup`` in a fresh runtime, then
``await task.validate(runtime)`` (0.4.0: ``verifiers/v1/cli/validate.py:242-244``,
``_gold``; the pin: ``verifiers/v1/cli/validate.py:256``); True is ``valid``,
False ``invalid``, an exception ``error``. Both versions'
default ``Task.validate`` checks nothing (0.4.0 ``verifiers/v1/task.py:195``
returns None, "unchecked"; the pin ``verifiers/v1/task.py:176`` returns
True, "valid"). ``GlyphTask.validate`` calls :func:`validate_task`.

What it proves, per task: the reference goes into the runtime as
``solution.py`` and is read back from there, as finalize reads the final
solution, and glyph's trusted grader grades it on the reward's suite
(``base`` or ``plus``) through ``Regrader.hidden``, finalize's own call, under
the default harness's limits (``limits_from_record(None)``: a trace carries
the harness's limits; a validation has no harness). A reference that does
not pass is ``invalid``, with the outcome and the grader's detail logged; a
grading that raises (a sandbox fault) propagates and reads as ``error``.
It does not run the agent program or the test service (no model here), and
it does not check the ``noop`` side (0.4.0 scores the untouched task by
finalize: no trace, reward 0).
"""

from __future__ import annotations

import asyncio
import logging

from glyph.envs.mbpp.harness import limits_from_record
from glyph.envs.mbpp.finalize import Regrader, TaskTests
from glyph.outcomes import Outcome
from glyph.agent.protocol import SOLUTION_FILE

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
    suites = await asyncio.to_thread(Regrader(tests, limits_from_record(None)).hidden, source)
    return suites[tests.reward]


async def validate_task(task, runtime) -> bool:
    """``Task.validate`` for glyph-mbpp: True iff the reference passes."""
    outcome, detail = await gold_outcome(task, runtime)
    if outcome != Outcome.PASS.value:
        logger.warning("%s: the reference solution gets %s on the %s hidden tests: %s",
                       task.data.name, outcome, task.data.hidden, detail[-500:])
        return False
    return True
