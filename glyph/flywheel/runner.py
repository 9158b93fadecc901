"""From :class:`~glyph.flywheel.options.RunOptions` to a finished run: the agent
and writer they name, the loop, and the outputs. What ``glyph flywheel run``,
``replicate`` and ``sweep`` share."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from glyph.data import conventions
from glyph.data.conventions import ConventionTask
from glyph.flywheel.agents import Agent, Endpoint, OpenAIAgent, ReferenceAgent
from glyph.flywheel.options import RunConfig, RunOptions
from glyph.flywheel.writers import OpenAIWriter, ReferenceWriter, Writer


def _endpoint(options: RunOptions, base_url: str, model: str,
              flags: tuple[str, str] = ("--base-url", "--model")) -> Endpoint:
    return Endpoint(base_url, model, timeout=options.timeout, retries=options.retries,
                    backoff=options.backoff, flags=flags)


def make_agent(options: RunOptions, config: RunConfig, tasks: Sequence[ConventionTask]) -> Agent:
    if config.agent == "reference":
        return ReferenceAgent(tasks, seed=config.seed, p_lucky=config.p_lucky, p_slip=config.p_slip,
                              noise_draw=config.noise_draw)
    return OpenAIAgent(_endpoint(options, config.base_url, config.model), temperature=config.temperature,
                       max_tokens=config.max_tokens, seed=config.seed)


def make_writer(options: RunOptions, config: RunConfig) -> Writer:
    if config.writer == "reference":
        return ReferenceWriter()
    flags = (flag if getattr(options, name) else f"{flag.replace('--writer-', '--')} (writer)"
             for name, flag in (("writer_base_url", "--writer-base-url"), ("writer_model", "--writer-model")))
    return OpenAIWriter(_endpoint(options, config.writer_base_url, config.writer_model, tuple(flags)))


def run_one(options: RunOptions, out: str | Path, *, console=None, agent: Agent | None = None,
            writer: Writer | None = None):
    """Run (or resume) one flywheel run into ``out`` and write its outputs;
    returns ``(run document, the Flywheel)`` (the latter has ``calls``,
    ``reused``, ``seconds`` and the grade cache, for the summary). Raises
    ``OptionsError`` before anything is written when the options cannot make a run."""
    from glyph.flywheel.loop import Flywheel
    from glyph.flywheel.outputs import write_run

    config = options.config()
    tasks = conventions.load_tasks(config.tasks)
    fw = Flywheel(config, out, agent or make_agent(options, config, tasks), writer or make_writer(options, config),
                  tasks=tasks, concurrency=options.concurrency, progress=not options.quiet, console=console,
                  retry_excluded=options.retry_excluded)
    doc = fw.run()
    write_run(out, doc)
    return doc, fw
