"""Every attack in glyph.redteam: not passed, no process left, no file left
outside the run directory, grader alive (and not restarted), and a grade
whose text UTF-8 can encode."""

import hashlib
import json
import os
import resource
import socket
from pathlib import Path

import pytest
from conftest import sandbox_processes, sandbox_tmp

import glyph
from glyph.grading import grade
from glyph.redteam import ATTACKS, DEMO_SOLUTION, DEMO_TESTS, aimed_at_a_listener
from glyph.sandbox import Limits
from glyph.semantics import GLYPH, STUDY

SECRET = "glyph-redteam-secret-4c1d"
os.environ["GLYPH_REDTEAM_SECRET"] = SECRET  # before any sandbox starts: it must not leak into runs
LIMITS = Limits(cpu_s=2, wall_s=4)
WATCHED_DIRS = [Path("/tmp"), Path("/var/tmp"), Path("/dev/shm"), Path.home(), Path.cwd(),
                Path(glyph.__file__).parent]
TRUSTED_FILES = [Path(glyph.__file__).parent / "grading.py", Path(glyph.__file__).parent / "semantics.py",
                 *sorted((Path(glyph.__file__).parent / "sandbox").rglob("*.py")), Path(os.__file__)]


def snapshot():
    # Only the attacks' own marker names: other programs may use /tmp meanwhile.
    names = {d: sorted(n for n in os.listdir(d) if "pwned" in n) for d in WATCHED_DIRS if d.is_dir()}
    digests = {f: hashlib.sha256(f.read_bytes()).hexdigest() for f in TRUSTED_FILES}
    return names, digests


def test_at_least_twenty_distinct_attacks():
    assert len({a.name for a in ATTACKS}) == len(ATTACKS) >= 20


@pytest.mark.parametrize("attack", [a for a in ATTACKS if a.own_tests], ids=lambda a: a.name)
def test_an_attacks_own_tests_pass_the_reference(attack, sandbox):
    assert grade(DEMO_SOLUTION, "", attack.tests, limits=LIMITS, sandbox=sandbox).passed


@pytest.mark.parametrize("semantics", [GLYPH, STUDY], ids=["glyph", "study"])
@pytest.mark.parametrize("attack", ATTACKS, ids=[a.name for a in ATTACKS])
def test_attack_is_contained(attack, semantics, sandbox):
    """Under either profile's semantics (``glyph.semantics``: the study's runs the solution as
    ``__main__`` and reads the run's own report of what it printed)."""
    source, listener = aimed_at_a_listener(attack)
    before = snapshot()
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    g = grade(source, "", attack.tests, limits=LIMITS, sandbox=sandbox, semantics=semantics)

    assert not g.passed, f"{attack.name} was rewarded: {g.detail}"
    assert sandbox_processes(sandbox) == [], "processes left behind"
    assert sandbox_tmp(sandbox) == [], "files left in the runs' /tmp"
    assert snapshot() == before, "files outside the sandbox changed"
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before < 200 * 1024, "grader memory grew"
    assert SECRET not in g.stdout + g.stderr + g.detail
    json.dumps(g.to_json(), ensure_ascii=False).encode("utf-8")  # what a store or a terminal takes
    if listener is not None:
        with pytest.raises(socket.timeout):
            listener.accept()
        listener.close()
    assert sandbox.restarts == 0, "the server died"
    assert grade(DEMO_SOLUTION, "", DEMO_TESTS, sandbox=sandbox).passed, "grader broken after the attack"


def _bare_control(fn, *args, tries: int = 3, **kwargs):
    """The attack in bare mode, where nothing separates runs: it must work
    there, else a test that it fails elsewhere shows nothing. Timing decides
    how many colluding copies find each other: a few tries."""
    from glyph.sandbox import Sandbox
    sb = Sandbox(mode="bare", pool=0)
    try:
        return _control(fn, sb, *args, tries=tries, **kwargs)
    finally:
        sb.close()


def _control(fn, sb, *args, tries: int = 3, **kwargs):
    """``fn(sb, ...)`` until it shows the attack working (a copy or a grading passed), at most ``tries``
    times: the last result."""
    for _ in range(tries):
        result = fn(sb, *args, **kwargs)
        if (any(result) if isinstance(result, list) else result["second"]):
            return result
    return result


def test_colluding_copies_graded_at_once_pass_none(sandbox):
    """Eight copies of a solution that computes nothing, graded at once,
    pooling over abstract unix sockets which answers got them killed: each
    run has a network namespace of its own, so each copy is alone; and no
    run learns a verdict to pool. Control: in bare mode, graded by the
    grader that told a run its verdicts (``leaky_grade``), copies pass; by
    glyph's grader, none does even there."""
    from testkit.redteam import collude
    from testkit.redteam.verdicts import leaky_grade
    passed = collude(sandbox)
    assert not any(passed), passed
    assert sandbox_processes(sandbox) == [] and sandbox.restarts == 0
    assert any(_bare_control(collude, grader=leaky_grade)), "control: against leaky_grade some copies must pass"
    assert not any(_bare_control(collude, tries=1)), "in bare mode too, no copy learns a verdict to pool"


