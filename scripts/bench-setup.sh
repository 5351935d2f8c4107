#!/usr/bin/env bash
# Idempotent, pinned virtualenv for the peer detectors of `make bench`
# (.venv-bench: River and PySAD), and Debian's tcpreplay for the sensor's benchmark on a
# link (as root; without it that part says why and is skipped). Not needed for building,
# testing or running metapu.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$root/.venv-bench"
pins=(river==0.26.1 pysad==0.7.0 numpy==2.4.6 scipy==1.17.1 scikit-learn==1.9.1)
stamp="$venv/.metapu-bench"

tcpreplay_pin=4.4.3-1
if ! command -v tcpreplay >/dev/null && [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null; then
  echo "bench-setup: installing tcpreplay $tcpreplay_pin (the sensor's benchmark on a link)"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "tcpreplay=$tcpreplay_pin" >/dev/null \
    || echo "bench-setup: tcpreplay not installed: the sensor benchmark skips its part on a link" >&2
fi

if [[ -f "$stamp" && "$(cat "$stamp")" == "${pins[*]}" ]]; then
  exit 0
fi
python=${PYTHON:-python3}
[[ -x "$venv/bin/python" ]] || "$python" -m venv "$venv"
"$venv/bin/python" -m pip --disable-pip-version-check -q install "${pins[@]}"
echo "${pins[*]}" > "$stamp"
echo "bench-setup: $venv ready (${pins[*]})"
