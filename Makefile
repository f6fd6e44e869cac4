# shardflow developer commands. Fresh machine: `make run`, then `make test`.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
SNAKEMAKE := $(BIN)/snakemake
CORES ?= all
# The targets' variables come from the command line (make evaluate-beir DATA=... NAME=...),
# never from the shell's environment: WSL sets NAME to the host name, and a DATA or MODEL
# exported for another tool would change what a target runs without a word. Emptied and
# unexported, not `undefine`d, which GNU make 3.81 (macOS's /usr/bin/make) lacks: their
# defaults below are given as $(or $(X),default), since an empty X counts as set for ?=.
TARGET_VARS := DATA MODEL NAME ID ARTICLE REFERENCE METHOD STORED STORED_FORMAT SPLIT SPLITTER REFERENCE_FORMAT CHUNKS \
  DROP_IDENTICAL_IDS SWEEP DRY_RUN TORCH_INDEX A B JSON CONFIG GPUS STORAGE GPU_PEAK_TFLOPS MFU Q QUERIES K DATASET OUT TEXT \
  QUERY FIRST
$(foreach v,$(TARGET_VARS),$(if $(filter environment,$(origin $(v))),$(eval $(v) :=)$(eval unexport $(v))))
# A yes/no variable (JSON=, DRY_RUN=) is yes unless empty, 0, no or false: JSON=0 printed
# JSON, and DRY_RUN=0 made no move.
yes = $(filter-out 0 no No NO false False FALSE,$(1))
# Nothing at run time or in tests downloads from a model hub.
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export HF_DATASETS_OFFLINE := 1
export PIP_DISABLE_PIP_VERSION_CHECK := 1
# Shell rules (train) run `python`: the venv's, without activating it.
export PATH := $(abspath $(BIN)):$(PATH)

.PHONY: help setup run report estimate status compare search hits dag rulegraph test test-fast test-faults test-aot test-unit test-workflow test-cluster lint fmt bench clean evaluate-beir evaluate-summaries reproduce-arguana reproduce-shakespeare sweep sweep-adopt

help:
	@echo "make run    install into .venv and run the embedding workflow on the demo corpus"
	@echo "make test   the whole test suite (unit, workflow, SLURM / S3 / Kubernetes stand-in)"
	@echo "make test-fast  unit tests and dry runs only (the edit loop, about 3 minutes)"
	@echo "make test-faults  the fault matrix with five seeds, and its extended configs (every rule SIGKILLed, reruns compared)"
	@echo "make test-aot     compile_mode aot's tests with AOTInductor's real compile and load (make test stands in for them)"
	@echo "make estimate  GPU-hours, cost, wall time and disk of the configured run, before it runs (CONFIG=, GPUS=, GPU_PEAK_TFLOPS=, MFU=; installs .venv only if missing)"
	@echo "make status  where a running or stopped run stands: jobs, records, time left, cost so far, failures (CONFIG=, GPUS=, STORAGE=s3://... for an eks run; installs .venv only if missing)"
	@echo "make compare A=<provenance.json> B=<provenance.json>  why two runs differ, outputs first (JSON=1)"
	@echo "make search Q='a question'  the run's documents nearest to it (QUERIES=file, K=10, DATASET=, CONFIG=, MODEL=, JSON=1, OUT=)"
	@echo "make hits  task search's hits with their texts, nothing embedded (QUERY=<id>[,<id>...] or FIRST=5, K=, DATASET=, CONFIG=, JSON=1)"
	@echo "make dag    write dag.svg (graphviz) of the configured workflow"
	@echo "make lint   snakemake --lint, snakefmt --check and ruff check (make fmt fixes what it can)"
	@echo "make bench  CPU engine benchmark against sentence-transformers"
	@echo "make sweep NAME=<name>  a parameter sweep of config/sweeps/ (prints its table's path last)"
	@echo "make sweep-adopt SWEEP=<name>  after a key was added to or removed from a finished sweep's grid: move its finished jobs to their new point ids instead of rerunning them (CONFIG=, DRY_RUN=1)"
	@echo "make report  bring the run up to date and write report.html (its first page: results/report.rst)"
	@echo "make evaluate-beir DATA=<BEIR folder>  retrieval metrics of a BEIR data set (make evaluate-beir: its variables)"
	@echo "make evaluate-summaries DATA=<jsonl[.gz]>  summaries scored with ROUGE (make evaluate-summaries: its variables)"
	@echo "make reproduce-arguana | reproduce-shakespeare  a published number through the workflow (needs ../shared/data)"
	@echo "make rulegraph  write rulegraph.svg; make fmt  snakefmt and ruff --fix; make clean  remove results, logs, report.html and .snakemake"

