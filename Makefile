# The whole workflow. Every target works from a fresh clone: the environment is created from
# the hashed lock files in requirements/ the first time it is needed.
#
#   make env [PYTHON=python3.12] [TORCH_INDEX=url]
#                                  the environment in .venv from the lock files requirements/*.txt
#                                  (hash-checked; Python >= 3.11); torch alone comes from
#                                  TORCH_INDEX, by default PyTorch's CPU index
#                                  (https://download.pytorch.org/whl/cpu); a CUDA build:
#                                  TORCH_INDEX=https://download.pytorch.org/whl/cu128; PyPI's own
#                                  torch (CUDA on Linux, ~3 GB of NVIDIA wheels): TORCH_INDEX=
#   make book                      execute all chapters (default profile) and build the HTML
#   make test                      the whole test suite (smoke execution, book build, browser),
#                                  in two lanes at once (TEST_LANES=1: one after the other)
#   make unit                      the tests without the book builds (`pytest -m "not book"`)
#   make execute PROFILE=smoke|default|paper DEVICE=auto|cpu|cuda [NOTEBOOKS="a b"]
#                [FORCE=1] [TIMEOUT=seconds per cell] [EXECUTOR=local|ray|slurm] [WORKERS=n|auto]
#                (training grids: MOE_GRID_EXECUTOR / MOE_GRID_WORKERS; ray: RAY_ADDRESS)
#   make html PROFILE=... [REPOSITORY=https://github.com/<owner>/<repo>]
#                                  build the HTML of a profile from its executed chapters
#                                  (with a repository: repository and launch buttons)
#   make student [PROFILE=...]     the student edition (solutions removed at build time)
#   make pdf [PROFILE=...]         the book as PDF, full and student editions, in build/PROFILE/pdf
#   make assignments               build the autograded assignments and self-check them (otter run),
#                                  in build/assignments: the teacher's, never published
#   make bench                     benchmarks (speed and scale, printed as ratios)
#   make gpu-check                 on a CUDA GPU (~8 min): CUDA tests, timed paper-grid probe, projected
#                                  grid time; report in build/gpu-check/report.json
#   make lab [PORT=8888]           JupyterLab on the chapters (MyST files open as notebooks)
#   make wheel                     the library's wheel in dist/ (pip install dist/moe_routing-*.whl);
#                                  needs only pip, not the book's environment
#   make floors                    (maintainers) the wheel with its lowest accepted dependency
#                                  releases in a fresh venv (build/floors), and the tests they run
#   make dist [PROFILE=...]        the release bundle: HTML (full, student), PDFs, wheel, assignments,
#                                  ledger.json, figures, MANIFEST -> dist/moe-routing-companion-VERSION/ + .tar.gz
#   make publish REMOTE=<git url>  push the public copy of the built HTML (autograders left out,
#                                  then checked for hidden tests and solutions) to gh-pages
#   make lock [UPGRADE=1]          (maintainers) recompile the lock files requirements/*.txt from
#                                  their inputs requirements/*.in with pip-compile (pip-tools),
#                                  keeping their versions (UPGRADE=1: the newest allowed)
#   make clean                     remove build/, book/_build and dist/ (not the environment)

