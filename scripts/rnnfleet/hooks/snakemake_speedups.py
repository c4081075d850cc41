"""Per-job costs inside Snakemake 9.27.1 that grow with the number of datasets, removed from
the workflow (applied by rules/handlers.smk before the DAG is built).

What it promises:
- On Snakemake 9.27.1 exactly, and only while the replaced functions' source is the source
  these replacements were written against (SHA-256 below), it replaces:
  1. `JobScheduler._schedule_reevalutation`: during a real run, every scheduling round
     starts a one-second timer (for --max-jobs-per-timespan, default 100/1s) that triggers
     one more round, which starts another timer: each finished job adds a chain that never
     ends while jobs wait, so rounds per second grow with the jobs done. The replacement
     keeps at most one timer pending, which is all the rate limit needs.
  2. `JobScheduler.update_input_sizes`: each round re-stats the inputs of *every* ready
     job. A ready job's inputs are finished files that do not change before it runs: the
     replacement stats only paths whose size it does not know yet.
  3. `ScriptProcessor.process_job` (and so `NotebookProcessor`): stock Snakemake reads and
     caches the `script:` file once per job to check that it exists. The replacement checks
     each script of a rule once (scripts whose path holds `{wildcards}` or `{params}` are
     still checked per job).
  4. `snakemake.common.get_function_params`: `inspect.signature` of the same input and
     resource functions for every job; the replacement remembers it per function.
  5. `Job.conda_env_spec`: stock Snakemake evaluates every job's `params:` while building the
     DAG, only to pass them to `Rule.expand_conda_env`, which ignores them when the rule's
     `conda:` is a plain path it has already expanded (the same for every job). The
     replacement asks the rule first and evaluates the params only when the rule needs them.
  6. `Job.shellcmd`: formats the rule's shell command anew at every access (three times per
     job while a dry-run prints it). The replacement keeps the command with the params and
     resources it was formatted from, and formats again when those are new (a retry).
  7. `FileRecord.render` (`snakemake --report`): each file's caption is rendered with a link
     target for every file of the report appended, and parsed as reStructuredText once per
     file: quadratic in the files (bench/README.md: hours at 10,000 datasets). A caption
     that does not use `snakemake` (the job's wildcards, params, ...) is the same text for
     every file it captions: the replacement renders and parses it once and gives every such
     file the same HTML; a caption that uses `snakemake` is rendered per file as before.
- It also raises the thresholds of Python's cyclic garbage collector in the Snakemake
  process and freezes the objects that exist after the Snakefile is parsed (modules, rules,
  config): stock collection re-scans the growing heap of jobs again and again while the DAG
  is built, a cost that grows with the number of jobs. Memory is unchanged (the DAG holds
  few reference cycles) and garbage is still collected, less often.
- What Snakemake schedules, runs, lists and logs is unchanged (tests/workflow/test_speedups_run.py
  compares the dry-run's jobs and reasons with and without these replacements).
- On any other Snakemake version, or when a replaced function's source differs, nothing is
  replaced and one warning line says so; RNNFLEET_STOCK_SNAKEMAKE=1 turns them off silently.

The same changes as a patch for Snakemake itself, with measurements: docs/upstream/.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import sys
import threading
import types
import weakref
from itertools import filterfalse

from rnnfleet.hooks.snakemake_contract import _stock, difference, stock_hashes
from rnnfleet.hooks.snakemake_contract import locate as _resolve
from rnnfleet.snakemake_version import SUPPORTED_SNAKEMAKE

WRITTEN_FOR_VERSION = SUPPORTED_SNAKEMAKE
DISABLE_VARIABLE = "RNNFLEET_STOCK_SNAKEMAKE"
# The reason when the installed Snakemake is another release: the Snakefile's start line says
# so once (rnnfleet.snakemake_version), so the replacements' own warnings stay silent then.
OTHER_RELEASE = f"written for Snakemake {WRITTEN_FOR_VERSION}"

STOCK_SOURCE_SHA256 = stock_hashes("snakemake_speedups")  # rnnfleet.hooks.snakemake_contract

# Private names of Snakemake that the replacements read or write: each class's stock source
# must still assign them (`self.<name> =`), and each module must still define them.
PRIVATE_ATTRIBUTES = {
    "snakemake.scheduling.job_scheduler:JobScheduler": ("_open_jobs", "_input_sizes"),
    "snakemake.jobs:Job": ("_params", "_resources", "_conda_env_spec"),
    "snakemake.rules:Rule": ("_expanded_conda_env",),
}
PRIVATE_MODULE_NAMES = {"snakemake.rules": ("_NOT_CACHED",)}


def worth_a_warning(problems: list[str]) -> bool:
    """Whether the replacements' problems need their own line: not when the only one is
    another Snakemake release, which the run's start line already names."""
    return bool(problems) and problems != [OTHER_RELEASE]


