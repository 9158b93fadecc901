"""From command-line options to a finished run: the configuration, the agent
and writer it names, the loop, and the outputs. What ``glyph flywheel run``,
``replicate`` and ``sweep`` share."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from glyph.flywheel.agents import Agent, Endpoint, OpenAIAgent, ReferenceAgent
from glyph.flywheel.store import RunConfig, sha256_file
from glyph.flywheel.writers import OpenAIWriter, ReferenceWriter, Writer
from glyph.data import conventions
from glyph.data.conventions import ConventionTask

DEFAULT_P_LUCKY = 0.1
DEFAULT_P_SLIP = 0.05


@dataclass(frozen=True)
class CallOptions:
    """How model calls are made; none of it changes results, so none of it is in the config."""

    timeout: float = 120.0
    retries: int = 6
    backoff: float = 1.0
    concurrency: int = 8


def make_config(*, tasks: str | Path | None = None, K: int = 8, seed: int = 0, agent: str = "reference",
                base_url: str | None = None, model: str | None = None, temperature: float = 1.0,
                max_tokens: int = 2048, writer: str = "reference", writer_base_url: str | None = None,
                writer_model: str | None = None, gate: str = "band", max_rounds: int = 20,
                p_lucky: float = DEFAULT_P_LUCKY, p_slip: float = DEFAULT_P_SLIP) -> RunConfig:
    """A run's configuration; raises ``ValueError`` naming the option that is missing or wrong."""
    path = Path(tasks) if tasks else conventions.DATA_FILE
    if not path.is_file():
        raise ValueError(f"--tasks {path}: no such file")
    if agent == "openai" and not (base_url and model):
        raise ValueError("--agent openai needs --base-url and --model")
    if writer == "openai":
        writer_base_url, writer_model = writer_base_url or base_url, writer_model or model
        if not (writer_base_url and writer_model):
            raise ValueError("--writer openai needs --writer-base-url and --writer-model (or --base-url and --model)")
    else:
        writer_base_url = writer_model = None
    ref = agent == "reference"
    return RunConfig(
        tasks=str(tasks) if tasks else str(conventions.DATA_FILE), tasks_sha256=sha256_file(path), K=K,
        seed=seed, agent=agent, base_url=None if ref else base_url, model=None if ref else model,
        temperature=None if ref else temperature, max_tokens=None if ref else max_tokens, writer=writer,
        writer_base_url=writer_base_url, writer_model=writer_model, gate=gate, max_rounds=max_rounds,
        p_lucky=p_lucky if ref else None, p_slip=p_slip if ref else None)


def make_agent(config: RunConfig, tasks: Sequence[ConventionTask], calls: CallOptions) -> Agent:
    if config.agent == "reference":
        return ReferenceAgent(tasks, seed=config.seed, p_lucky=config.p_lucky or 0.0, p_slip=config.p_slip or 0.0)
    endpoint = Endpoint(config.base_url, config.model, timeout=calls.timeout, retries=calls.retries,
                        backoff=calls.backoff)
    return OpenAIAgent(endpoint, temperature=config.temperature, max_tokens=config.max_tokens, seed=config.seed)


def make_writer(config: RunConfig, calls: CallOptions) -> Writer:
    if config.writer == "reference":
        return ReferenceWriter()
    return OpenAIWriter(Endpoint(config.writer_base_url, config.writer_model, timeout=calls.timeout,
                                 retries=calls.retries, backoff=calls.backoff))


def run_one(config: RunConfig, out: str | Path, calls: CallOptions = CallOptions(), *, progress: bool = True,
            console=None, retry_excluded: bool = False, agent: Agent | None = None,
            writer: Writer | None = None):
    """Run (or resume) one flywheel run into ``out`` and write its outputs;
    returns ``(run document, the Flywheel)`` (the latter has ``calls``,
    ``reused``, ``seconds`` and the grade cache, for the summary)."""
    from glyph.flywheel.loop import Flywheel
    from glyph.flywheel.outputs import write_run

    tasks = conventions.load_tasks(config.tasks)
    fw = Flywheel(config, out, agent or make_agent(config, tasks, calls), writer or make_writer(config, calls),
                  tasks=tasks, concurrency=calls.concurrency, progress=progress, console=console,
                  retry_excluded=retry_excluded)
    doc = fw.run()
    write_run(out, doc)
    return doc, fw
