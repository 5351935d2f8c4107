#!/usr/bin/env bash
# `make cuda-check`: what can be checked of the GPU build on a host with or without a GPU.
#  - the link: `--features cuda` links libtorch_cuda, the CPU build does not;
#  - the fallback: without a usable GPU, --version/info/the daemon's start-up say so;
#  - the results: the paper's protocol on the real Danmini rows gives the same accuracies
#    from both builds (on the CPU here; on a GPU host the cuda build runs there).
# The cuda binary stays at target/metapu-cuda; target/release/metapu is the CPU build again.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
fail() { echo "cuda-check: FAILED: $*" >&2; exit 1; }
ok() { echo "cuda-check: ok: $*"; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

METAPU_CUDA=1 bash scripts/setup.sh
cargo build --release --features cuda --bin metapu
cp target/release/metapu target/metapu-cuda
cargo build --release --bin metapu
cuda=target/metapu-cuda cpu=target/release/metapu

ldd "$cuda" | grep -q 'libtorch_cuda.so =>' || fail "the cuda build does not link libtorch_cuda: $(ldd "$cuda")"
ldd "$cpu" | grep -q libtorch_cuda && fail "the CPU build links libtorch_cuda"
! ldd "$cuda" | grep -q "not found" || fail "$(ldd "$cuda" | grep 'not found')"
ok "link: $(ldd "$cuda" | grep -c '=>') libraries, libtorch_cuda among them; none missing"

"$cuda" --version | grep -q "(cuda build)" || fail "--version: $("$cuda" --version)"
compute="$("$cuda" info models/iot-default.safetensors | sed -n 's/^compute      //p')"
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
  [[ "$compute" == GPU* ]] || fail "a GPU is present but info says: $compute"
else
  [[ "$compute" == "CPU: this CUDA build found no usable GPU"* ]] || fail "info without a GPU says: $compute"
  # The daemon says it at start-up (it then waits for its broker: stopped after 5 s).
  log="$(METAPU__MODEL__PATH=models/iot-default.safetensors METAPU__HTTP__LISTEN=127.0.0.1:0 \
    METAPU__KAFKA__BROKERS=127.0.0.1:1 timeout -s TERM 5 "$cuda" run 2>&1 || true)"
  grep -q "this CUDA build found no usable GPU" <<<"$log" || fail "no fallback warning at start-up: $log"
fi
ok "compute: $compute"

echo '{"source": [], "validation": [], "target": ["danmini_doorbell"]}' >"$work/danmini.split.json"
for build in cpu cuda; do
  "${!build}" eval --data ../shared/data/nbaiot/raw --split "$work/danmini.split.json" \
    --model models/iot-default.safetensors --methods ours,nnpu --target-repeats 2 --out "$work/$build" >/dev/null
done
python3 - "$work/cpu/results.json" "$work/cuda/results.json" <<'EOF'
import json, sys
def numbers(path):  # every number of the results but the timings, by its place
    out = {}
    def walk(v, key):
        if isinstance(v, dict):
            for k, x in v.items():
                if "seconds" not in k:
                    walk(x, f"{key}/{k}")
        elif isinstance(v, list):
            for i, x in enumerate(v):
                walk(x, f"{key}/{i}")
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            out[key] = float(v)
    walk(json.load(open(path)), "")
    return out
cpu, cuda = numbers(sys.argv[1]), numbers(sys.argv[2])
assert len(cpu) > 100 and cpu.keys() == cuda.keys(), "the two results differ in shape"
worst = max(abs(cpu[k] - cuda[k]) for k in cpu)
print(f"cuda-check: {len(cpu)} numbers (accuracies, estimated priors, ...), largest difference {worst:.2e}")
sys.exit(0 if worst <= 1e-6 else 1)
EOF
ok "the same results from both builds"
