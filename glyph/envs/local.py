"""What both environments share: verifiers' single-agent env with a glyph
harness on the local subprocess runtime by default
(``--env.agent.runtime.type docker|prime|...`` to scale out), and reading a
file the rollout left in its runtime."""

from __future__ import annotations

import types

import verifiers.v1 as vf


def single_agent_env(name: str, harness: vf.HarnessConfig, doc: str, module: str) -> tuple[type, type]:
    """``(<name>Config, <name>)``: a ``SingleAgentEnvConfig`` whose one ``agent``
    seat runs ``harness`` on the subprocess runtime, and the ``SingleAgentEnv``
    bound to it (``vf.Env[<name>Config]``, which verifiers reads to type the
    env's config), both defined as if in ``module``."""

    def config_body(ns: dict) -> None:
        ns["__annotations__"] = {"agent": vf.AgentConfig}
        ns["agent"] = vf.AgentConfig(runtime=vf.SubprocessConfig(), harness=harness)
        ns["__module__"] = module

    config = types.new_class(f"{name}Config", (vf.SingleAgentEnvConfig,), exec_body=config_body)
    env = types.new_class(name, (vf.SingleAgentEnv, vf.Env[config]),
                          exec_body=lambda ns: ns.update(__doc__=doc, __module__=module))
    return config, env


async def read_text(runtime: vf.Runtime, path: str, max_bytes: int) -> str | None:
    """``path`` in the rollout's runtime as text (UTF-8, surrogateescape: any
    bytes round-trip); None when it is absent or unreadable (the caller records why)."""
    try:
        return (await runtime.read(path, max_bytes=max_bytes)).decode("utf-8", "surrogateescape")
    except Exception:  # absent or unreadable: the caller records why
        return None
