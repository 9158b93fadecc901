"""A new user's frictions (issue 22: items 1, 2, 3, 7 and 8), each pinned by a test.

In-process (``CliRunner``) and against 127.0.0.1 only; no test waits out a real
backoff (the endpoints here get ``backoff`` of milliseconds and sub-second timeouts)."""

from __future__ import annotations

import json
import re
import socket
import threading
import time
import urllib.error
import urllib.request
from enum import Enum
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace

import pytest
import typer.main
from typer.testing import CliRunner

from glyph.cli.app import app
from glyph.flywheel.agents import Endpoint, ModelCallFailed, ModelSetupError

runner = CliRunner()
MSGS = [{"role": "user", "content": "hi"}]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _one_line_error(r, *names: str) -> str:
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output and len(r.stderr.strip().splitlines()) == 1, r.stderr
    for name in names:
        assert name in r.stderr, r.stderr
    return r.stderr


# ---------------------------------------------------------------- 1. a dead endpoint fails fast


class _Scripted(ThreadingHTTPServer):
    """Answers the i-th chat request with ``statuses[i]`` (the last one repeats): an
    HTTP status, or "hang" (no answer for 5 s)."""

    daemon_threads = True

    def __init__(self, statuses):
        super().__init__(("127.0.0.1", 0), _ScriptedHandler)
        self.statuses, self.requests, self.lock = list(statuses), 0, threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"


class _ScriptedHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        with self.server.lock:
            status = self.server.statuses[min(self.server.requests, len(self.server.statuses) - 1)]
            self.server.requests += 1
        if status == "hang":
            time.sleep(5)
            return
        if status == 200:
            body = {"id": "c", "object": "chat.completion", "created": 0, "model": "m",
                    "choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": "ok"}}]}
        else:
            body = {"error": {"message": f"scripted {status}"}}
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Connection", "close")  # no kept-alive socket outlives a shutdown
        self.close_connection = True
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def scripted():
    servers = []

    def start(*statuses):
        server = _Scripted(statuses)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return server

    yield start
    for s in servers:
        s.shutdown()
        s.server_close()


def _client(url: str, retries: int = 3, timeout: float = 5.0):
    return Endpoint(url, "m", timeout=timeout, retries=retries, backoff=0.001).client()


def test_a_refused_connection_is_a_setup_error_at_once_naming_base_url(monkeypatch):
    """One try, no backoff (before: 7 tries with the SDK's backoff, 24 s). What is counted is the
    tries and the waits; the wall bound is only a backstop (the SDK's imports are in ``client()``)."""
    from glyph.flywheel import agents

    url = f"http://127.0.0.1:{_free_port()}/v1"
    client = Endpoint(url, "m", timeout=5, retries=6).client()  # the default backoff: never reached
    tries, waits, create = [], [], client._create

    def counted(**kw):
        tries.append(kw)
        return create(**kw)

    monkeypatch.setattr(client, "_create", counted)
    clock = {name: getattr(time, name) for name in dir(time) if not name.startswith("_")}
    monkeypatch.setattr(agents, "time", SimpleNamespace(**{**clock, "sleep": waits.append}))  # agents' alone
    t0 = time.perf_counter()
    with pytest.raises(ModelSetupError, match=rf"^--base-url {re.escape(url)}: cannot reach the endpoint"):
        client.chat(MSGS)
    assert len(tries) == 1 and waits == []
    assert time.perf_counter() - t0 < 5


@pytest.mark.parametrize("status,flag", [(400, "--model m at --base-url"), (404, "--model m at --base-url"),
                                         (401, "--base-url"), (409, "--model m at --base-url")])
def test_a_4xx_is_a_setup_error_never_retried(scripted, status, flag):
    server = scripted(status)
    with pytest.raises(ModelSetupError, match=rf"^{flag}.*HTTP {status}: scripted {status}"):
        _client(server.url).chat(MSGS)
    assert server.requests == 1


@pytest.mark.parametrize("status", [429, 500, 503, 408])
def test_429_5xx_and_408_are_retried_then_answered(scripted, status):
    server = scripted(status, status, 200)
    assert _client(server.url).chat(MSGS) == "ok"
    assert server.requests == 3


