"""The `rnnfleet` command (installed by `pip install -e .`): init, run, predict, inspect, export, clean.

    rnnfleet init my-fleet --data /path/to/bars   a project folder of your own (docs/project-folder.md)
    rnnfleet run [--project FOLDER] SNAKEMAKE-ARGS  snakemake there, `--config train.epochs=3` allowed
    rnnfleet predict --model ... --csv ... --out ...   forecasts from a model file
    rnnfleet predict --dataset NAME --out ...      the same for a dataset of a project folder
    rnnfleet inspect [FOLDER]                      every dataset read and checked, nothing trained
    rnnfleet export [NAME ...] / --model ... --csv ...   models as ONNX files (docs/export.md)

The workflow files (Snakefile, rules/, schemas/, profiles/, envs/, report/, scripts/*.py) are
found next to this package in a clone (an editable install), else where a non-editable
install put them (<prefix>/share/rnnfleet); workflow_dir says which.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from rnnfleet.bars.discovery import freqtrade_layout, period_files_layout
from rnnfleet.errors import UserError

WORKFLOW_FILES = ("Snakefile", "rules", "schemas", "scripts")
PROJECT_CONFIG = Path("config") / "config.yaml"
PROFILES = ("default", "slurm", "slurm-packed")
COMMENT_COLUMN = 26  # where the comments of config.yaml's keys start
NO_DEFAULT = object()  # a schema key without a default: absent unless the user sets it


def workflow_dir() -> Path:
    """rnnfleet's workflow folder: the clone this package sits in, else the installed copy
    (`pip install .` into an environment, or `pip install --user .` into the user base)."""
    import site

    candidates = [Path(__file__).resolve().parents[3], Path(sys.prefix) / "share" / "rnnfleet"]
    candidates.append(Path(site.getuserbase()) / "share" / "rnnfleet")
    for candidate in candidates:
        if all((candidate / name).exists() for name in WORKFLOW_FILES):
            return candidate
    raise UserError(
        f"rnnfleet's workflow files (Snakefile, rules/, ...) are in none of {', '.join(map(str, candidates))}; "
        "install rnnfleet from its clone with `pip install -e .` or `pip install .`"
    )


def project_snakefile() -> str:
    return (
        "# An rnnfleet project folder (written by `rnnfleet init`; docs/project-folder.md).\n"
        "# Your settings: config/config.yaml. Run here:  snakemake --cores all\n"
        "# (or from anywhere: snakemake -s path/to/this/Snakefile: it runs in this folder).\n"
        "# rnnfleet's workflow is included from wherever rnnfleet is installed in the Python that\n"
        "# runs snakemake, found anew at each run: upgrading, moving or re-creating that\n"
        "# environment leaves this folder working; outputs, logs and .snakemake/ are written here.\n"
        "# (include, not `module`: Snakemake does not register a module's onstart/onsuccess/\n"
        "# onerror handlers, which write results after failures.)\n"
        "try:\n"
        "    from rnnfleet.cli.commands import workflow_dir\n"
        "except ImportError as error:\n"
        "    raise WorkflowError(\n"
        '        f"rnnfleet is not installed in the Python that runs this snakemake ({error}); "\n'
        '        "run the snakemake of the environment where you installed rnnfleet"\n'
        "    ) from None\n"
        "\n"
        "\n"
        "workdir: workflow.basedir\n"
        "\n"
        "\n"
        'include: str(workflow_dir() / "Snakefile")\n'
        "\n"
        "\n"
        "# What a plain `snakemake` makes here: rnnfleet's `all` (an included file cannot set it).\n"
        "rule fleet:\n"
        "    default_target: True\n"
        "    input:\n"
        "        rules.all.input,\n"
    )


def project_config(workflow: Path, data_dir: str, files_pattern: str = "") -> str:
    """The demo's commented config.yaml with data_dir (and datasets.files) set, and every
    key of the schema it lacks added at its default (config_with_every_key): every key a
    user can set, each at its schema default."""
    lines = (workflow / "config.yaml").read_text().splitlines(keepends=True)
    header = (
        "# The settings of this rnnfleet project folder (docs/configuration.md lists every key).\n"
        "# Override one for a single run:  snakemake --config 'train={\"epochs\": 5}'\n"
        "# A changed setting re-runs what depends on it; `snakemake -n` lists what and why first.\n"
    )
    body = "".join(lines[next(i for i, line in enumerate(lines) if not line.startswith("#")) :])
    data_line = next(line for line in body.splitlines() if line.startswith("data_dir:"))
    body = body.replace(data_line, f"data_dir: {quoted_yaml(data_dir)}", 1)
    if files_pattern:
        files_line = next(line for line in body.splitlines() if line.startswith("  files:"))
        body = body.replace(files_line, f"  files: {quoted_yaml(files_pattern)}", 1)
    return header + config_with_every_key(body, schema_defaults(workflow))


def schema_defaults(workflow: Path) -> dict[str, tuple[object, str]]:
    """{dotted key: (its default, its description)} of every key a user sets, from
    schemas/config.schema.yaml: an object whose keys have defaults key by key, one without
    (format.positions) as one key; the built-in model's keys (its `then`) included."""
    from rnnfleet.workflow.config_check import load_schema

    schema = load_schema(workflow / "schemas" / "config.schema.yaml")

    def keys_of(properties: dict, prefix: str) -> dict[str, tuple[object, str]]:
        found = {}
        for name, spec in properties.items():
            children = dict(spec.get("properties", {}))
            for child, child_spec in spec.get("then", {}).get("properties", {}).items():
                children[child] = {**child_spec, **children.get(child, {})}
            if children and any("default" in child or "properties" in child for child in children.values()):
                found.update(keys_of(children, f"{prefix}{name}."))
            else:
                found[f"{prefix}{name}"] = (
                    spec.get("default", NO_DEFAULT),
                    " ".join(str(spec.get("description", "")).split()),
                )
        return found

    return keys_of(schema["properties"], "")


