"""What every protocol profile's agent half is: an ``AgentProfile`` (its
workspace, its opening messages, its turn grammar, read and written) and the
``Episode`` it runs, one declared interface that the agent program, trusted
finalize's replay of the model's replies, credit assignment and the SFT
replays all drive.

A turn never raises on the model's account: whatever a reply holds (a NUL
byte, a lone surrogate, a 300-character name, a 5,000-digit integer, JSON
nested 3,000 deep), ``turn`` ends the episode with a protocol error or
answers a failed tool call (``model_turn``). The one exception that leaves a
turn is its tester's (``TesterFault`` in the agent program): a fault of
glyph's, which model text cannot raise.

Also the one scanner of tagged labels (``<PREDICTION>PASS</PREDICTION>``):
each grammar reads a turn's prediction and decision with ``tagged``, and
PREDICT (``glyph.predict.annotate``) finds the label's bytes in the policy's
tokens with ``scan``, so what counts as a label is decided once.

Stdlib only: shipped into the runtime with the agent layer.
"""

from __future__ import annotations

import bisect
import functools
import os
import re
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Callable, ClassVar, Protocol

from glyph.agent.trace import Trace
from glyph.outcomes import Outcome
from glyph.text import encodable

Tester = Callable[[str, bool], str]
"""``tester(source, shadow)``: the outcome class of the visible tests on ``source``."""


@dataclass(frozen=True)
class Call:
    """One tool call, in any grammar: its id, the tool's name and its (string) arguments."""

    id: str
    tool: str
    args: dict = field(default_factory=dict)


Step = tuple[Call, str, str]
"""What a turn that ran a call gives: (the call, its status, the observation's body)."""


class ProtocolError(ValueError):
    """The turn breaks the protocol; the episode ends and the reason is recorded."""


class TesterFault(RuntimeError):
    """The tester failed (the test service did not answer, the grader raised, an answer that is no
    outcome class): glyph's fault, never the model's. The agent program's tester raises it
    (``glyph.agent.program.Tester``), and ``model_turn`` for a tester's answer that is no outcome
    class; a turn passes it on, and the program ends the episode as ``tester_error``. No text a model
    writes can raise it: an exception that is not the tester's ends the turn (``model_turn``)."""


FAULT_CHARS = 500
"""How much of an exception's message the protocol error of a turn that raised records."""


class _Watched:
    """A tester that remembers whether it failed: raised, or answered what is no outcome class
    (a ``TesterFault`` then)."""

    def __init__(self, tester: Tester) -> None:
        self.tester, self.raised = tester, None

    def __call__(self, source: str, shadow: bool) -> str:
        try:
            outcome = self.tester(source, shadow=shadow)
        except BaseException as exc:
            self.raised = exc
            raise
        if outcome not in Outcome.__members__:
            self.raised = TesterFault(f"the tester answered {outcome!r}, not an outcome class")
            raise self.raised
        return outcome


def model_turn(turn):
    """Make an episode's ``turn`` total on model text: an exception it raises (a reply no parser
    foresaw, a path the OS refuses) ends the episode as a protocol error of that turn, through the
    episode's ``refuse(reason)``, the reason naming the exception; what its tester raises propagates
    unchanged (also when the turn caught it: a tester's failure is never the model's), and an answer
    that is no outcome class is a ``TesterFault``. So the agent program, finalize's replay, credit
    and the SFT replays see one outcome for one reply. A bug of glyph's own inside a turn ends it
    the same way, the exception named in the reason (``Trace.error``, finalize's reason)."""

    @functools.wraps(turn)
    def guarded(self, reply: str, tester: Tester, context: list[dict] | None = None):
        watched = _Watched(tester)
        try:
            step = turn(self, reply, watched, context)
        except Exception as exc:  # deliberate: model text never raises out of a turn; the reason records it
            if watched.raised is not None:
                raise watched.raised from None
            return self.refuse(encodable(f"the turn could not be applied: {type(exc).__name__}: {exc}"
                                         [:FAULT_CHARS]))
        if watched.raised is not None:
            raise watched.raised
        return step

    guarded.model_turn = True
    return guarded