def test_a_timeout_is_retried_then_excluded(scripted):
    server = scripted("hang")
    with pytest.raises(ModelCallFailed, match=r"timed out after 0.2 s \(after 2 tries\)"):
        _client(server.url, retries=1, timeout=0.2).chat(MSGS)
    assert server.requests == 2


def test_a_dropped_connection_after_the_endpoint_answered_is_retried(scripted):
    """A server that answered once and then went away (a restart) is a transient fault."""
    server = scripted(200)
    client = _client(server.url, retries=1)
    assert client.chat(MSGS) == "ok"
    server.shutdown()
    server.server_close()
    with pytest.raises(ModelCallFailed, match=r"connection error: .*\(after 2 tries\)"):
        client.chat(MSGS)


def test_flywheel_run_on_a_dead_endpoint_fails_in_seconds_with_one_line(tmp_path):
    url = f"http://127.0.0.1:{_free_port()}/v1"
    t0 = time.perf_counter()
    r = runner.invoke(app, ["flywheel", "run", "--out", str(tmp_path / "run"), "--quiet", "--agent", "openai",
                            "--base-url", url, "--model", "m"])
    seconds = time.perf_counter() - t0
    _one_line_error(r, f"--base-url {url}", "cannot reach")
    assert seconds < 10, seconds  # before: about 44 minutes (7 tries a rollout, every baseline rollout)


def test_flywheel_run_on_an_unknown_model_names_model(tmp_path, scripted):
    server = scripted(404)
    r = runner.invoke(app, ["flywheel", "run", "--out", str(tmp_path / "run"), "--quiet", "--agent", "openai",
                            "--base-url", server.url, "--model", "gpt-4o"])
    _one_line_error(r, "--model gpt-4o", "HTTP 404: scripted 404")


@pytest.mark.parametrize("args,names", [
    (["--base-url", "http://127.0.0.1:9/v1"], ["--base-url goes with --agent openai", "--agent is reference"]),
    (["--model", "m"], ["--model goes with --agent openai"]),
    (["--temperature", "0.3"], ["--temperature goes with --agent openai"]),
    (["--writer-model", "m"], ["--writer-model goes with --writer openai"]),
    (["--agent", "openai", "--base-url", "http://127.0.0.1:9/v1", "--model", "m", "--p-slip", "0.2"],
     ["--p-slip goes with --agent reference"]),
    (["--agent", "openai", "--base-url", "notaurl", "--model", "m"], ["--base-url notaurl: not an http(s) URL"]),
    (["--agent", "openai", "--base-url", "http://127.0.0.1:x/v1", "--model", "m"], ["not an http(s) URL"]),
])
def test_an_option_nothing_reads_or_a_url_that_is_none_is_refused_before_the_run(tmp_path, args, names):
    r = runner.invoke(app, ["flywheel", "run", "--out", str(tmp_path / "run"), "--quiet", *args])
    _one_line_error(r, *names)
    assert not (tmp_path / "run").exists()


def test_the_agents_endpoint_serves_the_writer_too():
    """``--base-url`` with ``--writer openai`` alone is read (the writer's default), so not refused."""
    from glyph.flywheel.options import RunOptions

    opts = RunOptions(writer="openai", base_url="http://127.0.0.1:9/v1", model="m")
    assert opts.config().writer_base_url == "http://127.0.0.1:9/v1"


def test_credit_refuses_temperature_without_a_model(tmp_path):
    r = runner.invoke(app, ["flywheel", "credit", str(tmp_path), "--temperature", "0.5"])
    _one_line_error(r, "--temperature goes with --base-url and --model")


# ---------------------------------------------------------------- 2. the cause of an errored rollout


