"""``glyph demo`` and ``glyph serve``: the reference policies, run and served."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from glyph.cli.common import MbppPath, console, err, fail


def demo(
    tasks: Annotated[int, typer.Option(min=1, help="tasks per arm")] = 6,
    attacks: Annotated[bool, typer.Option("--attacks", help="also grade the red-team solutions directly")] = False,
    out: Annotated[Optional[Path], typer.Option("--out", help="where the eval runs are kept (default: a new "
                                                               "folder under the system's temp dir)")] = None,
    profile: Annotated[str, typer.Option(metavar="<study|glyph>", help="the protocol profile glyph-mbpp runs: study (the PREDICT "
                                              "study's) or glyph")] = "study",
    mbpp_path: MbppPath = None,
) -> None:
    """Run vf-eval glyph-mbpp against the reference policies, both arms, and summarize."""
    from glyph import profiles
    from glyph.demo import run_attack_demo, run_env_demo

    if profile not in profiles.PROFILES:
        fail(f"--profile {profile}: expected {' or '.join(profiles.names())}")
    code = run_attack_demo(console) if attacks else 0
    code |= run_env_demo(console, tasks, str(mbpp_path) if mbpp_path else None, out, profile)
    raise typer.Exit(code)


def serve(
    policy: Annotated[Optional[str], typer.Option(help="oracle, recover, revise, hack, mix, a conv-* or a "
                                                       "fault-* policy (default: the request's model name); "
                                                       "each request is answered in its own profile's "
                                                       "grammar (study or glyph)")] = None,
    port: Annotated[int, typer.Option(min=0, max=65535, help="port on 127.0.0.1 (0: any free one)")] = 8000,
    mbpp_path: MbppPath = None,
) -> None:
    """Serve a reference policy as an OpenAI-compatible endpoint on 127.0.0.1."""
    import time

    from glyph.policies.policies import known, unknown_policy

    if policy is not None and not known(policy):  # before the data is loaded (which may wait on the hub)
        fail(f"--policy: {unknown_policy(policy)}")
    _check_port(port)

    from glyph.data import mbpp
    from glyph.policies.server import PolicyServer

    tasks = {t.id: t for t in mbpp.load_source(mbpp_path).tasks}
    try:
        server = PolicyServer(tasks, policy, port, log=lambda line: err.print(line, markup=False,
                                                                              highlight=False)).start()
    except OSError as exc:  # taken since the check above
        fail(_port_taken(port, exc))
    console.print(f"serving {policy or 'the requested model'} at {server.base_url} (Ctrl-C to stop)")
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:  # Ctrl-C is how a user stops the server
        server.close()


def _port_taken(port: int, exc: OSError) -> str:
    return (f"--port {port}: cannot listen on 127.0.0.1:{port} ({exc.strerror or exc}); pick another, "
            "or 0 for any free one")


def _check_port(port: int) -> None:
    """Fail now if 127.0.0.1:``port`` cannot be bound (bound the way the server binds it)."""
    import socket

    if port == 0:
        return
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as http.server does
        try:
            probe.bind(("127.0.0.1", port))
        except OSError as exc:
            fail(_port_taken(port, exc))
