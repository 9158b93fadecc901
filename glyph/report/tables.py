"""The report document as display tables, and those tables as Markdown (on a
terminal: :mod:`glyph.report.terminal`). Percentages print with one decimal, as the study's
tables do; an interval prints as ``[lo, hi]`` in the same unit as its value.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from glyph import profiles

DASH = "—"
GROUPS = (("never", "never REVISE (KEEP only)"), ("revised", "chose REVISE"))
CONVENTION_NOTES = {
    "study": "study convention: every rollout counted, an incomplete one in never REVISE (the study's "
    "seed-42 split: 409 + 91 = 500)",
    "glyph": "glyph convention: incomplete trajectories apart",
}
MIXED = "each rollout by its own profile's definitions (a labelled mix of profiles)"


@dataclass
class Table:
    key: str
    title: str
    columns: list[str]
    rows: list[list[str]] = field(default_factory=list)
    caption: str = ""
    numeric: int = 0  # columns from this index on are right-aligned
    keys: int = 0  # the leading columns that name a row (repeated in each part of a split terminal table)
    legend: list[str] = field(default_factory=list)  # lines under the table (``r1: <a run's path>``)
    markup: bool = False  # cells hold rich markup (terminal only)
    styles: list[str | None] = field(default_factory=list)  # a rich style per row (terminal only)
    right_columns: tuple[int, ...] = ()  # right-aligned, besides ``numeric``'s

    def right(self, i: int) -> bool:
        """Whether column ``i`` is right-aligned (a number)."""
        return i >= self.numeric > 0 or i in self.right_columns


def pct(value: float | None) -> str:
    return DASH if value is None else f"{100 * value:.1f}%"


def prop(p: dict | None, counts: bool = False) -> str:
    """``63.3% [58.6, 67.8]`` (``259/409`` before it with ``counts``)."""
    if not p or p["value"] is None:
        return DASH
    lo, hi = p["ci"]
    text = f"{100 * p['value']:.1f}% [{100 * lo:.1f}, {100 * hi:.1f}]"
    return f"{p['successes']}/{p['n']} {text}" if counts else text


def est(e: dict | None, percent: bool = False, digits: int = 2) -> str:
    if not e or e["value"] is None:
        return DASH
    if percent:
        return f"{100 * e['value']:.1f}% [{100 * e['ci'][0]:.1f}, {100 * e['ci'][1]:.1f}]"
    return f"{e['value']:.{digits}f} [{e['ci'][0]:.{digits}f}, {e['ci'][1]:.{digits}f}]"


def pp(e: dict) -> str:
    """A difference of proportions, in percentage points."""
    if e["value"] is None:
        return DASH
    return f"{100 * e['value']:+.1f} pp [{100 * e['ci'][0]:+.1f}, {100 * e['ci'][1]:+.1f}]"


def pvalue(p: float) -> str:
    return "< 0.001" if p < 0.001 else f"{p:.3f}"


def show(v) -> str:
    return DASH if v is None else str(v)


def arm_text(c: dict) -> str:
    """A cell's arm, with its observation CE where a label gave one (``b · echo on``)."""
    return show(c["arm"]) + (f" · echo {c['echo']}" if c.get("echo") else "")


def cell_name(c: dict) -> str:
    return f"arm {arm_text(c)} · seed {show(c['seed'])} · {show(c['ckpt'])}"


def _key(c: dict) -> list[str]:
    return [arm_text(c), show(c["seed"]), show(c["ckpt"])]