def test_the_report_shows_the_endpoints_own_reason_for_an_errored_rollout():
    """Shaped as vf-eval 0.4.0 wrote a rollout of ``-m gpt-4o`` against ``glyph serve``: glyph's
    record says HTTP 404; verifiers' error carries the server's message."""
    from glyph.policies.policies import unknown_policy
    from glyph.report.load import judge

    body = json.dumps({"error": {"message": unknown_policy("gpt-4o")}})
    trace = {"ok": False, "is_timeout": False,
             "errors": [{"type": "ProviderError", "message": f"upstream 404: {body}", "status_code": 404}],
             "info": {"glyph": {"reward": None, "reason": "endpoint_error: model call failed: HTTP 404",
                                "fault": "endpoint_error", "confirmed_by": None, "tamper": [], "candidates": [],
                                "final_outcome": None, "final_detail": None, "base_outcome": None,
                                "plus_outcome": None, "plus_detail": None, "reward_suite": "base",
                                "metrics": {}, "visible_outcomes": None, "program": {},
                                "visible_gradings": 0, "sandbox": None}}}
    j = judge({"ok": False, "errors": []}, trace)
    assert j.status == "errored"
    assert j.reason.startswith("endpoint_error: model call failed: HTTP 404 (upstream 404: unknown policy "
                               "'gpt-4o'; policies: oracle"), j.reason
    assert "{" not in j.reason and len(j.reason) < 300


def test_the_programs_fault_reason_carries_the_endpoints_own_words():
    """The fault reason glyph records for a 4xx (the agent program's EndpointError):
    the status and the endpoint's message, whole; verifiers' interception server's
    wrapping of an upstream's body (``upstream 404: {"error": ...}``) undone."""
    from glyph.agent import program
    from glyph.policies.policies import unknown_policy
    from glyph.policies.server import PolicyServer

    # the reference server, asked for gpt-4o
    with PolicyServer({}, log=lambda line: None) as server, pytest.raises(program.EndpointError) as direct:
        program.chat({"base_url": server.base_url, "model": "gpt-4o"}, MSGS, 5, "")
    assert str(direct.value) == f"model call failed: HTTP 404: {unknown_policy('gpt-4o')}"

    wrapped = json.dumps({"error": {"message": unknown_policy("gpt-4o")}})

    class Interception(BaseHTTPRequestHandler):  # what verifiers' server answers the program with
        def do_POST(self):
            self.rfile.read(int(self.headers["Content-Length"]))
            body = json.dumps({"error": {"message": f"upstream 404: {wrapped}"}}).encode()
            self.send_response(404)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Interception)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        with pytest.raises(program.EndpointError) as relayed:
            program.chat({"base_url": f"http://127.0.0.1:{httpd.server_port}/v1", "model": "gpt-4o"}, MSGS, 5,
                         "")
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()
    assert str(relayed.value) == f"model call failed: HTTP 404: upstream 404: {unknown_policy('gpt-4o')}"
    assert program.own_words("upstream 500: not json") == "upstream 500: not json"


def test_serve_logs_an_unknown_model_once_with_the_valid_ones():
    from glyph.policies.server import PolicyServer

    lines: list[str] = []
    with PolicyServer({}, log=lines.append) as server:
        for _ in range(3):
            req = urllib.request.Request(server.base_url + "/chat/completions",
                                         json.dumps({"model": "gpt-4o", "messages": MSGS}).encode(),
                                         {"Content-Type": "application/json"})
            with pytest.raises(urllib.error.HTTPError) as err:
                urllib.request.urlopen(req, timeout=5)
            assert err.value.code == 404
    assert len(lines) == 1 and "'gpt-4o'" in lines[0] and "oracle" in lines[0] and "conv-fixed" in lines[0]


# ---------------------------------------------------------------- 3. arguments before data and network


def test_serve_checks_the_policy_before_the_data(tmp_path):
    absent = str(tmp_path / "absent.jsonl")  # loading it would be a DataError naming the file
    r = runner.invoke(app, ["serve", "--policy", "nope", "--mbpp-path", absent])
    _one_line_error(r, "--policy", "'nope'", "oracle", "mix")
    assert "absent.jsonl" not in r.stderr


