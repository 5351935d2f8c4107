#!/usr/bin/env bash
# Idempotent, pinned virtualenv for the peer detectors of `make bench`
# (.venv-bench: River and PySAD). Not needed for building, testing or running metapu.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$root/.venv-bench"
pins=(river==0.26.1 pysad==0.7.0 numpy==2.4.6 scipy==1.17.1 scikit-learn==1.9.1)
stamp="$venv/.metapu-bench"

if [[ -f "$stamp" && "$(cat "$stamp")" == "${pins[*]}" ]]; then
  exit 0
fi
python=${PYTHON:-python3}
[[ -x "$venv/bin/python" ]] || "$python" -m venv "$venv"
"$venv/bin/python" -m pip --disable-pip-version-check -q install "${pins[@]}"
echo "${pins[*]}" > "$stamp"
echo "bench-setup: $venv ready (${pins[*]})"
