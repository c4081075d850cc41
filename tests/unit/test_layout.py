"""The package's four parts stay apart: the core imports nothing of the runner, the workflow or
the hooks, each outer part only what docs/architecture.md allows it, that page names every
module, and no module imports itself back through others (read from the source, every import counted,
also those inside functions)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest
from conftest import REPO

PACKAGE = REPO / "scripts" / "rnnfleet"
OUTER_PARTS = ("rnnfleet.runner", "rnnfleet.workflow", "rnnfleet.hooks")
# What a reader of the core must not meet: processes, sockets, locks, Snakemake.
NOT_IN_THE_CORE = ("socket", "selectors", "fcntl", "filelock", "snakemake", "subprocess")


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_names(path: Path) -> set[str]:
    """Every module `path` imports, anywhere in the file."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)  # `from rnnfleet import x`
    return names


def package_imports() -> dict[str, set[str]]:
    modules = {module_name(path): path for path in PACKAGE.rglob("*.py")}
    return {
        name: {imported for imported in imported_names(path) if imported in modules} for name, path in modules.items()
    }


def reached_from(graph: dict[str, set[str]], start: str) -> set[str]:
    """Every module `start` imports, directly or through others."""
    reached, todo = set(), [start]
    while todo:
        for imported in graph[todo.pop()] - reached:
            reached.add(imported)
            todo.append(imported)
    return reached


# The core's stage folders, in the order data flows.
CORE_STAGES = ("bars", "prep", "train", "scores", "forecast", "report", "tune")


def core_modules() -> list[Path]:
    """The package's top folder and its stage folders (not cli/, the `rnnfleet` command: the
    front door to every part)."""
    top = list(PACKAGE.glob("*.py"))
    return sorted(top + [path for stage in CORE_STAGES for path in (PACKAGE / stage).glob("*.py")])


def test_the_core_imports_nothing_of_the_runner_or_the_hooks():
    for path in core_modules():
        outer = sorted(name for name in imported_names(path) if name.startswith(OUTER_PARTS))
        assert outer == [], f"{path.name} imports {outer}"


# What each outer part may import of the others (the core: none; cli.py is the front door).
OUTER_IMPORTS = {"runner": (), "hooks": (), "workflow": ("rnnfleet.runner",)}


def test_each_outer_part_imports_only_the_core_and_what_it_is_allowed():
    # the workflow may use the runner's locks and run files; a job's process never loads the
    # workflow or Snakemake's patches, and the patches touch Snakemake alone
    for part, allowed in OUTER_IMPORTS.items():
        for path in sorted((PACKAGE / part).glob("*.py")):
            others = [name for name in OUTER_PARTS if name != f"rnnfleet.{part}" and not name.startswith(allowed)]
            found = sorted(name for name in imported_names(path) if name.startswith(tuple(others)))
            assert found == [], f"{part}/{path.name} imports {found}"


def test_every_module_of_the_package_is_named_in_architecture_md():
    page = (REPO / "docs" / "architecture.md").read_text()
    modules = sorted(path for path in PACKAGE.rglob("*.py") if path.name != "__init__.py")
    assert [str(path.relative_to(PACKAGE)) for path in modules if f"`{path.name}`" not in page] == []


def test_the_fit_reaches_neither_predict_nor_the_runner():
    # the forecast at the last bar is asked for by the train job after the fit (rnnfleet.runner.jobs)
    graph = package_imports()
    assert "rnnfleet.train.fit" in graph
    reached = reached_from(graph, "rnnfleet.train.fit")
    assert sorted(name for name in reached if name.startswith(("rnnfleet.forecast.predict", "rnnfleet.runner"))) == []


def test_the_core_reads_without_sockets_locks_or_snakemake():
    for path in core_modules():
        found = sorted(
            name for name in imported_names(path) if name.split(".")[0] in NOT_IN_THE_CORE or name == "multiprocessing"
        )
        assert found == [], f"{path.name} imports {found}"


def test_no_module_imports_itself_back():
    graph = package_imports()

    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        for imported in graph.get(start, ()):
            if imported == goal or (imported not in seen and (seen.add(imported) or reaches(imported, goal, seen))):
                return True
        return False

    circles = sorted(name for name in graph if reaches(name, name, set()))
    assert circles == [], f"import circles through {circles}"