# The venv is rebuilt when the lock file or the package metadata change.
# Bytecode is compiled on every core after the install (pip compiles one file at a
# time): 47 s instead of 59 s for the lock on a 2-core machine. A few files do not
# compile under this Python (torch's helpers in 3.12 syntax): pip passes over them
# silently, and so does this.
#
# TORCH_INDEX=<pip index URL> (make run TORCH_INDEX=https://download.pytorch.org/whl/cpu):
# torch comes from that index first, at the lock's version, and the lock then finds its pin
# met (torch==2.13.0 takes 2.13.0+cpu). PyPI's torch for Linux is the CUDA build, which
# brings about 5 GB of NVIDIA libraries a CPU-only machine never loads; where pip already
# offers the CPU wheel (a wheelhouse in its config, as on the CI machine), nothing is needed.
TORCH_PIN = $(shell sed -n 's/^torch==//p' requirements/lock.txt)
$(VENV)/.installed: requirements/lock.txt pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(if $(TORCH_INDEX),$(BIN)/pip install --quiet --no-compile --index-url $(TORCH_INDEX) torch==$(TORCH_PIN))
	$(BIN)/pip install --quiet --no-compile -r requirements/lock.txt
	$(BIN)/python -m compileall -q -j 0 $(VENV)/lib >/dev/null || true
	$(BIN)/pip install --quiet --no-deps --no-build-isolation -e .
	touch $@

# Snakemake looks profiles up in ./NAME, not profiles/NAME: link them so that
# `snakemake --profile local` works as typed from the repo root.
PROFILE_LINKS := local slurm eks
#
# The package's bytecode is compiled here, for every job to read: the editable install
# compiles none, and where PYTHONDONTWRITEBYTECODE is set (as in many containers, and on
# the CI machine) every Python process compiled each shardflow module it imported again,
# about 0.15 s of each Snakemake job and dry run (`snakemake -n`: 2.30 s -> 2.10 s).
# Up to date, this takes 0.05 s; a stale file is recompiled (Python checks each source's
# time and size against its bytecode, so an edit is never run from an old copy). With -q
# it prints only a module that does not compile (file, line, error), and setup stops there.
setup: $(VENV)/.installed
	@$(BIN)/python -m compileall -q shardflow
	@for p in $(PROFILE_LINKS); do \
	  if [ -d profiles/$$p ] && [ ! -e $$p ]; then ln -s profiles/$$p $$p; fi; \
	done
	@command -v dot >/dev/null || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing graphviz (dot) for make dag"; \
	    (apt-get install -y -qq graphviz >/dev/null 2>&1 || \
	     (apt-get update -qq >/dev/null && apt-get install -y -qq --no-install-recommends graphviz >/dev/null)); \
	  else echo "note: graphviz 'dot' is missing; install it for make dag"; fi; }

run: setup
	$(SNAKEMAKE) --profile profiles/local --cores $(CORES)
	$(SNAKEMAKE) --profile profiles/local --report report.html
	@echo "merged embeddings: results/*/embeddings.npy; verification: results/*/verification.json; report: report.html"

# The first page (results/report.rst) is the last run's: the run is brought up to date
# for this config first (nothing to do after `make run`, the first page at most).
report: setup
	$(SNAKEMAKE) --profile profiles/local --cores $(CORES)
	$(SNAKEMAKE) --profile profiles/local --report report.html

# What the configured run would take, before any GPU is rented: per data set and GPU
# stage its jobs, records, rate (measured by an earlier run here, else assumed, and
# said so), GPU-hours, cost, wall time and disk (shardflow.workflow.estimate). Runs no
# job. CONFIG=my.yaml (or "a.yaml b.yaml", merged in order); GPUS=N for the wall time
# (default: this host's GPUs, as the local profile counts them); GPU_PEAK_TFLOPS=X and
# MFU=F: the GPU assumed for training without a measured run (its dense bf16 peak, the
# share of it used; defaults named in the output).
# estimate and status need the venv only: installed where there is none, never updated
# (no pip under running jobs when lock.txt or pyproject.toml changed, no graphviz check on
# each `watch make status`); `make setup` updates it.
INSTALLED_IF_MISSING := $(if $(wildcard $(VENV)/.installed),,$(VENV)/.installed)
estimate: $(INSTALLED_IF_MISSING)
	$(BIN)/python -m shardflow.cli estimate $(if $(CONFIG),--configfile $(CONFIG)) $(if $(GPUS),--gpus $(GPUS)) \
		$(if $(GPU_PEAK_TFLOPS),--gpu-peak-tflops $(GPU_PEAK_TFLOPS)) $(if $(MFU),--mfu $(MFU))

