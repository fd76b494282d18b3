# The two commands of the README. Each creates .venv and installs what it needs.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# A generated match for `pan bench ball`, removed after it.
BENCH_DATA := .bench-data
# Under CI the slowest tests are listed at the end, to keep an eye on the suite's time.
PYTEST_ARGS ?= $(if $(CI),--durations=25)

.PHONY: demo test test-heavy lint bench clean java sshd chromium bytecode

# Spark 4 needs Java 17 or newer: install it from Debian when it is missing and we may.
java:
	@if java -version 2>&1 | grep -Eq 'version "(1[7-9]|[2-9][0-9])'; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		apt-get update -qq && apt-get install -y -qq openjdk-17-jre-headless >/dev/null; \
	else echo "Java 17+ is needed for the Spark jobs (e.g. apt-get install openjdk-17-jre-headless)"; exit 1; fi

# pan cluster (the namespace hosts of the deploy tests) runs Debian's sshd in each namespace.
sshd:
	@if [ -x /usr/sbin/sshd ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		apt-get update -qq && apt-get install -y -qq openssh-server >/dev/null; \
	else echo "openssh-server is needed for the pan cluster tests (apt-get install openssh-server); they will skip"; fi

# The dashboard's browser tests (tests/workers/test_dashboard_browser.py) and `pan bench dashboard` drive Debian's
# headless Chromium.
chromium:
	@if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		apt-get update -qq && apt-get install -y -qq chromium chromium-driver >/dev/null; \
	else echo "chromium and chromium-driver are needed for the dashboard's browser test (apt-get install chromium chromium-driver); it will skip"; fi

# The runtime with its extras, and the benchmarks' own distribution (pan bench), both editable.
$(STAMP): pyproject.toml benchmarks/pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]' -e ./benchmarks
	# matplotlib builds its font cache (running fc-list) the first time it is imported: here, not inside a test.
	$(BIN)/python -c "import matplotlib.font_manager"
	touch $(STAMP)

# Byte code for every process the demo and the tests start, written once here: with PYTHONDONTWRITEBYTECODE set
# (as on some machines), each process would otherwise compile PAN's sources again (0.1 s of CPU per start).
# Incremental: only changed files are compiled again.
bytecode: $(STAMP)
	$(BIN)/python -m compileall -q -j 0 pan workers simulator benchmarks tests >/dev/null

demo: $(STAMP) java bytecode
	$(BIN)/pan demo --speedup 1 --dashboard 8765

test: $(STAMP) java sshd chromium bytecode
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

# The heavy tests, which CI leaves out: minutes-long replays and the benchmarks' acceptance runs (over an hour).
test-heavy: $(STAMP) java sshd chromium bytecode
	PAN_HEAVY=1 $(BIN)/python -m pytest -q -m heavy $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .

bench: $(STAMP) chromium
	command -v redis-server >/dev/null || { [ "$$(id -u)" = 0 ] && apt-get update -q && apt-get install -y -q redis-server; } \
		|| echo "redis-server missing: install it with 'sudo apt-get install -y redis-server' (pan bench redis will skip)"
	command -v ip >/dev/null || { [ "$$(id -u)" = 0 ] && apt-get update -q && apt-get install -y -q iproute2; } || true
	$(BIN)/pan bench runtime --write docs/benchmarks.md
	$(BIN)/pan bench memory --reps 5 --write docs/benchmarks.md
	$(BIN)/pan bench wire --reps 5 --write docs/benchmarks.md
	$(BIN)/pan bench security --reps 5 --write docs/benchmarks.md
	$(BIN)/pan bench ingest --reps 5 --write docs/benchmarks.md
	$(BIN)/pan bench simulation --minutes 2:3 10:1 --write docs/benchmarks.md
	$(BIN)/pan bench simulate --reps 5 --write docs/benchmarks.md
	$(BIN)/pan bench ordering --reps 5 --write docs/ordering.md
	rm -rf $(BENCH_DATA) && $(BIN)/pan generate --minutes 5 --seed 2013 --out $(BENCH_DATA)
	$(BIN)/pan bench ball $(BENCH_DATA) --seconds 120 --reps 5 --write docs/benchmarks.md
	rm -rf $(BENCH_DATA)
	$(BIN)/pan bench fanout --write docs/benchmarks.md
	$(BIN)/pan bench fanout --clients 100,1000 --publishers 1,3 --rate 200 --seconds 4 --warmup 2 --reps 5 \
		--section fanout-bench-200 --write docs/benchmarks.md
	$(BIN)/pan bench redis --write docs/benchmarks.md
	$(BIN)/pan bench network --write docs/benchmarks.md
	$(BIN)/pan bench cluster --write docs/benchmarks.md
	$(BIN)/pan bench query-delay --write docs/benchmarks.md
	$(BIN)/pan bench distribution --write docs/benchmarks.md
	$(BIN)/pan bench replay --per-worker --profile 20 --write docs/benchmarks.md
	$(BIN)/pan bench floor --reps 5 --write docs/benchmarks.md
	$(BIN)/pan bench arrays --reps 5 --write docs/benchmarks.md
	$(BIN)/pan bench chaos --write docs/benchmarks.md
	$(BIN)/pan bench ordering-modes --write docs/ordering.md
	$(BIN)/pan bench speculation --write docs/benchmarks.md
	$(BIN)/pan bench dashboard --write docs/benchmarks.md
	$(BIN)/pan bench fullgame --write docs/benchmarks.md
	$(BIN)/pan bench policies --out docs/policies.json

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache $(BENCH_DATA)
