"""On PYTHONPATH, makes every Python process of a run believe a CUDA GPU is there
(torch.cuda.is_available() and device_count() say so) and makes starting CUDA fail loudly:
torch.cuda's lazy initialisation, which every call that needs a context goes through, appends
the process's id and the stack that asked to the file named by RNNFLEET_CUDA_TRIPWIRE, then
raises. Python imports one sitecustomize: this one then runs the next one on the path
(tests/without_unix_facilities's, for instance). tests/workflow/test_cuda_context.py runs the real workflow this way: with
train.device: cpu, no process of a run may start CUDA, though each is told it could."""

import importlib.abc
import importlib.util
import os
import sys
import traceback

RECORD = os.environ.get("RNNFLEET_CUDA_TRIPWIRE")


def _tripwire(*args, **kwargs):
    with open(RECORD, "a") as record:
        record.write(f"pid {os.getpid()}: CUDA initialised by\n{''.join(traceback.format_stack())}\n")
    raise RuntimeError("CUDA initialisation in a process of this run (tests/cuda_tripwire)")


def _arm(cuda) -> None:
    cuda.init = _tripwire
    for name, module in list(sys.modules.items()):  # torch.cuda.memory and others bind it at import
        if (name == "torch.cuda" or name.startswith("torch.cuda.")) and hasattr(module, "_lazy_init"):
            module._lazy_init = _tripwire
    cuda.is_available = lambda: True
    cuda.device_count = lambda: 1


class _ArmTorchCuda(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name != "torch.cuda":
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        loader_exec = spec.loader.exec_module

        def exec_module(module):
            loader_exec(module)
            _arm(module)

        spec.loader.exec_module = exec_module
        return spec


def _run_the_next_sitecustomize() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    folders = [os.path.abspath(folder or os.curdir) for folder in sys.path]
    for folder in folders[folders.index(here) + 1 :] if here in folders else []:
        candidate = os.path.join(folder, "sitecustomize.py")
        if os.path.isfile(candidate):
            spec = importlib.util.spec_from_file_location("_next_sitecustomize", candidate)
            spec.loader.exec_module(importlib.util.module_from_spec(spec))
            return


if RECORD:
    sys.meta_path.insert(0, _ArmTorchCuda())
_run_the_next_sitecustomize()