def tables(doc: dict) -> list[Table]:
    iv = doc["intervals"]
    boot = f"95% percentile bootstrap, {iv['resamples']} resamples, seed {iv['seed']}"
    out = [_runs(doc), _pass(doc, boot)]
    cells = doc["cells"]
    out.append(_episode(cells))
    split = [c for c in cells if c["revise_split"]]
    if split:
        conventions = sorted({c["revise_split"]["convention"] for c in split})
        t = Table(
            "revise_split",
            "Arm B: trajectories by whether they ever chose REVISE "
            f"({' and '.join(conventions)} convention)",
            ["arm", "seed", "ckpt", "trajectories", "n", "share", "pass@1"],
            numeric=4,
            keys=4,
            caption="share and pass@1: 95% Wilson; incomplete: errored, timed out or no trace, the "
            "trajectory cut short or unknown (failures in pass@1); "
            + "; ".join(CONVENTION_NOTES[k] for k in conventions),
        )
        for c in split:
            s = c["revise_split"]
            for name, label in (*GROUPS, ("incomplete", "incomplete")):
                if s[name] is None or (name == "incomplete" and not s[name]["n"]):
                    continue
                if name == "never" and s["never_incomplete"]:
                    label += f" (incl. {s['never_incomplete']} incomplete)"
                t.rows.append(
                    _key(c) + [label, str(s[name]["n"]), prop(s[name]["share"]), prop(s[name]["pass_at_1"])]
                )
        out.append(t)
    gated = [c for c in cells if c["gate"]]
    if gated:
        t = Table(
            "gate",
            "Gate discrimination: REVISE rate by the patch's verified outcome",
            [
                "arm",
                "seed",
                "ckpt",
                "failing patches",
                "REVISEd (failing)",
                "passing patches",
                "REVISEd (passing)",
            ],
            numeric=3,
            keys=3,
            caption="over every patch the agent predicted on; 95% Wilson",
        )
        for c in gated:
            g = c["gate"]
            t.rows.append(
                _key(c)
                + [str(g["failing"]["n"]), prop(g["failing"]), str(g["passing"]["n"]), prop(g["passing"])]
            )
        out.append(t)
    t = Table(
        "tool_calls",
        "Tool calls and cap hits: KEEP-only vs REVISE trajectories",
        ["arm", "seed", "ckpt", "trajectories", "n", "mean tool calls", "cap hit"],
        numeric=4,
        keys=4,
        caption=f"mean: {boot}, over trajectories; cap hit (the budget ran out or was used up): 95% Wilson; "
        f"incomplete trajectories (errored, timed out, no trace) are counted, not measured",
    )
    for c in cells:
        tc = c["tool_calls"]
        for name, label in GROUPS:
            if tc[name]["n"] or name == "never":
                t.rows.append(
                    _key(c)
                    + [
                        label if c["revise_split"] else "all",
                        str(tc[name]["n"]),
                        est(tc[name]["mean"]),
                        prop(tc[name]["cap_hit"]),
                    ]
                )
        if tc["incomplete"]:
            t.rows.append(_key(c) + ["incomplete", str(tc["incomplete"]), DASH, DASH])
    out.append(t)
    for c in cells:
        if c["confusion"]:
            out += _confusion(c)
    if doc["comparisons"]:
        out.append(_comparisons(doc, boot))
    out += factorial_tables(doc, boot)
    if doc["seed_aggregates"]:
        t = Table(
            "seeds",
            "pass@1 over seeds",
            ["arm", "ckpt", "seeds", "pass@1 per seed", "mean", "min–max"],
            numeric=3,
            keys=2,
            caption="mean of the seeds' pass@1; interval: " + boot + " over tasks (the same draw "
            "for every seed), so it reflects task sampling; the seeds' spread is min–max",
        )
        for a in doc["seed_aggregates"]:
            per = ", ".join(
                f"{show(s)}: {pct(p['value'])}" for s, p in zip(a["seeds"], a["per_seed"], strict=True)
            )
            t.rows.append(
                [
                    arm_text(a),
                    show(a["ckpt"]),
                    str(len(a["seeds"])),
                    per,
                    est(a["mean"], percent=True),
                    f"{pct(a['min'])}–{pct(a['max'])}",
                ]
            )
        out.append(t)
    out.append(_incidents(doc))
    return out


def _incidents(doc: dict) -> Table:
    """The incidents, one row per run, cell, kind and reason (500 rollouts that failed alike are
    one row, not 500): how many, their lines in the run's results file and their tasks, both as
    ranges (``1-500``, ``mbpp_11-510``), so every incident stays named. ``report.json`` lists each."""
    groups: dict[tuple, list[dict]] = {}
    for i in doc["incidents"]:
        key = (i["run"], arm_text(i), show(i["seed"]), show(i["ckpt"]), i["kind"], i["reason"])
        groups.setdefault(key, []).append(i)
    n = len(doc["incidents"])
    t = Table(
        "incidents",
        f"Incidents: errored, timed-out and tampered rollouts ({n}"
        + (f", in {len(groups)} groups" if len(groups) < n else "") + ")",
        ["run", "kind", "rollouts", "lines", "tasks", "arm", "seed", "ckpt", "reason"],
        caption="each counts as a failure in every rate above; one row per run, cell, kind and reason; "
        "lines: the rollouts' lines in the run's results file; reason: the cause as recorded, the "
        "endpoint's own words where it answered (report.json lists every incident)",
        keys=2,
        right_columns=(2,),
        legend=_run_legend(doc, sorted({i["run"] for i in doc["incidents"]})),
    )
    for (run, arm, seed, ckpt, kind, reason), members in groups.items():
        t.rows.append([run_label(run), kind, str(len(members)), ranges([m["line"] for m in members]),
                       task_ranges([m["task"] for m in members]), arm, seed, ckpt, reason])
    return t


