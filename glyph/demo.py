"""``glyph demo``: the main job on an embedded default, no data needed.

For now it grades reference, wrong and adversarial solutions of an embedded
task in the sandbox and shows that only the real solution is rewarded.
"""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from glyph.grading import grade
from glyph.redteam import DEMO_PROMPT, DEMO_SOLUTION, DEMO_TESTS, DEMO_WRONG, REFEREE_TESTS, attack
from glyph.sandbox import Limits, get_sandbox

LIMITS = Limits(cpu_s=2, wall_s=4)

SHOWN_ATTACKS = ("always_equal", "str_subclass_equal", "caller_frames", "read_test_files", "sys_exit_zero",
                 "double_fork_daemon", "memory_bomb", "cpu_spin", "kill_grader", "always_equal_referee")


def run_demo(console: Console) -> int:
    sb = get_sandbox()
    info = sb.protections()
    on = [k for k, v in info.protections.items() if v["on"]]
    console.print(f"[bold]task:[/] {DEMO_PROMPT}")
    console.print(f"[bold]sandbox:[/] {info.mode} mode; active: {', '.join(on)}\n", highlight=False)
    cases = [("reference solution", DEMO_SOLUTION, DEMO_TESTS, True),
             ("reference (referee-path tests)", DEMO_SOLUTION, REFEREE_TESTS, True),
             ("wrong solution", DEMO_WRONG, DEMO_TESTS, False),
             ("syntax error", "def remove_first_last(s, ch)\n    return s\n", DEMO_TESTS, False),
             ("crashes", "def remove_first_last(s, ch):\n    return s[10**9]\n", DEMO_TESTS, False)]
    for name in SHOWN_ATTACKS:
        a = attack(name)
        cases.append((f"attack [italic]{a.name}[/]: {a.tries}", a.source, REFEREE_TESTS if a.referee else DEMO_TESTS, False))
    table = Table(title="grading in the sandbox")
    for col, justify in (("solution", "left"), ("outcome", "left"), ("rewarded", "center"), ("ms", "right")):
        table.add_column(col, justify=justify)
    wrong = 0
    for label, source, tests, should_pass in cases:
        g = grade(source, "", tests, limits=LIMITS)
        ok = g.passed == should_pass
        wrong += not ok
        table.add_row(label, g.outcome.value, "[green]yes[/]" if g.passed else "no",
                      f"{g.seconds * 1000:.0f}", style=None if ok else "bold red")
    console.print(table)
    console.print(f"restarts of the sandbox server: {sb.restarts}")
    if wrong:
        console.print(f"[bold red]{wrong} case(s) graded against expectation[/]")
    return 1 if wrong else 0