# Where the configured run stands, from the files here (shardflow.workflow.status): per
# data set and GPU stage, jobs done / running / stalled / failed / retrying / waiting, records, rate,
# time left, GPU-hours and cost so far, each failed job's error and log. Read-only and
# cheap: `watch make status`. CONFIG= as the run's --configfile; GPUS=N for the time left;
# STORAGE=s3://<bucket>/<prefix> for a run with S3 as its default storage (the eks profile).
status: $(INSTALLED_IF_MISSING)
	$(BIN)/python -m shardflow.cli status $(if $(CONFIG),--configfile $(CONFIG)) $(if $(GPUS),--gpus $(GPUS)) \
		$(if $(STORAGE),--storage-prefix $(STORAGE))

# Why two runs differ, from their records (shardflow.workflow.compare): whether the
# outputs are the same bytes, then what could have changed them (inputs, config, models,
# the checkout, packages, Python, platform, GPU, CUDA), each group listing only what
# differs. A=, B=: results/<dataset>/provenance.json of each run; JSON=1 prints it all as
# JSON. The command's exit status is 0 where the outputs are identical, 1 where they
# differ, 2 for a record it cannot read; make turns either failure into its own 2.
compare: $(INSTALLED_IF_MISSING)
	@test -n "$(A)" -a -n "$(B)" || { echo "usage: make compare A=<provenance.json> B=<provenance.json> [JSON=1]" >&2; exit 2; }
	@$(BIN)/python -m shardflow.cli compare "$(A)" "$(B)" $(if $(call yes,$(JSON)),--json)

# The documents of a finished run nearest to each query (shardflow.workflow.search): the
# queries embedded with the run's own model and settings (its provenance record), searched
# exactly, each hit shown with its text. Q='text' (a query), QUERIES=<file or glob> (read
# as input.path is: jsonl, csv, tsv, parquet, text; ids from `id`, texts from `text`, or
# the fields ID= and TEXT= name), K=
# hits per query (10), DATASET= (default: the config's), CONFIG= as the run's --configfile,
# MODEL= the run's model where it lies now if it moved (default, the other targets' own,
# leaves the run's); JSON=1 prints JSON lines, OUT=file
# writes them there. The values reach the command through the environment, as typed: a
# query may hold $, quotes or backticks, a path spaces; CONFIG= is split at spaces, as for
# the other targets (CONFIG="a.yaml b.yaml").
search: export SHARDFLOW_SEARCH_Q = $(value Q)
search: export SHARDFLOW_SEARCH_QUERIES = $(value QUERIES)
search: export SHARDFLOW_SEARCH_DATASET = $(value DATASET)
search: export SHARDFLOW_SEARCH_CONFIG = $(value CONFIG)
search: export SHARDFLOW_SEARCH_MODEL = $(value MODEL)
search: export SHARDFLOW_SEARCH_OUT = $(value OUT)
search: export SHARDFLOW_SEARCH_ID = $(value ID)
search: export SHARDFLOW_SEARCH_TEXT = $(value TEXT)
search: $(INSTALLED_IF_MISSING)
	@test -n "$$SHARDFLOW_SEARCH_Q$$SHARDFLOW_SEARCH_QUERIES" || { echo "usage: make search Q='a query' | QUERIES=<file> [ID=field] [TEXT=field] [K=10] [DATASET=name] [CONFIG=file] [MODEL=folder] [JSON=1] [OUT=file]" >&2; exit 2; }
	@$(BIN)/python -m shardflow.cli search $(if $(value Q),--query "$$SHARDFLOW_SEARCH_Q") \
		$(if $(value QUERIES),--queries "$$SHARDFLOW_SEARCH_QUERIES") $(if $(K),--top-k $(K)) \
		$(if $(value ID),--id-field "$$SHARDFLOW_SEARCH_ID") $(if $(value TEXT),--text-field "$$SHARDFLOW_SEARCH_TEXT") \
		$(if $(value DATASET),--dataset "$$SHARDFLOW_SEARCH_DATASET") $(if $(value CONFIG),--configfile $$SHARDFLOW_SEARCH_CONFIG) \
		$(if $(filter-out default,$(value MODEL)),--model "$$SHARDFLOW_SEARCH_MODEL") $(if $(call yes,$(JSON)),--json) $(if $(value OUT),--out "$$SHARDFLOW_SEARCH_OUT")

