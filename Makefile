# The two commands: `make demo` and `make test`. Both install what is missing (apt, as root), configure and
# build into build/ (executables in build/bin/). `make bench` runs the benchmarks.
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?= -DCMAKE_BUILD_TYPE=Release -DPython3_EXECUTABLE=/usr/bin/python3
# Sanitizer builds: only line tables (-g1: a report's stack still names file:line; 40 % less compile time than
# full debug info). ASan at -O1 (what its documentation recommends: another third off the build, and the unit
# tests ran no slower than at -O2 here), TSan at -O2. The CI budget is mostly these builds.
SANITIZER_FLAGS = -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMOE_ENABLE_CUDA=OFF -DMOE_ENABLE_PYTHON=OFF \
                  -DMOE_BUILD_BENCH=OFF -DMOE_ENABLE_MPI=OFF -DPython3_EXECUTABLE=/usr/bin/python3
sanitizer_opt = -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="$(1) -g1 -DNDEBUG" -DCMAKE_C_FLAGS_RELWITHDEBINFO="$(1) -g1 -DNDEBUG"

.PHONY: all deps configure build corpus demo test bench asan tsan portable fuzz fuzz-build package doc-examples \
        doc-examples-update format clean

all: build

deps:
	@bash scripts/install-deps.sh
	@if command -v nvcc > /dev/null || [ -x /usr/local/cuda/bin/nvcc ]; then \
	  bash scripts/gpu-bundle.sh > /dev/null || echo "deps: gpu-bundle not fetched (gpu_bundle_build_test will skip)"; fi

configure: deps
	@cmake -S . -B $(BUILD) $(CMAKE_FLAGS) > /dev/null

build: configure
	cmake --build $(BUILD) -j $(JOBS)

# The divergence lab needs the KJV corpus (stranger prompts from the held-out books): fetched from the packages
# scripts/install-deps.sh installs.
corpus: deps
	@test -s data/kjv/heldout.txt || bash scripts/fetch-corpus.sh data/kjv

demo: build corpus
	bash scripts/demo.sh $(BUILD)
	bash scripts/demo-diverge.sh $(BUILD)

# Every test: unit, invariance, mpi (under mpirun with 1, 2 and 4 ranks), python, and gpu (skips without a GPU).
test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

bench: build
	bash scripts/bench.sh $(BUILD)

# Unit and invariance tests under AddressSanitizer + UndefinedBehaviorSanitizer, except those labelled `heavy`
# (long numerical runs of code that shorter tests already run under the sanitizers) or `build` (they only
# compile code).
asan: deps
	@cmake -S . -B build-asan $(SANITIZER_FLAGS) $(call sanitizer_opt,-O1) -DMOE_SANITIZE=address,undefined > /dev/null
	cmake --build build-asan -j $(JOBS)
	cd build-asan && ctest --output-on-failure -j $(JOBS) -L "unit|invariance" -LE "python|mpi|gpu|heavy|install|build"

# Threaded code (thread pool, kernels, layer, the simulator's streaming) under ThreadSanitizer: the tests labelled
# `threaded` (their programs: the target threaded_tests, tests/CMakeLists.txt). Without oneDNN
# (its OpenMP runtime and JIT code are not instrumented): the bf16 fast kind then runs its Eigen fallback there.
tsan: deps
	@cmake -S . -B build-tsan $(SANITIZER_FLAGS) $(call sanitizer_opt,-O2) -DMOE_SANITIZE=thread -DMOE_ENABLE_ONEDNN=OFF > /dev/null
	cmake --build build-tsan -j $(JOBS) --target threaded_tests
	cd build-tsan && TSAN_OPTIONS=halt_on_error=1 ctest --output-on-failure -j $(JOBS) -L threaded

# The portable build (MOE_NATIVE=OFF: the x86-64 baseline, ISA-specific kernels chosen at run time) of the
# code with hand-vectorised paths and their fallbacks - the router, the simulator, the CPU kernels, the peak
# benchmark - and their unit and invariance tests (the everyday build compiles for the host only).
PORTABLE_TARGETS = router_topk_test router_topk_rule_test router_topk_block_test router_exp_test \
                   router_planner_test router_invariance_test sim_score_model_test sim_routing_stats_test \
                   sim_experiment_test sim_parallel_test kernels_cpu_thread_pool_test kernels_cpu_linear_test \
                   kernels_cpu_invariance_test kernels_cpu_quant_invariance_test peak_bench
