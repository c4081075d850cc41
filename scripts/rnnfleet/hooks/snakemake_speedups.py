"""Per-job costs inside Snakemake 9.27.1 that grow with the number of datasets, removed from
the workflow (applied by rnnfleet.hooks.apply before the DAG is built).

What it promises:
- It replaces (each by its name in REPLACEMENTS):
  1. `JobScheduler._schedule_reevalutation`: during a real run, every scheduling round
     starts a one-second timer (for --max-jobs-per-timespan, default 100/1s) that triggers
     one more round, which starts another timer: each finished job adds a chain that never
     ends while jobs wait, so rounds per second grow with the jobs done. The replacement
     keeps at most one timer pending, which is all the rate limit needs.
  2. `JobScheduler.update_input_sizes`: each round re-stats the inputs of *every* ready
     job. A ready job's inputs are finished files that do not change before it runs: the
     replacement stats only paths whose size it does not know yet.
  3. `snakemake.common.get_function_params`: `inspect.signature` of the same input and
     resource functions for every job; the replacement remembers it per function.
  4. `Job.shellcmd`: formats the rule's shell command anew at every access (three times per
     job while a dry-run prints it). The replacement keeps the command with the params and
     resources it was formatted from, and formats again when those are new (a retry).
  5. `FileRecord.render` (`snakemake --report`): each file's caption is rendered with a link
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
- Applied by rnnfleet.hooks.apply alone, behind its one gate (the supported release, every
  replaced function's source as in snakemake_contract.CONTRACT).

The same changes as a patch for Snakemake itself, with measurements: docs/upstream/.
"""

from __future__ import annotations

import asyncio
import threading
import types
import weakref
from itertools import filterfalse

from rnnfleet.hooks.snakemake_contract import _stock
from rnnfleet.hooks.snakemake_contract import locate as _resolve


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


_stock_get_function_params = None
_stock_shellcmd = None
_stock_file_record_render = None

# Each replacement by the name rnnfleet.hooks knows it by (its bench switch leaves out names).
REPLACEMENTS = {
    "reevaluation_timer": (
        "snakemake.scheduling.job_scheduler:JobScheduler._schedule_reevalutation",
        schedule_reevaluation,
    ),
    "input_sizes": ("snakemake.scheduling.job_scheduler:JobScheduler.update_input_sizes", update_input_sizes),
    "function_params": ("snakemake.common:get_function_params", get_function_params),
    "shellcmd": ("snakemake.jobs:Job.shellcmd", job_shellcmd),
    "report_captions": ("snakemake.report:FileRecord.render", file_record_render),
}
NAMES = (*REPLACEMENTS, "gc")


def apply(leave_out: frozenset[str] = frozenset()) -> list[str]:
    """Replace the functions of REPLACEMENTS and tune garbage collection (see the module
    docstring), all but the names in `leave_out`; returns the names applied. Only
    rnnfleet.hooks.apply calls it, behind its check that the installed Snakemake is the one
    these were written against."""
    global _stock_get_function_params, _stock_shellcmd, _stock_file_record_render
    import snakemake.rules

    applied = []
    for name, (qualified_name, replacement) in REPLACEMENTS.items():
        if name in leave_out:
            continue
        owner, attribute, current = _resolve(qualified_name)
        replacement.__rnnfleet_stock__ = _stock(current)
        setattr(owner, attribute, property(replacement) if isinstance(current, property) else replacement)
        applied.append(name)
    _stock_get_function_params = getattr(get_function_params, "__rnnfleet_stock__", None)
    _stock_shellcmd = getattr(job_shellcmd, "__rnnfleet_stock__", None)
    _stock_file_record_render = getattr(file_record_render, "__rnnfleet_stock__", None)
    if "function_params" in applied:
        # rules.py imported get_function_params by name: replace it where it is looked up too.
        snakemake.rules.get_function_params = get_function_params
    if "gc" not in leave_out:
        tune_garbage_collection()
        applied.append("gc")
    return applied
