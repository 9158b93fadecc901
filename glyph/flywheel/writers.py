"""Lesson writers: one cluster of failing *train* rollouts in, one short lesson out.

The holdout is sealed from the writer by construction: a writer receives a
:class:`Cluster`, whose :class:`Failure` rows refuse any split but train
(and carry only the spec, the code, the outcome and the grader's detail,
never a hidden test). The loop builds clusters from train rollouts only.

* :class:`ReferenceWriter`: the mode's lesson from ``conventions.MODE_LESSONS``
  (for an unknown mode or a mode-less cluster, a lesson built from the
  cluster's name: see ``agents.reference_lesson``). Offline and free.
* :class:`OpenAIWriter`: asks an OpenAI-compatible model for one short,
  actionable lesson; retried and failing like the OpenAI agent (``Endpoint``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from glyph.flywheel.agents import Endpoint, ModelCallFailed, reference_lesson

MAX_EXAMPLES = 6
MAX_CODE_CHARS = 1500
MAX_LESSON_CHARS = 400

WRITER_SYSTEM = (
    "You improve a coding agent by writing lessons it will read before its next attempts. "
    "You see failed attempts at programming tasks, graded by hidden tests the agent never sees. "
    "Find the convention the hidden tests enforce that the agent missed, and state it as one short, "
    "actionable rule that applies to other tasks of the same kind (not to these tasks only). "
    "Reply with the lesson alone: one sentence, no preamble, no code.")


@dataclass(frozen=True)
class Failure:
    """One failing train rollout, as the writer sees it."""

    task: str
    split: str
    spec: str
    code: str
    outcome: str
    detail: str

    def __post_init__(self) -> None:
        if self.split != "train":
            raise ValueError(f"the lesson writer sees train rollouts only; task {self.task!r} is {self.split}")


@dataclass(frozen=True)
class Cluster:
    """Failures grouped by mode, or by outcome signature for mode-less tasks."""

    name: str
    """The mode, or the signature (``OUTCOME`` or ``OUTCOME:ExceptionClass``) where the tasks have none."""
    mode: str
    failures: tuple[Failure, ...]

    @property
    def size(self) -> int:
        return len(self.failures)


class Writer(Protocol):
    name: str

    def write(self, cluster: Cluster) -> str: ...


class ReferenceWriter:
    name = "reference"

    def __init__(self, mode_lessons: dict[str, str] | None = None) -> None:
        self.mode_lessons = mode_lessons

    def write(self, cluster: Cluster) -> str:
        return reference_lesson(cluster.name, self.mode_lessons)


def writer_prompt(cluster: Cluster) -> list[dict]:
    """The chat messages the OpenAI writer sends: up to ``MAX_EXAMPLES``
    distinct failures (task, then code), each with spec, code, outcome, detail."""
    seen, shown = set(), []
    for f in cluster.failures:
        if (f.task, f.code) not in seen:
            seen.add((f.task, f.code))
            shown.append(f)
        if len(shown) == MAX_EXAMPLES:
            break
    parts = [f"{cluster.size} failed attempts share this failure kind; {len(shown)} of them:"]
    for i, f in enumerate(shown, 1):
        code = f.code if len(f.code) <= MAX_CODE_CHARS else f.code[:MAX_CODE_CHARS] + "\n# ... (truncated)"
        parts.append(f"### Attempt {i}\nTask:\n{f.spec.strip()}\n\nThe agent's solution.py:\n```python\n"
                     f"{code.rstrip()}\n```\nGrade: {f.outcome}" + (f" ({f.detail})" if f.detail else ""))
    parts.append("Write the one lesson.")
    return [{"role": "system", "content": WRITER_SYSTEM}, {"role": "user", "content": "\n\n".join(parts)}]


def clean_lesson(text: str) -> str:
    """The first non-empty line, without list markers or quotes, capped."""
    for line in (text or "").splitlines():
        line = line.strip().lstrip("-*•").strip().strip('"').strip()
        if line.lower().startswith("lesson:"):
            line = line[7:].strip()
        if line:
            return line[:MAX_LESSON_CHARS]
    return ""


class OpenAIWriter:
    name = "openai"

    def __init__(self, endpoint: Endpoint, temperature: float = 0.0, max_tokens: int = 200) -> None:
        self.endpoint, self.temperature, self.max_tokens = endpoint, temperature, max_tokens
        self._client = endpoint.client()

    def write(self, cluster: Cluster) -> str:
        text = clean_lesson(self._client.chat(writer_prompt(cluster), temperature=self.temperature,
                                              max_tokens=self.max_tokens))
        if not text:
            raise ModelCallFailed("the writer returned an empty lesson")
        return text
