"""rnnfleet.train.pretraining without snakemake: row slices of an array file, the frozen membership."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from conftest import returns_with_planted_signal, write_bars_of_returns

from rnnfleet.prep.arrays_file import npz_rows
from rnnfleet.workflow.pretrain_plan import frozen_membership


def test_npz_rows_reads_the_same_rows_as_loading_the_whole_array(tmp_path):
    path = tmp_path / "arrays.npz"
    features = np.arange(5000 * 3, dtype=np.float32).reshape(5000, 3)
    targets = np.linspace(-1, 1, 5000)
    np.savez(path, scalar=np.int64(7), features=features, targets=targets, fortran=np.asfortranarray(features))
    assert np.array_equal(npz_rows(str(path), "features", 1234, 1300), features[1234:1300])
    assert np.array_equal(npz_rows(str(path), "targets", 4990, 6000), targets[4990:])
    assert np.array_equal(npz_rows(str(path), "fortran", 10, 20), features[10:20])
    compressed = tmp_path / "compressed.npz"
    np.savez_compressed(compressed, features=features)
    assert np.array_equal(npz_rows(str(compressed), "features", 3, 9), features[3:9])


def test_the_datasets_served_stay_frozen_while_the_settings_are_unchanged(tmp_path):
    lineage = tmp_path / "pretrained.json"
    assert frozen_membership(str(lineage), "abc", ["A", "B"]) == (["A", "B"], False)
    lineage.write_text(json.dumps({"settings_sha256": "abc", "datasets": ["A", "B", "GONE"]}))
    assert frozen_membership(str(lineage), "abc", ["A", "B", "NEW"]) == (["A", "B"], True)
    assert frozen_membership(str(lineage), "changed", ["A", "B", "NEW"]) == (["A", "B", "NEW"], False)


def test_pooled_pieces_give_exactly_their_windows_and_none_across_two(tmp_path):
    from rnnfleet.prep.arrays import PreparedArrays
    from rnnfleet.prep.arrays_file import read_head, save_arrays
    from rnnfleet.prep.split import SplitSettings
    from rnnfleet.train.loop import usable_windows
    from rnnfleet.train.pretraining import FleetRows, Piece, fleet_arrays

    seq_len, rows = 8, 300
    split = SplitSettings(seq_len, 1, 0.15, 0.15).points(rows)
    paths = []
    for number in range(2):
        path = tmp_path / f"d{number}.npz"
        # Feature value = dataset number * 1000 + row: a window's rows say where it came from.
        features = (number * 1000 + np.arange(rows, dtype=np.float32))[:, None].repeat(2, axis=1)
        save_arrays(
            PreparedArrays(
                features=features,
                targets=np.zeros(rows, np.float32),
                feature_mean=np.zeros(2, np.float32),
                feature_std=np.ones(2, np.float32),
                target_std=1.0,
                train_end=split.train_end,
                val_start=split.val_start,
                val_end=split.val_end,
                test_start=split.test_start,
                last_close=1.0,
                horizon=1,
                feature_names=("a", "b"),
                row_times=np.arange(rows, dtype=np.int64),
                raw_features=features.astype(np.float64),  # what the file holds: mean 0, std 1
                raw_targets=np.zeros(rows),
            ),
            path,
        )
        paths.append(str(path))
    train, val = FleetRows([], [], []), FleetRows([], [], [])
    pieces = [(Piece(20, 69), Piece(100, 119)), (Piece(7, 56), Piece(150, 159))]
    for path, (train_piece, val_piece) in zip(paths, pieces, strict=True):
        head = read_head(path)
        train.add(path, head, train_piece, seq_len)
        val.add(path, head, val_piece, seq_len)
    pooled = fleet_arrays(train, val, read_head(paths[0]))
    numbers = usable_windows(pooled, seq_len)
    assert len(numbers.train) == 50 + 50 and len(numbers.val) == 20 + 10 and not len(numbers.test)
    for number in np.concatenate([numbers.train, numbers.val]):
        window = pooled.features[number : number + seq_len, 0]
        assert np.all(np.diff(window) == 1), window  # consecutive rows of one dataset
    ends = pooled.features[numbers.train + seq_len - 1, 0]
    assert sorted(ends.tolist()) == [*range(20, 70), *range(1007, 1057)]


# ---- the cutoff, proved from the model's skill ---------------------------------------------------

PLANTED_ROW = 300  # LONG's bars from here on carry the planted signal
SEQ_LEN = 8


def planted_window_skill(state_dict: dict, model_hparams: dict, arrays, ends: np.ndarray) -> float:
    """Skill (1 - MSE / the naive zero forecast's) of a model's weights on the windows ending at `ends`."""
    import torch

    from rnnfleet.heads import with_outputs
    from rnnfleet.train.loop import SINGLE, window_outputs, window_view
    from rnnfleet.train.models import build_model

    model = build_model(with_outputs(model_hparams, SINGLE), arrays.features.shape[1], SEQ_LEN)
    model.load_state_dict(state_dict)
    windows = window_view(torch.from_numpy(arrays.features), SEQ_LEN)
    outputs = window_outputs(model, windows, None, torch.from_numpy(ends - (SEQ_LEN - 1)))
    actual = arrays.targets[ends]
    return float(1 - np.mean((outputs - actual) ** 2) / np.mean(actual**2))


@pytest.mark.slow
def test_the_pretrained_model_never_learns_a_signal_planted_after_the_cutoff(tmp_path):
    """SHORT's training part ends first (its first embargo bar is the cutoff, before LONG's row
    300); LONG's bars from row 300 on follow each other, inside SHORT's validation and test
    periods in time. Pretrained on both, the model never reads them: on LONG's planted windows
    it scores no more than a lean by accident (skill < 0.2; with these settings, over data
    seeds 0-7, from -0.30 to +0.13). The same pretraining of LONG alone (its cutoff after row
    300: it reads them) scores clearly (> 0.35; 0.58 to 0.79 over those seeds), and so does
    the pretraining of both when each dataset is read up to its own cutoff (0.52)."""
    import torch

    from rnnfleet.prep.arrays_file import load_arrays, save_arrays
    from rnnfleet.prep.prepare import prepare_dataset
    from rnnfleet.train.pretraining import pretrain, pretrain_settings

    paths = {}
    for number, (name, rows) in enumerate({"SHORT": 400, "LONG": 900}.items()):
        rng = np.random.default_rng(number)
        returns = returns_with_planted_signal(rows, rng, PLANTED_ROW if name == "LONG" else None)
        write_bars_of_returns(tmp_path / f"{name}.csv", returns, rng)
        arrays, _ = prepare_dataset(str(tmp_path / f"{name}.csv"), seq_len=SEQ_LEN, horizon=1, val_fraction=0.15)
        save_arrays(arrays, tmp_path / f"{name}.npz")
        paths[name] = str(tmp_path / f"{name}.npz")
    model = {"cell": "lstm", "hidden_size": 8, "num_layers": 1, "dropout": 0.0}
    train = {"seq_len": SEQ_LEN, "batch_size": 64, "epochs": 10, "patience": 10, "lr": 0.02, "seed": 0}
    settings = pretrain_settings(model, train, {}, {"train_windows": 300, "val_windows": 80}, {})
    settings["settings_sha256"] = "test"
    long = load_arrays(paths["LONG"])
    planted_ends = np.arange(PLANTED_ROW + SEQ_LEN + long.warmup, long.train_end - long.horizon)

    def skill_of_pretraining(fleet: dict[str, str]) -> tuple[float, dict]:
        checkpoint, lineage = pretrain(fleet, settings, torch.device("cpu"), log=lambda line: None)
        return planted_window_skill(checkpoint["state_dict"], model, long, planted_ends), lineage

    fleet_skill, lineage = skill_of_pretraining(paths)
    assert lineage["cutoff_dataset"] == "SHORT"
    assert lineage["bars"]["LONG"]["last_bar_ns"] < int(long.row_times[PLANTED_ROW])  # from the bars it records
    seen_skill, seen_lineage = skill_of_pretraining({"LONG": paths["LONG"]})
    assert seen_lineage["bars"]["LONG"]["last_bar_ns"] >= int(long.row_times[planted_ends[-1]])
    assert fleet_skill < 0.2 and seen_skill > 0.35, (fleet_skill, seen_skill)


def test_the_datasets_served_are_every_one_present_whenever_the_pretraining_is_redone(tmp_path):
    import os
    from types import SimpleNamespace

    from rnnfleet.workflow.pretrain_plan import pretrain_forced, pretrain_plan

    lineage, code = tmp_path / "pretrained.json", tmp_path / "my_model.py"
    code.write_text("")
    lineage.write_text(json.dumps({"settings_sha256": "abc", "datasets": ["A", "B"]}))
    present = ["A", "B", "NEW"]
    stands = pretrain_plan(str(lineage), "abc", present, False, [str(code)])
    assert (stands.datasets, stands.frozen, stands.why_redone) == (["A", "B"], True, "")
    assert pretrain_plan(str(lineage), "changed", present, False, []).datasets == present
    assert pretrain_plan(str(lineage), "abc", present, True, []).datasets == present
    os.utime(code, (lineage.stat().st_mtime + 10,) * 2)  # the user's model file edited since
    edited = pretrain_plan(str(lineage), "abc", present, False, [str(code)])
    assert (edited.datasets, edited.why_redone) == (present, "a model or feature file changed since it was made")
    outputs = ("models/.fleet/pretrained.pt",)
    assert pretrain_forced(SimpleNamespace(forcerun={"pretrain"}), "pretrain", outputs)
    assert pretrain_forced(SimpleNamespace(forcerun={"models/.fleet/pretrained.pt"}), "pretrain", outputs)
    assert pretrain_forced(SimpleNamespace(forceall=True), "pretrain", outputs)
    assert pretrain_forced(SimpleNamespace(forcetargets=True, targets={"pretrain"}), "pretrain", outputs)
    assert not pretrain_forced(SimpleNamespace(forcerun={"train"}, targets={"pretrain"}), "pretrain", outputs)


def test_an_array_file_that_does_not_read_is_left_out_and_the_others_pretrain(tmp_path):
    import torch

    from rnnfleet.prep.arrays_file import save_arrays
    from rnnfleet.prep.prepare import prepare_dataset
    from rnnfleet.train.pretraining import pretrain, pretrain_settings

    paths = {}
    for number, name in enumerate(("A", "B")):
        rng = np.random.default_rng(number)
        write_bars_of_returns(tmp_path / f"{name}.csv", returns_with_planted_signal(300, rng), rng)
        arrays, _ = prepare_dataset(str(tmp_path / f"{name}.csv"), seq_len=SEQ_LEN, horizon=1, val_fraction=0.15)
        save_arrays(arrays, tmp_path / f"{name}.npz")
        paths[name] = str(tmp_path / f"{name}.npz")
    (tmp_path / "DAMAGED.npz").write_bytes(b"PK\x03\x04 not a whole zip file")
    paths["DAMAGED"] = str(tmp_path / "DAMAGED.npz")
    model = {"cell": "gru", "hidden_size": 4, "num_layers": 1, "dropout": 0.0}
    train = {"seq_len": SEQ_LEN, "batch_size": 64, "epochs": 1, "patience": 1, "lr": 0.01, "seed": 0}
    settings = pretrain_settings(model, train, {}, {"train_windows": 50, "val_windows": 20}, {})
    failed = {"GONE": "its preprocess failed: data/GONE.csv: ..."}
    lines = []
    _, lineage = pretrain(paths, {**settings, "settings_sha256": "test"}, torch.device("cpu"), lines.append, failed)
    assert lineage["trained_on"] == ["A", "B"] and lineage["datasets"] == ["A", "B", "DAMAGED"]
    assert lineage["left_out"]["GONE"] == failed["GONE"]
    assert lineage["left_out"]["DAMAGED"].startswith(f"its array file does not read: {paths['DAMAGED']} (")
    assert f"pretrain: DAMAGED left out: {lineage['left_out']['DAMAGED']}" in lines


def test_the_fleets_verdict_on_its_start_is_a_sign_test_across_datasets():
    from rnnfleet.scores.start_verdicts import fleet_start_verdict, sign_test_p_value

    assert sign_test_p_value(8, 0) == 2 / 2**8 and sign_test_p_value(4, 4) == 1.0
    assert sign_test_p_value(14, 2) == pytest.approx(2 * sum(math.comb(16, k) for k in range(3)) / 2**16)
    better = fleet_start_verdict([0.02, 0.01, 0.03, 0.015, 0.02, 0.01, 0.025, 0.012])
    assert (better.compared, better.better, better.worse) == (8, 8, 0)
    assert better.low > 0 and better.words.startswith("the fleet's start beat scratch: better on 8 of 8 datasets")
    mixed = fleet_start_verdict([0.02, -0.01, 0.03, -0.015, 0.02, -0.01, float("nan")])
    assert mixed.compared == 6 and mixed.low < mixed.mean < mixed.high
    assert mixed.words.startswith("the fleet's start is no better than scratch") and "train from scratch" in mixed.words
    assert fleet_start_verdict([0.1, 0.2]).words.startswith("too few datasets to tell (2, fewer than 6)")


def test_a_datasets_own_verdict_needs_several_seeds_and_is_corrected_across_the_fleet():
    from rnnfleet.scores.start_verdicts import (
        FLEET_START_BETTER,
        NO_DIFFERENCE,
        ONE_FIT,
        init_verdicts,
        seeds_p_value,
    )

    # Four seeds each, every fit from the start above every fit from scratch: the most extreme
    # of the 70 ways to split eight fits in two, on either side.
    assert seeds_p_value([0.5, 0.6, 0.55, 0.58], [0.1, 0.2, 0.15, 0.12]) == pytest.approx(2 / 70)
    assert seeds_p_value([0.5, 0.1], [0.4, 0.2]) == 1.0
    rows = [
        {"dataset": "A", "init_fleet_test_skill": 0.5, "init_scratch_test_skill": 0.1, "init_seeds_pvalue": 2 / 70},
        {"dataset": "B", "init_fleet_test_skill": 0.3, "init_scratch_test_skill": 0.3, "init_seeds_pvalue": 1.0},
        {"dataset": "C", "init_fleet_test_skill": 0.2, "init_scratch_test_skill": 0.1},  # one fit each
        {"dataset": "D"},  # not compared
    ]
    verdicts = {row["dataset"]: row.get("init_verdict") for row in init_verdicts(rows, "bh", 0.1)}
    assert verdicts == {"A": FLEET_START_BETTER, "B": NO_DIFFERENCE, "C": ONE_FIT, "D": None}
    # Corrected across the fleet: A's p-value alone passes 0.05, not after Benjamini-Hochberg over two.
    assert {row["dataset"]: row.get("init_verdict") for row in init_verdicts(rows, "bh", 0.05)}["A"] == NO_DIFFERENCE