# Task search's hits (results/<dataset>/search/hits.parquet) with their texts, read
# back from the run's chunks, nothing embedded (shardflow.workflow.search.stored_hits):
# QUERY=<id> (several at commas: QUERY=a,b) shows those queries' hits, in that order,
# else FIRST=N the first N queries of the file (5); K= hits per query (default: all the
# file holds), DATASET= (default: the config's), CONFIG= as the run's --configfile, JSON=1
# prints JSON lines. The values reach the command through the environment, as make
# search's do: a query id may hold $, quotes or spaces.
hits: export SHARDFLOW_HITS_QUERY = $(value QUERY)
hits: export SHARDFLOW_HITS_FIRST = $(value FIRST)
hits: export SHARDFLOW_HITS_K = $(value K)
hits: export SHARDFLOW_HITS_DATASET = $(value DATASET)
hits: export SHARDFLOW_HITS_CONFIG = $(value CONFIG)
hits: $(INSTALLED_IF_MISSING)
	@$(BIN)/python -m shardflow.cli hits $(if $(value QUERY),--query "$$SHARDFLOW_HITS_QUERY") \
		$(if $(value FIRST),--first "$$SHARDFLOW_HITS_FIRST") $(if $(value K),--top-k "$$SHARDFLOW_HITS_K") \
		$(if $(value DATASET),--dataset "$$SHARDFLOW_HITS_DATASET") $(if $(value CONFIG),--configfile $$SHARDFLOW_HITS_CONFIG) \
		$(if $(call yes,$(JSON)),--json)

# pipefail: a Snakemake error (a bad config) fails the target instead of writing an
# empty SVG; the SVG is replaced only when both steps succeed.
# CONFIG=my.yaml: the DAG of your config (default: the shipped one).
dag: setup
	set -o pipefail; $(SNAKEMAKE) --dag $(if $(CONFIG),--configfile $(CONFIG)) | dot -Tsvg > dag.svg.tmp && mv dag.svg.tmp dag.svg || { rm -f dag.svg.tmp; exit 1; }
	@echo "wrote dag.svg"

rulegraph: setup
	set -o pipefail; $(SNAKEMAKE) --rulegraph | dot -Tsvg > rulegraph.svg.tmp && mv rulegraph.svg.tmp rulegraph.svg || { rm -f rulegraph.svg.tmp; exit 1; }
	@echo "wrote rulegraph.svg"

lint: setup
	$(SNAKEMAKE) --lint
	$(BIN)/snakefmt --check Snakefile rules/
	$(BIN)/ruff check .

fmt: setup
	$(BIN)/snakefmt Snakefile rules/
	$(BIN)/ruff check --fix .

# Two pytest workers (pytest-xdist): workflow and cluster tests spend much of their
# time waiting on subprocesses and schedulers. `--dist loadfile` keeps each test file on
# one worker, so a module's shared workflow run (a module fixture) runs once and the
# SLURM tests share one cluster. (pytest-xdist 3.8's `loadgroup` does not group under
# pytest 9: it renames node ids through an attribute pytest 9 no longer reads, so every
# test was its own group and module fixtures ran once per worker.)
# Files go to workers in the order given (--no-loadscope-reorder; xdist would otherwise
# hand out the files with the most tests first, which leaves the long workflow and
# cluster files for last and one worker busy alone at the end): the slow folders first,
# the many short unit files last to fill the gaps. tests/unit/test_repository.py checks
# that every folder of tests is listed.
XDIST ?= -n 2 --dist loadfile --no-loadscope-reorder
TEST_FOLDERS := tests/cluster tests/faults tests/workflow tests/unit
test: setup
	$(BIN)/python -m pytest -rA --durations=25 $(XDIST) $(TEST_FOLDERS)