def config_with_every_key(text: str, defaults: dict[str, tuple[object, str]]) -> str:
    """A config's YAML text with each key of `defaults` it lacks added at its default: a
    top-level key at the end, a key of a section at the end of that section's block (the
    section added where it is missing), each with its description as a comment; a key
    without a default (NO_DEFAULT) as a commented-out line."""
    import yaml

    given = yaml.safe_load(text) or {}
    lines = text.splitlines()
    for key, (default, description) in defaults.items():
        if holds_key(given, key):
            continue
        section, _, name = key.partition(".")
        if "." in name:
            raise ValueError(f"config key {key!r}: config_with_every_key adds keys one level deep only")
        indent = "  " if name else ""
        if default is NO_DEFAULT:  # unset unless given (columns.date): shown commented out
            entry = f"{indent}# {name or section}:"
        else:
            entry = f"{indent}{name or section}: {yaml_value(default)}"
        if description:  # at the column of the demo's comments, a long one on the lines below
            first, *more = comment_lines(description)
            entry = "\n".join(
                [
                    f"{entry.ljust(COMMENT_COLUMN - 1)} # {first}",
                    *(f"{'':<{COMMENT_COLUMN - 1}} # {line}" for line in more),
                ]
            )
        if not name:
            lines.append(entry)
            continue
        start = next((number for number, line in enumerate(lines) if line.startswith(f"{section}:")), None)
        if start is None:
            lines += [f"{section}:", entry]
            given[section] = {}
        else:
            end = start + 1
            while end < len(lines) and (lines[end].startswith(" ") or not lines[end].strip()):
                end += 1
            while end > start + 1 and not lines[end - 1].strip():
                end -= 1  # before the blank lines that end the block
            lines.insert(end, entry)
        given.setdefault(section, {})[name] = default
    return "\n".join(lines) + "\n"


def holds_key(config: dict, key: str) -> bool:
    """Whether a config holds the dotted key (train.seq_len)."""
    value = config
    for part in key.split("."):
        if not isinstance(value, dict) or part not in value:
            return False
        value = value[part]
    return True


def yaml_value(value: object) -> str:
    """A value as YAML writes it in one line (null, [], '', auto)."""
    import yaml

    return yaml.safe_dump([value], default_flow_style=True, width=10**6).strip()[1:-1]