PORTABLE_TESTS = $(subst $(eval) ,|,$(filter-out peak_bench,$(PORTABLE_TARGETS)))
portable: deps
	@cmake -S . -B build-portable $(CMAKE_FLAGS) -DMOE_NATIVE=OFF -DMOE_ENABLE_CUDA=OFF -DMOE_ENABLE_PYTHON=OFF \
	  -DMOE_ENABLE_MPI=OFF > /dev/null
	cmake --build build-portable -j $(JOBS) --target $(PORTABLE_TARGETS)
	cd build-portable && ctest --output-on-failure -j $(JOBS) -R "^($(PORTABLE_TESTS))$$"

# libFuzzer targets (fuzz/, docs/fuzzing.md) built with clang 14 under ASan + UBSan in build-fuzz/ (only the
# libraries the targets need), each run for FUZZ_SECONDS from its seeds; a crash or sanitizer report fails.
# FUZZ_OPT: -O1 (the default) for campaigns; CI's short pass builds at -O0 (83 s instead of 205 s here).
FUZZ_SECONDS ?= 60
FUZZ_OPT ?= -O1
FUZZ_FLAGS = -DCMAKE_BUILD_TYPE=Fuzz -DCMAKE_CXX_FLAGS_FUZZ="$(FUZZ_OPT) -gline-tables-only" \
             -DCMAKE_C_FLAGS_FUZZ="$(FUZZ_OPT) -gline-tables-only" -DMOE_BUILD_FUZZ=ON -DMOE_BUILD_TESTS=OFF \
             -DMOE_BUILD_BENCH=OFF -DMOE_ENABLE_CUDA=OFF -DMOE_ENABLE_MPI=OFF -DMOE_ENABLE_PYTHON=OFF
fuzz-build: deps
	@CC=clang-14 CXX=clang++-14 cmake -S . -B build-fuzz $(FUZZ_FLAGS) > /dev/null
	cmake --build build-fuzz -j $(JOBS) --target moe_fuzzers
fuzz: fuzz-build
	FUZZ_SECONDS=$(FUZZ_SECONDS) bash scripts/fuzz.sh build-fuzz

# The Debian package (cmake/package.cmake, docs/install.md): build-package/moe_<version>_amd64.deb, for
# `apt install ./moe_<version>_amd64.deb`. Portable (MOE_NATIVE=OFF: the x86-64 baseline, the hand-vectorised
# kernels chosen at run time, docs/install.md) and without CUDA; installs under /usr. Not part of `make test`.
PACKAGE_FLAGS = -DCMAKE_BUILD_TYPE=Release -DMOE_NATIVE=OFF -DMOE_ENABLE_CUDA=OFF -DMOE_BUILD_TESTS=OFF \
                -DMOE_BUILD_BENCH=OFF -DCMAKE_INSTALL_PREFIX=/usr -DPython3_EXECUTABLE=/usr/bin/python3
package: deps
	@cmake -S . -B build-package $(PACKAGE_FLAGS) > /dev/null
	cmake --build build-package -j $(JOBS)
	cd build-package && cpack -G DEB
	@dpkg-deb --field build-package/moe_*.deb Package Version Architecture Depends Recommends Suggests
	@ls build-package/moe_*.deb

# The documents' examples (scripts/doc-examples.py, docs/doc-examples.md): run and compared with their documented
# output (make test runs them as the ctests doc_examples_*); -update rewrites the documented output from real runs
# (after a deliberate change of output; review the diff).
DOC_FILES = README.md docs/cli.md docs/divergence.md docs/runtime.md docs/fuzzing.md docs/embedding.md
# moe-sim in build/ reads the corpus from build/kjv (build/share/moe/kjv; the ctest fixture kjv_corpus builds it).
doc-examples: build
	@test -s $(BUILD)/kjv/heldout.txt || bash scripts/fetch-corpus.sh $(BUILD)/kjv
	/usr/bin/python3 scripts/doc-examples.py --build $(BUILD) $(DOC_FILES)
doc-examples-update: build
	@test -s $(BUILD)/kjv/heldout.txt || bash scripts/fetch-corpus.sh $(BUILD)/kjv
	/usr/bin/python3 scripts/doc-examples.py --build $(BUILD) --update $(DOC_FILES)

format:
	clang-format -i $$(git ls-files '*.h' '*.cc' '*.cu' '*.cuh')

clean:
	rm -rf $(BUILD) build-asan build-tsan build-portable build-fuzz build-package