# The fault matrix at a larger size: five seeds, half of the faults kill Snakemake itself,
# and the extended matrix (split_source, a sweep, stored summaries, verify_reproduction:
# a second config; the embed, retrieval and summarise sweeps' rules: a third; make test
# skips both); the per-rule table goes to fault-report.json
# (tests/faults/test_fault_matrix.py).
FAULT_SEEDS ?= 1,2,3,4,5
# compile_mode aot's tests with AOTInductor's real compile and load (about 30 s); `make
# test` runs them with a stand-in for those two calls (tests/unit/embed/test_aot.py).
test-aot: setup
	SHARDFLOW_AOT_BUILD=1 $(BIN)/python -m pytest -q -p no:cacheprovider tests/unit/embed/test_aot.py

test-faults: setup
	SHARDFLOW_FAULT_SEEDS=$(FAULT_SEEDS) SHARDFLOW_FAULT_CONTROLLER_SHARE=0.5 SHARDFLOW_FAULT_EXTENDED=1 \
	SHARDFLOW_FAULT_REPORT=$(abspath fault-report.json) \
	  $(BIN)/python -m pytest -q -s -p no:cacheprovider tests/faults

# The edit loop: unit tests and parse-only workflow checks (dry runs, DAG, lint).
test-fast: setup
	$(BIN)/python -m pytest -q $(XDIST) -m "not workflow or dryrun" tests/unit tests/workflow

test-unit: setup
	$(BIN)/python -m pytest -q tests/unit

test-workflow: setup
	$(BIN)/python -m pytest -rA tests/workflow

test-cluster: setup
	$(BIN)/python -m pytest -rA tests/cluster

bench: setup
	$(BIN)/python benchmarks/bench_engine.py --texts demo --threads 2

# Evaluate any BEIR folder: make evaluate-beir DATA=<folder> [MODEL=<name or path>] [NAME=<name>]
#   [SPLIT=test|dev|train] (qrels/<split>.tsv; default test)
#   [CHUNKS=N|auto] (corpus chunks, embed jobs; default: the config's retrieval.n_chunks)
# Another split of the same folder writes to the same results/<name>/: give NAME= to keep both.
# Hits whose doc id equals the query id are dropped, as MTEB does (DROP_IDENTICAL_IDS=false to keep them).
DROP_IDENTICAL_IDS := $(or $(DROP_IDENTICAL_IDS),true)
MODEL := $(or $(MODEL),default)
evaluate-beir: SPLIT := $(or $(SPLIT),test)
evaluate-beir: setup
	@test -n "$(DATA)" || { echo "usage: make evaluate-beir DATA=<BEIR folder> [MODEL=<name or path>] [NAME=<name>] [SPLIT=<test|dev|train>] [CHUNKS=<n|auto>] [DROP_IDENTICAL_IDS=<true|false>]" >&2; exit 2; }
	@name="$(or $(NAME),$$(basename "$$(cd "$(DATA)" && pwd)" | tr -c 'A-Za-z0-9_.\n-' '_'))"; \
	  cfg=".snakemake/shardflow/evaluate-beir-$$name.yaml"; mkdir -p "$$(dirname "$$cfg")"; \
	  $(BIN)/python -m shardflow.cli beir-config --data "$(DATA)" --name "$$name" --model "$(MODEL)" \
	    --split "$(SPLIT)" --drop-identical-ids "$(DROP_IDENTICAL_IDS)" --chunks "$(CHUNKS)" --out "$$cfg" >&2 && \
	  $(SNAKEMAKE) "results/$$name/retrieval/metrics.json" --profile profiles/local --cores $(CORES) --configfile "$$cfg" >&2 && \
	  echo "results/$$name/retrieval/metrics.json"

