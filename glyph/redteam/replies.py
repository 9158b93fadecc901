"""Hostile agent replies: model text shaped to make a turn raise, where the
agent program applies it and where the trusted side replays it (finalize's
replay of the interception's record, credit, the SFT replays). Each one must
end its rollout scored (a protocol error, or a failed tool call and the
episode goes on), never errored: a rollout the machinery drops is one the
policy is never penalised for.

Each reply is written in a profile's own grammar (``AgentProfile.turn_text``,
the profile's argument keys, its ``solution.py``), as a model would write it:
valid UTF-8 text, a lone surrogate or a NUL byte only as a JSON escape inside
a CALL (which the call's JSON then decodes), invalid UTF-8 only as what a
tokenizer makes of it (U+FFFD) or as a name's escaped byte (``\\udcff``).
``GOES_ON`` are calls the episode answers as failed and goes on from;
``ENDS`` end it at their last turn. The reference policies play them
(``hostile``, ``hostile-<name>``: ``glyph.policies.policies``);
``tests/test_hostile_replies.py`` plays each under both profiles and both
arms, through the program and finalize, and through ``vf-eval``.

What raised before glyph's episodes caught it (``glyph.agent.profiles.base.model_turn``):
under the glyph profile ``nul_path`` and ``lone_surrogate_path`` (ValueError,
UnicodeEncodeError from path resolution), ``long_name`` (OSError, name too
long), ``huge_integer`` (ValueError past Python's digit limit); under both
``deep_nesting`` (RecursionError, which the program took for a tester fault
and exited 98); under the study profile ``final_with_tags`` in Arm B
(IndexError), and ``escaped_byte_path`` answered a tool error holding a lone
surrogate no endpoint takes. Stdlib only.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

from glyph.agent.profiles.base import AgentProfile, Call
from glyph.text import encodable

_MARK = "@hostile@"

Turns = Callable[[AgentProfile, "str | None", Callable[[], str]], list[str]]
"""``turns(agent, project, next_id)``: the reply's turns in ``agent``'s grammar for a task whose
project folder is ``project``; ``next_id()`` gives each call a fresh id."""


@dataclass(frozen=True)
class HostileReply:
    name: str
    tries: str
    ends: bool
    """The episode ends at its last turn (a protocol error; FINAL where the grammar reads one); False:
    each turn is a call the episode answers and goes on from (a failed one, but ``surrogate_id``'s)."""
    turns: Turns


def _call(tool: str, path: str | None = None, find: str | None = None, replace: str | None = None,
          call_id: str | None = None) -> Turns:
    """One call; a string argument's odd characters written as the JSON escapes a model would write."""

    def turns(agent: AgentProfile, project: str | None, next_id: Callable[[], str]) -> list[str]:
        path_ = agent.solution(project) if path is None else path
        fill = {"find": find, "replace": replace}
        if tool == "apply_patch" and find is None:
            fill["find"] = agent.placeholder
        args = agent.args(tool, path_, project, fill["find"], fill["replace"])
        return [encodable(agent.turn_text(Call(call_id or next_id(), tool, args)))]

    return turns


def _raw(value: str) -> Turns:
    """A read_file whose path argument is ``value``, raw JSON (not a string)."""

    def turns(agent: AgentProfile, project: str | None, next_id: Callable[[], str]) -> list[str]:
        text = agent.turn_text(Call(next_id(), "read_file", agent.args("read_file", _MARK, project)))
        return [text.replace(json.dumps(_MARK), value)]

    return turns


def _text(reply: str) -> Turns:
    return lambda agent, project, next_id: [reply]


def _final_with_tags(agent: AgentProfile, project: str | None, next_id: Callable[[], str]) -> list[str]:
    """A successful patch (Arm B: a prediction is due), then a FINAL line that carries both tags."""
    patch = _call("apply_patch", replace="def f():\n    return 1\n")(agent, project, next_id)
    return patch + ["FINAL: <PREDICTION>PASS</PREDICTION><DECISION>KEEP</DECISION>"]


GOES_ON = (
    HostileReply("nul_path", "a NUL byte in the path", False, _call("read_file", "solution.py\x00.txt")),
    HostileReply("lone_surrogate_path", "a lone surrogate (a JSON escape) as the path", False,
                 _call("read_file", "\ud800")),
    HostileReply("escaped_byte_path", "a name of one byte that is not UTF-8 (0xff)", False,
                 _call("read_file", "\udcff")),
    HostileReply("long_name", "a 300-character file name", False, _call("read_file", "x" * 300)),
    HostileReply("long_path", "a path past PATH_MAX", False, _call("read_file", "a/" * 2100 + "x")),
    HostileReply("control_path", "terminal controls in the path", False,
                 _call("read_file", "\x1b[2J\x07\r\x7f")),
    HostileReply("dotdot_path", "a path out of the workspace", False,
                 _call("read_file", "../" * 8 + "etc/passwd")),
    HostileReply("absolute_path", "an absolute path", False, _call("read_file", "/etc/passwd")),
    HostileReply("directory_path", "a directory as the file", False, _call("read_file", ".")),
    HostileReply("glyph_dir_path", "the program's own folder", False,
                 _call("read_file", ".glyph/config.json")),
    HostileReply("empty_find", "apply_patch with an empty find", False,
                 _call("apply_patch", find="", replace="x")),
    HostileReply("huge_find", "apply_patch with a 60,000-character find", False,
                 _call("apply_patch", find="x" * 60_000, replace="")),
    HostileReply("surrogate_replace", "a patch whose result holds a lone surrogate", False,
                 _call("apply_patch", replace="def f():\n    return '\ud800'\n")),
    HostileReply("surrogate_id", "a lone surrogate as the call id", False,
                 _call("read_file", call_id="\ud800")),
)
ENDS = (
    HostileReply("deep_nesting", "a CALL whose JSON nests 3,000 deep", True, _raw("[" * 3000 + "]" * 3000)),
    HostileReply("huge_integer", "a 5,000-digit JSON integer as an argument", True, _raw("9" * 5000)),
    HostileReply("inf_nan", "JSON numbers Python reads as inf and nan", True,
                 _raw("[1e999, NaN, -Infinity]")),
    HostileReply("non_string_args", "arguments that are not strings", True, _raw('{"a": [true, null, {}]}')),
    HostileReply("control_reply", "NUL bytes and terminal controls, no action line", True,
                 _text("\x00\x01\x1b[2J\x7f\u202e\x00")),
    HostileReply("replacement_chars", "what a tokenizer makes of invalid UTF-8", True, _text("\ufffd" * 64)),
    HostileReply("huge_reply", "two megabytes before the CALL (cut at the reply cap)", True,
                 lambda agent, project, next_id: ["x" * (2 << 20) + "\n" + _call("read_file")(agent, project,
                                                                                              next_id)[0]]),
    HostileReply("empty_reply", "an empty reply", True, _text("")),
    HostileReply("final_with_tags", "a FINAL line carrying both Arm B tags after a patch", True,
                 _final_with_tags),
)
REPLIES = {r.name: r for r in GOES_ON + ENDS}
