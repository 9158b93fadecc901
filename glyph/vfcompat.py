"""Every difference between the two verifiers versions glyph runs under, in
one place: 0.4.0 from PyPI, and 0.3.1.dev62 (commit a60a606, what PRIME-RL
pins). Nothing else in glyph asks which version is installed. Paths are in
the installed ``verifiers`` package; line numbers are 0.4.0's unless a60a606
is named.

1. The v1 eval CLI's console script is ``vf-eval`` in 0.4.0
   (``verifiers-0.4.0.dist-info/entry_points.txt``) but ``eval`` at a60a606,
   where ``vf-eval`` is the legacy CLI (``verifiers.legacy.scripts.eval``).
   Both versions ship the same entry point, ``verifiers.v1.cli.eval.main:main``,
   which reads ``sys.argv[1:]`` (``v1/cli/eval/main.py:38-39``; a60a606
   ``:39-40``) and has no ``__main__`` guard, so ``python -m`` on it would
   import and exit; :func:`eval_command` calls it with ``-c`` instead.
2. A stage deadline's expiry: 0.4.0 sets ``Trace.is_timeout``
   (``v1/trace.py:428``, by ``record_timeout`` at ``:735-740``, which
   ``v1/rollout.py:211-215`` calls for the setup, agent, finalize and scoring
   deadlines at ``:435, 506, 602, 618``) and, being a stop rather than a
   failure, still finalizes and scores the rollout. a60a606 has no such field:
   each expiry is a failure recorded in ``trace.errors`` by
   ``Trace.record_error`` (a60a606 ``v1/trace.py:585-600``). The agent
   deadline records ``HarnessError("agent timeout: rollout exceeded its
   {agent:g}s budget")`` (a60a606 ``v1/rollout.py:388-398``); the others pass
   a ``TimeoutError`` through ``boundary`` (a60a606 ``v1/errors.py:86-97``),
   which records ``"<what> timed out"`` for the boundaries the deadlines wrap
   (a60a606 ``v1/rollout.py:238, 243, 474, 484``). :func:`timed_out` reads
   either.
3. A model call that fails at the interception server (an HTTP 500 from the
   endpoint, say) is stashed on the session in both (``v1/interception/
   server.py:864-867``; a60a606 ``:612-615``), and the provider's status is
   relayed so the harness retries 5xx/429. In 0.4.0 a harness that then
   completes cleanly handled it (``v1/rollout.py:529-532``); at a60a606 the
   rollout fails with it after the harness returns, however the harness
   ended (a60a606 ``v1/rollout.py:418-420``). glyph's programs retry 5xx/429
   (``glyph.agent.program._post``) and, when the call failed for good (still
   5xx after the retries, unreachable, or past ``model_timeout``), exit 97
   (5.), so such a rollout is errored and unscored in both. The difference
   left: a call that failed once and succeeded on a retry is handled in
   0.4.0 and fails the rollout at a60a606.
4. ``TaskData.id`` exists in 0.4.0 (``v1/task.py:86``) and not at a60a606
   (``v1/task.py:80-118``), whose model drops the keyword. glyph sets
   ``name`` to the same MBPP id, and readers of saved traces
   (``glyph.demo.read_rollouts``) read ``name``, present in both.
5. A harness whose program exits non-zero fails the rollout in both, as a
   different error: 0.4.0 raises ``InterceptionError`` for exit 97
   (``MODEL_TRANSPORT_ERROR_EXIT_CODE``, ``v1/errors.py:45``; raised at
   ``v1/harness.py:187-190``) and ``HarnessError`` for any other code
   (``:191-193``); a60a606 raises ``HarnessError`` for every code (a60a606
   ``v1/harness.py:150-161``), and where a model call had failed records the
   stashed model error instead, the harness's as its cause (a60a606
   ``v1/rollout.py:404-408``). Either way a failed harness skips finalize and
   scoring (``v1/rollout.py:584``; a60a606 ``:472``). glyph-conventions'
   single-turn program (``glyph.agent.single_turn``) and glyph-mbpp's agent program
   (``glyph.agent.program``) exit 97 when the model call failed for good, and
   the agent program exits 98 when the test service faulted; on the local
   runtime the harness passes those exits on (``glyph.envs.mbpp.harness``), with
   the cause in ``trace.info["glyph"]["reason"]``, so the rollout is errored
   and unscored under either version; nothing reads which error class it was.

6. A container runtime's endpoint fault is confirmed from verifiers' own
   record (``glyph.envs.mbpp.harness.model_call_failure``). The interception
   server appends one ``ModelCall`` per upstream exchange to ``trace.calls``
   (``record_call``, ``v1/interception/server.py:519-582``, called from the
   turn's ``finally`` at 897 after the handlers at 863, 878, 887; a60a606
   ``:317-375``, called at 643 after 611, 626, 635), with ``error``
   (``type``, ``message``, ``status_code``; ``v1/trace.py:170``, ``Error`` at
   84-88 in both) when the exchange committed no turn; ``Trace.calls`` is at
   ``v1/trace.py:396`` (a60a606 ``:379``), ``Trace.stop_condition`` at ``:426``
   (a60a606 ``:403``). A provider failure is a ``ProviderError`` whose
   ``status_code`` is the provider's, or 502/503/504 for a transport fault or
   timeout (``v1/errors.py``). Then 0.4.0 maps exit 97 to an
   ``InterceptionError`` (``v1/harness.py:187``) and re-raises the stashed
   upstream error (``v1/rollout.py:513``), forgetting it when the harness
   exits 0 (``:532``); a60a606 raises ``HarnessError`` for any non-zero exit
   (``v1/harness.py:159``) and fails the rollout on a stashed model error
   even after a 0 exit (``v1/rollout.py:418-419``).
7. Where a plugin's errors surface. A finalize that raises fails the rollout,
   errored and unscored (``v1/rollout.py:590,621``; a60a606
   ``:474,494``). verifiers reads a taskset through ``Taskset.__iter__``, which
   calls ``load`` (``v1/taskset.py:75-84,165-168``; a60a606 ``:54-67``), and
   ends its CLI on a plugin's config error with one line
   (``v1/cli/resolve.py:21-29``): glyph-mbpp's ``__iter__`` raises
   ``SystemExit`` with one line for unusable data. The gold check:
   ``vf-validate`` (0.4.0) and ``validate`` (a60a606) run ``Task.setup`` in a
   fresh runtime, then ``await task.validate(runtime)`` (0.4.0
   ``v1/cli/validate.py:242-244``; a60a606 ``:256``): True is ``valid``, False
   ``invalid``, an exception ``error``; the default checks nothing (0.4.0
   ``v1/task.py:195`` returns None, "unchecked"; a60a606 ``:176`` returns True).
8. The record of the model's replies (``glyph.envs.mbpp.harness.
   interception_record``), the same in both versions. Each exchange that
   committed a turn is one ``ModelCall`` in ``trace.calls`` (appended by
   ``record_call``, 6.; none once the session is released: ``v1/interception/
   server.py:537-540``, a60a606 ``:334-337``) whose ``node`` (``v1/trace.py:156``
   in both) indexes ``Trace.nodes`` (``:394``; a60a606 ``:377``): the
   assistant ``MessageNode`` (``message``, ``sampled``: ``v1/graph.py:101,
   103``; a60a606 ``:71, 73``) that ``_commit_turn`` appends with
   ``message=response.message``, ``sampled=True`` (``v1/graph.py:946-947``;
   a60a606 ``:611``), committed at ``v1/interception/server.py:852`` (a60a606
   ``:591``) before it is served. Its ``content`` (``AssistantMessage.content``,
   ``v1/types.py:84``; a60a606 ``:75``) is the text the program reads: the eval
   client relays the provider's completion, parsed into that message
   (``v1/dialects/chat.py:254-271``; a60a606 ``:190-217``, ``content=
   message.content``), and the train client serves a completion built from it
   (``serialize_completion``, ``v1/clients/train.py:55-58``; a60a606
   ``:52-55``). A retry the client marks with ``x-stainless-retry-count`` > 0
   (``RETRY_COUNT_HEADER``, ``v1/interception/server.py:91, 97``; a60a606
   ``:82, 85``) of a turn already committed is answered with that turn and not
   recorded again (``:653-667``; a60a606 ``:410-417``, the served turn kept at
   ``:535``); the agent program marks its retries so.

Not bridged (2. and 3.): at a60a606 a failed rollout skips finalize and
scoring (``v1/rollout.py:472``, ``if not self._failed and self._opened``), so
a timed-out rollout and one whose model call failed once and then succeeded
are errored, unscored traces there (``ok`` false, no ``passed`` reward, the
cause in ``trace.errors``; PRIME-RL counts them as errored instead of
training on a 0), where 0.4.0 finalizes them and glyph scores the timed-out
one 0 with the reason (and the retried one as it ended). The
a60a606 ``RolloutTimeouts`` and ``TimeoutConfig`` have no setting that makes
a deadline a stop, nothing lets a harness mark a failed model call handled,
and a Task runs no code after a skipped finalize, so glyph cannot change this
from the environment. :func:`failures_are_scored` says which applies.
"""