def comment_lines(text: str, width: int = 90) -> list[str]:
    """The first sentence of text (an abbreviation's stop, "e.g.", ends none), whole, in lines
    of at most `width` characters."""
    import re
    import textwrap

    first = re.split(r"(?<!\be\.g)(?<!\bi\.e)\. ", text, maxsplit=1)[0]
    return textwrap.wrap(first, width) or [""]


def quoted_yaml(text: str) -> str:
    import json

    return json.dumps(text)  # a JSON string is a YAML string


def init(folder: Path, data_dir: str, files_pattern: str = "") -> list[Path]:
    """Write a project folder: Snakefile, config/config.yaml, profiles/{default,slurm,slurm-packed}.
    Refuses (UserError) when one of them exists: nothing already there is replaced."""
    workflow = workflow_dir()
    files = {
        folder / "Snakefile": project_snakefile(),
        folder / PROJECT_CONFIG: project_config(workflow, data_dir, files_pattern),
    }
    for profile in PROFILES:  # the run settings and the SLURM profiles, the folder's own to edit
        files[folder / "profiles" / profile / "config.yaml"] = (
            workflow / "profiles" / profile / "config.yaml"
        ).read_text()
    existing = [path for path in files if path.exists()]
    if existing:
        raise UserError(f"{existing[0]}: exists already; nothing was written (choose a new folder)")
    for path, text in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return list(files)


def run_init(args: argparse.Namespace) -> int:
    folder = Path(args.folder)
    if folder.exists() and not folder.is_dir():
        raise UserError(f"{folder}: exists and is not a folder; nothing was written (choose a new folder)")
    if args.data and not os.path.isdir(args.data):
        raise UserError(f"--data {args.data}: no such folder; nothing was written (give the folder of your bar files)")
    data_dir = os.path.abspath(args.data) if args.data else "data"
    layout = (freqtrade_layout(data_dir) or period_files_layout(data_dir)) if args.data else None
    written = init(folder, data_dir, layout[1] if layout else "")
    print(f"rnnfleet project folder {folder}: wrote {', '.join(str(path.relative_to(folder)) for path in written)}")
    if layout:
        words, files_pattern, datasets = layout
        shown = ", ".join(datasets[:5]) + (f" and {len(datasets) - 5} more" if len(datasets) > 5 else "")
        print(f"{args.data} holds {words}: datasets.files set to {files_pattern!r} ({len(datasets)} datasets: {shown})")
    if not args.data:
        print(f"put your bar files in {folder / 'data'} (or set data_dir in {folder / PROJECT_CONFIG})")
    else:
        print(layout_found(folder))
    print(f"then:  cd {folder} && snakemake -n   (what would run), snakemake --cores all   (run it)")
    return 0


def layout_found(folder: Path) -> str:
    """How many datasets the new project folder finds, and how its first dataset's first file
    reads (a run reads each file the same way unless format: says otherwise), in one line."""
    from rnnfleet.bars.formats import read_bars

    try:
        _, found = project_datasets(folder, "rnnfleet init")
    except UserError as error:
        return f"its data: {error}"
    if not found:
        return "its data folder holds no bar file whose name matches pattern (config/config.yaml): none would train"
    dataset = sorted(found)[0]
    first = found[dataset][0]
    try:
        bars = read_bars(folder / first)  # an absolute path stays itself
    except UserError as error:
        return f"{len(found)} dataset(s) found; the first file, {first}, does not read: {error} (rnnfleet inspect checks every one)"
    return (
        f"{len(found)} dataset(s) found; {dataset}'s first file, {first}, reads as {bars.attrs['read_as']}: "
        f"{len(bars):,} bars (rnnfleet inspect checks every file)"
    )


def snakemake_in(folder: Path, arguments: list[str]) -> list[str]:
    """The snakemake command for `folder`: its own Snakefile, else rnnfleet's."""
    command = [sys.executable, "-m", "snakemake"]
    if not (folder / "Snakefile").exists():
        command += ["-s", str(workflow_dir() / "Snakefile")]
    return command + arguments