class Episode(Protocol):
    """One episode's protocol state and its turn semantics. The agent program's
    loop (``glyph.agent.program``) calls ``turn`` with each model reply and sends
    ``observation`` back; the replays (finalize's of the model's replies, credit's,
    ``glyph study replay``) call the same methods, so the semantics exist once."""

    trace: Trace
    end: str | None
    """``final``, ``protocol_error`` or ``budget_exhausted`` once a turn ended the episode."""
    error: str | None
    call: Call | None
    """The last turn's call (also one the budget refused)."""

    @property
    def budget(self) -> int:
        """Tool calls left."""

    @property
    def expect_prediction(self) -> bool:
        """Arm B: the next turn must predict and decide."""

    @property
    def may_test(self) -> bool:
        """The grammar allows a python_test as the next turn (the study's Arm B: only as KEEP)."""

    def turn(self, reply: str, tester: Tester, context: list[dict] | None = None) -> Step | None:
        """Apply one model reply; the step it ran, or None when it ended the episode (``end`` and
        ``error`` say how). ``context``: the messages before it (recorded with a prediction).
        Never raises on the reply (decorate it with ``model_turn``); what ``tester`` raises
        propagates (``TesterFault``, in the agent program)."""

    def refuse(self, reason: str) -> None:
        """End the episode as a protocol error of this turn, for ``reason`` (``model_turn``)."""

    def observation(self, step: Step) -> dict:
        """The message that answers ``step``."""


class AgentProfile(ABC):
    """The agent half of a protocol profile (the trusted half is ``glyph.profiles``)."""

    name: ClassVar[str]
    placeholder: ClassVar[str]
    """``solution.py`` as the agent finds it."""
    trace_type: ClassVar[type[Trace]] = Trace
    """The trace its episode writes (finalize decodes a saved one into it)."""

    @abstractmethod
    def project(self, task_id: int) -> str | None:
        """The task's project folder, relative to the workspace root (None: the root itself)."""

    def solution(self, project: str | None) -> str:
        """The path of ``solution.py``, relative to the workspace root."""
        return f"{project}/solution.py" if project else "solution.py"

    def lay_out(self, root: str, project: str | None, source: str | None = None) -> str:
        """Write ``solution.py`` into the workspace at ``root`` as an episode finds it (``source``, else the
        placeholder), its folders made; its path. What the harness writes into a runtime."""
        path = os.path.join(root, self.solution(project))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8", errors="surrogateescape", newline="") as f:
            f.write(self.placeholder if source is None else source)
        return path

    @abstractmethod
    def messages(self, arm: str, task_text: str, setup: str, tests: list[str], project: str | None,
                 budget: int, switches: dict | None = None) -> list[dict]:
        """The messages an episode opens with (system, user), for a task's text, its test setup and
        visible tests, its project folder, the harness's budget and switches."""

    @abstractmethod
    def episode(self, cfg: dict, trace: Trace, root: str = ".") -> Episode:
        """The episode a program config asks for (``glyph.envs.mbpp.harness.program_config``:
        ``arm``, ``max_tool_calls``, ``test_cost``, ``limits``, ``project``, ``switches``...), its paths
        resolved against ``root``."""

    @abstractmethod
    def arm_of(self, messages: list[dict]) -> str | None:
        """The arm of a conversation this profile opened (its system prompt), else None."""

    # ------------------------------------------------------------ writing turns

    @abstractmethod
    def call_id(self, n: int) -> str:
        """The id a scripted turn gives its ``n``-th call (1-based)."""

    @abstractmethod
    def args(self, tool: str, path: str, project: str | None, find: str | None = None,
             replace: str | None = None) -> dict:
        """``tool``'s arguments under this grammar's keys."""

    @abstractmethod
    def turn_text(self, call: Call | None, prediction: str | None = None, decision: str | None = None,
                  thought: str = "") -> str:
        """A turn in this grammar: ``call`` (None: FINAL, ``thought`` its summary where the grammar allows
        one), after Arm B's prediction and decision where given, after ``thought`` where the grammar allows
        free text."""

    def lines(self, text: str) -> str:
        """``text`` as the tools read it back from the workspace."""
        return text


class Registry(dict):
    """One side's profiles by name (``glyph.agent.profiles.PROFILES``, ``glyph.profiles.PROFILES``)."""

    def add(self, profile):
        """Make ``profile`` known by its name (a name registered twice is a bug)."""
        if profile.name in self:
            raise ValueError(f"the profile {profile.name!r} is registered already")
        self[profile.name] = profile
        return profile

    def named(self, name: str):
        """The profile named ``name``; a ValueError naming the known ones for any other."""
        try:
            return self[name]
        except (KeyError, TypeError):
            raise ValueError(f"the profile is {name!r}, not one of {', '.join(self)}") from None


# ---------------------------------------------------------------- tagged labels


