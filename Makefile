# Entry points. Each target runs scripts/setup.sh first, so a fresh machine needs nothing
# else. PRESET selects a CMake preset (release, debug, asan, ubsan, tsan, fuzz).
PRESET ?= release
BUILD_DIR := $(if $(filter release,$(PRESET)),build,build-$(PRESET))
# HAMI_WERROR=1 makes warnings errors (CI), HAMI_WERROR=0 not; unset, a build tree keeps what
# it was configured with, so `make demo` after `HAMI_WERROR=1 make test` recompiles nothing.
ifeq ($(HAMI_WERROR),)
WERROR :=
else ifneq ($(filter 1 ON on yes true,$(HAMI_WERROR)),)
WERROR := -DHAMI_WERROR=ON
else ifneq ($(filter 0 OFF off no false,$(HAMI_WERROR)),)
WERROR := -DHAMI_WERROR=OFF
else
$(error HAMI_WERROR='$(HAMI_WERROR)': give 1 (warnings are errors) or 0)
endif

.PHONY: all setup configure build test demo install bench asan ubsan tsan check-thread-safety tsan-concurrency tsan-concurrency-build fuzz format tidy clean

all: build

setup:
	@scripts/setup.sh

configure: setup
	@cmake --preset $(PRESET) $(WERROR) >/dev/null

build: configure
	@cmake --build --preset $(PRESET)

# Every test except those labelled gpu; ends with CTest's summary.
test: build
	@ctest --preset $(PRESET)

# On the simulated GPU (or a real one when present): a driver-API round trip, then memory
# limits under `hami run --memory` — the view, refusal past the limit, two processes sharing
# one budget, and a process with an empty environment held by the limits file — a compute
# share, and a simulated cluster with the example pods and their compute shares (as root, with
# kubectl). scripts/demo.sh lists its steps.
demo: build
	@scripts/demo.sh $(BUILD_DIR)

# What ships, installed under PREFIX (docs/install-host.md): the `ship` preset (no tests, so
# only the build's own packages: setup.sh --build-only) built in build-ship/, then
# `cmake --install`. DESTDIR stages it elsewhere (packaging).
PREFIX ?= /usr/local
install:
	@scripts/setup.sh --build-only
	@cmake --preset ship $(WERROR) >/dev/null
	@cmake --build --preset ship
	@DESTDIR="$(DESTDIR)" cmake --install build-ship --prefix "$(PREFIX)"

bench: build
	@$(BUILD_DIR)/bin/hami bench

asan ubsan tsan:
	@$(MAKE) --no-print-directory test PRESET=$@

# The clang build of libvgpu, whose thread-safety analysis checks the lock annotations
# (GUARDED_BY, REQUIRES) as errors; CI runs it after `make test`.
check-thread-safety: setup
	@cmake --preset clang >/dev/null && cmake --build --preset clang --target vgpu

# The concurrent parts' tests alone (hami_cc_test CONCURRENT: region, broker, libvgpu,
# ledger, policy, probe lock, ...) built and run under ThreadSanitizer; CI runs it last.
# die_after_fork=0: libvgpu starts a thread (its watcher) in a fork child that joins its
# region, which TSan otherwise refuses after a multi-threaded parent's fork.
# `make tsan-concurrency-build` only builds them.
TSAN_CTEST := ctest --test-dir build-tsan/concurrency -j2 -LE gpu --output-on-failure --no-tests=error

tsan-concurrency: tsan-concurrency-build
	@TSAN_OPTIONS="suppressions=$(CURDIR)/cmake/tsan.supp die_after_fork=0 $(TSAN_OPTIONS)" $(TSAN_CTEST)

tsan-concurrency-build: setup
	@cmake --preset tsan $(WERROR) >/dev/null
	@cmake --build --preset tsan --target concurrency_tests

fuzz: setup
	@cmake --preset fuzz >/dev/null && cmake --build --preset fuzz

format:
	@git ls-files '*.h' '*.cc' '*.c' | xargs clang-format -i

tidy: configure
	@git ls-files 'src/*.cc' | xargs clang-tidy -p $(BUILD_DIR) --quiet

clean:
	@rm -rf build build-*