def test_serve_checks_the_port_before_the_data(tmp_path):
    absent = str(tmp_path / "absent.jsonl")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        t0 = time.perf_counter()
        r = runner.invoke(app, ["serve", "--port", str(port), "--mbpp-path", absent])
    _one_line_error(r, f"--port {port}", "in use")
    assert time.perf_counter() - t0 < 5  # before: the data loaded first (26 s of hub retries offline)


def test_grade_checks_its_files_and_task_id_before_the_data(tmp_path):
    absent = str(tmp_path / "absent.jsonl")
    (tmp_path / "s.py").write_text("def f(x):\n    return x\n")
    r = runner.invoke(app, ["grade", "--task", "11", "--solution", str(tmp_path / "s.py"), "--mbpp-path", absent])
    _one_line_error(r, "--task 11", "mbpp_11")


# ---------------------------------------------------------------- 8. glyph grade's words


def test_grade_suggests_close_task_ids(tmp_path, mbpp_path):
    (tmp_path / "s.py").write_text("def f(x):\n    return x\n")
    r = runner.invoke(app, ["grade", "--task", "mbp_11", "--solution", str(tmp_path / "s.py"),
                            "--mbpp-path", mbpp_path])
    _one_line_error(r, "--task mbp_11", "did you mean mbpp_11", "glyph data list")


def test_missing_solution_and_tests_files_are_worded_alike(tmp_path):
    (tmp_path / "s.py").write_text("def f(x):\n    return x\n")
    (tmp_path / "t.py").write_text("assert f(1) == 1\n")
    a = _one_line_error(runner.invoke(app, ["grade", "--solution", str(tmp_path / "no.py"), "--tests",
                                            str(tmp_path / "t.py")]), "--solution")
    b = _one_line_error(runner.invoke(app, ["grade", "--solution", str(tmp_path / "s.py"), "--tests",
                                            str(tmp_path / "no.py")]), "--tests")
    assert a.replace("--solution", "OPT") == b.replace("--tests", "OPT") == f"error: OPT {tmp_path / 'no.py'}: " \
        "no such file\n"
    c = _one_line_error(runner.invoke(app, ["grade", "--solution", str(tmp_path), "--tests", str(tmp_path / "t.py")]))
    assert c.strip() == f"error: --solution {tmp_path}: not a regular file"


def test_a_non_python_file_is_named_as_given_and_the_path_is_explained(tmp_path):
    (tmp_path / "notes.txt").write_text("Dear reader: not Python.\n")
    (tmp_path / "t.py").write_text("assert f(1) == 1\n")
    r = runner.invoke(app, ["grade", "--solution", str(tmp_path / "notes.txt"), "--tests", str(tmp_path / "t.py")],
                      terminal_width=200)
    assert r.exit_code == 1, r.output
    assert "SYNTAX_ERROR" in r.stdout and "(notes.txt, line 1)" in r.stdout and "solution.py" not in r.stdout
    assert "fast path: each assert compared outside the solution" in r.stdout


# ---------------------------------------------------------------- 7. one CLI style


def _commands(cmd, path=()):
    """Every command under ``cmd``, with its path. Typer (0.29) builds its commands on its own copy of
    click (``typer._click``), so a group is told by its ``commands``, not by ``isinstance(click.Group)``."""
    yield path, cmd
    for name, sub in (getattr(cmd, "commands", None) or {}).items():
        yield from _commands(sub, (*path, name))


def test_the_walk_reaches_every_command():
    paths = {" ".join(p) for p, _ in _commands(typer.main.get_command(app))}
    assert {"report", "data prepare", "flywheel run", "flywheel sweep", "flywheel import", "study replay"} <= paths
    assert len(paths) > 25, sorted(paths)


def test_version_and_short_help():
    r = runner.invoke(app, ["--version"])
    assert r.exit_code == 0 and re.fullmatch(r"glyph-rl \S+ \(verifiers \S+\)\n", r.stdout), r.stdout
    for path, _ in _commands(typer.main.get_command(app)):
        r = runner.invoke(app, [*path, "-h"], terminal_width=160)
        assert r.exit_code == 0 and "Usage: " in r.stdout and "Show this message" in r.stdout, (path, r.output)