def nested_config_entries(arguments: list[str]) -> list[str]:
    """Snakemake arguments with each dotted `--config` entry (`train.epochs=3`, which
    Snakemake's own parser refuses) written as the nested entry it means (`train={"epochs": "3"}`,
    the value as text, as Snakemake gives a nested value); the entries of one section become one,
    where the first of them was. Other arguments are kept as they are."""
    import json

    sections: dict[str, dict] = {}
    kept: list[str | tuple[str]] = []  # an argument, or (section,) where that section goes
    in_config = False
    for argument in arguments:
        key, equals, value = argument.partition("=")
        if argument.startswith("-"):
            in_config = argument in ("--config", "-C")
        elif in_config and equals and "." in key:
            section, *parents, leaf = key.split(".")
            if section not in sections:
                kept.append((section,))
            level = sections.setdefault(section, {})
            for parent in parents:
                level = level.setdefault(parent, {})
            level[leaf] = value
            continue
        kept.append(argument)
    return [f"{entry[0]}={json.dumps(sections[entry[0]])}" if isinstance(entry, tuple) else entry for entry in kept]


def run_parser() -> argparse.ArgumentParser:
    run = argparse.ArgumentParser(
        prog="rnnfleet run",
        allow_abbrev=False,
        description="Run snakemake in FOLDER with the options given (e.g. --cores all, -n, "
        "--config train.epochs=3 train.lr=0.001). A dotted --config key, which snakemake's own "
        "parser refuses, is passed as the nested value it means.",
        epilog="Every option but --project and --help is snakemake's.",
    )
    run.add_argument("--project", default=".", metavar="FOLDER", help="the project folder (default: .)")
    return run


def run_snakemake(argv: list[str]) -> int:
    """snakemake in the project folder (its Snakefile, else rnnfleet's), dotted --config keys allowed."""
    args, snakemake_args = run_parser().parse_known_args(argv)
    folder = Path(args.project)
    if not folder.is_dir():
        raise UserError(f"{folder}: no such folder")
    return subprocess.run(snakemake_in(folder, nested_config_entries(snakemake_args)), cwd=folder).returncode


def run_inspect(args: argparse.Namespace) -> int:
    folder = Path(args.folder)
    if not folder.is_dir():
        raise UserError(f"{folder}: no such folder")
    if not is_project_folder(folder):
        return inspect_data_folder(folder, args.snakemake_args)
    arguments = nested_config_entries(["inspect", "--cores", "1", *args.snakemake_args])
    result = subprocess.run(snakemake_in(folder, arguments), cwd=folder)
    if result.returncode == 0:
        print_table(folder / results_dir(folder) / "inspect.csv")
    return result.returncode


def is_project_folder(folder: Path) -> bool:
    """A folder snakemake runs in (a project folder, or a clone): its own Snakefile or config."""
    return any((folder / name).exists() for name in ("Snakefile", PROJECT_CONFIG, "config.yaml"))


def inspect_data_folder(data_dir: Path, snakemake_args: list[str]) -> int:
    """`snakemake inspect` over a folder of bar files with rnnfleet's default settings, run in
    a private temporary folder: nothing is written into the data."""
    import tempfile

    workflow = workflow_dir()
    print(f"rnnfleet: {data_dir} holds no Snakefile or config: inspected as a data folder with the default settings")
    with tempfile.TemporaryDirectory(prefix="rnnfleet-inspect-") as work:
        Path(work, "config.yaml").write_text(project_config(workflow, str(data_dir.resolve())))
        command = [sys.executable, "-m", "snakemake", "-s", str(workflow / "Snakefile"), "inspect", "--cores", "1"]
        result = subprocess.run(command + nested_config_entries(snakemake_args), cwd=work)
        if result.returncode == 0:
            print_table(Path(work) / "results" / "inspect.csv")
    return result.returncode


def print_table(table: Path) -> None:
    if table.exists():
        print(table.read_text(), end="")


def folder_config(folder: Path) -> tuple[dict, Path | None]:
    """The configuration a run in folder starts from (its config/config.yaml, else its
    config.yaml) and that file; ({}, None) where it has neither."""
    import yaml

    for config_path in (folder / PROJECT_CONFIG, folder / "config.yaml"):
        if config_path.exists():
            try:
                return yaml.safe_load(config_path.read_text()) or {}, config_path
            except yaml.YAMLError as error:
                raise UserError(f"{config_path}: not valid YAML ({str(error).splitlines()[0]})") from None
    return {}, None