def test_the_layout_check_sees_a_circle_and_an_outer_import(tmp_path, monkeypatch):
    """The checks above can fail: a planted circle, a planted core -> runner import and a fit
    that reaches predict through another module are found."""
    package = tmp_path / "rnnfleet"
    (package / "runner").mkdir(parents=True)
    (package / "a.py").write_text("from rnnfleet.b import x\n")
    (package / "b.py").write_text("def f():\n    from rnnfleet.a import y\n")
    (package / "c.py").write_text("import rnnfleet.runner.jobs\n")
    (package / "runner" / "jobs.py").write_text("")
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", package)
    with pytest.raises(AssertionError, match=r"import circles through \['rnnfleet.a', 'rnnfleet.b'\]"):
        test_no_module_imports_itself_back()
    with pytest.raises(AssertionError, match=r"c.py imports \['rnnfleet.runner.jobs'\]"):
        test_the_core_imports_nothing_of_the_runner_or_the_hooks()
    (package / "train").mkdir()
    (package / "train" / "fit.py").write_text("from rnnfleet.b import x\n")  # b reaches predict through a function
    (package / "b.py").write_text("def f():\n    from rnnfleet.forecast.predict import forecast_at_last_bar\n")
    (package / "forecast").mkdir()
    (package / "forecast" / "predict.py").write_text("")
    with pytest.raises(AssertionError, match=r"rnnfleet.forecast.predict"):
        test_the_fit_reaches_neither_predict_nor_the_runner()


def test_the_training_loop_reaches_no_bar_reader():
    """The train path reads arrays, never bar files: nothing the loop imports, at the top or
    inside a function, reaches bars/ or the preparation of arrays from bars (PreparedArrays
    lives in prep/arrays.py, apart from the readers)."""
    reached = reached_from(package_imports(), "rnnfleet.train.loop")
    assert "rnnfleet.prep.arrays" in reached
    assert sorted(name for name in reached if name.startswith(("rnnfleet.bars", "rnnfleet.prep.prepare"))) == []


# The modules that open .npz or .zip files, and what each opens: the array format has one reader.
OPENS_ARCHIVES = {
    "prep/arrays_file.py": "the array file (.npz)",
    "bars/bar_cache.py": "its own cache of each file's bars (.npz)",
    "bars/formats.py": "a bar file packed in a .zip",
    "train/modelfile.py": "a model file (torch's zip)",
}


def test_the_array_file_is_read_by_one_module():
    readers = sorted(
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if any(call in path.read_text() for call in ("np.load(", "np.memmap(", "zipfile.ZipFile("))
    )
    assert readers == sorted(OPENS_ARCHIVES)


def rule_file_python(text: str) -> list[str]:
    """The lines of a rule file outside its rules that are Python: neither a comment, a blank
    line, nor a Snakemake declaration (resource_scopes, localrules) or its body."""
    found, inside_block = [], False
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if line.startswith((" ", "\t")):
            if not inside_block:
                found.append(line)
            continue
        inside_block = line.startswith(("rule ", "resource_scopes:", "localrules:"))
        if not inside_block:
            found.append(line)
    return found


def test_rule_files_hold_rules_and_the_helper_files_hold_the_python():
    """A file of rules is declarative; the parse-time Python lives in the helper files, one
    per concern (config, datasets, jobs, checks, handlers), as in the snakemake-workflows
    template's common.smk. Every rule builds its command with job_command (rules/jobs.smk)."""
    helpers = {"config.smk", "datasets.smk", "jobs.smk", "checks.smk", "handlers.smk"}
    rule_files = sorted(path for path in (REPO / "rules").glob("*.smk") if "\nrule " in "\n" + path.read_text())
    assert {path.name for path in rule_files}.isdisjoint(helpers)
    assert {path.name for path in (REPO / "rules").glob("*.smk")} == helpers | {path.name for path in rule_files}
    assert {path.name: rule_file_python(path.read_text()) for path in rule_files} == {
        path.name: [] for path in rule_files
    }
    commands = {path.name: path.read_text().count("job_command(") for path in rule_files}
    runs_a_job = {"preprocess.smk", "pretrain.smk", "train.smk", "predict.smk", "export.smk", "tune.smk"}
    assert {name for name, count in commands.items() if count} == runs_a_job
    assert "JOB_CLIENT" not in "".join(path.read_text() for path in rule_files)


def test_the_rule_file_check_sees_python():
    text = "# a comment\nrule a:\n    input:\n        'x'\n\nX = 1\nif X:\n    import os\n"
    assert rule_file_python(text) == ["X = 1", "if X:", "    import os"]