def _option_rows(path, cmd, ctx) -> dict[str, str]:
    """Each visible option's row of ``glyph PATH --help``, drawn wide enough that a row is one line."""
    r = runner.invoke(app, [*path, "--help"], env={"COLUMNS": "400"})
    assert r.exit_code == 0, (path, r.output)
    rows = [line for line in r.stdout.splitlines() if line.startswith("│")]
    out = {}
    for p in cmd.get_params(ctx):
        if p.param_type_name != "option" or p.hidden:
            continue
        mine = [line for line in rows if re.search(rf"(?<![\w-]){re.escape(p.opts[0])}(?![\w-])", line)]
        assert mine, (path, p.opts[0], r.stdout)
        out[p.opts[0]] = mine[0]
    return out


def test_every_option_is_described_and_shows_its_default_as_it_is():
    """Every option of every command has a description, and its --help names its default: typer's
    ``[default: X]`` (X as the option has it), or the description's own ``(default: ...)`` for a default
    computed at run time; a plain on/off flag (default off) is the one exception."""
    root = typer.main.get_command(app)
    ctx = root.context_class(root)
    checked = 0
    for path, cmd in _commands(root):
        rows = _option_rows(path, cmd, ctx)
        for p in cmd.get_params(ctx):
            if p.param_type_name == "option" and not p.hidden and p.name != "help":
                flag = f"glyph {' '.join(path)} {p.opts[0]}"
                assert (p.help or "").strip(), f"{flag}: no description"
                row = rows[p.opts[0]]
                assert not ("(default:" in row and "[default:" in row), (flag, row)  # one default, the one it has
                plain_flag = p.is_flag and not p.secondary_opts and not p.default
                if p.default is not None and not plain_flag:
                    assert "[default:" in row or "(default:" in row, f"{flag}: default {p.default!r} not shown"
                    if "[default:" in row and not p.is_flag:
                        shown = re.search(r"\[default: ([^\]]*)\]", row).group(1)
                        value = p.default.value if isinstance(p.default, Enum) else p.default
                        expect = ", ".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)
                        assert shown == expect, (flag, shown, expect)
                    checked += 1
            if p.param_type_name == "argument":  # one case for what a usage line names: SOURCE, RUN_DIR
                assert p.metavar and p.metavar.isupper(), (path, p.name, p.metavar)
                assert (getattr(p, "help", "") or "").strip(), (path, p.name)
        r = runner.invoke(app, [*path, "--help"], terminal_width=200)
        assert "<bool>" not in r.stdout, (path, r.stdout)  # a flag takes no value
    assert checked > 50, checked  # the walk reached the commands' options, not the root's alone


def test_a_progress_bar_drawn_on_richs_global_console_goes_to_stderr(capsys):
    """glyph's data preparation draws its bars with ``rich.progress.track`` (rich's global console);
    under the glyph command that console is stderr, so stdout keeps only what a command prints."""
    from rich.progress import track

    import glyph.cli.common  # noqa: F401  (the command's import sets it)

    for _ in track(range(3), description="grading gold solutions"):
        pass
    captured = capsys.readouterr()
    assert "grading gold solutions" in captured.err and "grading gold solutions" not in captured.out, captured


def test_report_pass_at_is_named_apart_from_the_flywheels_K(tmp_path):
    r = runner.invoke(app, ["report", "--help"], terminal_width=200)
    assert "--pass-at" in r.stdout and "--k " not in r.stdout
    for flag in ("--pass-at", "--k"):  # the old name still works, unlisted
        _one_line_error(runner.invoke(app, ["report", str(tmp_path), flag, "0"]), "--pass-at 0")


def test_replicate_names_the_folders_it_writes(tmp_path):
    r = runner.invoke(app, ["flywheel", "replicate", "--runs", "2", "--K", "1", "--max-rounds", "1", "--quiet",
                            "--out", str(tmp_path)], terminal_width=160)
    assert r.exit_code == 0, r.output
    for i in (0, 1):
        assert f"run-{i}: {i + 1} of 2, seed {i}" in r.stderr and (tmp_path / f"run-{i}" / "run.json").exists()
