"""Hooks into Snakemake's own steps that rules/handlers.smk needs and no Snakefile
directive offers (rnnfleet.hooks.apply installs them while the Snakefile is parsed).

- before_building_dag: a function called with the run's target files and rules, and the
  set of files to force (--forcerun), right before the DAG is built: the targets are
  known only then (not while the Snakefile is parsed), in real runs and dry-runs alike.
- after_building_dag: a function called with the DAG right after it is built (the jobs to
  run and their reasons known), before a dry-run lists them and before a real run's
  onstart handler and first job (Snakemake runs no onstart in a dry-run).
- keep_going_past_busy_empty_folders: Snakemake's clean-up of empty folders after a run
  leaves a folder it cannot remove (a mount point) instead of ending the run there.
- name_write_protected_outputs: outputs this user cannot write are named in one line.
- forgive_removed_inputs: a job whose inputs are those it was made with less some (a
  dataset removed) is not re-run for that, where the workflow says its inputs may shrink.

Each wraps Snakemake's function rather than copy it; rnnfleet.hooks.apply installs them
behind its one gate (the supported release, the wrapped functions' source as in
snakemake_contract.CONTRACT).
"""

from __future__ import annotations

from collections.abc import Callable

from rnnfleet.hooks.snakemake_contract import _stock

BeforeDag = Callable[[set, set, set], None]


def before_building_dag(callback: BeforeDag) -> None:
    """callback(target files, target rule names, files to force) runs before each DAG is
    built; it may raise (a WorkflowError is Snakemake's one clear line) or add to the files
    to force. Target files are paths as Snakemake holds them (relative to the working folder)."""
    from snakemake.dag import DAG

    stock_init = _stock(DAG.__init__)

    def init(self, *args, **kwargs):
        if "targetfiles" in kwargs:
            force_files = set(kwargs.get("forcefiles") or ())
            callback(
                {str(path) for path in kwargs.get("targetfiles") or ()},
                {rule.name for rule in kwargs.get("targetrules") or ()},
                force_files,
            )
            kwargs["forcefiles"] = force_files
        stock_init(self, *args, **kwargs)

    init.__rnnfleet_stock__ = stock_init
    DAG.__init__ = init


def after_building_dag(callback: Callable[[object], None]) -> None:
    """callback(the DAG) runs each time the workflow has built its DAG (Workflow._build_dag),
    in real runs and dry-runs alike."""
    from snakemake.workflow import Workflow

    stock_build_dag = _stock(Workflow._build_dag)

    def build_dag(self, *args, **kwargs):
        result = stock_build_dag(self, *args, **kwargs)
        callback(self.dag)
        return result

    build_dag.__rnnfleet_stock__ = stock_build_dag
    Workflow._build_dag = build_dag


def keep_going_past_busy_empty_folders() -> None:
    """After a real run, Snakemake removes every empty folder of a missing output
    (DAG.cleanup_workdir) and stops at the first it cannot remove: an output folder that is a
    mount point (EBUSY) then ends the run with a traceback before its onerror handler, which
    puts back the previous models of failed re-trains. With this, such a folder stays where
    it is (it is empty and harmless) and the run ends as it would have."""
    from snakemake.dag import DAG
    from snakemake.logging import logger

    stock_cleanup = _stock(DAG.cleanup_workdir)

    def cleanup_workdir(self) -> None:
        try:
            stock_cleanup(self)
        except OSError as error:
            logger.debug(f"rnnfleet: left the empty folder {error.filename} in place ({error.strerror})")

    cleanup_workdir.__rnnfleet_stock__ = stock_cleanup
    DAG.cleanup_workdir = cleanup_workdir


def name_write_protected_outputs(describe: Callable[[list[str]], str | None]) -> None:
    """Snakemake refuses a job whose existing outputs this user cannot write (while building
    the DAG, dry-runs too) with a ProtectedOutputException of several lines; with this,
    describe(those outputs) gives the WorkflowError's one line instead (None: Snakemake's own)."""
    import os

    from snakemake.exceptions import ProtectedOutputException, WorkflowError
    from snakemake.jobs import Job

    stock_check = _stock(Job.check_protected_output)

    async def check_protected_output(self) -> None:
        try:
            await stock_check(self)
        except ProtectedOutputException:
            protected = [
                str(path)
                for path in self.output
                if os.path.exists(path) and not os.path.islink(path) and not os.access(path, os.W_OK)
            ]
            line = describe(protected) if protected else None
            if line is None:
                raise
            raise WorkflowError(line) from None

    check_protected_output.__rnnfleet_stock__ = stock_check
    Job.check_protected_output = check_protected_output


def forgive_removed_inputs(may_shrink: Callable[[object], bool]) -> None:
    """Snakemake re-runs a job whose set of inputs differs from the one recorded with its
    output (the `input` rerun trigger). With this, a job for which may_shrink(job) is true
    is not re-run where its inputs are the recorded ones less some: fewer datasets is not a
    change for it (the fleet's pretraining while its membership is frozen)."""
    from snakemake.persistence import PersistenceBase

    stock_input_changed = _stock(PersistenceBase._input_changed)

    def input_changed(self, job, file=None) -> bool:
        changed = stock_input_changed(self, job, file)
        if not changed or not may_shrink(job):
            return changed
        recorded = self.input(file)
        return not set(self._input(job)) <= set(recorded or ())

    input_changed.__rnnfleet_stock__ = stock_input_changed
    PersistenceBase._input_changed = input_changed
