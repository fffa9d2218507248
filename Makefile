# The two commands of the README, and a few conveniences. Everything runs inside .venv,
# which `setup` creates from nothing (Debian packages too, when run as root).
VENV  ?= .venv
BIN   := $(VENV)/bin
CORES ?= all

.PHONY: setup run test smoke full-dry-run lint report clean

setup:
	@scripts/setup.sh

## run: set up, then regenerate every selected paper at the default scale, and the summary
run: setup
	$(BIN)/snakemake --profile profiles/default --cores $(CORES)

## test: set up, then run the test suite (unit tests, kernels, the smoke DAG, determinism)
test: setup
	$(BIN)/python -m pytest

## smoke: the whole DAG at the smoke scale (seconds per paper)
smoke: setup
	$(BIN)/snakemake --profile profiles/default --cores $(CORES) --configfile config/smoke.yaml

## full-dry-run: the full scale's DAG (its data paths must exist: config/full.yaml names them under data/)
full-dry-run: setup
	$(BIN)/snakemake --profile profiles/default --configfile config/full.yaml -n

lint: setup
	$(BIN)/snakemake --lint

## report: Snakemake's HTML report of the default scale (after `make run`)
report: setup
	$(BIN)/snakemake --profile profiles/default --report results/default/report.html

clean:
	rm -rf results/smoke logs benchmarks .snakemake

## gpu-check: on a CUDA machine, the kernels' tests compiled, their values against the references, the benchmark's ratios
GPU_CHECK_OUT ?= results/kernels/gpu_check
gpu-check:
	scripts/gpu-check.sh $(GPU_CHECK_OUT)