def ranges(numbers: list[int]) -> str:
    """``1-3, 7, 9-10``: sorted, distinct, runs of consecutive numbers as ``first-last``."""
    out: list[str] = []
    for x in sorted(set(numbers)):
        if out and out[-1][1] == x - 1:
            out[-1][1] = x
        else:
            out.append([x, x])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in out)


def task_ranges(tasks: list[str]) -> str:
    """Task ids as ranges where they share a prefix and a number (``mbpp_11-13, mbpp_20``); other ids as
    they are, in order."""
    import re

    numbered: dict[str, list[int]] = {}
    other: list[str] = []
    for task in dict.fromkeys(tasks):
        m = re.fullmatch(r"(.*?)(\d+)", str(task))
        if m:
            numbered.setdefault(m.group(1), []).append(int(m.group(2)))
        else:
            other.append(str(task))
    parts = [f"{prefix}{r}" for prefix, nums in numbered.items() for r in ranges(nums).split(", ")]
    return ", ".join(parts + other)


SOURCE_WORDS = {"label": "--label"}
"""How a run's ``sources`` value reads in the Runs table (the rest as recorded)."""


def run_label(i: int) -> str:
    """The short name of the document's ``i``-th run: ``r1``, ``r2``, ... (its path in the legend)."""
    return f"r{i + 1}"


def _run_legend(doc: dict, which: list[int]) -> list[str]:
    return [f"{run_label(i)}: {doc['runs'][i]['path']}" for i in which]


def _runs(doc: dict) -> Table:
    t = Table(
        "runs",
        "Runs",
        ["run", "source", "verifiers", "rollouts", "arm", "seed", "ckpt",
         "arm from", "seed from", "ckpt from"],
        caption="arm from, seed from, ckpt from: where the run's arm, seed and checkpoint came from: --label "
        "(given on the command line), task records (each rollout's task), sampling.seed (the run's sampling "
        "seed), PRIME-RL step (the step the checkpoint was evaluated at), model name (the model the run "
        "names), not recorded (the run does not say)",
        keys=1,
        right_columns=(3,),
        legend=_run_legend(doc, list(range(len(doc["runs"])))),
    )
    for n, run in enumerate(doc["runs"]):
        v = run["values"]
        t.rows.append(
            [
                run_label(n),
                run["source"],
                show(run["verifiers"]),
                str(run["rollouts"]),
                ", ".join(map(show, v["arm"])) + (f" · echo {', '.join(map(show, v['echo']))}"
                                                  if any(v.get("echo") or ()) else ""),
                ", ".join(map(show, v["seed"])),
                ", ".join(map(show, v["ckpt"])),
                *(SOURCE_WORDS.get(run["sources"][k], run["sources"][k]) for k in ("arm", "seed", "ckpt")),
            ]
        )
    return t