from __future__ import annotations

import sys
from typing import Any

EVAL_MAIN = "verifiers.v1.cli.eval.main"
AGENT_TIMEOUT_PREFIX = "agent timeout:"
STAGE_TIMEOUTS = frozenset(f"{what} timed out" for what in ("task setup", "harness setup", "task finalize",
                                                            "scoring"))


def eval_command(*args: str) -> list[str]:
    """The argv that runs the installed verifiers' v1 eval CLI (``vf-eval`` in
    0.4.0, ``eval`` at a60a606) with ``args``, in this interpreter's
    environment."""
    return [sys.executable, "-c", f"from {EVAL_MAIN} import main; main()", *args]


def eval_cli() -> str:
    """The console script that runs the installed verifiers' v1 eval CLI (1.):
    ``vf-eval`` in 0.4.0, ``eval`` at a60a606 (where ``vf-eval`` is the legacy
    CLI), read from the distribution's entry points."""
    from importlib.metadata import PackageNotFoundError, distribution
    try:
        points = distribution("verifiers").entry_points
    except PackageNotFoundError:
        return "vf-eval"
    names = [ep.name for ep in points if ep.group == "console_scripts" and ep.value == f"{EVAL_MAIN}:main"]
    return names[0] if names else "vf-eval"


def in_process_args() -> list[str]:
    """Eval CLI arguments that run the rollouts in the CLI's own process
    (where a caller's patches of glyph apply): ``--no-serve`` at a60a606,
    whose eval runs them in a spawned env-server worker pool by default
    (``v1/cli/eval/runner.py:3-4``, ``v1/configs/cli/eval.py:63-65``);
    none in 0.4.0, whose ``EvalConfig`` has no ``serve`` and runs them
    in-process."""
    from verifiers.v1.configs.cli.eval import EvalConfig
    return ["--no-serve"] if "serve" in EvalConfig.model_fields else []


def timed_out(trace: Any) -> bool:
    """Whether a setup, agent, finalize or scoring deadline ended ``trace`` (a
    ``vf.Trace``; at a60a606 only once the rollout has ended, since the expiry
    is recorded as its last error, and earlier attempts' errors do not count)."""
    if "is_timeout" in type(trace).model_fields:
        return bool(trace.is_timeout)
    last = trace.errors[-1].message if trace.errors and not trace.ok else ""
    return last.startswith(AGENT_TIMEOUT_PREFIX) or last in STAGE_TIMEOUTS


def failures_are_scored() -> bool:
    """Whether a rollout whose agent deadline expired, or whose model call
    failed once and succeeded on the program's retry, is finalized and scored
    (0.4.0) rather than left an errored, unscored trace (a60a606). A model
    call that failed for good is errored in both (3., 5.).
    ``Trace.is_timeout`` marks the 0.4.0 line."""
    from verifiers.v1 import Trace
    return "is_timeout" in Trace.model_fields