# Summarise a JSONL(.gz) of articles and score the summaries against its references (ROUGE):
#   make evaluate-summaries DATA=<jsonl[.gz]> [METHOD=lead|extractive|abstractive|stored] [MODEL=<folder or hub name>]
#     [NAME=<name>] [ID=id] [ARTICLE=article] [REFERENCE=highlights] [REFERENCE_FORMAT=prose|tokenised]
#     [SPLITTER=punctuation|prose] [STORED=<field, a.b or a.*>] [STORED_FORMAT=prose|tokenised] [CHUNKS=auto|N]
# METHOD=stored scores summaries already in the file (STORED=system_summaries.* scores every system);
# STORED_FORMAT= says how ROUGE-Lsum splits them into sentences (default: as REFERENCE_FORMAT).
# MODEL= is abstractive's model, or extractive's sentence encoder (default all-MiniLM-L6-v2); a
# variable the method does not read (MODEL= under lead or stored, STORED= or STORED_FORMAT= without
# METHOD=stored) is an error, not dropped.
# CNN/DailyMail highlights are tokenised (" . " between sentences): REFERENCE_FORMAT=tokenised.
# The last line printed is the metrics JSON path.
METHOD := $(or $(METHOD),lead)
REFERENCE_FORMAT := $(or $(REFERENCE_FORMAT),prose)
SPLITTER := $(or $(SPLITTER),punctuation)
evaluate-summaries: CHUNKS := $(or $(CHUNKS),auto)
evaluate-summaries: setup
	@test -n "$(DATA)" || { echo "usage: make evaluate-summaries DATA=<jsonl[.gz]> [METHOD=<lead|extractive|abstractive|stored>] [MODEL=<folder or name>] [STORED=<field, a.b or a.*>] [STORED_FORMAT=<prose|tokenised>] [REFERENCE_FORMAT=<prose|tokenised>] [SPLITTER=<punctuation|prose>] [NAME=<name>] [ID=<id field>] [ARTICLE=<article field>] [REFERENCE=<reference field>] [CHUNKS=<n|auto>]" >&2; exit 2; }
	@name="$(or $(NAME),$$(basename "$(DATA)" | sed 's/\.gz$$//; s/\.jsonl$$//' | tr -c 'A-Za-z0-9_.\n-' '_')-$(METHOD))"; \
	  cfg=".snakemake/shardflow/evaluate-summaries-$$name.yaml"; mkdir -p "$$(dirname "$$cfg")"; \
	  $(BIN)/python -m shardflow.cli summaries-config --data "$(DATA)" --name "$$name" --method "$(METHOD)" \
	    --model "$(MODEL)" --stored "$(STORED)" --stored-format "$(STORED_FORMAT)" --id "$(or $(ID),id)" --article "$(or $(ARTICLE),article)" \
	    --reference "$(or $(REFERENCE),highlights)" --reference-format "$(REFERENCE_FORMAT)" --splitter "$(SPLITTER)" \
	    --chunks "$(CHUNKS)" --out "$$cfg" >&2 && \
	  $(SNAKEMAKE) "results/$$name/summarise/metrics.json" --profile profiles/local --cores $(CORES) --configfile "$$cfg" >&2 && \
	  $(BIN)/python -m shardflow.cli warnings "results/$$name/summarise/metrics.json" && \
	  echo "results/$$name/summarise/metrics.json"

# $(call need_data,<command>,<VAR>): a shell line that stops, naming VAR, where the data
# it names is missing (a clone without ../shared), before Snakemake's parse would fail on
# it with a traceback that names neither the target nor the variable.
need_data = if [ ! -e "$($(2))" ]; then \
	    echo "make $(1): no data at $($(2)); give it: make $(1) $(2)=<path>" >&2; exit 2; fi;

# Opt-in: reproduce MTEB's published ArguAna nDCG@10 (0.50167 +- 0.001) with the real
# workflow; fails with a table of expected vs got. Needs ../shared/data/arguana (or ARGUANA=).
# Writes results/arguana-minilm/ (fp32), not evaluate-beir's results/arguana/ (dtype auto).
ARGUANA ?= ../shared/data/arguana
reproduce-arguana: setup
	@$(call need_data,reproduce-arguana,ARGUANA) start=$$(date +%s); \
	  $(SNAKEMAKE) results/arguana-minilm/reproduction.json --profile profiles/local --cores $(CORES) \
	    --configfile config/reproduce/arguana-minilm.yaml --config 'retrieval={path: "$(ARGUANA)"}' && \
	  echo "reproduce-arguana: passed in $$(( $$(date +%s) - start )) s; metrics: results/arguana-minilm/retrieval/metrics.json"

