import os
from pathlib import Path

import pytest

from glyph.sandbox import Sandbox


@pytest.fixture(scope="session")
def mbpp_path() -> str:
    path = os.environ.get("GLYPH_MBPP_PATH")
    if not path:
        pytest.skip("needs MBPP data: set GLYPH_MBPP_PATH to an MBPP JSONL in the official schema "
                    "(CI: ../shared/data/mbpp/mbpp.jsonl)")
    return path


@pytest.fixture(scope="session")
def mbpp_tasks(mbpp_path):
    from glyph.data import mbpp
    return mbpp.load(mbpp_path)


@pytest.fixture(scope="module")
def sandbox():
    """A server with no pre-forked workers: after a grading, any process in
    its namespace (or below it) is a leftover."""
    sb = Sandbox(pool=0)
    sb.protections()
    yield sb
    sb.close()


def _stat(pid: int) -> tuple[int, str]:
    data = Path(f"/proc/{pid}/stat").read_bytes()
    fields = data[data.rfind(b")") + 2:].split()
    return int(fields[1]), fields[0].decode()


def sandbox_processes(sb: Sandbox) -> list[int]:
    """Live host pids of every process the server started (not the server):
    its descendants (in namespaces and userns mode each run has a pid
    namespace of its own, nested in the server's, and its orphans are
    re-parented inside it), and in namespaces mode every other process in
    the server's own pid namespace too."""
    server = sb.server_pid()
    assert server is not None, "the sandbox server is not running"
    found = []
    if sb.info.mode == "namespaces":
        ns = os.readlink(f"/proc/{server}/ns/pid")
        for name in os.listdir("/proc"):
            if not name.isdigit() or int(name) == server:
                continue
            try:
                if os.readlink(f"/proc/{name}/ns/pid") == ns and _stat(int(name))[1] != "Z":
                    found.append(int(name))
            except OSError:
                continue
    parents = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                parents[int(name)] = _stat(int(name))
            except OSError:
                pass
    for pid, (ppid, state) in parents.items():
        p = ppid
        while p > 1 and p != server:
            p = parents.get(p, (0, ""))[0]
        if p == server and state != "Z" and pid not in found:
            found.append(pid)
    return found


def sandbox_tmp(sb: Sandbox) -> list[str]:
    """What is left in the runs' private /tmp (seen through the server's root)."""
    server = sb.server_pid()
    if not sb.info.protections["mount_isolation"]["on"]:
        pytest.skip("no private filesystem view on this machine")
    return os.listdir(f"/proc/{server}/root/tmp")


# tests/pin/ needs the pinned PRIME-RL stack (torch, PRIME-RL on PYTHONPATH, verifiers a60a606):
# tests/test_pin.py runs it there. In the main venv it is not collected.
collect_ignore = [] if os.environ.get("GLYPH_PIN_STACK") else ["pin"]


@pytest.fixture(autouse=True)
def _verifiers_free_calls_none(request):
    """A test marked ``verifiers_free`` (not run again at the pin, tests/test_pin.py) calls no
    verifiers code, in any thread: a profile hook records every Python call into the package."""
    if request.node.get_closest_marker("verifiers_free") is None:
        yield
        return
    import sys
    import threading

    import verifiers
    root = os.path.dirname(verifiers.__file__) + os.sep
    hits: list[str] = []

    def hook(frame, event, arg):
        if event == "call" and frame.f_code.co_filename.startswith(root) and len(hits) < 5:
            hits.append(f"{frame.f_code.co_filename[len(root):]}:{frame.f_code.co_name}")

    sys.setprofile(hook)
    threading.setprofile(hook)
    try:
        yield
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
    assert not hits, f"marked verifiers_free, but it called verifiers: {hits}"


def _pin_runs(session):
    """tests/test_pin.py's background runs (``PinRuns``), when this session selected one of its tests."""
    for item in session.items:
        runs = getattr(getattr(item, "module", None), "RUNS", None)
        if item.path.name == "test_pin.py" and runs is not None:
            return runs
    return None


