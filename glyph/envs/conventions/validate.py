"""verifiers' gold check for glyph-conventions (``vf-validate glyph-conventions``;
``validate`` at the pin; ``glyph.vfcompat``, 7.), as ``glyph conventions
validate`` checks a task file: the task's fixed reference, put where the
model's ``solution.py`` goes and read back from there as finalize reads it,
passes the hidden test, and its broken reference does not (a hidden test the
broken reference passes does not enforce the convention, so a lesson could
not be measured on it). Both are graded by ``conventions.grade``, finalize's
own grader. A task that fails either is ``invalid`` (the log says which and
why); a grading that raises (a sandbox fault) reads as ``error``. It runs no
model and no agent program.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging

from glyph.agent.profiles.glyph import SOLUTION_FILE
from glyph.data import conventions

logger = logging.getLogger(__name__)

MAX_SOLUTION_BYTES = 8 << 20


async def validate_task(task, runtime) -> bool:
    """``Task.validate`` for glyph-conventions: True iff the fixed reference, read back from
    ``runtime``, passes and the broken one does not."""
    data = task.data
    await runtime.write(SOLUTION_FILE, data.reference_fixed.encode("utf-8", "surrogateescape"))
    raw = await runtime.read(SOLUTION_FILE, max_bytes=MAX_SOLUTION_BYTES)
    fixed = raw.decode("utf-8", "surrogateescape")
    checked = await asyncio.to_thread(conventions.validate_task,
                                      dataclasses.replace(data.task(), reference_fixed=fixed))
    if not checked.ok:
        logger.warning("%s: %s", data.name, checked.problem())
    return checked.ok
