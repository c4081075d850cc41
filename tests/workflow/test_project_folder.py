"""A project folder of the user's own, made with the installed `rnnfleet` command outside the
repository, and settings that mean what they say: through the real pip, `rnnfleet` and
`snakemake`."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
import sysconfig
import time
import zipfile
from pathlib import Path

import pytest
import yaml
from conftest import REPO, TINY_CONFIG, add_datasets, pending_jobs, schema_keys, snakemake, write_config

from rnnfleet.cli.commands import project_config
from rnnfleet.train.models import load_model
from rnnfleet.workflow.config_check import config_problems, model_section, typed_as_yaml

SCHEMA = yaml.safe_load((REPO / "schemas" / "config.schema.yaml").read_text())
# Folders a run or an editable install may write in the repository, not outputs.
NOT_OUTPUTS = (".git", "build", "rnnfleet.egg-info", "__pycache__", ".pytest_cache")


def bin_dir(venv: Path) -> Path:
    return venv / ("Scripts" if os.name == "nt" else "bin")


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    """A fresh virtual environment with rnnfleet installed by `pip install -e` (without
    dependencies: it sees this interpreter's packages through a .pth file)."""
    venv = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    purelib = Path(sysconfig.get_path("purelib", vars={"base": str(venv), "platbase": str(venv)}))
    (purelib / "these_packages.pth").write_text(sysconfig.get_path("purelib") + "\n")
    python = bin_dir(venv) / "python"
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "-e", str(REPO)],
        check=True,
        capture_output=True,
    )
    return venv


def rnnfleet(venv: Path, *args: str, cwd: Path, check: bool = True) -> subprocess.CompletedProcess:
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}  # no PYTHONPATH
    result = subprocess.run(
        [str(bin_dir(venv) / "rnnfleet"), *args], cwd=cwd, capture_output=True, text=True, env=env, timeout=900
    )
    if check and result.returncode != 0:
        raise AssertionError(f"rnnfleet {' '.join(args)} failed:\n{result.stdout}\n{result.stderr[-4000:]}")
    return result