# ---------------------------------------------------------------- quick and slow
# `uv run pytest -m quick`: what a newcomer runs first (under 2 minutes on two cores); `uv run pytest`
# (CI, .ci/run): everything. Every test is marked one or the other here, from its file and name, not in
# each file. Measured (pytest's junit times, the whole suite on a two-core machine shared with other
# jobs): a file whose tests took 40 s or more in all is slow whole (it runs vf-eval or the eval CLI,
# prepares data, builds a venv or the pinned stack, generates plus tests or replays every SFT trace),
# and so is a test that took 2 s or more elsewhere. A test that grows slow belongs in these lists.
SLOW_FILES = frozenset({
    "test_conventions_env.py", "test_data.py", "test_env.py", "test_env_pool.py", "test_eval_profiles.py",
    "test_faults.py", "test_flywheel_live.py", "test_flywheel_loop.py", "test_gold_check.py", "test_pin.py",
    "test_plus.py", "test_recipe_smoke.py", "test_redteam.py", "test_render.py", "test_render_study.py",
    "test_report_policies.py", "test_sandbox_unprivileged.py", "test_wheels.py", "test_study_replay.py",
    "test_hostile_replies.py",
})
SLOW_TESTS = {  # file: test names (a parametrized test by its name alone: all its cases; or one case)
    "test_cli.py": ("test_attack_demo_grades_as_expected", "test_check_gold_all_pass",
                    "test_demo_runs_vf_eval_for_both_arms"),
    "test_cli_friction.py": ("test_every_option_is_described_and_shows_its_default_as_it_is",
                             "test_replicate_names_the_folders_it_writes", "test_version_and_short_help"),
    "test_conventions.py": ("test_shipped_file_validates",),
    "test_flywheel_credit.py": ("test_cli_continues_with_a_model_endpoint",
                                "test_forks_of_the_slipping_repair_draw_apart_reproducibly"),
    "test_flywheel_import.py": ("test_the_cli_redraws_runs_replication_credit_and_bands",),
    "test_flywheel_noise.py": ("test_aa_band_matches_the_two_rate_band_for_independent_rollouts",
                               "test_aa_band_widens_when_a_tasks_rollouts_are_correlated",
                               "test_run_with_the_aa_gate_records_the_three_bands_and_resumes_the_aa_command",
                               "test_the_default_gate_records_the_bands_without_measuring"),
    "test_flywheel_pages.py": ("test_a_kept_lesson_whose_paired_interval_includes_0_is_marked",
                               "test_every_point_of_a_run_has_the_interval_of_its_stored_rollouts",
                               "test_replicate_and_sweep_write_html_with_the_bands_and_intervals",
                               "test_run_json_and_the_curve_page_carry_every_gates_decision_per_round",
                               "test_the_flywheel_pages_and_the_report_share_one_look",
                               "test_write_run_is_deterministic"),
    "test_grading.py": ("test_a_server_killed_under_a_grading_is_regraded_or_raised_never_a_verdict",
                        "test_outcome_classes[timeout]", "test_referee_timeouts_are_timeouts"),
    "test_layers.py": ("test_the_shipped_set_imports_alone",),
    "test_report_known.py": ("test_outputs_json_markdown_and_one_self_contained_html",),
    "test_report_pictures.py": ("test_every_text_is_at_least_9_pt_and_inside_its_figure",),
    "test_sandbox.py": ("test_a_large_request_to_a_run_that_stops_reading_is_bounded",
                        "test_bare_mode_still_limits_and_sweeps", "test_time_limits"),
    "test_wire.py": ("test_a_bomb_on_the_result_channel_is_refused_fast_and_small",
                     "test_a_decoded_value_stays_under_the_documented_bound",
                     "test_loads_counts_tokens_before_parsing"),
}


def is_slow(item) -> bool:
    """Whether ``item`` is left out of ``-m quick`` (``SLOW_FILES``, ``SLOW_TESTS``)."""
    names = SLOW_TESTS.get(item.path.name, ())
    return item.path.name in SLOW_FILES or item.name in names or getattr(item, "originalname", None) in names


def pytest_ignore_collect(collection_path, config):
    """``-m quick`` does not even import a slow file (their imports are seconds of the quick run)."""
    if config.getoption("markexpr", "") == "quick" and collection_path.name in SLOW_FILES:
        return True
    return None


@pytest.hookimpl(tryfirst=True)  # before ``-m`` deselects by these markers
def pytest_collection_modifyitems(session, config, items):
    """Every test marked ``slow`` or ``quick`` (above); tests/test_pin.py's tests wait for the
    background runs: they go last, so the rest of the suite runs meanwhile."""
    for item in items:
        item.add_marker(pytest.mark.slow if is_slow(item) else pytest.mark.quick)
    items.sort(key=lambda item: item.path.name == "test_pin.py")


def pytest_collection_finish(session):
    runs = _pin_runs(session)
    if runs is not None and not session.config.option.collectonly:
        runs.start(session.config._tmp_path_factory.mktemp("pin-runs"))


def pytest_sessionfinish(session):
    runs = _pin_runs(session)
    if runs is not None:
        runs.stop()


@pytest.fixture(scope="session")
def demo_runs(tmp_path_factory, mbpp_path) -> dict:
    """``glyph demo --tasks 3`` once per profile, both at once (the eval CLI, both arms, the mix
    policy: revise, hack and oracle on the first three tasks of the profile's test split), shared by
    the profile x command matrix (``test_profile_matrix.py``) and the eval CLI's tests
    (``test_eval_profiles.py``). Per profile: ``out`` (the eval runs, ``arm_<a|b>-<profile>``),
    ``code`` (the command's exit status) and ``text`` (what it printed)."""
    import subprocess
    import sys
    import types

    root = tmp_path_factory.mktemp("demo")
    env = dict(os.environ, PRIME_RUNS_MODE="disabled", COLUMNS="200")
    procs = {p: subprocess.Popen([sys.executable, "-m", "glyph.cli.app", "demo", "--tasks", "3", "--out",
                                  str(root / p), "--profile", p, "--mbpp-path", mbpp_path],
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
             for p in ("study", "glyph")}
    runs = {}
    for profile, proc in procs.items():
        text, _ = proc.communicate(timeout=600)
        runs[profile] = types.SimpleNamespace(out=root / profile, code=proc.returncode, text=text)
    return runs