def results_dir(folder: Path) -> str:
    config, _ = folder_config(folder)
    return str((config.get("paths") or {}).get("results", "results"))


def dataset_in_project(name: str, folder: Path, asked_by: str = "") -> tuple[str, list[str]]:
    """(model file, bar files) of dataset `name` in the project folder: its files found as a
    run there finds them (the datasets sheet, else data_dir with pattern / datasets.files),
    its model at paths.models/<name>.pt. Paths absolute; UserError in one line otherwise,
    starting with asked_by (the option or command that named the dataset; --dataset NAME)."""
    asked_by = asked_by or f"--dataset {name}"
    config, found = project_datasets(folder, asked_by)
    if name not in found:
        known = ", ".join(sorted(found)[:5]) + (", ..." if len(found) > 5 else "")
        raise UserError(f"{asked_by}: no such dataset in {folder} ({len(found)} found: {known or 'none'})")
    model = Path(config["paths"]["models"]) / f"{name}.pt"
    return str((folder / model).absolute()), [str((folder / path).absolute()) for path in found[name]]


def project_datasets(folder: Path, asked_by: str) -> tuple[dict, dict[str, list[str]]]:
    """(the project folder's configuration with its defaults, {dataset: its bar files}) as a
    run there finds them; UserError in one line, starting with `asked_by`, otherwise."""
    from rnnfleet.bars.discovery import discover_datasets
    from rnnfleet.workflow.config_check import fill_schema_defaults, load_schema

    config, config_path = folder_config(folder)
    if config_path is None:
        raise UserError(f"{asked_by}: {folder} holds no {PROJECT_CONFIG} or config.yaml (give --project FOLDER)")
    schemas = workflow_dir() / "schemas"
    schema = load_schema(schemas / "config.schema.yaml")
    config.pop("model", None)  # a builder's own keys are checked by the run (rules/config.smk)
    try:
        fill_schema_defaults(config, schema)
    except ValueError:
        raise UserError(f"{config_path}: not a valid configuration (snakemake -n in {folder} says why)") from None
    here = Path.cwd()
    try:
        os.chdir(folder)  # a run's relative paths are the folder's
        if config["datasets"]["sheet"]:
            from rnnfleet.workflow.dataset_sheet import read_dataset_sheet

            row_schema = load_schema(schemas / "datasets.schema.yaml")
            found = read_dataset_sheet(
                config["datasets"]["sheet"], config["data_dir"], config, schema, row_schema
            ).found
        else:
            found = discover_datasets(config["data_dir"], config["pattern"], config["datasets"]["files"])
    finally:
        os.chdir(here)
    return config, found.files


def models_in_project(folder: Path) -> tuple[list[str], Path]:
    """(the datasets of the project folder that have a model file, in name order; the folder
    its exports go to, paths.exports). A model file no dataset owns any more (its bar files
    are gone) is left out with one line on stderr each."""
    from rnnfleet.unowned import unowned_files

    config, found = project_datasets(folder, "rnnfleet export")
    paths = config["paths"]
    unowned = unowned_files(folder, paths, set(found))
    for dataset, files in unowned.items():
        model = Path(paths["models"]) / f"{dataset}.pt"
        if model in files:
            print(f"{model}: {UNOWNED_LINE}: skipped", file=sys.stderr)
    models = folder / paths["models"]
    with_models = sorted(name for name in found if (models / f"{name}.pt").is_file())
    return with_models, folder / paths["exports"]


UNOWNED_LINE = "no dataset owns it any more (no bar files of its dataset are found); `rnnfleet clean` lists such files"