def _pass(doc: dict, boot: str) -> Table:
    cells = doc["cells"]
    ks = [
        k
        for k in sorted({p["k"] for c in cells for p in c["pass_at_k"]})
        if k > 1 and any(p["k"] == k and p["value"] is not None for c in cells for p in c["pass_at_k"])
    ]
    plus = any(c["plus"] for c in cells)
    suites = any(c["reward_suite"] != "base" for c in cells)
    cols = (
        ["arm", "seed", "ckpt"] + (["reward grades"] if suites else []) + ["n", "tasks", "passed", "pass@1"]
    )
    cols += [f"pass@{k}" for k in ks]
    cols += ["pass@1 base", "pass@1 plus"] if plus else []
    cols += ["errored", "timed out", "tampered"]
    caption = (
        "pass@1: the reward, 95% Wilson over rollouts; errored, timed-out and tampered rollouts count as "
        "failures"
    )
    if ks:
        caption += (
            f"; pass@k: Chen et al.'s unbiased estimator over tasks with >= k rollouts, {boot} over tasks"
        )
    if plus:
        caption += (
            "; pass@1 base / plus: the hidden tests / the hidden and the generated plus tests, as finalize "
            "recorded them (base_passed, plus_passed; a rollout without a grade counts as a failure)"
        )
    t = Table("pass", "pass@1 by arm × seed × checkpoint", cols, numeric=3, caption=caption, keys=3)
    for c in cells:
        row = (
            _key(c)
            + ([c["reward_suite"]] if suites else [])
            + [
                str(c["rollouts"]),
                str(c["tasks"]),
                str(c["pass_at_1"]["successes"]),
                prop(c["pass_at_1"]),
            ]
        )
        by_k = {p["k"]: p for p in c["pass_at_k"]}
        row += [est(by_k.get(k), percent=True) for k in ks]
        if plus:
            row += [prop(c[s]["pass_at_1"]) if c[s] else DASH for s in ("base", "plus")]
        row += [str(c["incidents"][k]) for k in ("errored", "timed_out", "tampered")]
        t.rows.append(row)
    return t


def _episode(cells: list[dict]) -> Table:
    t = Table(
        "episode",
        "First-patch correctness and recovery after an executed failure",
        ["arm", "seed", "ckpt", "definitions", "first patch correct", "executed failure", "recovered"],
        numeric=3,
        keys=3,
        caption="95% Wilson; first patch and executed failure: of all rollouts; recovered: of those with an "
        "executed failure. Definitions: "
        + "; ".join(f"{k}: {profiles.get(k).definitions if k in profiles.PROFILES else MIXED}"
                    for k in sorted({c["definitions"] for c in cells})),
    )
    for c in cells:
        e = c["episode"]
        t.rows.append(
            _key(c)
            + [c["definitions"], prop(e["first_patch_correct"]), prop(e["executed_failure"]), prop(e["recovered"])]
        )
    return t


def _confusion(c: dict) -> list[Table]:
    conf = c["confusion"]
    labels = conf["labels"]
    columns = conf.get("predicted_labels", labels)
    m = Table(
        f"confusion:{cell_name(c)}",
        f"Prediction confusion, {cell_name(c)} ({conf['n']} predicted patches)",
        ["verified \\ predicted", *columns, "total"],
        numeric=1,
        keys=1,
        caption="rows: the verified outcome; columns: the sampled prediction"
        + (" (INVALID: a label that is no outcome class, as the study counts it)" if len(columns) > len(labels)
           else "")
        + f"; accuracy {prop(conf['accuracy'])}",
    )
    for i, label in enumerate(labels):
        m.rows.append([label, *map(str, conf["matrix"][i]), str(sum(conf["matrix"][i]))])
    m.rows.append(
        ["total", *(str(sum(row[j] for row in conf["matrix"])) for j in range(len(columns))), str(conf["n"])]
    )
    p = Table(
        f"classes:{cell_name(c)}",
        f"Per-class precision and recall, {cell_name(c)}",
        ["class", "predicted", "verified", "precision", "recall", "prediction share", "base rate"],
        numeric=1,
        keys=1,
        caption="95% Wilson; prediction share: of all predictions; base rate: of all verified outcomes",
    )
    for k in conf["classes"]:
        p.rows.append(
            [
                k["label"],
                str(k["predicted"]),
                str(k["verified"]),
                prop(k["precision"]),
                prop(k["recall"]),
                prop(k["prediction_share"]),
                prop(k["base_rate"]),
            ]
        )
    return [m, p]


FACTORIAL_NAMES = {("a", "off"): "A", ("a", "on"): "A + ECHO", ("b", "off"): "B (PREDICT)",
                   ("b", "on"): "B + ECHO"}
"""The four cells as the four-cell tables name them."""