# Opt-in: reproduce nanoGPT's Shakespeare-char CPU run (best validation loss 1.90 +- 0.03) with
# the real workflow; fails with a table of expected vs got. The last line printed is the
# path of the run's metrics JSON. Needs the tinyshakespeare input.txt (or TINYSHAKESPEARE=).
TINYSHAKESPEARE ?= ../shared/data/tinyshakespeare/input.txt
reproduce-shakespeare: setup
	@$(call need_data,reproduce-shakespeare,TINYSHAKESPEARE) start=$$(date +%s); \
	  $(SNAKEMAKE) results/shakespeare_char/reproduction.json --profile profiles/local --cores $(CORES) \
	    --configfile config/reproduce/shakespeare-char-cpu.yaml --config 'input={path: "$(TINYSHAKESPEARE)"}' >&2 && \
	  echo "reproduce-shakespeare: passed in $$(( $$(date +%s) - start )) s" >&2 && \
	  echo "results/shakespeare_char/train/metrics.json"

# Parameter sweeps shipped in config/sweeps/<NAME>.yaml: every point x seed runs as
# ordinary jobs of its stage, then one table (config/README.md, `sweeps`):
#   make sweep NAME=cnndm-lead-k|shakespeare-lr-layers|arguana-max-length|demo-token-budget [CORES=N]
# Re-running after adding a grid value or seed runs only the new jobs. Snakemake's
# output goes to stderr; the last line printed is the summary table's path
# (results/sweeps/<folder>/summary.parquet; runs.parquet, table.md, plots/ beside it).
# Data: ../shared/data (or CNNDM=<jsonl>, TINYSHAKESPEARE=<file>, ARGUANA=<folder>);
# demo-token-budget needs none (the demo corpus).
CNNDM ?= ../shared/data/cnndm-frank100/dev.jsonl
SWEEP_NAMES = $(sort $(basename $(notdir $(wildcard config/sweeps/*.yaml))))
SWEEP_DATA_cnndm-lead-k = input={path: "$(CNNDM)"}
SWEEP_DATA_shakespeare-lr-layers = input={path: "$(TINYSHAKESPEARE)"}
SWEEP_DATA_arguana-max-length = retrieval={path: "$(ARGUANA)"}
# The variable naming each shipped sweep's data, for a clear message when it is missing.
SWEEP_VAR_cnndm-lead-k = CNNDM
SWEEP_VAR_shakespeare-lr-layers = TINYSHAKESPEARE
SWEEP_VAR_arguana-max-length = ARGUANA
sweep: setup
	@case " $(SWEEP_NAMES) " in *" $(NAME) "*) ;; *) \
	  echo "usage: make sweep NAME=<$$(echo $(SWEEP_NAMES) | tr ' ' '|')> [CORES=N]" >&2; exit 2;; esac; \
	  $(if $(SWEEP_VAR_$(NAME)),$(call need_data,sweep NAME=$(NAME),$(SWEEP_VAR_$(NAME)))) \
	  cfg="config/sweeps/$(NAME).yaml"; \
	  table=$$($(BIN)/python -m shardflow.cli sweep-table "$$cfg") && \
	  $(SNAKEMAKE) "$$table" --profile profiles/local --cores $(CORES) --configfile "$$cfg" \
	    $(if $(SWEEP_DATA_$(NAME)),--config '$(SWEEP_DATA_$(NAME))') >&2 && \
	  echo "$$table"

# A key added to (or removed from) a finished sweep's grid renames every point, so every
# finished job would run again: this moves each job folder whose values are a current
# point's (the key's value the base's) to that point's id, with Snakemake's records of
# its outputs, so a job whose base value changed since it ran still reruns
# (shardflow.sweep.adopt; config/README.md, `sweeps`). CONFIG= as the run's --configfile
# (a sweep `make sweep NAME=` ran: its config/sweeps/<name>.yaml, unless CONFIG= is given);
# DRY_RUN=1 prints the moves and makes none. Refuses while a Snakemake run holds the
# working directory.
sweep-adopt: $(INSTALLED_IF_MISSING)
	@test -n "$(SWEEP)" || { echo "usage: make sweep-adopt SWEEP=<sweep name> [CONFIG=<file(s)>] [DRY_RUN=1]" >&2; exit 2; }
	$(BIN)/python -m shardflow.cli sweep-adopt "$(SWEEP)" \
	  $(if $(or $(CONFIG),$(wildcard config/sweeps/$(SWEEP).yaml)),--configfile $(or $(CONFIG),config/sweeps/$(SWEEP).yaml)) \
	  $(if $(call yes,$(DRY_RUN)),--dry-run)

clean:
	rm -rf results logs benchmarks/*/ resources/demo .snakemake report.html dag.svg rulegraph.svg