SHELL       := /bin/bash
PYTHON      ?= python3
VENV        ?= .venv
PY          := $(VENV)/bin/python
STAMP       := $(VENV)/.installed
# The lock files, by purpose, in the order `make lock` compiles them (each at the versions of
# those before it): the library's dependencies, the book (chapters, tooling, tests), the
# cluster backends (Ray, submitit), the knowledge base's data sources. Their inputs: the
# requirements/*.in files beside them (the pyproject.toml lists they repeat, tests check it).
LOCKS       := $(addprefix requirements/,runtime.txt book.txt cluster.txt data.txt)
# torch's release: pinned in requirements/runtime.in, installed by a step of its own (below)
TORCH_VERSION := $(shell sed -n 's/^torch==\([^+ ;]*\).*/\1/p' requirements/runtime.in)
# Where torch alone is installed from (pip --index-url for that one package; everything else
# comes from PyPI). Empty: PyPI's torch.
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
PROFILE     ?= default
RESOLVED_DEVICE ?= $(DEVICE)
DEVICE      ?= auto
# The library's wheel (defined here: rule prerequisites are expanded when make reads them)
VERSION     := $(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml | head -1)
WHEEL       := dist/moe_routing-$(VERSION)-py3-none-any.whl
ALL_NOTEBOOKS := $(sort $(notdir $(basename $(filter-out notebooks/README.md,$(wildcard notebooks/*.md)))))
NOTEBOOKS   ?= $(ALL_NOTEBOOKS)
ifeq ($(PROFILE),default)
HTML_OUT    := book
else
HTML_OUT    := build/$(PROFILE)
endif

.PHONY: print-theory-notebooks book student assignments execute html test unit bench chromium env lock clean help lab wheel \
        floors publish pdf poppler gpu-check dist FORCE

help:
	@sed -n '/^#/!q;p' Makefile | sed 's/^# \{0,1\}//'

# --- environment ---------------------------------------------------------------------------
# The stamp is written (atomically, last) only after every install step succeeded, so an
# interrupted `make` leaves no half-valid environment behind: the next call redoes the install;
# a virtual environment whose pip does not run (interrupted creation) is recreated.
#
# Three steps, each a pip install:
#  1. torch, alone (--no-deps), from TORCH_INDEX (empty: pip's own index, PyPI). Not hash-checked,
#     and in no lock file: the build is the index's choice (2.13.0+cpu, 2.13.0+cu128, PyPI's
#     2.13.0), each a different file with its own hash, and PyPI's build is a different one again;
#     a lock per index, or hashes of every build in one, would tie the lock to indexes that
#     `make lock` may not reach. The release is pinned (requirements/runtime.in); TORCH_INDEX
#     names the index trusted for this one package. PyTorch's indexes also serve numpy, jinja2
#     and others, which is why no index of theirs is ever named for the rest.
#  2. the lock files, from PyPI, every file checked against its hash (--require-hashes): every
#     package but torch, torch's own dependencies included, as the CPU build requires them.
#  3. `torch==X` again: what this torch build needs beyond the lock -- nothing for a CPU build,
#     the NVIDIA libraries and triton for a CUDA one -- from PyPI, without hashes (the lock is
#     resolved for the CPU build, which has none of them).
# Then the two local packages (editable), and `pip check`. The index used is recorded in the
# stamp: naming another one (make env TORCH_INDEX=...) reinstalls torch from it; when none is
# named, a reinstall (a lock file changed) keeps the recorded one (ENV_TORCH_INDEX).
STAMP_INDEX := $(shell sed -n 's/^torch-index: //p' $(STAMP) 2>/dev/null)
ifneq ($(filter command line environment,$(origin TORCH_INDEX)),)
ENV_TORCH_INDEX := $(TORCH_INDEX)
ifneq ($(STAMP_INDEX),$(or $(TORCH_INDEX),pypi))
$(STAMP): FORCE
endif
else
ENV_TORCH_INDEX := $(if $(STAMP_INDEX),$(patsubst pypi,,$(STAMP_INDEX)),$(TORCH_INDEX))
endif
FORCE:

$(STAMP): $(LOCKS) requirements/runtime.in pyproject.toml tooling/pyproject.toml
	@py=$(PY); $$py -m pip --version >/dev/null 2>&1 || py=$(PYTHON); \
	$$py -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null || { \
	  echo "error: Python >= 3.11 is required (requires-python in pyproject.toml); $$py is" \
	    "$$($$py -c 'import platform; print(platform.python_version())' 2>/dev/null || echo 'not found');" \
	    "name another: make env PYTHON=python3.12 (with no $(VENV), or after rm -rf $(VENV))" >&2; exit 2; }
	@$(PY) -m pip --version >/dev/null 2>&1 || { rm -rf $(VENV) && $(PYTHON) -m venv $(VENV); }
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps \
	  $(if $(filter-out $(or $(ENV_TORCH_INDEX),pypi),$(STAMP_INDEX)),--force-reinstall) \
	  $(if $(ENV_TORCH_INDEX),--index-url '$(ENV_TORCH_INDEX)') 'torch==$(TORCH_VERSION)' || { \
	  echo "error: torch==$(TORCH_VERSION) could not be installed from TORCH_INDEX=$(or $(ENV_TORCH_INDEX),(PyPI));" \
	    "name a reachable index (make env TORCH_INDEX=<url>) or TORCH_INDEX= for the build on PyPI" >&2; \
	  exit 1; }
	$(PY) -m pip install --quiet --disable-pip-version-check --require-hashes $(addprefix -r ,$(LOCKS))
	$(PY) -m pip install --quiet --disable-pip-version-check 'torch==$(TORCH_VERSION)'
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation \
	  -e . -e ./tooling
	$(PY) -m pip check
	@{ sha256sum $(filter-out FORCE,$^) && echo "torch-index: $(or $(ENV_TORCH_INDEX),pypi)"; } > $@.tmp \
	  && mv $@.tmp $@

env: $(STAMP)

# Recompile the lock files (maintainers only; commit them with environment.yml and binder/, which
# are rewritten from them: tests/test_environment.py checks they agree) with pip-compile, from
# pip-tools (PIP_TOOLS, in a virtual environment of its own, build/lock-tools, made from the
# project's Python so that the lock is resolved for it). Each file keeps the versions it has
# unless UPGRADE=1; each is compiled at the versions of the files before it (its .in constrains
# it by them), so that a package shared by two files has one version. Hashes: every file of the
# release on the index (wheels for every platform, sdist). torch is resolved from TORCH_INDEX,
# the CPU build, for its dependencies, and left out (--unsafe-package torch: see `make env`);
# a lock that holds NVIDIA libraries was resolved against a CUDA torch and is refused. The lock
# files name no index (--no-emit-index-url): `make env` installs them from PyPI.
PIP_TOOLS  ?= pip-tools==7.7.0
LOCK_TOOLS := build/lock-tools
lock: $(STAMP)
	@$(LOCK_TOOLS)/bin/pip-compile --version 2>/dev/null | grep -qxF 'pip-compile, $(subst pip-tools==,version ,$(PIP_TOOLS))' || { \
	  rm -rf $(LOCK_TOOLS) && $(PY) -m venv $(LOCK_TOOLS) && \
	  $(LOCK_TOOLS)/bin/python -m pip install --quiet --disable-pip-version-check '$(PIP_TOOLS)'; }
	@for lock in $(LOCKS); do echo "pip-compile $${lock%.txt}.in -> $$lock"; \
	  CUSTOM_COMPILE_COMMAND='make lock' $(LOCK_TOOLS)/bin/pip-compile --quiet --generate-hashes \
	    --strip-extras --unsafe-package torch --no-emit-index-url --no-emit-find-links \
	    $(if $(TORCH_INDEX),--extra-index-url '$(TORCH_INDEX)') $(if $(filter 1 yes true,$(UPGRADE)),--upgrade) \
	    --output-file "$$lock" "$${lock%.txt}.in" || exit 1; done
	@! grep -qiE '^(nvidia-|triton==)' $(LOCKS) || { echo "error: the lock holds NVIDIA libraries:" \
	  "torch was resolved as a CUDA build; name a CPU index (make lock TORCH_INDEX=<url>)" >&2; exit 1; }
	$(PY) -m moe_book.environment

# --- execution -----------------------------------------------------------------------------
# Arguments are validated once, before anything runs; each chapter is its own target so that
# `make -j2 execute` runs two at a time. A failing chapter does not stop the others (-k); the
# report at the end lists failures and sets the exit status.
GRID_ENV = $(if $(EXECUTOR),MOE_GRID_EXECUTOR='$(EXECUTOR)') $(if $(WORKERS),MOE_GRID_WORKERS='$(WORKERS)')
execute: $(STAMP)
	@dev=$$($(GRID_ENV) \
	        $(PY) -m moe_book.pipeline validate --profile '$(PROFILE)' --device '$(DEVICE)' \
	        --print-device $(NOTEBOOKS)) || exit 2; \
	$(MAKE) --no-print-directory -k $(addprefix run-,$(NOTEBOOKS)) RESOLVED_DEVICE=$$dev; rc=$$?; \
	$(PY) -m moe_book.pipeline stage --profile '$(PROFILE)' >/dev/null || exit 1; \
	$(PY) -m moe_book.pipeline report --profile '$(PROFILE)' $(NOTEBOOKS) || exit 1; exit $$rc

run-%:
	@$(GRID_ENV) $(PY) -m moe_book.pipeline run --profile '$(PROFILE)' --device '$(RESOLVED_DEVICE)' \
	  $(if $(filter 1 yes true,$(FORCE)),--force) $(if $(TIMEOUT),--timeout '$(TIMEOUT)') $*

# REPOSITORY=https://github.com/<owner>/<repo> (or the environment variable BOOK_REPOSITORY_URL)
# gives the book a home: repository and issue buttons on every page, Binder and Colab launch
# links on every chapter (moe_book/home.py). Without it the book shows none.
HOME_ENV = $(if $(REPOSITORY),BOOK_REPOSITORY_URL='$(REPOSITORY)')

html: $(STAMP)
	@$(MAKE) --no-print-directory $(WHEEL)
	@$(PY) -m moe_book.pipeline validate --profile '$(PROFILE)' --device cpu >/dev/null
	@src=$$($(HOME_ENV) $(PY) -m moe_book.pipeline stage --profile '$(PROFILE)') && \
	$(PY) -m moe_book.jupyter_book build "$$src" --path-output '$(HTML_OUT)' -W --keep-going -q
	@echo "HTML: $(HTML_OUT)/_build/html/index.html"

# `make book` runs every chapter on one torch/BLAS thread per process, in two streams at once:
# the chapters that train grids of models (GRID_NOTEBOOKS), the training chapter first, alone
# (it trains all its runs in one pool, one per core, the bridge chapter's A-Fig. 2 runs among
# them), then the others together (the bridge chapter reads those runs back, and its own work,
# mostly one thread, fills what the two-hop grid's pool leaves of the cores); and
# beside them the others (Monte Carlo, quadrature, searches), BOOK_JOBS at a time, longest first
# (LONGEST_FIRST, measured on 2 cores; make -j takes them in order). Two streams, because each
# alone leaves cores idle: a grid chapter between and after its pools (evaluation, figures, the
# Hugging Face model), the theory chapters on their last chapter. Single-threaded processes
# share the cores without spinning (two processes of two OpenMP threads each on two cores
# spin: boundary mass took 272 s that way, 71 s on one thread beside another chapter; its
# numbers are the same). A failing chapter does not stop the others; the book is built only
# when every chapter is ok.
GRID_FIRST     := training
GRID_AFTER     := bridge two_hop
GRID_NOTEBOOKS := $(GRID_FIRST) $(GRID_AFTER)
LONGEST_FIRST  := landscape_multi boundary_mass construction landscape soft_to_hard
THEORY_NOTEBOOKS = $(strip $(foreach n,$(LONGEST_FIRST),$(filter $(n),$(ALL_NOTEBOOKS))) \
  $(filter-out $(GRID_NOTEBOOKS) $(LONGEST_FIRST),$(ALL_NOTEBOOKS)))
BOOK_JOBS   ?= 2
ONE_THREAD  := OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1
# glibc's allocator reuses freed blocks up to its 32 MiB mmap ceiling instead of unmapping
# them: the theory chapters allocate and free arrays of MBs thousands of times, and each fresh
# mapping faulted its pages in again (system time without arithmetic; the same numbers, bit
# for bit). benchmarks/bench_heap_reuse.py: 1.5 million minor faults to 0.1 million and 14 %
# less CPU on a critical-point search of the multi-region chapter
HEAP_REUSE  := MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=4294967296 MALLOC_TOP_PAD_=268435456
book: $(STAMP)
	@dev=$$($(GRID_ENV) $(PY) -m moe_book.pipeline validate --profile default \
	        --device '$(DEVICE)' --print-device $(ALL_NOTEBOOKS)) || exit 2; \
	export $(ONE_THREAD) $(HEAP_REUSE); \
	{ $(MAKE) --no-print-directory -k $(addprefix run-,$(filter $(GRID_FIRST),$(ALL_NOTEBOOKS))) \
	    PROFILE=default RESOLVED_DEVICE=$$dev; first=$$?; \
	  $(MAKE) --no-print-directory -k -j2 $(addprefix run-,$(filter $(GRID_AFTER),$(ALL_NOTEBOOKS))) \
	    PROFILE=default RESOLVED_DEVICE=$$dev && [ $$first = 0 ]; } & grids=$$!; \
	$(MAKE) --no-print-directory -k -j$(BOOK_JOBS) $(addprefix run-,$(THEORY_NOTEBOOKS)) \
	  PROFILE=default RESOLVED_DEVICE=$$dev; rc=$$?; \
	wait $$grids || rc=1; \
	$(PY) -m moe_book.pipeline stage --profile default >/dev/null || exit 1; \
	$(PY) -m moe_book.pipeline report --profile default $(ALL_NOTEBOOKS) || exit 1; exit $$rc
	@$(MAKE) --no-print-directory html PROFILE=default

# The student edition: the same executed chapters, every exercise solution cut from the sources
# before the build (not hidden by CSS), HTML in build/PROFILE/student/_build/html.
student:
	@$(MAKE) --no-print-directory execute PROFILE='$(PROFILE)'
	@$(MAKE) --no-print-directory $(WHEEL)
	@src=$$($(HOME_ENV) $(PY) -m moe_book.pipeline stage --profile '$(PROFILE)' --edition student) && \
	$(PY) -m moe_book.jupyter_book build "$$src" --path-output 'build/$(PROFILE)/student' -W --keep-going -q
	@echo "Student edition: build/$(PROFILE)/student/_build/html/index.html"

# The PDF editions (full and student): the one-page HTML build of each, printed by chromium.
pdf: chromium
	@$(MAKE) --no-print-directory execute PROFILE='$(PROFILE)'
	@$(MAKE) --no-print-directory $(WHEEL)
	@$(PY) -m moe_book.pdf --profile '$(PROFILE)'

# The autograders' torch comes from TORCH_INDEX too (the CPU build by default; graders are CPUs).
# They hold every hidden test: they stay here, in build/assignments, and are never published.
assignments: $(STAMP)
	@$(MAKE) --no-print-directory $(WHEEL)
	TORCH_INDEX='$(TORCH_INDEX)' $(PY) -m moe_book.assignments --check

# --- tests ---------------------------------------------------------------------------------
# A Chromium drives the rendered-book checks and prints the PDF: any one (moe_book.pdf's
# find_chromium: $CHROMIUM, then chromium, chromium-browser, google-chrome[-stable] on PATH, then
# Playwright's download). None found: as root Debian's 'chromium' is installed (said so);
# otherwise one line says what to install.
chromium: $(STAMP)
	@found=$$($(PY) -m moe_book.pdf --which-chromium 2>/dev/null); rc=$$?; \
	if [ $$rc = 0 ]; then echo "Chromium: $$found"; \
	elif [ $$rc = 3 ] && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "no Chromium found: installing Debian's package 'chromium' (apt-get install chromium)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null \
	    && echo "Chromium: $$($(PY) -m moe_book.pdf --which-chromium)"; \
	else $(PY) -m moe_book.pdf --which-chromium >/dev/null; exit 1; fi

# poppler's pdftotext reads the PDFs back in the tests. Like Chromium it is optional: when it is
# missing, as root with apt-get Debian's 'poppler-utils' is installed (said so); otherwise one line
# says where to get it and this rule fails, which `make test` turns into skipped tests (below).
POPPLER_HOWTO := Debian/Ubuntu: apt-get install poppler-utils; Fedora: dnf install poppler-utils; \
  macOS: brew install poppler; conda: conda install -c conda-forge poppler
poppler:
	@if command -v pdftotext >/dev/null 2>&1; then echo "pdftotext: $$(command -v pdftotext)"; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "no pdftotext found: installing Debian's package 'poppler-utils' (apt-get install poppler-utils)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq poppler-utils >/dev/null \
	    && echo "pdftotext: $$(command -v pdftotext)"; \
	else echo "no pdftotext found (poppler); install it ($(POPPLER_HOWTO))" >&2; exit 1; fi

# The numerical tests run a second time under other CPU kernel dispatch levels than the
# machine's own (MKL's SSE4.2 BLAS, torch's scalar kernels): a result that holds only for one
# kind of CPU (an exact comparison of two code paths) fails here, not on the next machine.
# They are the files marked `kernels` (tests whose results the kernels compute); the tooling,
# classroom, ledger, configuration, CLI, data-loader and executor tests, whose results no
# kernel computes, run once. tests/test_ci_contract.py fails when a test file importing the
# numerical library has neither the mark nor a written reason for its absence.
# NumPy's OpenBLAS (the boundary and landscape code is NumPy) takes its kernel from
# OPENBLAS_CORETYPE: Prescott selects its SSE kernels, valid on every x86-64 CPU.
OTHER_DISPATCH := MKL_ENABLE_INSTRUCTIONS=SSE4_2 ATEN_CPU_CAPABILITY=default OPENBLAS_CORETYPE=Prescott

# Without a Chromium the browser checks are skipped (listed, with the reason, at the end of the
# run) and everything else runs; MOE_REQUIRE_BROWSER=1 (CI) makes a missing browser an error.
# Likewise without poppler's pdftotext the PDF tests that read its text are skipped;
# MOE_REQUIRE_POPPLER=1 (CI) makes that an error.
#
# The suite runs in two lanes at once, one per core, every process on one torch/BLAS thread
# (OpenMP threads spinning on shared cores slow each other down many times over): the book lane
# (BOOK_TESTS: the smoke book's execution and HTML, the student edition, the PDF, the browser
# checks, the release bundle), whose output goes to TEST_BOOK_LOG and is printed when it ends,
# and the unit lane (every other test, then the kernel tests again under OTHER_DISPATCH, then
# the assignments, built and graded in temporary folders; about 16 minutes each on 2 cores,
# where the book lane took 19 with the assignments and the unit lane 13). The lanes share
# nothing but the library's wheel, built once before they start (every later `make wheel` finds
# it up to date): the unit tests build their projects under pytest's temporary folders.
# TEST_LANES=1 runs the two one after the other.
BOOK_TESTS    := book
TEST_BOOK_LOG := build/test-book.log
TEST_LANES    ?= 2
test: $(STAMP)
	$(VENV)/bin/ruff check src tooling tests benchmarks book/_ext scripts
	$(PY) -m moe_book.chapter_lint
	@$(MAKE) --no-print-directory chromium || { \
	  if [ "$${MOE_REQUIRE_BROWSER:-0}" = 1 ]; then echo "error: MOE_REQUIRE_BROWSER=1 and no usable Chromium" >&2; exit 1; fi; \
	  echo "warning: no Chromium: the browser checks and the PDF tests are SKIPPED (listed at the end); MOE_REQUIRE_BROWSER=1 makes this an error"; }
	@$(MAKE) --no-print-directory poppler || { \
	  if [ "$${MOE_REQUIRE_POPPLER:-0}" = 1 ]; then echo "error: MOE_REQUIRE_POPPLER=1 and no pdftotext" >&2; exit 1; fi; \
	  echo "warning: no pdftotext: the PDF tests that read its text are SKIPPED (listed at the end); MOE_REQUIRE_POPPLER=1 makes this an error"; }
	@$(MAKE) --no-print-directory $(WHEEL)
	@mkdir -p $(dir $(TEST_BOOK_LOG)); export $(ONE_THREAD) $(HEAP_REUSE); \
	book_lane() { $(PY) -m pytest -q -rs -p no:cacheprovider -m "$(BOOK_TESTS)" > $(TEST_BOOK_LOG) 2>&1; }; \
	if [ '$(TEST_LANES)' = 1 ]; then book_lane; brc=$$?; book=; \
	else echo "== the book tests ($(BOOK_TESTS)) run beside the others; their log: $(TEST_BOOK_LOG)"; \
	  book_lane & book=$$!; trap 'kill $$book 2>/dev/null' INT TERM; fi; \
	$(PY) -m pytest -q -rs -m "not ($(BOOK_TESTS)) and not assignments"; rc=$$?; \
	echo "== numerical tests again under $(OTHER_DISPATCH)"; \
	env $(OTHER_DISPATCH) $(PY) -m pytest -q -p no:cacheprovider -m "kernels and not book and not assignments and not training" || rc=1; \
	echo "== the assignments, built and graded"; \
	$(PY) -m pytest -q -rs -p no:cacheprovider -m "assignments and not ($(BOOK_TESTS))" || rc=1; \
	if [ -n "$$book" ]; then wait $$book; brc=$$?; fi; \
	echo "== the book tests ($(BOOK_TESTS)), exit status $$brc"; cat $(TEST_BOOK_LOG); \
	[ $$rc = 0 ] && [ $$brc = 0 ]

unit: $(STAMP)
	$(PY) -m pytest -q -m "not book"

bench: $(STAMP)
	@for b in benchmarks/bench_*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

# Exits 2 at once without CUDA; `$(PY) scripts/gpu_check.py --device cpu --quick` checks it on a CPU.
gpu-check: $(STAMP)
	$(PY) scripts/gpu_check.py

# JupyterLab in the project environment, local only. jupytext opens every chapter
# (notebooks/*.md) as a notebook and saves it back as MyST; the kernel is this environment's,
# so `import moe_routing` works; the assignments' student notebooks are under build/assignments.
PORT ?= 8888
lab: $(STAMP)
	@mkdir -p $(VENV)/share/jupyter/lab/settings
	@cp tooling/jupyterlab-overrides.json $(VENV)/share/jupyter/lab/settings/overrides.json
	$(VENV)/bin/jupyter lab --ip=127.0.0.1 --port=$(PORT) --no-browser $(if $(filter 0,$(shell id -u)),--allow-root) \
	  --ServerApp.root_dir="$(CURDIR)" --LabApp.default_url=/lab/tree/notebooks/intro.md

# The library's wheel (the science package alone, with its shipped data); rebuilt only when the
# library changed. It needs no book environment, only pip: with the environment (.venv) it is
# built offline with the environment's setuptools, otherwise by $(PYTHON)'s pip, whose build
# isolation fetches the build backend (setuptools) from the index. The book offers it for
# download (Execution status page) so that a downloaded chapter runs where only the book is.
SETUPTOOLS_OK := import setuptools, sys; sys.exit(int(setuptools.__version__.split(".")[0]) < 77)
$(WHEEL): pyproject.toml $(shell find src -type f -not -path '*/__pycache__/*' -not -path '*.egg-info*')
	@rm -rf build/wheel && mkdir -p dist build/wheel
	@if $(PY) -c '$(SETUPTOOLS_OK)' 2>/dev/null; then \
	  set -x; $(PY) -m pip wheel --quiet --no-deps --no-build-isolation --wheel-dir build/wheel .; \
	else set -x; $(PYTHON) -m pip wheel --quiet --no-deps --wheel-dir build/wheel .; fi
	@mv build/wheel/moe_routing-*.whl $@.tmp && mv $@.tmp $@

wheel: $(WHEEL)
	@ls $(WHEEL)

# The library's version floors (maintainers; not part of `make test`): a fresh virtual
# environment in build/floors with the wheel and exactly the lowest releases it accepts
# (pyproject.toml's >=, read by scripts/floors.py: the runtime dependencies, and pandas and
# matplotlib, which library modules import), torch from TORCH_INDEX as in `make env`; then every
# test file that needs nothing else (scripts/floors.py tests), against the wheel's copy of the
# library. The floors are releases this target has passed on (README: what was tested).
FLOORS_VENV := build/floors/venv
floors:
	@$(MAKE) --no-print-directory $(WHEEL)
	rm -rf $(FLOORS_VENV) && $(PYTHON) -m venv $(FLOORS_VENV)
	$(if $(TORCH_INDEX),$(FLOORS_VENV)/bin/python -m pip install --quiet --disable-pip-version-check \
	  --index-url '$(TORCH_INDEX)' "$$($(PYTHON) scripts/floors.py torch)")
	$(FLOORS_VENV)/bin/python -m pip install --quiet --disable-pip-version-check "$(WHEEL)" \
	  $$($(PYTHON) scripts/floors.py pins) pytest hypothesis
	@$(FLOORS_VENV)/bin/python -m pip list --disable-pip-version-check 2>/dev/null \
	  | grep -iE "^($$($(PYTHON) scripts/floors.py pins | sed 's/==.*//' | paste -sd'|')) "
	@cd $(FLOORS_VENV) && bin/python -c 'import moe_routing, sys; print("moe_routing from", moe_routing.__file__); \
	  sys.exit(not moe_routing.__file__.startswith(sys.prefix))'
	export $(ONE_THREAD) $(HEAP_REUSE); $(FLOORS_VENV)/bin/python -m pytest -q -p no:cacheprovider \
	  -m "not book and not assignments and not training and not cuda" $$($(PYTHON) scripts/floors.py tests)

# The release bundle of a profile (moe_book.dist): built from the PDFs and both HTML editions,
# made first; refused, naming the part, when one is missing; written atomically.
dist: pdf
	@$(MAKE) --no-print-directory html PROFILE='$(PROFILE)'
	@$(MAKE) --no-print-directory student PROFILE='$(PROFILE)'
	@$(PY) -m moe_book.dist --profile '$(PROFILE)'

# Publish the built HTML of a profile (default: the book of `make book`) to the gh-pages branch
# of REMOTE with ghp-import (.nojekyll included, which _static/ needs), from a throwaway
# repository: the working repository gets no gh-pages branch. The branch holds the latest build.
# What is pushed is the public copy of the build (moe_book.classroom public): the autograder zips
# that a local full edition offers the teacher are left out, and the copy is refused, nothing
# pushed, if any file in it still holds a hidden test or a solution line of an assignment.
PUBLISH_DIR ?= $(if $(filter default,$(PROFILE)),book/_build/html,build/$(PROFILE)/_build/html)
publish: $(STAMP)
	@test -n "$(REMOTE)" || { echo "error: REMOTE is required: make publish REMOTE=<git url or path>" >&2; exit 2; }
	@test -f "$(PUBLISH_DIR)/index.html" || { echo "error: no built book in $(PUBLISH_DIR) (run make book, or make html PROFILE=...)" >&2; exit 2; }
	@rev=$$(git rev-parse --short HEAD 2>/dev/null || echo unknown) && \
	tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && \
	$(PY) -m moe_book.classroom public "$(PUBLISH_DIR)" "$$tmp/site" && \
	git -C "$$tmp" init -q repo && git -C "$$tmp/repo" remote add origin "$(REMOTE)" && cd "$$tmp/repo" && \
	GIT_COMMITTER_NAME="$${GIT_COMMITTER_NAME:-moe-book}" GIT_COMMITTER_EMAIL="$${GIT_COMMITTER_EMAIL:-moe-book@localhost}" \
	"$(CURDIR)/$(VENV)/bin/ghp-import" -n -p -f -r origin -b gh-pages \
	  -m "Book built from $$rev ($(PROFILE) profile)" "$$tmp/site"
	@echo "Published $(PUBLISH_DIR) to the gh-pages branch of $(REMOTE)"

clean:
	rm -rf build book/_build dist

# the theory stream of `make book` (beside the grid chapters), in its order (read by the tests)
print-theory-notebooks:
	@echo $(strip $(THEORY_NOTEBOOKS))
