#!/usr/bin/env bash
# The Ray suite's interpreter: a virtual environment at .venv-ray (git-ignored) with Ray from PyPI, kept out of
# the main environment (the wheel is large and pins its own protobuf and grpcio). It sees the main
# environment's packages (--system-site-packages), so `drills`, `refplatform` and pytest stay importable from
# the editable install. Idempotent: a venv that already has the pinned Ray is left as it is.
#
#   tests/realray/setup.sh            # then: .venv-ray/bin/python -m pytest tests/realray -m realray
#   RAY_VENV=path tests/realray/setup.sh
set -euo pipefail
cd "$(dirname "$0")/../.."

VENV="${RAY_VENV:-.venv-ray}"
PYTHON="${PYTHON:-python3}"
# ray[train] adds pandas, pyarrow, fsspec, tensorboardX and pydantic (no torch): Ray Train's
# DataParallelTrainer runs with them alone (drills/canary/raytrain.py).
RAY_SPEC="ray[default,train]==2.60.0"

if [[ ! -x "$VENV/bin/python" ]]; then
    echo "setup: creating $VENV (python: $($PYTHON --version 2>&1), --system-site-packages)"
    "$PYTHON" -m venv --system-site-packages "$VENV"
else
    echo "setup: $VENV exists"
fi

if "$VENV/bin/python" -c 'import ray, sys; sys.exit(ray.__version__ != "2.60.0")' 2>/dev/null \
        && "$VENV/bin/python" -c 'import pyarrow, pandas, ray.train' 2>/dev/null; then
    echo "setup: ray $("$VENV/bin/python" -c 'import ray; print(ray.__version__)') with train already installed"
else
    echo "setup: pip install $RAY_SPEC into $VENV"
    "$VENV/bin/python" -m pip install --quiet "$RAY_SPEC"
fi

echo "setup: checking that $VENV sees the project and Ray"
"$VENV/bin/python" -c 'import drills, refplatform, pytest, ray, ray.train; print("setup: ok: ray", ray.__version__, "pytest", pytest.__version__)'
