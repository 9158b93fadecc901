import json
import os
import socket
from pathlib import Path

import pytest
from typer.testing import CliRunner

from glyph.cli.app import app
from glyph.data import mbpp
from glyph.errors import DataError
from glyph.redteam import DEMO_SOLUTION, DEMO_TESTS

runner = CliRunner()


@pytest.fixture()
def files(tmp_path):
    (tmp_path / "good.py").write_text(DEMO_SOLUTION)
    (tmp_path / "bad.py").write_text("def remove_first_last(s, ch):\n    return s\n")
    (tmp_path / "tests.py").write_text(DEMO_TESTS)
    (tmp_path / "latin1.py").write_bytes(b"x = '\xe9'\n")
    (tmp_path / "empty.py").write_text("")
    return tmp_path


def test_grade_tests_json(files):
    r = runner.invoke(app, ["grade", "--tests", str(files / "tests.py"), "--solution", str(files / "good.py"), "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["passed"] is True and d["outcome"] == "PASS" and len(d["checks"]) == 3 and d["seconds"] > 0


def test_grade_failure_exit_code_and_text(files):
    r = runner.invoke(app, ["grade", "--tests", str(files / "tests.py"), "--solution", str(files / "bad.py")])
    assert r.exit_code == 1
    assert "ASSERTION_FAILURE" in r.stdout and "got 'hello', expected 'heo'" in r.stdout


@pytest.mark.parametrize("raised,shown", [
    ('"bad \\udcff \\ud800 end"', "ValueError: bad \\udcff \\ud800 end"),  # lone surrogates
    ('"[/] [bold]x \\x1b[2J\\x00"', "ValueError: [/] [bold]x \\x1b[2J\\x00"),  # markup, terminal controls
])
def test_grade_text_of_a_failure_model_code_controls(files, raised, shown):
    """What the solution raised is printed escaped, and the exit is a failing grade's."""
    (files / "raises.py").write_text(f"def remove_first_last(s, ch):\n    raise ValueError({raised})\n")
    r = runner.invoke(app, ["grade", "--tests", str(files / "tests.py"), "--solution", str(files / "raises.py")])
    assert r.exit_code == 1 and isinstance(r.exception, SystemExit), r.exception  # not a crash
    assert "RUNTIME_ERROR" in r.stdout and shown in r.stdout, r.stdout
    r = runner.invoke(app, ["grade", "--tests", str(files / "tests.py"), "--solution", str(files / "raises.py"),
                            "--json"])
    assert r.exit_code == 1 and json.loads(r.stdout)["detail"].startswith("ValueError: ")


@pytest.mark.parametrize("name,outcome", [("latin1.py", "SYNTAX_ERROR"), ("empty.py", "RUNTIME_ERROR")])
def test_bad_solution_files_are_outcomes(files, name, outcome):
    r = runner.invoke(app, ["grade", "--tests", str(files / "tests.py"), "--solution", str(files / name), "--json"])
    assert json.loads(r.stdout)["outcome"] == outcome


def test_a_solution_over_the_size_limit_is_named_by_its_own_size(files):
    """A 52 MiB file (sparse): the grade names its size, not the read cap (8,388,609) glyph grade
    stops reading at; it is OTHER, exit 1, and nothing runs."""
    big = files / "big.py"
    with big.open("wb") as f:
        f.truncate(52 << 20)
    r = runner.invoke(app, ["grade", "--tests", str(files / "tests.py"), "--solution", str(big)])
    assert r.exit_code == 1 and "OTHER" in r.stdout and "(not run)" in r.stdout, r.stdout
    text = " ".join(r.stdout.split())
    assert "big.py is 54,525,952 bytes (52.0 MiB), over the grader's 8,388,608-byte limit" in text, text
    assert "8388609" not in text and "8,388,609" not in text
    d = json.loads(runner.invoke(app, ["grade", "--tests", str(files / "tests.py"), "--solution", str(big),
                                       "--json"]).stdout)
    assert d["outcome"] == "OTHER" and not d["checks"]
    assert d["detail"].startswith("big.py is 54,525,952 bytes")


def test_missing_solution_is_a_one_line_error(files):
    r = runner.invoke(app, ["grade", "--tests", str(files / "tests.py"), "--solution", str(files / "nope.py")])
    assert r.exit_code == 2 and "nope.py: no such file" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_grade_mbpp_task(files, mbpp_path):
    sol = files / "sol.py"
    sol.write_text("def remove_Occ(s, ch):\n    s = s.replace(ch, '', 1)\n    i = s.rfind(ch)\n"
                   "    return s if i < 0 else s[:i] + s[i + 1:]\n")
    r = runner.invoke(app, ["grade", "--task", "mbpp_11", "--solution", str(sol), "--json", "--mbpp-path", mbpp_path])
    assert r.exit_code == 0 and json.loads(r.stdout)["passed"]


def test_unknown_task_is_a_one_line_error(files, mbpp_path):
    r = runner.invoke(app, ["grade", "--task", "mbpp_0", "--solution", str(files / "good.py"), "--mbpp-path", mbpp_path])
    assert r.exit_code == 2 and "glyph data list" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_sandbox_info_json():
    r = runner.invoke(app, ["sandbox", "info", "--json"])
    assert r.exit_code == 0
    d = json.loads(r.stdout)
    assert set(d["protections"]) >= {"pid_namespace", "network_isolation", "mount_isolation", "uid_separation",
                                     "rlimits"}


@pytest.fixture()
def eval_in_process(monkeypatch):
    """``subprocess.run`` for the eval CLI's command, in this process: the command
    (checked to be ``glyph.vfcompat.eval_command``'s) is run as verifiers' eval
    ``main(argv)`` under the environment (and in the folder) given, its stdout and
    stderr kept as a subprocess's would be, and what ``main`` sets for a whole process is put back after:
    ``sys.argv``, the SIGINT/SIGTERM handlers (``verifiers/v1/utils/interrupt.py:19-35``),
    loguru's sinks and the ``verifiers.v1`` logger (``verifiers/v1/utils/logging.py:39-60``).
    Each run saves a fresh interpreter's import of verifiers (seconds);
    tests/test_eval_profiles.py runs the same command as a subprocess."""
    import contextlib
    import io
    import logging
    import signal
    import subprocess
    import sys

    from glyph.vfcompat import EVAL_MAIN

    def run(cmd, *, capture_output, text, env, cwd=None, timeout=None):
        assert capture_output and text
        assert cmd[:3] == [sys.executable, "-c", f"from {EVAL_MAIN} import main; main()"], cmd
        from loguru import logger
        from verifiers.v1.cli.eval.main import main

        out, err, code = io.StringIO(), io.StringIO(), 0
        argv, handlers = sys.argv[:], {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
        library = logging.getLogger("verifiers.v1")
        state = (library.handlers[:], library.level, library.propagate, logging.lastResort)
        with monkeypatch.context() as m:
            for name in set(os.environ) - set(env):
                m.delenv(name)
            for name, value in env.items():
                m.setenv(name, value)
            if cwd is not None:
                m.chdir(cwd)
            try:
                with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                    main(cmd[3:])
            except SystemExit as exc:  # as the interpreter reports it
                code = exc.code if isinstance(exc.code, int) else 1
                if exc.code is not None and not isinstance(exc.code, int):
                    err.write(f"{exc.code}\n")
            finally:
                sys.argv[:] = argv
                for sig, handler in handlers.items():
                    signal.signal(sig, handler)
                logger.remove()  # main's sinks: the captured stderr and the run's log file
                logger.add(sys.stderr)  # loguru's default
                library.handlers[:], library.level, library.propagate, logging.lastResort = state
        return subprocess.CompletedProcess(cmd, code, out.getvalue(), err.getvalue())

    return run


@pytest.mark.parametrize("profile", ["study", "glyph"])
def test_demo_runs_vf_eval_for_both_arms(mbpp_path, tmp_path, profile, eval_in_process, monkeypatch):
    import types

    from rich.console import Console

    import glyph.demo
    from glyph.vfcompat import eval_cli
    monkeypatch.setattr(glyph.demo, "subprocess", types.SimpleNamespace(run=eval_in_process))
    spun, status = [], Console.status
    monkeypatch.setattr(Console, "status",
                        lambda self, text, **kw: spun.append(text) or status(self, text, **kw))
    r = runner.invoke(app, ["demo", "--tasks", "3", "--mbpp-path", mbpp_path, "--out", str(tmp_path),
                            "--profile", profile])
    assert r.exit_code == 0, r.output
    # the spinner reads as the command a user would type, not as `-c from verifiers... import main`
    assert spun == [f"arm {arm}: {eval_cli()} glyph-mbpp -m mix -n 3 --env.taskset.arm {arm} "
                    f"({profile} profile) ..." for arm in ("a", "b")], spun
    assert "against expectation" not in r.stdout and "All as expected" in " ".join(r.stdout.split())
    assert f"profile: {profile} (--env.taskset.profile {profile} --env.agent.harness.profile {profile})" in \
        " ".join(r.stdout.split())
    for arm in ("a", "b"):  # the runs are the profile's
        cfg = json.loads(next((tmp_path / f"arm_{arm}-{profile}").rglob("eval.json")).read_text())
        assert cfg["env"]["taskset"]["profile"] == cfg["env"]["agent"]["harness"]["profile"] == profile
    # Arm B's prediction metrics, as glyph report computes them (the mix policy predicts on every patch).
    assert "prediction accuracy" in r.stdout and "REVISE rate on failing patches" in r.stdout


def test_attack_demo_grades_as_expected():
    from rich.console import Console

    from glyph.demo import run_attack_demo
    console = Console(record=True, width=200)
    assert run_attack_demo(console) == 0
    assert "always_equal" in console.export_text()


def test_check_gold_all_pass(mbpp_path):
    r = runner.invoke(app, ["data", "check-gold", "--json", "--mbpp-path", mbpp_path])
    d = json.loads(r.stdout)
    assert d["tests"]["counts"] == {"PASS": 974} and d["challenge"]["counts"] == {"PASS": 11}, d
    assert r.exit_code == 0


def _one_clear_error(r, *names: str) -> None:
    """Exit 2, no traceback, and the message names each of ``names``."""
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output and not isinstance(r.exception, (ValueError, OSError, OverflowError))
    for name in names:
        assert name in r.output, r.output


def test_serve_port_out_of_range_names_the_option():
    _one_clear_error(runner.invoke(app, ["serve", "--port", "99999"]), "--port", "65535")


def test_serve_port_taken_is_one_line_naming_the_option(mbpp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        r = runner.invoke(app, ["serve", "--port", str(port), "--mbpp-path", mbpp_path])
    _one_clear_error(r, f"--port {port}", "in use")
    assert len(r.stderr.strip().splitlines()) == 1


def test_demo_with_no_tasks_fails_before_running_anything():
    _one_clear_error(runner.invoke(app, ["demo", "--tasks", "0"]), "--tasks")


def test_demo_with_an_unknown_profile_names_the_known_ones():
    _one_clear_error(runner.invoke(app, ["demo", "--profile", "prime"]), "--profile prime", "study", "glyph")


def test_serve_an_unknown_policy_lists_the_valid_ones(mbpp_path):
    _one_clear_error(runner.invoke(app, ["serve", "--policy", "orakle", "--port", "0", "--mbpp-path", mbpp_path]),
                     "--policy", "'orakle'", "oracle", "recover", "revise", "hack", "mix", "fault-budget")


def test_data_errors_name_the_callers_option(tmp_path, monkeypatch):
    """vf-eval's taskset passes its option; the glyph command keeps --mbpp-path."""
    monkeypatch.delenv(mbpp.ENV_VAR, raising=False)
    absent = str(tmp_path / "absent.jsonl")
    with pytest.raises(DataError, match=r"absent.jsonl: no such file \(from --env.taskset.data-path\)"):
        mbpp.load_source(absent, option="--env.taskset.data-path")
    with pytest.raises(DataError, match=r"\(from --mbpp-path\)"):
        mbpp.load_source(absent)
    monkeypatch.setenv(mbpp.ENV_VAR, absent)
    with pytest.raises(DataError, match=r"no such file \(from GLYPH_MBPP_PATH\)"):
        mbpp.load_source(None, option="--env.taskset.data-path")


def test_no_data_offline_is_one_line_naming_the_env_var_and_option(monkeypatch):
    import huggingface_hub
    from huggingface_hub.errors import LocalEntryNotFoundError

    def offline(*args, **kwargs):
        raise LocalEntryNotFoundError("offline")

    monkeypatch.delenv(mbpp.ENV_VAR, raising=False)
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", offline)
    problem = mbpp.data_problem(None, option="--env.taskset.data-path")
    assert problem is not None and "\n" not in problem
    assert "GLYPH_MBPP_PATH" in problem and "--env.taskset.data-path" in problem
    assert "--mbpp-path" not in problem


def _closed_port() -> int:
    """A port on 127.0.0.1 nothing listens on (bound, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_no_data_with_the_hub_unreachable_fails_in_seconds(monkeypatch, tmp_path, caplog):
    """Offline without a data path: the one line naming GLYPH_MBPP_PATH comes after the
    two-second reachability check (``glyph.data.hub``), not after huggingface_hub's retries
    (five, up to 8 s apart: 23-29 s measured). The hub endpoint is a closed port on 127.0.0.1;
    the hub cache an empty folder."""
    import time

    from huggingface_hub import constants

    monkeypatch.delenv(mbpp.ENV_VAR, raising=False)
    for var in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{_closed_port()}")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    started = time.monotonic()
    problem = mbpp.data_problem(None, option="--env.taskset.data-path")
    elapsed = time.monotonic() - started
    assert elapsed < 3, f"{elapsed:.1f} s"
    assert problem is not None and "\n" not in problem
    assert "connection refused by 127.0.0.1:" in problem and "not in the local hub cache" in problem, problem
    assert "GLYPH_MBPP_PATH" in problem and "--env.taskset.data-path" in problem
    assert "Retrying" not in caplog.text


def test_hub_check_names_why_and_keeps_its_deadline(monkeypatch):
    """``hub.unreachable``: a refused connection is named; name resolution that hangs (it takes
    no timeout) is abandoned at the deadline; behind a proxy no direct check is made."""
    import time

    from glyph.data import hub

    for var in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    port = _closed_port()
    assert hub.unreachable(f"http://127.0.0.1:{port}") == f"connection refused by 127.0.0.1:{port}"
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        assert hub.unreachable(f"http://127.0.0.1:{listening.getsockname()[1]}") is None

    def hangs(*args, **kwargs):
        time.sleep(3)
        raise OSError("answered after the deadline")

    monkeypatch.setattr(socket, "create_connection", hangs)
    started = time.monotonic()
    assert hub.unreachable("https://hub.example", deadline=0.5) == \
        "no connection to hub.example:443 within 0.5 s"
    assert time.monotonic() - started < 2
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:3128")
    assert hub.unreachable("https://hub.example", deadline=0.5) is None


def test_data_problem_accepts_good_data_and_names_a_bad_row(mbpp_path, tmp_path):
    assert mbpp.data_problem(mbpp_path, option="--env.taskset.data-path") is None
    bad = tmp_path / "bad.jsonl"
    bad.write_text(Path(mbpp_path).read_text().splitlines()[0] + "\n{not json\n")
    problem = mbpp.data_problem(str(bad), option="--env.taskset.data-path")
    assert problem.startswith(f"{bad}:2: not a JSON object"), problem


def test_glyph_mbpp_readme_lists_every_option_with_its_default():
    """vf-eval's --help omits the harness's options: the environment README is where they are listed."""
    import verifiers.v1 as vf

    from glyph.envs.mbpp.harness import GlyphHarnessConfig
    from glyph.envs.mbpp.taskset import GlyphTasksetConfig

    readme = (Path(__file__).resolve().parent.parent / "environments/glyph_mbpp/README.md").read_text()
    rows = {line.split("`")[1].split()[0]: line for line in readme.splitlines() if line.startswith("| `--")}
    for prefix, cfg, base in (("--env.taskset.", GlyphTasksetConfig, vf.TasksetConfig),
                              ("--env.agent.harness.", GlyphHarnessConfig, vf.HarnessConfig)):
        for name in set(cfg.model_fields) - set(base.model_fields):
            option = prefix + name.replace("_", "-")
            assert option in rows, f"environments/glyph_mbpp/README.md does not list {option}"
            default = cfg.model_fields[name].default
            if default is not None:
                shown = str(default).lower() if isinstance(default, bool) else str(default)
                assert f"`{shown}`" in rows[option], f"{option}: the README's default is not `{shown}`"


def test_vf_eval_bad_data_path_is_one_error_naming_the_env_option(tmp_path, eval_in_process):
    """In this process (``eval_in_process``); tests/test_eval_profiles.py runs the eval CLI as a subprocess."""
    import sys

    from glyph.vfcompat import eval_command

    cmd = eval_command("glyph-mbpp", "--env.taskset.data-path", "absent.jsonl", "-n", "1",
                       "-m", "x", "--client.base-url", "http://127.0.0.1:9/v1", "--no-push")
    assert cmd[0] == sys.executable
    r = eval_in_process(cmd, capture_output=True, text=True, cwd=tmp_path, timeout=120,
                        env=dict(os.environ, HF_HUB_OFFLINE="1", PRIME_RUNS_MODE="disabled", COLUMNS="200"))
    out = r.stdout + r.stderr
    assert r.returncode != 0 and "Traceback" not in out, out[-3000:]
    text = " ".join(out.replace("│", " ").split())  # the config error is a rich box
    assert "absent.jsonl: no such file (from --env.taskset.data-path)" in text, out
    assert "--mbpp-path" not in text


def test_vf_eval_with_no_data_at_all_is_one_line_naming_the_env_option(tmp_path, eval_in_process, monkeypatch):
    """No ``--env.taskset.data-path``, no ``GLYPH_MBPP_PATH``, and the hub
    unreachable: one line on what to set, no traceback. In this process: huggingface_hub
    reads HF_HUB_OFFLINE and HF_HOME when it is imported (``huggingface_hub/constants.py``),
    so its settings are set here as a fresh process given those variables would have them."""
    from huggingface_hub import constants

    from glyph.vfcompat import eval_command

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
    cmd = eval_command("glyph-mbpp", "-n", "1", "-m", "x", "--client.base-url", "http://127.0.0.1:9/v1",
                       "--no-push")
    env = {k: v for k, v in os.environ.items() if k != "GLYPH_MBPP_PATH"}
    env.update(HF_HUB_OFFLINE="1", PRIME_RUNS_MODE="disabled", HF_HOME=str(tmp_path / "hf"), COLUMNS="200")
    r = eval_in_process(cmd, capture_output=True, text=True, cwd=tmp_path, timeout=120, env=env)
    out = r.stdout + r.stderr
    assert r.returncode != 0 and "Traceback" not in out, out[-3000:]
    last = out.strip().splitlines()[-1]
    assert last.startswith("glyph-mbpp: could not download MBPP"), out[-3000:]
    assert "GLYPH_MBPP_PATH" in last and "--env.taskset.data-path" in last



def test_offline_without_data_demo_and_vf_eval_fail_within_3_s(tmp_path, eval_in_process, monkeypatch):
    """The hub a closed port on 127.0.0.1 (as with no network), no data path, an empty hub
    cache: ``glyph demo`` (a subprocess) fails with the line naming GLYPH_MBPP_PATH at most
    3 s later than the same command given a missing file (what starting it costs), and
    vf-eval's run of glyph-mbpp (in this process: verifiers' own import, 10-28 s on a busy
    machine, is not glyph's) within 3 s; neither prints the hub client's retries."""
    import subprocess
    import sys
    import time

    from huggingface_hub import constants

    from glyph.vfcompat import eval_command

    hub = f"http://127.0.0.1:{_closed_port()}"
    env = {k: v for k, v in os.environ.items()
           if k not in ("GLYPH_MBPP_PATH", "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")}
    env.update(HF_ENDPOINT=hub, HF_HOME=str(tmp_path / "hf"), PRIME_RUNS_MODE="disabled", COLUMNS="200")
    env.pop("HF_HUB_OFFLINE", None)
    glyph = [sys.executable, "-m", "glyph.cli.app", "demo", "--tasks", "1", "--out", str(tmp_path / "demo")]

    def timed(cmd):
        started = time.monotonic()
        r = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
        return r, time.monotonic() - started

    baseline, base_s = timed(glyph + ["--mbpp-path", str(tmp_path / "absent.jsonl")])
    assert baseline.returncode == 2 and "absent.jsonl: no such file" in baseline.stderr, baseline.stderr
    r, took = timed(glyph)
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr.startswith("error: could not download MBPP from the hub (connection refused by "
                               "127.0.0.1:")
    assert "GLYPH_MBPP_PATH" in r.stderr and "Retrying" not in r.stderr and len(r.stderr.splitlines()) == 1
    assert took - base_s < 3, f"{took:.1f} s against {base_s:.1f} s with a missing file"

    for var in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(constants, "ENDPOINT", hub)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
    args = ("-n", "1", "-m", "x", "--client.base-url", "http://127.0.0.1:9/v1", "--no-push")

    def timed_eval(*more):
        started = time.monotonic()
        r = eval_in_process(eval_command("glyph-mbpp", *args, *more), capture_output=True, text=True,
                            cwd=tmp_path, timeout=120, env=env)
        return r.stdout + r.stderr, time.monotonic() - started

    # the first run imports verifiers' CLI and glyph-mbpp
    out, base_s = timed_eval("--env.taskset.data-path", "absent.jsonl")
    assert "absent.jsonl: no such file" in " ".join(out.replace("│", " ").split()), out
    out, took = timed_eval()
    assert out.strip().splitlines()[-1].startswith("glyph-mbpp: could not download MBPP"), out
    assert "Retrying" not in out, out
    assert took < 3, f"{took:.1f} s (with a missing file: {base_s:.1f} s)"

# ---------------------------------------------------------------- the one error handler (glyph.cli.common)


def test_every_user_error_class_is_a_glyph_error_of_one_boundary():
    """The errors a command reports as one line are ``glyph.errors.GlyphError``s, each under one of the
    boundaries ``glyph.errors`` names; a module's own class is a subclass of one."""
    import importlib

    from glyph import errors

    boundaries = (errors.DataError, errors.RunError, errors.ConfigError, errors.SetupError)
    assert {c for c in vars(errors).values() if isinstance(c, type) and issubclass(c, errors.GlyphError)} \
        == {errors.GlyphError, *boundaries}
    from glyph.cli.common import is_user_error
    from glyph.sandbox import SandboxUnavailable

    assert not issubclass(SandboxUnavailable, errors.GlyphError)  # the sandbox imports nothing from glyph
    assert is_user_error(SandboxUnavailable("no user namespaces")) and not is_user_error(ValueError("a bug"))
    for module, name, boundary in (("glyph.grading", "InvalidTests", errors.DataError),
                                   ("glyph.report.load", "MixedRuns", errors.RunError),
                                   ("glyph.predict.pin", "PatchError", errors.SetupError),
                                   ("glyph.flywheel.options", "OptionsError", errors.ConfigError),
                                   ("glyph.flywheel.store", "ConfigMismatch", errors.ConfigError),
                                   ("glyph.flywheel.store", "StoreError", errors.RunError),
                                   ("glyph.flywheel.loop", "FlywheelError", errors.ConfigError),
                                   ("glyph.flywheel.agents", "ModelSetupError", errors.SetupError)):
        cls = getattr(importlib.import_module(module), name)
        assert issubclass(cls, boundary) and [b for b in boundaries if issubclass(cls, b)] == [boundary], name


def test_a_named_error_from_a_command_is_one_line_and_exit_2():
    from glyph.cli.common import App
    from glyph.errors import DataError

    probe = App()

    @probe.command()
    def named() -> None:
        raise DataError("mbpp_0: no such task [red]see `glyph data list`[/red]")

    @probe.command()
    def bug() -> None:
        raise ValueError("not a named error")

    r = runner.invoke(probe, ["named"])
    assert r.exit_code == 2 and r.stdout == ""
    assert r.stderr == "error: mbpp_0: no such task [red]see `glyph data list`[/red]\n"  # printed as is
    r = runner.invoke(probe, ["bug"])
    assert r.exit_code == 1 and isinstance(r.exception, ValueError)  # anything else is a bug: it propagates


def test_named_errors_of_every_kind_of_command_are_one_line(tmp_path):
    for args in (["data", "list", "--mbpp-path", str(tmp_path / "absent.jsonl")],
                 ["report", str(tmp_path / "absent")],
                 ["prime-rl", "check", str(tmp_path)]):
        r = runner.invoke(app, args)
        assert r.exit_code == 2 and r.stderr.startswith("error: "), (args, r.output)
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_the_app_imports_no_command_code():
    """Start-up stays cheap: importing the app imports no command module (each is
    imported when its command runs, or a help page lists it; the error handler needs
    only ``glyph.errors``, stdlib and import-free)."""
    import subprocess
    import sys

    probe = "import sys, glyph.cli.app; print(' '.join(sorted(m for m in sys.modules if m.startswith('glyph'))))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["glyph", "glyph.cli", "glyph.cli.app", "glyph.cli.common", "glyph.errors"]


HEAVY = ("pydantic", "verifiers", "numpy", "datasets", "huggingface_hub", "transformers", "openai", "msgspec",
         "jinja2", "matplotlib", "glyph.flywheel", "glyph.envs", "glyph.policies", "glyph.report", "glyph.predict")
"""What ``glyph grade`` has no use for: each costs tens of milliseconds or more to import."""


@pytest.mark.parametrize("how", ["tests", "task"])
def test_glyph_grade_imports_nothing_heavy(files, mbpp_path, how):
    """A whole ``glyph grade`` (parsed, graded in the sandbox, printed) in a fresh
    interpreter imports none of :data:`HEAVY`: not the other commands' code, and
    not pydantic, which typer's own value coercion would import
    (``glyph.cli.common._PlainValue``)."""
    import subprocess
    import sys

    sol = files / "sol.py"
    sol.write_text("def remove_Occ(s, ch):\n    s = s.replace(ch, '', 1)\n    i = s.rfind(ch)\n"
                   "    return s if i < 0 else s[:i] + s[i + 1:]\n")
    args = (["--tests", str(files / "tests.py"), "--solution", str(files / "good.py")] if how == "tests" else
            ["--task", "mbpp_11", "--solution", str(sol), "--mbpp-path", mbpp_path])
    probe = ("import json, sys\nfrom glyph.cli.app import app\nsys.argv[0] = 'glyph'\n"
             "try:\n    app()\nexcept SystemExit as e:\n    code = e.code\n"
             "print(json.dumps([code, sorted(sys.modules)]))")
    r = subprocess.run([sys.executable, "-c", probe, "grade", *args], capture_output=True, text=True, timeout=120,
                       check=False)
    code, modules = json.loads(r.stdout.splitlines()[-1])
    assert code == 0 and "PASS" in r.stdout, r.stdout + r.stderr
    assert "glyph.grading" in modules and "glyph.cli.grade" in modules  # the probe saw the grade run
    heavy = sorted(m for m in modules if m.split(".")[0] in HEAVY or ".".join(m.split(".")[:2]) in HEAVY)
    assert heavy == []


def _sample_values(kind) -> list:
    return [True, False] if kind is bool else ["x", "", "-", "a b", "mbpp_11", "~/x", "/", "a/../b", "\udcff"]


def test_plain_values_are_read_as_typer_reads_them():
    """Every option of every glyph command that ``glyph.cli.common._PlainValue``
    reads without pydantic gets the value, or the error, typer's own coercion gives."""
    import typer
    import typer.main

    from glyph.cli.common import _PlainValue

    if _PlainValue is None:
        pytest.skip("this typer has no RuntimeParam to stand in for: its own coercion reads every value")
    from typer._coercion import build_runtime_param

    def commands(cmd, path=()):
        yield path, cmd
        for name in getattr(cmd, "commands", {}):
            yield from commands(cmd.commands[name], (*path, name))

    def outcome(coercer, value, param, ctx):
        try:
            v = coercer.coerce(value, param=param, ctx=ctx)
            return type(v), v
        except typer.BadParameter as exc:
            return "error", exc.format_message()

    root = typer.main.get_command(app)
    seen = 0
    for path, cmd in commands(root):
        ctx = cmd.make_context("glyph", [], resilient_parsing=True)
        for p in cmd.get_params(ctx):
            if not isinstance(getattr(p, "_runtime_param", None), _PlainValue):
                continue
            theirs = build_runtime_param(p.type_descriptor)
            for value in _sample_values(p.type_descriptor.annotation):
                assert outcome(p._runtime_param, value, p, ctx) == outcome(theirs, value, p, ctx), (path, p.name, value)
                seen += 1
    assert seen > 100  # grade's, data's, flywheel's ... options were compared


