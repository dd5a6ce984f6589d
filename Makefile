# labkit's task runner. `make lab` runs the quickstart lab, `make test` runs the tests;
# both set up everything they need on a fresh machine (venv, llama-server, model, browser).

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
CONFIG ?= configs/quickstart.yaml

.PHONY: bench-coverage bench-store bench-report postgres lab test test-unit test-integration test-e2e test-ray lint typecheck sanitize docs check setup browser format bench bench-load bench-load-long bench-cpu bench-ray bench-readpath clean

LAB_STAMP := $(VENV)/.lab-installed-stamp

# The tests and tools: labkit with the dev extra (Ray, pytest, mypy, ruff, ...). Both installs
# build the C read path in place (setup.py; labkit runs the same steps in Python without it).
$(STAMP): pyproject.toml setup.py labkit/wire/_readpath.c labkit/wire/_loopclock.c labkit/_stampfigures.c
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $(STAMP) $(LAB_STAMP)

# The main job: labkit and its own dependencies only (what `pip install labkit` gets).
$(LAB_STAMP): pyproject.toml setup.py labkit/wire/_readpath.c labkit/wire/_loopclock.c labkit/_stampfigures.c
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e .
	@touch $(LAB_STAMP)

## The main job: set up (cached after the first time) and run the quickstart lab. Installs
## labkit's own dependencies only, not the dev extra.
lab: $(LAB_STAMP)
	$(BIN)/labkit setup
	$(BIN)/labkit run $(CONFIG)

## llama-server and the default model, built/fetched into ~/.cache/labkit when missing.
setup: $(LAB_STAMP)
	$(BIN)/labkit setup

## Debian's chromium, for the report's real-browser test.
browser:
	bash scripts/install-browser.sh

## Debian's PostgreSQL binaries, for the store's tests against a real server.
postgres:
	bash scripts/install-postgres.sh

## The whole test suite, every tier: the unit tier first (a typo fails before anything is
## built), then the browser, PostgreSQL and llama-server set-up, then integration and e2e.
## BUSY=1 runs those two beside a CPU hog per core (scripts/busy.sh), as CI does: tests
## assert behaviour, never speed, so they must hold on a busy host.
BUSY ?=
test: $(STAMP)
	$(BIN)/python -m pytest -q -m unit
	$(MAKE) --no-print-directory browser
	$(MAKE) --no-print-directory postgres
	$(BIN)/labkit setup
	$(if $(filter 1,$(BUSY)),scripts/busy.sh )$(BIN)/python -m pytest -q -m "not unit" --durations=25

## No sockets, a scripted clock: needs nothing but the venv (no llama-server, no browser).
test-unit: $(STAMP)
	$(BIN)/python -m pytest -q -m unit

## Real sockets on 127.0.0.1 and real time (and a real PostgreSQL server); no llama-server or
## browser.
test-integration: $(STAMP) postgres
	$(BIN)/python -m pytest -q -m integration

## The real llama-server and model, and a real headless browser.
test-e2e: $(STAMP) browser
	$(BIN)/labkit setup
	$(BIN)/python -m pytest -q -m e2e

## `executor: ray` on real Ray clusters, each in a loopback-only network namespace
## (`unshare -n`: run as root); the dev extra installs Ray.
test-ray: $(STAMP)
	$(BIN)/python -m pytest -q tests/runner/ray

lint: $(STAMP)
	$(BIN)/ruff check labkit tests benchmarks
	$(BIN)/ruff format --check labkit tests benchmarks

typecheck: $(STAMP)
	$(BIN)/mypy

## The C extensions (labkit/wire/_readpath.c, _loopclock.c, labkit/_stampfigures.c) built
## with AddressSanitizer and UndefinedBehaviorSanitizer into a throwaway folder (the in-place
## builds are left alone), and their fuzz and equivalence tests run on them: an
## out-of-bounds read or undefined behaviour stops them and fails (scripts/sanitize.py; about
## a minute on 2 cores; gcc and its libasan/libubsan).
sanitize: $(STAMP)
	$(BIN)/python scripts/sanitize.py

