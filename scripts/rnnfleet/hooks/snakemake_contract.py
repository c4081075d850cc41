"""Every function of Snakemake (and of its SLURM job-step plugin) that rnnfleet replaces or
wraps (or whose inner workings a wrapper relies on), in one table, with the SHA-256 of its source in the release rnnfleet supports
(rnnfleet.snakemake_version).

What it promises:
- CONTRACT names each replaced or wrapped function once: which rnnfleet module changes it and
  the hash of its stock source. Those modules that check the source themselves before they
  apply (speed-ups, guards, atomic restore) read their hashes from here.
- PRIVATE_NAMES lists the private attributes of Snakemake's classes and modules that the
  replacements read or write without replacing them: each class's module must still assign
  them (`self.<name> =`).
- differences() says, per function, what the installed Snakemake changed: another source, a
  function gone, a private name no longer set. tests/unit/test_snakemake_contract.py fails on any difference, so a new
  Snakemake shows in `make test` which of rnnfleet's changes need reading again, instead of
  their switching off (or, for the wrappers without a source check, misbehaving) silently.
- `python -m rnnfleet.hooks.snakemake_contract` prints the table against the installed
  Snakemake (the upgrade check; docs/architecture.md), exit status 1 when anything differs.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import sys
from dataclasses import dataclass


@dataclass(frozen=True)
class Patch:
    target: str  # "module:Class.attribute" or "module:function"
    by: str  # the rnnfleet module that replaces or wraps it
    source_sha256: str  # of its stock source in the supported release


CONTRACT = (
    # rnnfleet.hooks.snakemake_speedups: per-job costs that grow with the number of datasets
    Patch(
        "snakemake.scheduling.job_scheduler:JobScheduler._schedule_reevalutation",
        "snakemake_speedups",
        "bb09f100ea5766bbab2a2fa26d28d2a7488140ed6e74224adcebab65112bbf69",
    ),
    Patch(
        "snakemake.scheduling.job_scheduler:JobScheduler.update_input_sizes",
        "snakemake_speedups",
        "3d3d19efdbbe3267272cd388ea86569d858ec30bc4d96db033d23e0a5276f605",
    ),
    Patch(
        "snakemake.common:get_function_params",
        "snakemake_speedups",
        "ffd80f63645293c363afb4a5d0f3896d4623ace8373749bb833532e4038aa854",
    ),
    Patch(
        "snakemake.jobs:Job.shellcmd",
        "snakemake_speedups",
        "73ec1b845055ac7d4543163126d00a44741a93444c82d70a8a7ffe8bad196618",
    ),
    Patch(
        "snakemake.report:FileRecord.render",
        "snakemake_speedups",
        "6b7bc19ee387fcd6435c4c39b1de0c2c3c221f2b7ba9347ea2ac4d7ca58d0041",
    ),
    # rnnfleet.hooks.snakemake_guards: a dataset file gone during the run fails its own job
    Patch(
        "snakemake.jobs:Job.prepare",
        "snakemake_guards",
        "fd2d6313296170e4e79c48c3d2d213b4d124a4c966760f88005624989b2ff529",
    ),
    Patch(
        "snakemake.io:wait_for_files",
        "snakemake_guards",
        "9fe3d2722a5c6713010030f204f687b3271ceb0eb761b6910502ab24c101e65b",
    ),
    Patch(
        "snakemake.io:_IOFile.checksum",
        "snakemake_guards",
        "cc344b5b1a5e355bf913e41bf30ae96e8afc685e313392ff1144c0b70ae47d0d",
    ),
    # rnnfleet.hooks.atomic_restore: a failed re-train's model put back in one rename
    Patch(
        "snakemake.persistence:FileBackupMixin.restore_output",
        "atomic_restore",
        "929db9930db20c0c14703237255f295d75790235fe8a0b2e1a625eb2b36b6ba0",
    ),
    Patch(
        "snakemake.persistence:FileBackupMixin._get_backup_path",
        "atomic_restore",
        "64748f0e794d9de6d478c106252f46544607eea63f33ed63bffea899b691d29c",
    ),
    Patch(
        "snakemake.persistence:FileBackupMixin.backup_output",
        "atomic_restore",
        "0567435ee10946db380e7bad0d6893a9bd08070ebc7abe3532f69f2195bd09c3",
    ),
    Patch(
        "snakemake.persistence:PersistenceBase.finished",
        "atomic_restore",
        "3f347851a55e224352090af29258781870b2e5b6fdd7977e7fb6df0d442edf58",
    ),
    # rnnfleet.hooks.snakemake_hooks: wrappers (before and after the DAG, clean-up, protected outputs)
    Patch(
        "snakemake.dag:DAG.__init__",
        "snakemake_hooks",
        "e0d04cbce16199917286079911b45a383307782144857041d523bbab26053462",
    ),
    Patch(
        "snakemake.workflow:Workflow._build_dag",
        "snakemake_hooks",
        "246d9c8ae4dd927682f2552c1ca13219616e847426cffa578598539256c87b1f",
    ),
    Patch(
        "snakemake.dag:DAG.cleanup_workdir",
        "snakemake_hooks",
        "cf091055623f56199ac62a66d0a85fa70c737a9b545fce048ccfb9b5ca0907ed",
    ),
    Patch(
        "snakemake.jobs:Job.check_protected_output",
        "snakemake_hooks",
        "cc24c2002a61d80bcd6f9eacc14e67fe9af198607416bdfd3ea6df73f5f4f3b6",
    ),
    Patch(
        "snakemake.persistence:PersistenceBase._input_changed",
        "snakemake_hooks",
        "048b11db62c14f6aeada3643b5000b74e5179b52bcf42b9c027220ed1d8e7713",
    ),
    # rnnfleet.hooks.retry_policy: a training retried only when a retry can help
    Patch(
        "snakemake.jobs:Job.restart_times",
        "retry_policy",
        "deb703b85c554688ed5a86e1b2ff1b8a79510cb49a02c5d8ce9406361f91f6b0",
    ),
    # rnnfleet.hooks.packed_jobs: packed SLURM jobs (the job-step plugin: requirements-slurm.txt)
    Patch(
        "snakemake.scheduling.job_scheduler:JobScheduler._handle_error",
        "packed_jobs",
        "255b52a98a34627523867bb0f1cbd57892c661a2d7d15c862e32cf879760d327",
    ),
    # rnnfleet.hooks.past_failed_inputs wraps JobScheduler._handle_error too (above), and
    # releases a job from the DAG's count of what it waits for: what that relies on.
    Patch(
        "snakemake.dag:DAG.update_ready",
        "past_failed_inputs",
        "1d3a023d4b85a70c2e61cae2ab47ea308e544fb573792509e99d1633b5c732cc",
    ),
    Patch(
        "snakemake.dag:DAG._ready",
        "past_failed_inputs",
        "585d5ef7e3c3b3f50c5c3bb13bed5792a46ec94b1dc4e75eaea6a54398dd4237",
    ),
    Patch(
        "snakemake.iocontainers:Namedlist._allitems",
        "past_failed_inputs",
        "d22052c707a1aed3d97c64c31cc4ee1973a9bb35072b507b97a50b2ddf969f6b",
    ),
    # rnnfleet.workflow.pretrain_plan.preprocess_grouped_apart (train.init fleet under a SLURM
    # profile's groups) sets the run's --groups before the DAG is built: it relies on a rule's
    # group being read from them each time.
    Patch(
        "snakemake.rules:Rule.group",
        "pretrain_plan",
        "e6fed1c3280cb3f892ea57e5a6ed25f49bc926a7318bf99239de31943934750d",
    ),
    Patch(
        "snakemake_executor_plugin_slurm_jobstep:get_node_setting",
        "packed_jobs",
        "6f72c1ca6c8c09186f73d84707836698b09c45e0cb1b11d38e698167e12fd2c8",
    ),
    Patch(
        "snakemake_executor_plugin_slurm_jobstep:Executor.run_jobs",
        "packed_jobs",
        "3a5396cebc6ca004b0d50bd5eddd9aad71cb92d5ac8d40621b4b0f69eba60518",
    ),
)


# Private names the replacements use without replacing them (see the module docstring).
# Modules outside rnnfleet.hooks that rely on a Snakemake function's behaviour without
# replacing it (their CONTRACT entries are hash-checked like the patches').
RELIED_ON_ELSEWHERE = ("pretrain_plan",)

PRIVATE_NAMES = {
    "snakemake.scheduling.job_scheduler:JobScheduler": ("_open_jobs", "_input_sizes", "_tofinish"),
    "snakemake.jobs:Job": ("_params", "_resources"),
    "snakemake.jobs:GroupJob": ("_toposorted", "_resources", "_input", "_output", "_log", "_all_products", "_jobid"),
    "snakemake.workflow:Workflow": ("_resource_scopes",),
    "snakemake.dag:DAG": ("_running",),
}


def stock_hashes(by: str) -> dict[str, str]:
    """{function: stock source hash} of the functions one rnnfleet module changes."""
    return {patch.target: patch.source_sha256 for patch in CONTRACT if patch.by == by}


def _stock(function):
    """The stock function (a property's getter), also when rnnfleet has already replaced it."""
    if isinstance(function, property):
        function = function.fget
    while hasattr(function, "__rnnfleet_stock__"):  # wrappers of wrappers (JobScheduler._handle_error)
        function = function.__rnnfleet_stock__
    return function


def locate(target: str):
    """'module:Class.attribute' -> (owner object, attribute name, what the owner holds there)."""
    import snakemake.api  # noqa: F401  (imports the rest in the order they need)

    module_name, attribute_path = target.split(":")
    owner = importlib.import_module(module_name)
    *owner_names, attribute = attribute_path.split(".")
    for name in owner_names:
        owner = getattr(owner, name)
    return owner, attribute, inspect.getattr_static(owner, attribute)


def stock_function(target: str):
    """The stock function Snakemake defines at target (a property's getter), also once replaced."""
    return _stock(locate(target)[2])


def source_sha256(function) -> str:
    return hashlib.sha256(inspect.getsource(function).encode()).hexdigest()


def installed(patch: Patch) -> bool:
    """Whether the package the patched function belongs to is installed (the SLURM job-step
    plugin is optional: requirements-slurm.txt)."""
    return importlib.util.find_spec(patch.target.split(".")[0].split(":")[0]) is not None


def difference(target: str, expected_sha256: str) -> str | None:
    """What the installed Snakemake changed of one patched function (None: nothing)."""
    try:
        found = source_sha256(stock_function(target))
    except (ImportError, AttributeError, OSError, TypeError) as error:
        return f"not found ({error})"
    return None if found == expected_sha256 else "has changed"


def private_name_differences() -> list[str]:
    """One line per private name of PRIVATE_NAMES that Snakemake no longer sets."""
    problems = []
    for qualified_name, names in PRIVATE_NAMES.items():
        owner, attribute, _ = locate(qualified_name)
        # the source of the class's module: a class's own source takes a parse of the module (seconds)
        source = inspect.getsource(inspect.getmodule(getattr(owner, attribute)))
        problems += [f"{qualified_name} no longer sets {name}" for name in names if f"self.{name} =" not in source]
    return problems


def differences(contract: tuple[Patch, ...] | None = None) -> list[str]:
    """One line per patched function (of CONTRACT, or `contract`) of an installed package that
    differs, then one per private name gone (empty: all fit)."""
    contract = CONTRACT if contract is None else contract
    changed = [
        f"{patch.target} ({patch.by}) {why}"
        for patch in contract
        if installed(patch) and (why := difference(patch.target, patch.source_sha256))
    ]
    return changed + private_name_differences()


def main() -> int:
    import snakemake

    from rnnfleet.snakemake_version import SUPPORTED_SNAKEMAKE

    print(f"Snakemake {snakemake.__version__} installed; rnnfleet's changes were written for {SUPPORTED_SNAKEMAKE}")
    changed = 0
    for patch in CONTRACT:
        why = difference(patch.target, patch.source_sha256) if installed(patch) else None
        changed += why is not None
        state = "CHANGED" if why else "fits" if installed(patch) else "absent"
        print(f"{state:<8} {patch.by:<19} {patch.target}{f' {why}' if why else ''}")
    gone = private_name_differences()
    for line in gone:
        print(f"{'CHANGED':<8} {'(private name)':<19} {line}")
    print(
        f"{changed + len(gone)} of {len(CONTRACT)} functions and the private names changed"
        if changed or gone
        else "nothing changed"
    )
    return 1 if changed or gone else 0


if __name__ == "__main__":
    sys.exit(main())
