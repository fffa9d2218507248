# The two commands of the README, and a few conveniences. Everything runs inside .venv,
# which `setup` creates from nothing (Debian packages too, when run as root).
VENV  ?= .venv
BIN   := $(VENV)/bin
CORES ?= all

.PHONY: setup run test smoke full-dry-run lint report clean check

setup:
	@scripts/setup.sh

## run: set up, then regenerate every selected paper at the default scale, and the summary
run: setup
	$(BIN)/snakemake --cores $(CORES)

## test: set up, then run the test suite (unit tests, kernels, the smoke DAG, determinism)
test: setup
	$(BIN)/python -m pytest

## check: does this machine reproduce the committed verdicts? A fresh default-scale run into results/check/
## (about an hour on 2 cores), then every claim's verdict, control verdicts and interval against results/default.
check: setup
	$(BIN)/snakemake --cores $(CORES) --config run=check
	$(BIN)/python scripts/compare_results.py results/default results/check

## smoke: the whole DAG at the smoke scale (seconds per paper)
smoke: setup
	$(BIN)/snakemake --cores $(CORES) --configfile config/smoke.yaml

## full-dry-run: the full scale's DAG (its data paths must exist: config/full.yaml names them under data/)
full-dry-run: setup
	$(BIN)/snakemake --configfile config/full.yaml -n

lint: setup
	$(BIN)/snakemake --lint

## report: Snakemake's HTML report of the default scale (after `make run`)
report: setup
	$(BIN)/snakemake --report results/default/report.html

clean:
	rm -rf results/smoke logs benchmarks .snakemake

## gpu-check: on a CUDA machine, the kernels' tests compiled, their values against the references, the benchmark's ratios
GPU_CHECK_OUT ?= results/kernels/gpu_check
gpu-check:
	scripts/gpu-check.sh $(GPU_CHECK_OUT)
