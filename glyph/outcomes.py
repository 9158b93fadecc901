"""The outcome classes of one grading: the study's six, one source for every
module (grader, environment, PREDICT labels, reports)."""

from __future__ import annotations

from enum import Enum


class Outcome(str, Enum):
    PASS = "PASS"
    ASSERTION_FAILURE = "ASSERTION_FAILURE"
    RUNTIME_ERROR = "RUNTIME_ERROR"
    SYNTAX_ERROR = "SYNTAX_ERROR"
    TIMEOUT = "TIMEOUT"
    OTHER = "OTHER"

    def __str__(self) -> str:
        return self.value


# Exceptions that end a program rather than report an error in it.
_EXITS = {"SystemExit", "KeyboardInterrupt", "GeneratorExit", "BaseException"}


def outcome_of_exception(base: str, *, compiling: bool = False) -> Outcome:
    """Classify an exception by the nearest builtin class in its MRO (as the
    sandbox reports it), not by any text it printed."""
    if compiling:
        return Outcome.SYNTAX_ERROR
    if base == "AssertionError":
        return Outcome.ASSERTION_FAILURE
    if base in _EXITS:
        return Outcome.OTHER
    return Outcome.RUNTIME_ERROR