def stock_differences() -> list[str]:
    """Why the replacements do not fit the installed Snakemake (empty: they fit)."""
    return source_differences(STOCK_SOURCE_SHA256) or private_name_differences()


def source_differences(stock_source_sha256: dict[str, str]) -> list[str]:
    """Why functions replaced in Snakemake (name -> SHA-256 of their stock source) do not fit
    the installed Snakemake: another version, a function gone or changed (empty: they fit)."""
    import snakemake

    if snakemake.__version__ != WRITTEN_FOR_VERSION:
        return [OTHER_RELEASE]
    return [f"{name} {why}" for name, expected in stock_source_sha256.items() if (why := difference(name, expected))]


def private_name_differences() -> list[str]:
    """The private names of PRIVATE_ATTRIBUTES and PRIVATE_MODULE_NAMES that Snakemake no longer has."""
    import importlib

    problems = []
    for qualified_name, names in PRIVATE_ATTRIBUTES.items():
        module_name, class_name = qualified_name.split(":")
        source = inspect.getsource(getattr(importlib.import_module(module_name), class_name))
        problems += [f"{qualified_name} no longer sets {name}" for name in names if f"self.{name} =" not in source]
    for module_name, names in PRIVATE_MODULE_NAMES.items():
        module = importlib.import_module(module_name)
        problems += [f"{module_name} no longer defines {name}" for name in names if not hasattr(module, name)]
    return problems


def schedule_reevaluation(self, delay: int) -> None:
    """JobScheduler._schedule_reevalutation, with at most one timer pending: a round asked
    for while one is pending would come later than the pending one, which asks again if
    it still needs to."""
    lock = self.__dict__.setdefault("_rnnfleet_reevaluation_lock", threading.Lock())
    with lock:
        if self.__dict__.get("_rnnfleet_reevaluation_pending"):
            return
        self._rnnfleet_reevaluation_pending = True

    def reevaluate() -> None:
        with lock:  # cleared before the round it starts, so that round can ask again
            self._rnnfleet_reevaluation_pending = False
        self._open_jobs.release()

    timer = threading.Timer(delay, reevaluate)
    timer.daemon = True
    timer.start()


async def update_input_sizes(self, jobs) -> None:
    """JobScheduler.update_input_sizes, statting only the input files not sized yet."""

    async def get_size(path):
        return path, await path.size() if await path.exists() else None

    paths = {path for job in jobs for path in job.input}
    unsized = [path for path in paths if self._input_sizes.get(path) is None]
    if unsized:
        self._input_sizes.update(await asyncio.gather(*[get_size(path) for path in unsized]))

    if len(self._input_sizes) > 10000:
        for path in list(filterfalse(paths.__contains__, self._input_sizes)):
            del self._input_sizes[path]


def script_processor_process_job(self, job) -> None:
    """ScriptProcessor.process_job, checking a script that is the same for every job of its
    rule (no {wildcards} or {params} in its path) once."""
    script_entry = getattr(job.rule, self.script_type) if getattr(job, f"is_{self.script_type}") else None
    if isinstance(script_entry, os.PathLike):
        script_entry = os.fspath(script_entry)
    same_for_every_job = isinstance(script_entry, str) and "{" not in script_entry
    key = (script_entry, str(job.rule.basedir))
    checked = self.__dict__.setdefault("_rnnfleet_checked_scripts", set())
    if same_for_every_job and key in checked:
        return
    _stock_process_job(self, job)
    if same_for_every_job:
        checked.add(key)


# Functions -> parameters, and for bound methods (a new object at each attribute access,
# such as Resource.evaluate) their underlying function -> the bound method's parameters.
_function_params: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_bound_method_params: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def get_function_params(func):
    """snakemake.common.get_function_params, remembering each function's parameters."""
    if hasattr(func, "_overwrite_params"):  # set per object by Snakemake's ioutils
        return _stock_get_function_params(func)
    if isinstance(func, types.MethodType):
        cache, key = _bound_method_params, func.__func__
    else:
        cache, key = _function_params, func
    try:
        return cache[key]
    except (KeyError, TypeError):  # TypeError: not weakly referenceable
        pass
    params = _stock_get_function_params(func)
    try:
        cache[key] = params
    except TypeError:
        pass
    return params


def job_conda_env_spec(self):
    """Job.conda_env_spec, evaluating the job's params only when the rule's `conda:` needs them
    (a function, or a path with wildcards); a plain path is expanded once per rule."""
    if self._conda_env_spec is None:
        from snakemake.rules import _NOT_CACHED

        expanded_for_rule = self.rule._expanded_conda_env
        if expanded_for_rule is not _NOT_CACHED:
            self._conda_env_spec = expanded_for_rule
        else:
            self._conda_env_spec = self.rule.expand_conda_env(self.wildcards_dict, self.params, self.input)
    return self._conda_env_spec