def snakemake_here(venv: Path, folder: Path, *args: str) -> subprocess.CompletedProcess:
    """A plain `snakemake` in `folder`, as a user types it there (no -s, no -d)."""
    result = subprocess.run(
        [str(bin_dir(venv) / "python"), "-m", "snakemake", "--cores", "2", *args],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return result


def repo_files_newer_than(started: float) -> list[Path]:
    return [
        path
        for path in REPO.rglob("*")
        if path.is_file() and not set(path.relative_to(REPO).parts) & set(NOT_OUTPUTS)
        if path.stat().st_mtime > started
    ]


def test_init_makes_a_folder_that_runs_there_incrementally_and_forecasts(venv, tmp_path):
    bars = tmp_path / "bars"
    add_datasets(tmp_path, ["A_1m", "B_1m"])
    (tmp_path / "data").rename(bars)
    started = time.time()

    rnnfleet(venv, "init", "my-fleet", "--data", "bars", cwd=tmp_path)
    folder = tmp_path / "my-fleet"
    config_path = folder / "config" / "config.yaml"
    assert sorted(str(path.relative_to(folder)) for path in folder.rglob("*") if path.is_file()) == [
        "Snakefile",
        os.path.join("config", "config.yaml"),
        os.path.join("profiles", "default", "config.yaml"),
        os.path.join("profiles", "slurm-packed", "config.yaml"),
        os.path.join("profiles", "slurm", "config.yaml"),
    ]
    # The folder names no path of rnnfleet's install: it finds the workflow at each run.
    assert str(REPO) not in (folder / "Snakefile").read_text()
    config = yaml.safe_load(config_path.read_text())
    assert config["data_dir"] == str(bars)  # stored absolute: the folder runs from anywhere
    # The user's own settings, in the folder's config file.
    config["model"].update(TINY_CONFIG["model"])
    config["train"].update(TINY_CONFIG["train"])
    config["predict"].update({"datasets": ["A_1m"], "last": 5})  # a predict job is a process of its own
    config_path.write_text(yaml.safe_dump(config, sort_keys=False))

    run = snakemake_here(venv, folder)
    assert "profiles/default" in run.stderr  # the folder's own profile applied
    for output in ("models/A_1m.pt", "models/B_1m.pt", "results/metrics.csv", "predictions/A_1m.csv"):
        assert (folder / output).is_file(), output
    assert load_model(folder / "models" / "A_1m.pt")[1]["model_config"]["hidden_size"] == 8  # the folder's config
    assert repo_files_newer_than(started) == []  # every output is in the folder

    again = snakemake_here(venv, folder, "-n")
    assert "Nothing to be done" in again.stdout + again.stderr
    add_datasets(tmp_path, ["C_1m"])
    (tmp_path / "data" / "C_1m.csv").rename(bars / "C_1m.csv")
    dry_run = snakemake_here(venv, folder, "-n")
    assert list(pending_jobs(dry_run.stdout, "train")) == ["C_1m"]  # only the new dataset

    rnnfleet(venv, "predict", "--model", "models/A_1m.pt", "--csv", str(bars / "A_1m.csv"), "--out", "f.csv",
             "--last", "3", cwd=folder)  # fmt: skip
    with open(folder / "f.csv") as forecasts:
        assert len(list(csv.DictReader(forecasts))) == 3
    # By the dataset's name: its model and its own files, found as the folder's runs find them.
    rnnfleet(
        venv, "predict", "--dataset", "A_1m", "--project", "my-fleet", "--out", "g.csv", "--last", "3", cwd=tmp_path
    )
    assert (tmp_path / "g.csv").read_text() == (folder / "f.csv").read_text()
    unknown = rnnfleet(venv, "predict", "--dataset", "Z_1m", "--out", "g.csv", cwd=folder, check=False)
    assert unknown.returncode == 1
    assert unknown.stderr.strip() == "error: --dataset Z_1m: no such dataset in . (3 found: A_1m, B_1m, C_1m)"

    inspected = rnnfleet(venv, "inspect", cwd=folder)
    assert "A_1m" in inspected.stdout and (folder / "results" / "inspect.csv").is_file()
    assert repo_files_newer_than(started) == []


def test_every_command_has_help_and_init_replaces_nothing(venv, tmp_path):
    for command in ([], ["init"], ["run"], ["predict"], ["inspect"], ["export"], ["clean"]):
        result = rnnfleet(venv, *command, "--help", cwd=tmp_path)
        assert result.stdout.startswith(f"usage: rnnfleet {' '.join(command)}".rstrip()), result.stdout
    (tmp_path / "taken" / "config").mkdir(parents=True)
    (tmp_path / "taken" / "config" / "config.yaml").write_text("mine\n")

    refused = rnnfleet(venv, "init", "taken", cwd=tmp_path, check=False)

    assert refused.returncode == 1
    assert refused.stderr.strip().splitlines() == [
        f"error: {Path('taken') / 'config' / 'config.yaml'}: exists already; nothing was written (choose a new folder)"
    ]
    assert sorted(path.name for path in (tmp_path / "taken").rglob("*")) == ["config", "config.yaml"]


def test_the_generated_config_has_every_key_at_its_schema_default():
    config = yaml.safe_load(project_config(REPO, "/data/bars"))
    assert config["data_dir"] == "/data/bars"
    assert set(config) == set(SCHEMA["properties"])
    assert config_problems(config, SCHEMA) == []
    for section, values in config.items():
        if isinstance(values, dict) and section != "model":
            assert_at_schema_defaults(values, SCHEMA["properties"][section], section)
    # Every key docs/configuration.md lists is there (the schema's, not a hand list); a key
    # without a default (columns.date) commented out, since it may not be null.
    text, missing = project_config(REPO, "/data/bars"), []
    for key, default in schema_keys(SCHEMA["properties"]).items():
        value = config
        for part in key.split("."):
            value = value.get(part, missing) if isinstance(value, dict) else missing
        if value is missing and not (default is None and f"# {key.split('.')[-1]}:" in text):
            missing.append(key)
    assert missing == []
    # Each key's comment is its description's first sentence, whole: on lines of its own where long.
    comments = " ".join(line.split(" # ", 1)[1] for line in text.splitlines() if " # " in line)
    assert " ..." not in comments and "(e.g " not in comments + " "
    assert "several horizons from one model (e.g. [1, 5, 15, 60]): one output each" in comments


def test_init_on_a_binance_data_vision_tree_sets_datasets_files_and_the_first_dry_run_works(tmp_path):
    tree = tmp_path / "data.binance.vision" / "data" / "spot"
    for symbol in ("BTCUSDT", "ETHUSDT"):
        for period in ("daily/klines/{s}/1m/{s}-1m-2024-01-01.zip", "monthly/klines/{s}/1m/{s}-1m-2024-01.zip"):
            path = tree / period.format(s=symbol)
            path.parent.mkdir(parents=True, exist_ok=True)
            with zipfile.ZipFile(path, "w") as archive:  # the dry-run reads no bars: one line is enough
                archive.writestr(path.with_suffix(".csv").name, "1704067200000,1,1,1,1,1,1704067259999,1,1,1,1,0\n")
    env = {**os.environ, "PYTHONPATH": str(REPO / "scripts")}
    entry_point = [sys.executable, "-c", "import sys; from rnnfleet.cli.commands import main; sys.exit(main())"]
    init = subprocess.run(
        [*entry_point, "init", "fleet", "--data", str(tree)], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert init.returncode == 0, init.stderr
    assert (
        f"{tree} holds Binance Data Vision's tree of daily and monthly files: datasets.files set to "
        "'**/{dataset}-1m-*' (2 datasets: BTCUSDT, ETHUSDT)"
    ) in init.stdout
    # The layout it found, as the first dataset's first file reads (headerless Binance klines).
    first = f"{tree}/daily/klines/BTCUSDT/1m/BTCUSDT-1m-2024-01-01.zip"
    assert f"2 dataset(s) found; BTCUSDT's first file, {first}, reads as " in init.stdout, init.stdout
    assert ": 1 bars (rnnfleet inspect checks every file)" in init.stdout
    config = yaml.safe_load((tmp_path / "fleet" / "config" / "config.yaml").read_text())
    assert config["datasets"]["files"] == "**/{dataset}-1m-*" and config["data_dir"] == str(tree)
    dry_run = subprocess.run(
        [sys.executable, "-m", "snakemake", "-n"], cwd=tmp_path / "fleet", env=env, capture_output=True, text=True
    )
    assert dry_run.returncode == 0, dry_run.stderr
    assert set(pending_jobs(dry_run.stdout, "preprocess")) == {"BTCUSDT", "ETHUSDT"}


def assert_at_schema_defaults(values: dict, schema: dict, where: str) -> None:
    """Every key of `values` at its schema default, nested sections (quality.flat_bars.warn) too."""
    for key, value in values.items():
        spec = schema["properties"][key]
        if isinstance(value, dict) and "properties" in spec:
            assert_at_schema_defaults(value, spec, f"{where}.{key}")
        else:
            assert value == spec.get("default", value), f"{where}.{key}"


def test_command_line_text_is_typed_as_yaml_types_it_except_where_the_schema_says_text():
    given = {"model": {"builder": "x.py:b", "width": "16", "rate": "0.5", "on": "true", "name": "wide"},
             "train": {"epochs": "3", "device": "cpu"}, "format": {"delimiter": ",", "timestamp_format": "%Y"},
             "predict": {"datasets": ["A", "B"]}}  # fmt: skip
    typed = typed_as_yaml(given, SCHEMA)
    assert typed["model"] == {"builder": "x.py:b", "width": 16, "rate": 0.5, "on": True, "name": "wide"}
    assert typed["train"] == {"epochs": 3, "device": "cpu"}
    assert typed["format"] == given["format"] and typed["predict"] == given["predict"]


def test_a_layer_naming_another_builder_starts_the_model_section_afresh():
    demo = {"model": {"builder": "rnn", "cell": "gru", "hidden_size": 64}}
    assert model_section([demo, {"model": {"builder": "x.py:b", "width": 16}}], SCHEMA) == {
        "builder": "x.py:b",
        "width": 16,
    }
    # The same builder: keys merge, and rnn's keys left out take the schema's defaults.
    assert model_section([demo, {"model": {"hidden_size": 32}}], SCHEMA) == {
        "builder": "rnn",
        "cell": "gru",
        "hidden_size": 32,
        "num_layers": 2,
        "dropout": 0.1,
    }


# A builder that takes only its own keys (no **kwargs) and insists they are numbers.
STRICT_BUILDER = """
from torch import nn


class Last(nn.Module):
    def __init__(self, input_size, width, depth):
        super().__init__()
        layers = [nn.Linear(input_size, width)] + [nn.Linear(width, width) for _ in range(depth - 1)]
        self.body, self.head = nn.Sequential(*layers), nn.Linear(width, 1)

    def forward(self, windows):
        return self.head(self.body(windows[:, -1])).squeeze(-1)


def build(input_size: int, width: int, depth: int = 1) -> nn.Module:
    if not isinstance(width, int) or not isinstance(depth, int):
        raise TypeError(f"width and depth must be ints, got {type(width).__name__}, {type(depth).__name__}")
    return Last(input_size, width, depth)
"""


@pytest.mark.parametrize("source", ["--config", "--configfile", "the folder's config"])
def test_your_builder_with_numeric_keys_trains_from_each_source(tmp_path, source):
    add_datasets(tmp_path, ["A_1m"])
    (tmp_path / "strict.py").write_text(STRICT_BUILDER)
    model = {"builder": "strict.py:build", "width": 6, "depth": 2}
    args: list[str] = []
    if source == "the folder's config":
        write_config(tmp_path, data_dir="data")
        config = yaml.safe_load((tmp_path / "config.yaml").read_text())
        config["model"] = model  # the section names its builder and that builder's keys
        (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    else:
        write_config(tmp_path, data_dir="data")  # the demo's model section: builder rnn and its keys
        if source == "--config":
            args = ["--config", 'model={"builder": "strict.py:build", "width": 6, "depth": 2}']
        else:
            (tmp_path / "mine.yaml").write_text(yaml.safe_dump({"model": model}))
            args = ["--configfile", "mine.yaml"]

    snakemake(tmp_path, *args)

    _, checkpoint = load_model_here(tmp_path)
    assert {key: checkpoint["model_config"][key] for key in model} == model
    assert not {"cell", "hidden_size", "num_layers", "dropout"} & set(checkpoint["model_config"])


def load_model_here(folder: Path):
    cwd = os.getcwd()
    os.chdir(folder)  # the builder's path is relative to the working folder
    try:
        return load_model(folder / "models" / "A_1m.pt")
    finally:
        os.chdir(cwd)


def test_the_built_in_model_takes_its_keys_from_the_command_line(tmp_path):
    add_datasets(tmp_path, ["A_1m"])
    write_config(tmp_path, data_dir="data")

    snakemake(tmp_path, "--config", 'model={"hidden_size": 12, "cell": "gru"}')

    model, checkpoint = load_model(tmp_path / "models" / "A_1m.pt")
    assert (model.rnn.hidden_size, type(model.rnn).__name__) == (12, "GRU")
    assert checkpoint["model_config"]["num_layers"] == TINY_CONFIG["model"]["num_layers"]  # from config.yaml


def test_rnnfleet_run_takes_dotted_config_keys_that_snakemake_alone_refuses(venv, tmp_path):
    """`--config train.epochs=abc` is rnnfleet's one line naming the key, not Snakemake's
    traceback; `model.hidden_size=12 model.cell=gru` reach the model, the file's other keys kept."""
    add_datasets(tmp_path, ["A_1m"])
    write_config(tmp_path, data_dir="data")

    bad = rnnfleet(venv, "run", "--cores", "1", "-n", "--config", "train.epochs=abc", cwd=tmp_path, check=False)
    assert bad.returncode == 1
    assert "config key 'train.epochs' = 'abc' is not allowed" in bad.stderr
    assert "Traceback" not in bad.stderr and "valid identifier" not in bad.stderr
    plain = snakemake(tmp_path, "-n", "--config", "train.epochs=3", check=False)
    assert "Config entry must start with a valid identifier" in plain.stdout  # what rnnfleet run avoids

    rnnfleet(venv, "run", "--project", str(tmp_path), "--cores", "1", "--config", "model.hidden_size=12",
             "model.cell=gru", "train.epochs=1", cwd=tmp_path.parent)  # fmt: skip
    model, checkpoint = load_model(tmp_path / "models" / "A_1m.pt")
    assert (model.rnn.hidden_size, type(model.rnn).__name__) == (12, "GRU")
    assert checkpoint["model_config"]["num_layers"] == TINY_CONFIG["model"]["num_layers"]  # from config.yaml


def test_a_project_folder_is_lint_clean_and_runs_from_another_folder(venv, tmp_path):
    add_datasets(tmp_path, ["A_1m"])
    rnnfleet(venv, "init", "my-fleet", "--data", "data", cwd=tmp_path)
    folder = tmp_path / "my-fleet"
    lint = subprocess.run(
        [str(bin_dir(venv) / "python"), "-m", "snakemake", "--lint"], cwd=folder, capture_output=True, text=True
    )
    assert lint.returncode == 0, lint.stdout + lint.stderr
    from_parent = snakemake_here(venv, tmp_path, "-s", "my-fleet/Snakefile", "-n")
    assert list(pending_jobs(from_parent.stdout, "train")) == ["A_1m"]
    assert not (tmp_path / ".snakemake").exists()  # it ran in the project folder


def test_inspect_on_a_data_folder_writes_nothing_there_and_init_refuses_bad_paths(venv, tmp_path):
    add_datasets(tmp_path, ["A_1m", "B_1m"])
    data = tmp_path / "data"
    before = sorted(data.rglob("*"))
    inspected = rnnfleet(venv, "inspect", str(data), cwd=tmp_path)
    assert "inspected as a data folder" in inspected.stdout
    rows = {row["dataset"]: row for row in csv.DictReader(inspected.stdout.splitlines()[-3:])}
    assert set(rows) == {"A_1m", "B_1m"} and {row["status"] for row in rows.values()} == {"ok"}
    assert sorted(data.rglob("*")) == before and not (tmp_path / ".snakemake").exists()

    missing = rnnfleet(venv, "init", "fleet", "--data", str(tmp_path / "nowhere"), cwd=tmp_path, check=False)
    assert missing.returncode == 1 and missing.stderr.strip().endswith(
        "no such folder; nothing was written (give the folder of your bar files)"
    )
    (tmp_path / "a-file").write_text("")
    on_file = rnnfleet(venv, "init", "a-file", cwd=tmp_path, check=False)
    assert (
        on_file.returncode == 1
        and on_file.stderr.strip()
        == "error: a-file: exists and is not a folder; nothing was written (choose a new folder)"
    )
    assert not (tmp_path / "fleet").exists()
