"""For tests/workflow/test_slurm.py only (put on PYTHONPATH by that test): the SLURM executor
plugin checks its jobs every few seconds, as after a check that saw a job finish, instead of
waiting 10 s longer after each check that saw none (up to 180 s, to spare a real cluster's
controller). On the one-node test cluster of short jobs that back-off was most of each test's
time. Nothing else changes: the plugin is patched when, and only if, something imports it."""

import importlib.abc
import importlib.util
import sys

PLUGIN = "snakemake_executor_plugin_slurm"


def patch(module) -> None:
    stock = module.Executor.check_active_jobs

    async def check_active_jobs(self, active_jobs):
        async for job in stock(self, active_jobs):
            yield job
        self.next_seconds_between_status_checks = self.workflow.executor_settings.init_seconds_before_status_checks

    module.Executor.check_active_jobs = check_active_jobs


class PatchWhenImported(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != PLUGIN:
            return None
        sys.meta_path.remove(self)  # find the real module, once
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        load = spec.loader.exec_module

        def exec_module(module):
            load(module)
            patch(module)

        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, PatchWhenImported())