def run_clean(args: argparse.Namespace) -> int:
    """List (and with --remove set aside) the outputs no dataset of the project owns any more."""
    from rnnfleet.unowned import set_aside, unowned_files

    folder = Path(args.project)
    config, found = project_datasets(folder, "rnnfleet clean")
    unowned = unowned_files(folder, config["paths"], set(found))
    if not unowned:
        print(f"{folder}: every output belongs to one of its {len(found)} dataset(s); nothing to clean")
        return 0
    files = [path for paths in unowned.values() for path in paths]
    for dataset, paths in unowned.items():
        print(f"{dataset}: no bar files found for it any more: {', '.join(str(path) for path in paths)}")
    if not args.remove:
        print(
            f"{len(files)} file(s) of {len(unowned)} dataset(s) no dataset owns; `rnnfleet clean --remove` sets them aside"
        )
        return 0
    target = set_aside(folder, files)
    print(
        f"{len(files)} file(s) of {len(unowned)} dataset(s) moved to {target} (move one back to its path to restore it)"
    )
    return 0


def parser() -> argparse.ArgumentParser:
    main_parser = argparse.ArgumentParser(
        prog="rnnfleet",
        description="Train the same RNN on each of many datasets of 1-minute bars (a Snakemake workflow).",
    )
    commands = main_parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    init_parser = commands.add_parser(
        "init",
        help="create a project folder of your own: Snakefile, config/config.yaml, profile",
        description="Create a project folder that runs rnnfleet with its own settings: "
        "cd FOLDER && snakemake --cores all. Nothing already there is replaced.",
    )
    init_parser.add_argument("folder", help="the folder to create (or an empty one)")
    init_parser.add_argument(
        "--data", help="folder of your bar files (stored as an absolute path; default FOLDER/data)"
    )
    init_parser.set_defaults(run=run_init)

    commands.add_parser(
        "run", help="snakemake in a project folder, dotted --config keys allowed (rnnfleet run --help)", add_help=False
    ).set_defaults(run=None)

    commands.add_parser(
        "predict",
        help="forecasts from a model file and a CSV of recent bars (rnnfleet predict --help)",
        add_help=False,
    ).set_defaults(run=None)

    commands.add_parser(
        "export",
        help="models as ONNX files holding the whole forecast, for MetaTrader 5, C#, C++ (rnnfleet export --help)",
        add_help=False,
    ).set_defaults(run=None)

    inspect_parser = commands.add_parser(
        "inspect",
        help="read and check every dataset as preprocess would, train nothing (results/inspect.csv)",
        description="Run `snakemake inspect` in FOLDER (its Snakefile, else rnnfleet's with FOLDER's "
        "config.yaml) and print the table: one row per dataset, how its file was read.",
    )
    inspect_parser.add_argument("folder", nargs="?", default=".", help="project folder (default: this one)")
    inspect_parser.add_argument(
        "snakemake_args", nargs=argparse.REMAINDER, help="further snakemake options, e.g. --config data_dir=..."
    )
    inspect_parser.set_defaults(run=run_inspect)

    clean_parser = commands.add_parser(
        "clean",
        help="list the models, arrays, metrics, forecasts and exports no dataset owns any more",
        description="List the outputs of datasets whose bar files are gone from the project folder's data "
        "(models, arrays, metrics, forecasts, exports); with --remove, move them under .snakemake/rnnfleet-unowned/.",
    )
    clean_parser.add_argument("--project", default=".", metavar="FOLDER", help="the project folder (default: .)")
    clean_parser.add_argument("--remove", action="store_true", help="set them aside (moved, never deleted)")
    clean_parser.set_defaults(run=run_clean)
    return main_parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["predict"]:  # its own options and --help (rnnfleet.cli.predict)
        from rnnfleet.cli.predict import main as predict_main

        return predict_main(argv[1:], prog="rnnfleet predict", find_dataset=dataset_in_project)
    if argv[:1] == ["export"]:  # its own options (rnnfleet.cli.export; onnx is imported only where used)
        from rnnfleet.cli.export import main as export_main

        return export_main(
            argv[1:],
            prog="rnnfleet export",
            find_dataset=lambda name, folder: dataset_in_project(name, folder, f"rnnfleet export {name}"),
            project_models=models_in_project,
        )
    try:
        if argv[:1] == ["run"]:  # every option but its own is snakemake's
            return run_snakemake(argv[1:])
        args = parser().parse_args(argv)
        return args.run(args)
    except UserError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
