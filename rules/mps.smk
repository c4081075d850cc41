# CUDA MPS (config `mps: true`, Linux with an NVIDIA driver): one MPS control daemon for
# this run, so kernels of concurrent trainings on a GPU overlap instead of taking turns.
# Started before the first job, stopped when the run ends (success or error): the calls are
# in the run's onstart/onsuccess/onerror handlers in handlers.smk (Snakemake keeps one
# handler of each kind). Its pipe and log folders are private to this working folder; the
# jobs inherit them via the environment.
import shutil
import subprocess

MPS_ENVIRONMENT = {
    "CUDA_MPS_PIPE_DIRECTORY": os.path.abspath(".snakemake/mps/pipe"),
    "CUDA_MPS_LOG_DIRECTORY": os.path.abspath(".snakemake/mps/log"),
}


def mps_control():
    control = shutil.which("nvidia-cuda-mps-control")
    if control is None:
        raise WorkflowError(
            "mps is true in the config, but nvidia-cuda-mps-control (part of the NVIDIA driver "
            "on Linux) is not on PATH: set mps: false, or run where the driver is installed"
        )
    return control


def start_mps_if_on():
    if not config["mps"]:
        return
    control = mps_control()
    for folder in MPS_ENVIRONMENT.values():
        os.makedirs(folder, exist_ok=True)
    os.environ.update(MPS_ENVIRONMENT)  # inherited by every job this run starts
    subprocess.run([control, "-d"], check=True)


def stop_mps_if_on():
    if config["mps"]:
        subprocess.run([mps_control()], input="quit\n", text=True, check=False)