def test_colluding_copies_pass_no_copy_of_mbpp_task_3(sandbox, mbpp_tasks):
    from testkit.redteam import collude
    task = mbpp_tasks["mbpp_3"]
    assert not any(collude(sandbox, tests=task.tests(), function="is_not_prime"))


def test_what_a_grading_plants_a_later_grading_does_not_find(sandbox):
    """The first grading plants its value in the kernel keyrings, SysV shared
    memory, /tmp, /var/tmp, /dev/shm, /run/lock, its home and cwd, the
    environment, an inheritable pipe and a daemon on an abstract socket; the
    second, which knows no value, finds none of it and fails."""
    from testkit.redteam import carryover
    before = snapshot()
    c = carryover(sandbox)
    assert c["first"], c
    assert not c["second"] and c["found"] == {}, c
    assert sandbox_processes(sandbox) == [], "processes left behind"
    assert _planted(c["token"]) == [] and snapshot()[1] == before[1], "files outside the sandbox changed"
    bare = _bare_control(carryover)
    assert bare["second"] and {"keyring -4", "sysv shm", "/tmp"} <= set(bare["found"]), bare
    assert _planted(bare["token"]) == [], "the bare control left files behind"


def _planted(token: str) -> list[str]:
    """The files carryover's planting named with its own token: another test
    session on the machine may plant its own meanwhile (the names alone would
    differ), this run's are what must be gone."""
    return [str(d / f"glyph-pwned-{token}") for d in WATCHED_DIRS if (d / f"glyph-pwned-{token}").exists()]


def test_keyring_calls_are_denied_in_every_isolating_run(sandbox):
    import json
    src = ("import ctypes, platform\nlibc = ctypes.CDLL(None, use_errno=True)\n"
           "NR = {'x86_64': (248, 249, 250), 'aarch64': (217, 218, 219)}[platform.machine()]\n"
           "def errnos():\n    out = []\n    for nr in NR:\n"
           "        libc.syscall(ctypes.c_long(nr), 0, 0, 0, 0, 0)\n        out.append(ctypes.get_errno())\n"
           "    return out\n")
    from glyph.sandbox import Limits
    from glyph.sandbox.runtime import wire
    run = sandbox.open({"mode": "solution"}, {"source": src.encode(), "setup": b""}, Limits())
    assert run.recv() == {"ev": "ready"}
    run.send({"op": "eval", "id": 0, "expr": "errnos()"})
    assert wire.decode(run.recv()["value"]) == [13, 13, 13]  # EACCES, from the filter (else EFAULT/EINVAL)
    run.send({"op": "exit"})
    run.finish()
    assert sandbox.info.protections["syscall_filter"]["on"], json.dumps(sandbox.info.protections)


# ---------------------------------------------------------------- verdicts: nothing a run could carry


def test_a_source_graded_again_and_again_never_passes_mbpp_task_3(sandbox, mbpp_tasks):
    """One source that computes nothing, graded three times in one sandbox, keeping what each grading
    could learn in every channel runs still share (the page cache of stdlib files, the fork, pid and
    inode counters). Control: against the grader that told a run its verdicts (``leaky_grade``), it
    passes on a later grading (the second, but where the page cache lost a bit meanwhile), through the
    page cache, in this mode: the channel is real."""
    from testkit.redteam.verdicts import leaky_grade, learn_then_pass
    tests = mbpp_tasks["mbpp_3"].tests()
    assert learn_then_pass(sandbox, tests) == [False, False, False]
    assert sandbox_processes(sandbox) == [] and sandbox.restarts == 0
    # Learning takes a grading; one more where the page cache lost a bit meanwhile (memory pressure)
    control = _control(learn_then_pass, sandbox, tests, grader=leaky_grade)
    assert control[0] is False and any(control[1:]), control


def test_copies_pooling_over_flock_pass_no_copy_of_mbpp_task_3(sandbox, mbpp_tasks):
    """Eight copies graded at once, pooling what each learns over flock() on stdlib files every run
    sees (no namespace separates them). Control: against ``leaky_grade`` copies pass, in this mode."""
    from testkit.redteam.verdicts import collude_by_flock, leaky_grade
    tests = mbpp_tasks["mbpp_3"].tests()
    assert not any(collude_by_flock(sandbox, tests=tests))
    assert sandbox_processes(sandbox) == [] and sandbox.restarts == 0
    assert any(_control(collude_by_flock, sandbox, tests=tests, grader=leaky_grade))


