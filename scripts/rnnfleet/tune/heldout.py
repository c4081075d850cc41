"""The held-out verdict: the chosen settings against the defaults on datasets the search
never trained on, each arm fitted as a train job fits it (train_and_evaluate with the
dataset's whole arrays) and scored on the test period.

What it promises: per held-out dataset the test skill of each arm (the same seed, epochs and
scoring); the verdict is rnnfleet.scores.start_verdicts.paired_verdict of the differences
(chosen less defaults): a two-sided sign test across datasets and the mean's bootstrap
interval, in one line starting "tune: ". The search's own best value is not evidence here
(it was chosen on the sample's validation parts)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

from rnnfleet.prep.arrays import PreparedArrays
from rnnfleet.scores.start_verdicts import paired_verdict
from rnnfleet.tune.space import fit_settings

CHOSEN, DEFAULTS = "the search's choice", "the defaults"


def test_skill(arrays: PreparedArrays, train: Mapping, model: Mapping, evaluate: Mapping, device) -> float:
    """The test skill of one fit (NaN where the dataset has no test part)."""
    from rnnfleet.train.evaluate import Scoring, train_and_evaluate
    from rnnfleet.train.loop import LoopSettings

    scoring = Scoring.of(dict(evaluate), train["seed"])
    fit = train_and_evaluate(arrays, dict(model), LoopSettings.of(train), device, scoring=scoring)
    return float(fit.evaluated.test_scores.get("test_skill", math.nan))


def held_out_comparison(
    datasets: Mapping[str, Callable[[], PreparedArrays]],
    chosen: Mapping,
    defaults: Mapping,
    own: Mapping[str, Mapping],
    device,
    log: Callable,
) -> dict:
    """{dataset: {chosen, defaults}} test skills and the verdict line. datasets: name ->
    a function that loads its arrays (one at a time in memory); chosen: best.yaml's settings;
    defaults: {train, model, evaluate}; own: {dataset: its settings of its own (a datasets
    sheet)}, over both arms' for its fits, as over tune.apply's in its train job."""
    evaluate = defaults["evaluate"]
    skills = {}
    for name, load in datasets.items():
        arrays = load()
        train, model = fit_settings(defaults["train"], defaults["model"], {}, own.get(name, {}))
        chosen_train, chosen_model = fit_settings(defaults["train"], defaults["model"], chosen, own.get(name, {}))
        skills[name] = {
            "chosen": test_skill(arrays, chosen_train, chosen_model, evaluate, device),
            "defaults": test_skill(arrays, train, model, evaluate, device),
        }
        log(
            f"tune verdict: {name}: test skill {skills[name]['chosen']:+.4f} chosen, {skills[name]['defaults']:+.4f} defaults"
        )
    return {"skills": skills, "line": verdict_line(skills)}


def best_line(record: Mapping) -> str:
    """The search's own score of its choice, from best.yaml's record: optimistic by construction."""
    evidence = record["evidence"]
    return (
        f"tune: the best of {evidence['complete_trials']} trials, trial {evidence['best_trial']}, "
        f"validation loss / naive {evidence['best_value']:.4f} on {len(evidence['sample'])} sample dataset(s) "
        f"(optimistic: chosen on these): {record['settings']}"
    )


def verdict_line(skills: Mapping[str, Mapping[str, float]]) -> str:
    if not skills:
        return "tune: no held-out dataset (every dataset is in the sample): no verdict"
    verdict = paired_verdict(
        [entry["chosen"] - entry["defaults"] for entry in skills.values()], CHOSEN, DEFAULTS, "keep the defaults"
    )
    return f"tune (held-out datasets): {verdict.words}"