def factorial_tables(doc: dict, boot: str) -> list[Table]:
    """The four-cell comparison ({arm A, arm B} x {observation CE off, on}; ``doc["factorial"]``): each
    cell's pass@1 and, for arm B, its prediction figures; then every pair, paired on shared tasks."""
    groups = doc.get("factorial") or []
    if not groups:
        return []
    cells = Table(
        "factorial",
        "Four cells: {arm A, arm B} x {observation CE (ECHO) off, on}",
        ["profile", "seed", "ckpt", "cell", "n", "pass@1", "prediction accuracy", "REVISEd (failing)",
         "REVISEd (passing)"],
        numeric=4,
        keys=4,
        caption="cells from runs labelled echo=off|on (--label arm=...,echo=...,seed=...,ckpt=...), "
        "grouped by "
        "the profile their rollouts ran, seed and checkpoint; pass@1, prediction accuracy (of predicted "
        "patches) and the gate's REVISE rates: 95% Wilson; the prediction figures are arm B's",
    )
    pairs = Table(
        "factorial_pairs",
        "Four cells: every pair, paired on shared tasks",
        ["profile", "seed", "ckpt", "first", "second", "pairs", "pass@1 first", "pass@1 second", "difference",
         "McNemar p"],
        numeric=5,
        keys=5,
        caption=f"pairs: the same task (j-th rollout with j-th) in both cells; "
        f"difference: second minus first, "
        f"{boot} over pairs; McNemar: exact two-sided test on the discordant pairs",
    )
    for g in groups:
        where = [g["profile"], show(g["seed"]), show(g["ckpt"])]
        for c in g["cells"]:
            gate = c["gate"] if c["arm"] == "b" else None
            cells.rows.append(where + [FACTORIAL_NAMES[c["arm"], c["echo"]], str(c["rollouts"]),
                                       prop(c["pass_at_1"]),
                                       prop(c["prediction_accuracy"]) if c["arm"] == "b" else DASH,
                                       prop(gate["failing"]) if gate else DASH,
                                       prop(gate["passing"]) if gate else DASH])
        for x in g["pairs"]:
            pairs.rows.append(where + [FACTORIAL_NAMES[x["first"]["arm"], x["first"]["echo"]],
                                       FACTORIAL_NAMES[x["second"]["arm"], x["second"]["echo"]],
                                       str(x["pairs"]), prop(x["first_pass_at_1"]),
                                       prop(x["second_pass_at_1"]),
                                       pp(x["difference"]), pvalue(x["mcnemar_p"])])
    return [cells, pairs]


def _comparisons(doc: dict, boot: str) -> Table:
    t = Table(
        "comparisons",
        "Paired comparisons on identical tasks",
        [
            "kind",
            "first",
            "second",
            "pairs",
            "both pass",
            "first only",
            "second only",
            "neither",
            "pass@1 first",
            "pass@1 second",
            "difference",
            "McNemar p",
            "unpaired",
        ],
        numeric=3,
        caption=f"pairs: the same task (j-th rollout with j-th); difference: second minus first, {boot} over "
        f"pairs; McNemar: exact two-sided test on the discordant pairs",
    )
    for x in doc["comparisons"]:
        t.rows.append(
            [
                x["kind"],
                cell_name(x["first"]),
                cell_name(x["second"]),
                str(x["pairs"]),
                str(x["both"]),
                str(x["first_only"]),
                str(x["second_only"]),
                str(x["neither"]),
                pct(x["first_pass_at_1"]["value"]),
                pct(x["second_pass_at_1"]["value"]),
                pp(x["difference"]),
                pvalue(x["mcnemar_p"]),
                f"{x['unpaired_first']} / {x['unpaired_second']}",
            ]
        )
    return t


def markdown(doc: dict, tabs: list[Table] | None = None) -> str:
    parts = ["# glyph report", ""]
    for t in tabs if tabs is not None else tables(doc):
        parts += [f"## {t.title}", ""]
        if t.rows:
            parts.append("| " + " | ".join(_md(c) for c in t.columns) + " |")
            parts.append(
                "| "
                + " | ".join("---:" if i >= t.numeric > 0 else "---" for i in range(len(t.columns)))
                + " |"
            )
            parts += ["| " + " | ".join(_md(v) for v in row) + " |" for row in t.rows]
        else:
            parts.append("(none)")
        parts += ["", f"_{t.caption}_", ""] if t.caption else [""]
        parts += [f"- {_md(line)}" for line in t.legend] + [""] if t.legend else []
    if doc["notes"]:
        parts += ["## Notes", ""] + [f"- {n}" for n in doc["notes"]] + [""]
    return "\n".join(parts)


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")
