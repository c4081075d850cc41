"""The search's results from its study: every trial (trials.csv), the chosen settings with
their evidence (best.yaml), and a page of charts (tune.html, PNGs drawn with matplotlib and
embedded, so the page is one file).

What it promises: every trial of the study is a row, whatever its state; best.yaml holds the
settings of the COMPLETE trial of lowest value and says that value is the best of N trials
on the sample's validation parts (optimistic by construction: the held-out verdict is the
evidence); the importances are drawn only with 2 or more settings and MIN_FOR_IMPORTANCE
COMPLETE trials."""

from __future__ import annotations

import base64
import csv
import html
import io
from collections.abc import Mapping
from pathlib import Path

import optuna
import yaml

from rnnfleet.atomic_files import atomic_write
from rnnfleet.errors import UserError
from rnnfleet.tune.heldout import best_line
from rnnfleet.tune.search import SKIPPED_ATTR, WORKER_ATTR

MIN_FOR_IMPORTANCE = 4
FIXED_COLUMNS = ("number", "state", "value", "worker", "started", "seconds", "note")


def trial_rows(study: optuna.Study, space: Mapping) -> list[dict]:
    """One row per trial: number, state, value (empty unless COMPLETE), worker, when it
    started (UTC, ISO) and how long it ran, why it failed, and its settings, by trial number."""
    rows = []
    for trial in sorted(study.get_trials(deepcopy=False), key=lambda trial: trial.number):
        note = trial.user_attrs.get(SKIPPED_ATTR, "")
        if trial.state == optuna.trial.TrialState.FAIL and not note:
            note = "its worker stopped before it ended"
        rows.append(
            {
                "number": trial.number,
                "state": trial.state.name,
                "value": trial.value if trial.state == optuna.trial.TrialState.COMPLETE else "",
                "worker": trial.user_attrs.get(WORKER_ATTR, ""),
                "started": trial.datetime_start.isoformat() if trial.datetime_start else "",
                "seconds": trial.duration.total_seconds() if trial.duration is not None else "",
                "note": note,
                **{name: trial.params.get(name, "") for name in space},
            }
        )
    return rows


