# Two commands for a fresh machine:  make run  (demo)  and  make test.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# The CPU build of PyTorch (a plain `torch` requirement pulls a multi-GB CUDA build).
# With a GPU: make TORCH=torch==2.13.0 TORCH_INDEX=https://download.pytorch.org/whl/cu128 venv
TORCH ?= torch==2.13.0+cpu
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
CORES ?= all

.PHONY: venv slurm browser run test test-fast lint fmt bench bench-scale bench-read clean

venv: $(VENV)/.installed

$(VENV)/.installed: requirements.txt requirements-dev.txt requirements-mlflow.txt requirements-onnx.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	# torch alone from its index (--no-deps: its dependencies come from PyPI in the next step,
	# without asking the torch index for each of them)
	$(BIN)/python -m pip install --quiet --no-deps "$(TORCH)" --extra-index-url $(TORCH_INDEX)
	$(BIN)/python -m pip install --quiet -r requirements-dev.txt
	# The `rnnfleet` command (init, predict, inspect), editable: it uses this clone's workflow.
	$(BIN)/python -m pip install --quiet --no-deps -e .
	touch $@

# On a cluster: the SLURM executor, into the venv (requirements-slurm.txt says why it is apart).
slurm: venv
	$(BIN)/python -m pip install --quiet -r requirements-slurm.txt

# For tests/workflow/test_slurm.py only: the same packages in a folder of their own, put on PYTHONPATH
# by that test, so every other snakemake command of the suite starts without them.
SLURM_TEST_PLUGIN := $(VENV)/slurm-plugin
$(SLURM_TEST_PLUGIN)/.installed: requirements-slurm.txt | venv
	$(BIN)/python -m pip install --quiet --no-deps --target $(SLURM_TEST_PLUGIN) -r requirements-slurm.txt
	touch $@

demo_data: | venv
	$(BIN)/python scripts/make_demo_data.py demo_data

run: venv demo_data
	$(BIN)/snakemake --cores $(CORES) --config data_dir=demo_data

# Both tiers: tests/unit/ and tests/workflow/ (real snakemake runs and other processes).
# Test files run side by side, a file's tests in one worker (they share its fixtures): a
# workflow test waits on processes most of its time, so two workers keep two cores busy.
TEST_WORKERS ?= 2
test: venv $(SLURM_TEST_PLUGIN)/.installed browser
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python -m pytest tests -q --durations=10 \
		-n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

# The browser checks open the report and the table page in Debian's Chromium: installed here
# when missing and this machine can (root with apt-get), else the reason goes where the tests
# quote it when they skip (tests/conftest.py: chromium_or_skip).
browser: | venv
	sh tests/browser/install_chromium.sh $(VENV)/chromium-missing

# The fast loop while editing: tests/unit/ less the tests marked slow (no snakemake run).
test-fast: venv
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python -m pytest tests -q -m "not workflow and not slow" $(PYTEST_ARGS)

lint: venv demo_data
	$(BIN)/snakemake --lint
	$(BIN)/snakefmt --check Snakefile rules/
	$(BIN)/ruff check scripts tests bench examples
	$(BIN)/ruff format --check scripts tests bench examples

fmt: venv
	$(BIN)/snakefmt Snakefile rules/
	$(BIN)/ruff format scripts tests bench examples

bench: venv
	$(BIN)/python bench/bench_speed.py $(BENCH_ARGS)

bench-scale: venv
	$(BIN)/python bench/bench_scale.py $(BENCH_ARGS)

bench-read: venv
	$(BIN)/python bench/bench_read.py $(BENCH_ARGS)

clean:
	rm -rf prep models metrics results logs benchmarks predictions exports report.html fleet-report.zip fleet-report .snakemake
