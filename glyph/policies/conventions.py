"""Reference policies for the conventions tasks, so glyph-conventions runs
(and is tested) without a model. Each finds its task by the spec the user
message starts with, and answers in the protocol the conversation speaks:
one ```python block (the single protocol, recognised by its system prompt),
or the agent protocol (patch the placeholder, test, FINAL).

* ``conv-fixed``: the task's ``reference_fixed``;
* ``conv-broken``: its ``reference_broken``;
* ``conv-lessons``: fixed iff the lesson of the task's mode
  (``conventions.MODE_LESSONS``) is in the user message, else broken.
"""

from __future__ import annotations

from typing import Iterable

from glyph.agent.profiles import glyph as protocol
from glyph.agent.profiles.base import Call
from glyph.data import conventions
from glyph.data.conventions import ConventionTask

CONV_POLICIES = ("conv-fixed", "conv-broken", "conv-lessons")


class UnknownConventionsTask(LookupError):
    pass


def solution(policy: str, task: ConventionTask, user: str) -> str:
    if policy == "conv-fixed":
        return task.reference_fixed
    if policy == "conv-broken":
        return task.reference_broken
    lesson = conventions.MODE_LESSONS.get(task.mode)
    return task.reference_fixed if lesson and lesson in user else task.reference_broken


class ConventionsPolicy:
    """Answers for ``tasks`` (default: glyph's own data file, read on first use)."""

    def __init__(self, tasks: Iterable[ConventionTask] | None = None) -> None:
        self._tasks = None if tasks is None else list(tasks)

    @property
    def tasks(self) -> list[ConventionTask]:
        if self._tasks is None:
            self._tasks = conventions.load_tasks()
        return self._tasks

    def task_of(self, user: str) -> ConventionTask:
        """The task whose spec the user message starts with (the longest such spec)."""
        found = [t for t in self.tasks if user.startswith(t.spec.strip())]
        if not found:
            raise UnknownConventionsTask("the prompt names no conventions task this server knows")
        return max(found, key=lambda t: len(t.spec.strip()))

    def reply(self, policy: str, messages: list[dict]) -> str:
        user = next((m["content"] for m in messages if m.get("role") == "user"), "")
        task = self.task_of(user)
        code = solution(policy, task, user)
        if messages and messages[0].get("content") == conventions.SYSTEM_PROMPT:
            return f"```python\n{code}```"
        turn = sum(1 for m in messages if m.get("role") == "assistant")
        steps = [protocol.call_line(Call("1", "apply_patch", {"path": protocol.SOLUTION_FILE,
                                                              "find": protocol.PLACEHOLDER, "replace": code})),
                 protocol.call_line(Call("2", "python_test", {}))]
        return steps[turn] if turn < len(steps) else "FINAL: done."