def write_trials_csv(rows: list[dict], space: Mapping, path: str) -> None:
    with atomic_write(path) as handle:
        text = io.StringIO()
        writer = csv.DictWriter(text, fieldnames=[*FIXED_COLUMNS, *space], lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
        handle.write(text.getvalue().encode())


def complete_trials(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    return [trial for trial in study.get_trials(deepcopy=False) if trial.state == optuna.trial.TrialState.COMPLETE]


def best_record(study: optuna.Study, evidence: Mapping) -> dict:
    """best.yaml's contents: the best COMPLETE trial's settings and the evidence; UserError
    when no trial completed."""
    complete = complete_trials(study)
    if not complete:
        raise UserError(f"study {study.study_name}: no trial completed; see logs/tune/worker-*.log")
    best = min(complete, key=lambda trial: trial.value)
    return {
        "settings": dict(best.params),
        "evidence": {
            "study": study.study_name,
            "best_trial": best.number,
            "best_value": float(best.value),
            "value": "mean over the sample of validation loss / naive baseline's (lower is better)",
            "complete_trials": len(complete),
            "trials": len(study.get_trials(deepcopy=False)),
            "note": f"the best of {len(complete)} trials on the sample's validation parts: optimistic by "
            "construction; the held-out verdict (verdict.txt) is the evidence",
            **evidence,
        },
    }


def write_yaml(record: Mapping, path: str) -> None:
    with atomic_write(path) as handle:
        handle.write(yaml.safe_dump(dict(record), sort_keys=False).encode())


def png_of(figure) -> str:
    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=90, bbox_inches="tight")
    plt.close(figure)
    return base64.b64encode(buffer.getvalue()).decode()


def history_chart(complete: list[optuna.trial.FrozenTrial]) -> str:
    """Each COMPLETE trial's value by trial number, and the best so far."""
    import matplotlib.pyplot as plt

    numbers = [trial.number for trial in complete]
    values = [trial.value for trial in complete]
    best = [min(values[: index + 1]) for index in range(len(values))]
    figure, axes = plt.subplots(figsize=(6, 3.5))
    axes.plot(numbers, values, "o", label="trial")
    axes.step(numbers, best, where="post", label="best so far")
    axes.axhline(1.0, color="grey", lw=0.8, ls=":", label="naive baseline")
    axes.set_xlabel("trial")
    axes.set_ylabel("validation loss / naive")
    axes.legend()
    return png_of(figure)


def settings_chart(complete: list[optuna.trial.FrozenTrial], space: Mapping) -> str:
    """Trial value against each searched setting, one panel each."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullFormatter

    figure, panels = plt.subplots(1, len(space), figsize=(3.2 * len(space), 3), squeeze=False)
    for axes, name in zip(panels[0], space, strict=True):
        values = [trial.params[name] for trial in complete if name in trial.params]
        scores = [trial.value for trial in complete if name in trial.params]
        if isinstance(space[name], list):  # choices: at their place in the list
            positions = [space[name].index(value) for value in values]
            axes.set_xticks(range(len(space[name])), [str(choice) for choice in space[name]])
            axes.plot(positions, scores, "o")
        else:
            axes.plot(values, scores, "o")
            if space[name].get("log"):
                axes.set_xscale("log")
                axes.xaxis.set_minor_formatter(NullFormatter())  # the minor labels overlap
        axes.set_xlabel(name)
    panels[0][0].set_ylabel("validation loss / naive")
    return png_of(figure)


def importance_chart(study: optuna.Study) -> str:
    import matplotlib.pyplot as plt

    importances = optuna.importance.get_param_importances(study)
    figure, axes = plt.subplots(figsize=(5, 0.5 + 0.4 * len(importances)))
    axes.barh(list(importances)[::-1], list(importances.values())[::-1])
    axes.set_xlabel("importance (fANOVA)")
    return png_of(figure)


def write_page(study: optuna.Study, space: Mapping, record: Mapping, path: str) -> None:
    """tune.html: the best line and the charts (see the module doc)."""
    import matplotlib

    matplotlib.use("Agg")
    complete = complete_trials(study)
    sections = [
        ("Optimisation history", history_chart(complete)),
        ("Trial scores against the settings", settings_chart(complete, space)),
    ]
    notes = []
    if len(space) >= 2 and len(complete) >= MIN_FOR_IMPORTANCE:
        sections.append(("Setting importances", importance_chart(study)))
    else:
        notes.append(
            f"No importances: they need 2 or more settings searched and {MIN_FOR_IMPORTANCE} or more "
            f"complete trials ({len(space)} and {len(complete)} here)."
        )
    body = "".join(
        f'<h2>{html.escape(title)}</h2><img alt="{html.escape(title)}" src="data:image/png;base64,{png}">'
        for title, png in sections
    )
    page = (
        "<!doctype html><html><head><meta charset='utf-8'><title>rnnfleet tune</title></head><body>"
        f"<h1>Settings search</h1><p>{html.escape(best_line(record))}</p>"
        + "".join(f"<p>{html.escape(note)}</p>" for note in notes)
        + body
        + "</body></html>\n"
    )
    with atomic_write(path) as handle:
        handle.write(page.encode())


def write_results(study: optuna.Study, space: Mapping, evidence: Mapping, paths: Mapping[str, str]) -> dict:
    """trials.csv, best.yaml and tune.html of the study (paths: trials, best, page); the record."""
    write_trials_csv(trial_rows(study, space), space, paths["trials"])
    record = best_record(study, evidence)
    write_yaml(record, paths["best"])
    Path(paths["page"]).parent.mkdir(parents=True, exist_ok=True)
    write_page(study, space, record, paths["page"])
    return record