@dataclass(frozen=True)
class Tagged:
    """One ``<TAG>`` opening in some bytes, closed or not: byte offsets and what follows it."""

    start: int
    """The tag's ``<``."""
    gt: int
    """The tag's ``>``."""
    label_at: int
    """The label's first byte (== ``label_end`` when there is none)."""
    label_end: int
    label: str
    """The text after the tag (leading whitespace skipped) up to the next ``<`` or line end, stripped."""
    closed: bool
    """``</TAG>`` follows (whitespace aside, any case)."""
    end: int | None
    """The byte after the closing tag (None: not closed)."""
    exact: bool
    """Both tags spelled as the protocol spells them."""
    truncated: bool
    """Not closed, and the bytes end inside the label or the closing tag: a token limit cut it."""
    quoted: bool
    """Inside a ``<think>`` block or on a CALL line: a mention, not the turn's own."""


THINK_OPEN, THINK_CLOSE = b"<think>", b"</think>"
_CALL_LINE = re.compile(rb"[ \t]*CALL[ \t]")


def _think_regions(data: bytes) -> list[tuple[int, int]]:
    """Byte ranges inside ``<think>`` blocks; a block open at the end runs to the
    end, and a ``</think>`` before any ``<think>`` closes one opened before ``data``."""
    regions = []
    pos = 0
    first_close, first_open = data.find(THINK_CLOSE), data.find(THINK_OPEN)
    if first_close != -1 and (first_open == -1 or first_close < first_open):
        regions.append((0, first_close))
        pos = first_close + len(THINK_CLOSE)
    while (a := data.find(THINK_OPEN, pos)) != -1:
        b = data.find(THINK_CLOSE, a)
        regions.append((a, len(data) if b == -1 else b))
        pos = len(data) if b == -1 else b + len(THINK_CLOSE)
    return regions


def scan(data: bytes, tag: str = "PREDICTION") -> list[Tagged]:
    """Every ``<TAG>`` in ``data``, its tag matched in any case. Linear in ``data`` whatever it holds
    (a reply of thousands of tags and think blocks is the trusted side's to replay too)."""
    open_, close = f"<{tag}>".encode(), f"</{tag}>".encode()
    if open_.lower() not in data.lower():
        return []
    thinks = _think_regions(data)
    starts = [a for a, _ in thinks]
    out = []
    for m in re.finditer(re.escape(open_), data, re.IGNORECASE):
        gt = m.end() - 1
        at = _SPACE.match(data, m.end()).end()
        stop = _LABEL_TEXT.match(data, at).end()
        label_end = at + len(data[at:stop].rstrip())
        after = _SPACE.match(data, label_end).end()  # where the closing tag would start
        head = data[after:after + len(close)]
        closed = head.upper() == close
        end = after + len(close) if closed else None
        cut = not closed and (stop == len(data) or (len(data) - after <= len(close)
                                                    and close.startswith(head.upper())))
        k = bisect.bisect_right(starts, m.start()) - 1
        quoted = (k >= 0 and m.start() < thinks[k][1]) or \
            _CALL_LINE.match(data, data.rfind(b"\n", 0, m.start()) + 1, m.start()) is not None
        exact = m.group() == open_ and head == close
        out.append(Tagged(m.start(), gt, at, label_end, data[at:label_end].decode("utf-8", "replace"), closed,
                          end, exact, cut, quoted))
    return out


_SPACE = re.compile(rb"[ \t\n\r\x0b\x0c]*")
"""What ``bytes.isspace`` and ``bytes.strip`` take for whitespace."""
_LABEL_TEXT = re.compile(rb"[^<\n]*")


LABEL = re.compile(r"[A-Z_]+")
"""What a well-formed label is spelled with (an outcome class, a decision)."""


def tagged(text: str, tag: str, label: re.Pattern = LABEL) -> list[str]:
    """The labels of ``text``'s well-formed ``<TAG>label</TAG>`` (both tags as spelled, whitespace
    around the label allowed, the label all of ``label``), in order: what a grammar reads as a
    turn's prediction or decision. A tag in a think block or a CALL line counts too: where a
    grammar forbids those, it says so itself."""
    return [t.label for t in _well_formed(text, tag, label)]


def tagged_line(line: str, tag: str, label: re.Pattern = LABEL) -> str | None:
    """The label where ``line`` is exactly one well-formed ``<TAG>label</TAG>``, else None."""
    found = _well_formed(line, tag, label)
    n = len(line.encode("utf-8", "surrogatepass"))
    return found[0].label if len(found) == 1 and found[0].start == 0 and found[0].end == n else None


def _well_formed(text: str, tag: str, label: re.Pattern) -> list[Tagged]:
    return [t for t in scan(text.encode("utf-8", "surrogatepass"), tag)
            if t.exact and t.closed and label.fullmatch(t.label)]