def test_what_runs_still_share_and_what_they_do_not(sandbox):
    """``glyph sandbox info``'s "still shared", measured: one run stores a value, the next loads it.
    The page cache carries it exactly; in a pid namespace of its own a run is always pid 1."""
    from testkit.redteam.verdicts import carry_census
    census = carry_census(sandbox, 173, tries=3)
    assert census["page cache"] == [173, 173], census
    if sandbox.info.mode in ("namespaces", "userns"):
        assert census["pid counter"] == [173, 1], census
    assert sandbox_processes(sandbox) == []


def test_no_run_finds_another_runs_processes(sandbox):
    """kill(pid, 0) on every pid finds nothing but the run itself while three other runs are alive."""
    from testkit.redteam.verdicts import visible_pids
    if sandbox.info.mode not in ("namespaces", "userns"):
        pytest.skip(f"{sandbox.info.mode}: runs share the host's pid namespace (glyph sandbox info)")
    assert visible_pids(sandbox, copies=4) == [0, 0, 0, 0]
    assert sandbox_processes(sandbox) == []


CONCURRENT_GRADINGS = r'''
import json, sys, threading
from glyph.grading import grade
from glyph.redteam import attack
from glyph.sandbox import Limits, Sandbox
copies = int(sys.argv[1])

def high_water_kb():
    return next(int(x.split()[1]) for x in open("/proc/self/status") if x.startswith("VmHWM:"))

sb = Sandbox(pool=0)
a = attack("wire_cap_sets")
grade(a.source, "", a.tests, sandbox=sb)  # warm
before = high_water_kb()
outcomes = [None] * copies
def one(i):
    outcomes[i] = grade(a.source, "", a.tests, limits=Limits(cpu_s=10, wall_s=60), sandbox=sb).outcome.value
threads = [threading.Thread(target=one, args=(i,)) for i in range(copies)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(json.dumps({"outcomes": outcomes, "grew_kb": high_water_kb() - before}))
sb.close()
'''


def test_answers_at_the_cap_graded_many_at_once_stay_small_in_the_grader():
    """32 gradings at once, every answer just under the answer cap and shaped to cost the decoder most:
    each answer is decoded after its run, one at a time in the process (64 such gradings held 1.4-1.9 GB
    before the cap)."""
    import subprocess
    import sys
    p = subprocess.run([sys.executable, "-c", CONCURRENT_GRADINGS, "32"], capture_output=True, text=True,
                       timeout=600, check=False)
    assert p.returncode == 0, p.stderr[-2000:]
    out = json.loads(p.stdout.splitlines()[-1])
    assert out["outcomes"] == ["ASSERTION_FAILURE"] * 32
    assert out["grew_kb"] < 64 * 1024, f"the grader grew by {out['grew_kb'] // 1024} MiB"


def test_a_study_rollout_that_tests_twice_then_says_final_scores_zero(mbpp_tasks, tmp_path):
    """Through the env (the study profile, the local runtime's test service, finalize): a rollout whose
    solution computes nothing and learns across gradings runs python_test twice, then says FINAL. Its
    second test passed before verdict blindness (reward 1.0); now every grading fails and it scores 0."""
    from glyph.agent import study as S
    from glyph.agent.profiles.study import STUDY, call_line
    from glyph.data import study
    from glyph.envs.mbpp.harness import GlyphHarnessConfig
    from testkit.redteam import channels
    from testkit.rollout import Rollouts, Scripted
    task = mbpp_tasks["mbpp_3"]
    st = study.from_mbpp(task)
    source = channels.source(channels.SEQUENTIAL, "env-" + os.urandom(4).hex(), "is_not_prime")
    def call(tool: str, call_id: str, find: str | None = None, replace: str | None = None) -> str:
        return call_line(tool, call_id, STUDY.args(tool, st.solution_path, st.project, find, replace))

    replies = [call(S.APPLY_PATCH, "c1", S.PLACEHOLDER, source), call(S.PYTHON_TEST, "c2"),
               call(S.PYTHON_TEST, "c3"), S.FINAL_TURN]
    with Rollouts(mbpp_tasks, GlyphHarnessConfig(profile="study", tool_timeout=20, model_timeout=30)) as r:
        with Scripted(replies) as model:
            played = r.play(task, "a", "script", tmp_path / "ws", model=model)
    assert played.trace["end"] == "final"
    assert [g["outcome"] for g in played.service["log"]] == ["ASSERTION_FAILURE"] * 2, played.service["log"]
    assert played.record.reward == 0.0 and played.record.final_outcome == "ASSERTION_FAILURE"