def job_shellcmd(self):
    """Job.shellcmd, formatted once for the params and resources the job has (a retry
    resets both, and the command is formatted again)."""
    formatted = self.__dict__.get("_rnnfleet_shellcmd")
    if formatted is not None and formatted[0] is self._params and formatted[1] is self._resources:
        return formatted[2]
    command = _stock_shellcmd(self)
    self._rnnfleet_shellcmd = (self._params, self._resources, command)
    return command


# A report's captions as HTML, per caption source: (rst_links, categories, files, html), or
# PER_FILE where the caption uses `snakemake` (rendered per file, as stock Snakemake does).
_rendered_captions: dict[str, tuple] = {}
PER_FILE = ()


def file_record_render(self, env, rst_links, categories, files):
    """FileRecord.render, a caption that does not use `snakemake` rendered once per report."""
    if self.raw_caption is None:
        return _stock_file_record_render(self, env, rst_links, categories, files)
    source = self.workflow.sourcecache.open(self.raw_caption).read()
    known = _rendered_captions.get(source)
    # the same report: the same objects (auto_report makes them once per report)
    if known and known[0] is rst_links and known[1] is categories and known[2] is files:
        self.caption = known[3]
        return None
    if known is PER_FILE:
        return _stock_file_record_render(self, env, rst_links, categories, files)
    from jinja2 import TemplateSyntaxError, meta

    try:
        per_file = "snakemake" in meta.find_undeclared_variables(env.parse(source + rst_links))
    except TemplateSyntaxError:
        per_file = True  # stock rendering raises its own error
    _stock_file_record_render(self, env, rst_links, categories, files)
    _rendered_captions[source] = PER_FILE if per_file else (rst_links, categories, files, self.caption)
    return None


# Generation 0 is collected after this many new container objects (Python's default: 700).
GC_FIRST_THRESHOLD = 20_000


def tune_garbage_collection() -> None:
    """Collect cyclic garbage less often, and never re-scan what exists once the workflow is
    parsed (see the module docstring)."""
    import gc

    gc.freeze()
    _, second, third = gc.get_threshold()
    gc.set_threshold(GC_FIRST_THRESHOLD, second, third)


_stock_process_job = None
_stock_get_function_params = None
_stock_shellcmd = None
_stock_file_record_render = None

REPLACEMENTS = {
    "snakemake.scheduling.job_scheduler:JobScheduler._schedule_reevalutation": schedule_reevaluation,
    "snakemake.scheduling.job_scheduler:JobScheduler.update_input_sizes": update_input_sizes,
    "snakemake.dag:ScriptProcessor.process_job": script_processor_process_job,
    "snakemake.common:get_function_params": get_function_params,
    "snakemake.jobs:Job.conda_env_spec": job_conda_env_spec,
    "snakemake.jobs:Job.shellcmd": job_shellcmd,
    "snakemake.report:FileRecord.render": file_record_render,
}


def apply(warn: bool = True) -> list[str]:
    """Replace the functions (see the module docstring); returns the names replaced, [] when
    Snakemake is left as it is. `warn`: print the one warning line when they do not fit."""
    global _stock_process_job, _stock_get_function_params, _stock_shellcmd, _stock_file_record_render
    if os.environ.get(DISABLE_VARIABLE, "") not in ("", "0"):
        return []
    problems = stock_differences()
    if problems:
        if warn and worth_a_warning(problems):
            print(
                f"rnnfleet: Snakemake's scheduler and DAG speed-ups are off ({'; '.join(problems)}); "
                "planning and scheduling thousands of datasets will be slower",
                file=sys.stderr,
            )
        return []
    import snakemake.rules

    for qualified_name, replacement in REPLACEMENTS.items():
        owner, attribute, current = _resolve(qualified_name)
        replacement.__rnnfleet_stock__ = _stock(current)
        setattr(owner, attribute, property(replacement) if isinstance(current, property) else replacement)
    _stock_process_job = script_processor_process_job.__rnnfleet_stock__
    _stock_get_function_params = get_function_params.__rnnfleet_stock__
    _stock_shellcmd = job_shellcmd.__rnnfleet_stock__
    _stock_file_record_render = file_record_render.__rnnfleet_stock__
    # rules.py imported get_function_params by name: replace it where it is looked up too.
    snakemake.rules.get_function_params = get_function_params
    tune_garbage_collection()
    return [*REPLACEMENTS, "garbage collection"]