## The reference pages under docs/ built into site/ (git-ignored); --strict: a broken link or
## anchor, or a page missing from mkdocs.yml's nav, fails. Not --quiet: it hides the warnings
## from --strict's count, and the build then passes whatever they say.
docs: $(STAMP)
	$(BIN)/mkdocs build --strict

check: lint typecheck docs test

format: $(STAMP)
	$(BIN)/ruff format labkit
	$(BIN)/ruff check --fix labkit tests benchmarks

## Benchmarks print ratios and sizes measured side by side; they are not tests.
bench: $(STAMP)
	$(BIN)/labkit setup
	$(BIN)/python benchmarks/bench_report.py
	$(BIN)/python benchmarks/bench_recorder.py
	$(BIN)/python benchmarks/bench_faults.py
	$(BIN)/python benchmarks/bench_fidelity.py --llama

## The report at 10⁵, 10⁶ and 10⁷ records (each run written into a temporary folder and
## deleted after; 10⁷ needs about 35 GB free there: DIR=... picks it) and compare of two 10⁶
## runs: seconds and peak RSS beside their bounds (20 s, 60 s at 10⁷; 1 GiB), the columnar
## sidecar's build, 10⁶ before (records.jsonl read whole); 30-60 minutes on 2 cores.
bench-report: $(STAMP)
	$(BIN)/python benchmarks/bench_report.py --ladder $(if $(DIR),--dir $(DIR))

## labkit's stamp and TTFT error against a scripted server that stamps its own send times,
## at 1, 8 and 32 streams, over HTTP and HTTPS, beside bare httpx, the openai SDK and a raw
## asyncio client (a few minutes on 2 cores).
bench-load: $(STAMP)
	$(BIN)/python benchmarks/bench_load.py --https

## The same up to 1,000 streams (the runner's worker processes at 256 and 1,000; about 20
## minutes), every figure in bench-load.json. Before/after: add BEFORE=REV (labkit from git
## REV, then this tree, one after the other: twice as long).
bench-load-long: $(STAMP)
	$(BIN)/python benchmarks/bench_load.py --levels 1,32,256,1000 \
		--clients labkit,bare,raw,labkit-run,labkit-procs \
		--https --https-clients labkit,bare,labkit-procs --json bench-load.json \
		$(if $(BEFORE),--before $(BEFORE))

## labkit's CPU per streamed token (its whole `labkit run` process tree) and stamp/TTFT error,
## before (labkit from git BEFORE, default e63b065) and after (this tree), at 1, 32 and 256
## streams; 1,000 streams at 30 ms per token with the server on its own CPU; where the CPU per
## token went (about 12 minutes on 2 cores; figures also in results/bench-cpu.json).
bench-cpu: $(STAMP)
	$(BIN)/python benchmarks/bench_cpu.py $(if $(BEFORE),--before $(BEFORE)) \
		--json results/bench-cpu.json

## The C read path against its Python twins in one run of this tree: each C function's cost
## per call against its twin, and a 32-stream level's CPU per token with LABKIT_READPATH=c,
## =python and each C function left out, beside an A/A (C against C) that gives the noise
## (benchmarks/bench_readpath.py; about 8 minutes on 2 cores).
bench-readpath: $(STAMP)
	$(BIN)/python benchmarks/bench_readpath.py

## How often the lab's stated 95% intervals hold the truth: the quickstart 20 times against
## the truth server, seeded, graded (about 10 minutes on 2 cores).
bench-coverage: $(STAMP)
	$(BIN)/python benchmarks/bench_coverage.py --runs 20

## Streams held in flight and stamp error: one process, worker processes and Ray actors, at
## 32, 256 and 1,000 streams (the Ray leg inside unshare -n; unavailable without Ray).
bench-ray: $(STAMP)
	$(BIN)/python benchmarks/bench_ray.py

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache site
