# Two commands a newcomer needs: `make run` and `make test`. Both set up .venv first (CPU torch from local disk).
PY      := .venv/bin/python
PIP     := .venv/bin/pip
STAMP   := .venv/.installed
SCENARIO ?= scenarios/fleet-disaggregated.yaml
OUT     ?= out

.PHONY: setup run test app bench docs-figures gpu-check profile-modeled profile-cpu gpu-replay clean

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv .venv
	$(PIP) install -q --upgrade pip
	# torch first, pinned: this exact version is the CPU build on local disk; anything looser pulls CUDA.
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q -e '.[kernels,app,dev,ray,calibration]'
	touch $(STAMP)

setup: $(STAMP)

run: $(STAMP)
	.venv/bin/phaseplan capacity scenarios/kimi-k2.6-decode.yaml
	.venv/bin/phaseplan run $(SCENARIO)

test: $(STAMP)
	.venv/bin/ruff check simulator kernels app tests phaseplan bench tools
	.venv/bin/ruff format --check simulator kernels app tests phaseplan bench tools
	$(PY) -m pytest -q

app: $(STAMP)
	.venv/bin/phaseplan app

bench: $(STAMP)
	.venv/bin/phaseplan bench-sim

# Every figure README.md states, re-derived by its command into README.md and docs/figures.json (tools/docs_figures.py;
# minutes: plan and validate are most of it). Re-run after a change that moves figures; tests/test_docs_figures.py
# fails until then.
docs-figures: $(STAMP)
	nice $(PY) tools/docs_figures.py

profile-modeled: $(STAMP)
	.venv/bin/phaseplan profile --device roofline --hardware h200 --out profiles/h200-modeled.json

# On an H200: kernel tests on the GPU, ceilings, profile + log into $(OUT)/. Uses the machine's torch/triton.
gpu-check:
	mkdir -p $(OUT)
	OUT=$(OUT) PYTHONPATH=. python3 -m kernels.gpu_check

# The CPU replay loop's profile: exactly the op shapes of scenarios/tiny-cpu.yaml, timed on this CPU (torch reference
# ops, 1 thread); `phaseplan compare scenarios/tiny-cpu.yaml --device cpu` prices by it.
profile-cpu: $(STAMP)
	.venv/bin/phaseplan profile --device cpu --scenario scenarios/tiny-cpu.yaml --out profiles/cpu-tiny.json

# On an H200: kernel tests, the measured profile (gpu-check), then `compare` of the Kimi KV-format study at
# concurrency 1-64 for BF16 and FP8 caches; profile, comparison JSON and logs into $(OUT)/ (~8 minutes).
gpu-replay:
	mkdir -p $(OUT)
	OUT=$(OUT) PYTHONPATH=. python3 -m kernels.executor.gpu_replay

clean:
	rm -rf .venv out .pytest_cache .ruff_cache
