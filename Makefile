# corun build. `make` builds build/libcorun.a, the tests and build/corun-bench.
#   make test | make bench | make deps | make install PREFIX=/usr/local | make format
#   make check-layers (includes respect the layers) | make tsa (clang -Wthread-safety)
#   make fuzz (libFuzzer on the HTTP parser of examples/httpd.cpp, FUZZ_SECONDS=20)
#   MODE=release|debug (debug: -O0, expensive invariant checks)
#   ARCH=x86_64|aarch64 (aarch64: cross build in build/aarch64, tests under qemu; below)
#   SAN=address (ASan+UBSan) | SAN=thread (TSan), each in its own build folder.
#   NO_JEMALLOC=1: P memory from aligned_alloc, no -ljemalloc (keeps glibc's malloc).
#   RUNQ=4: each P's local run queue has 4 slots instead of 256 (CORUN_RUNQ_SIZE, a power
#   of two >= 2), so every test overflows rings into the global queue and steals all the
#   time (Tokio shrinks its queues to 4 under loom for the same reason).
# Release objects live in build/, the other builds in build/<mode|san>/; NO_JEMALLOC and
# RUNQ add a folder of their own below that (build/runq4, build/asan/runq4, ...).
# Sanitizer builds leave jemalloc out (CORUN_NO_JEMALLOC) so the sanitizers see every
# allocation, and use bigger task stacks (instrumented frames are larger). The ASan build
# also turns on the debug-only invariant walks (CORUN_DEBUG_CHECKS, src/base/check.hpp)
# and with them the lock-rank check (src/base/lock.hpp).

MODE ?= release
SAN ?=
CXX ?= g++
PREFIX ?= /usr/local
ARCH ?= x86_64

# ARCH=aarch64 on an x86-64 host: Debian's cross g++ (aarch64-linux-gnu-g++) builds into
# build/aarch64/ (MODE, NO_JEMALLOC and RUNQ add their folders below it as usual; SAN is
# refused: sanitizers under an emulator are not what this build is for), and `make test`
# runs the tests under qemu-aarch64-static (RUNNER, scripts/run-tests.sh). `make deps` then
# also runs `scripts/deps.sh aarch64` (the cross g++, qemu-user-static and the arm64
# libraries through multiarch); plain `make deps` never installs those. On an aarch64 host
# ARCH=aarch64 is meant as a native build in the same folder, with no emulator and nothing
# left out (not tried: no such host here).
# The cross build is a NO_JEMALLOC one (build/aarch64/nojemalloc): libjemalloc-dev:arm64
# cannot be installed beside the host's libjemalloc-dev (not Multi-Arch: same; apt would
# remove the host's), and corun's jemalloc use is not arch-specific.
# RUNNER is plain qemu-aarch64-static, not `-L /usr/aarch64-linux-gnu`: that prefix holds
# the cross libc (libc6-arm64-cross), whose ld.so would load the multiarch libc.so.6 of
# another Debian revision through the host's ld.so.cache; the multiarch ld.so and libraries
# (libc6:arm64, pulled in by the -dev packages) match each other.
# Under emulation `make test` builds the tests only (not the benchmarks and examples), runs
# every unit suite once and the runtime suites at 1 and 2 Ps (4 adds time, not coverage:
# qemu-user runs each guest thread as a host thread, so ordering is still x86's), and leaves
# out (EMU_EXCLUDE, printed by the run) what costs minutes under qemu's slower instructions
# and syscalls without testing anything arch-specific: the million-task scale tests (20-40 s
# each there), the 10'000-conn net scale test and the 300 network runs (12-20 s each). The
# chaos suite stays (8.5 s per P count): random mixes of every primitive, switching contexts
# all the time, are what the aarch64 code must survive. A test that cannot work under
# qemu-user skips itself with a printed reason, only when emulated (tests/support.hpp,
# CORUN_TEST_SKIP_IF_EMULATED): ReadWriteProlongedTimeout (its server's millions of 1-byte
# sends outlast its 10 s bound). The netpoller takes its timerfd fallback there: qemu 7.2
# lacks epoll_pwait2 (ENOSYS). Measured on this shared 2-core machine: install 72 s (once),
# then build + tests 271 s from an empty build/aarch64 (build ~125 s).
HOST_ARCH := $(shell uname -m)
B0 := build
RUNNER :=
DEPS_MODE :=
ifeq ($(ARCH),aarch64)
  B0 := build/aarch64
  ifneq ($(HOST_ARCH),aarch64)
    CXX := aarch64-linux-gnu-g++
    RUNNER := qemu-aarch64-static
    DEPS_MODE := aarch64
    NO_JEMALLOC := 1
  endif
  ifneq ($(SAN),)
    $(error SAN=$(SAN) is not accepted with ARCH=aarch64: leave SAN empty)
  endif
else ifneq ($(ARCH),x86_64)
  $(error ARCH=$(ARCH) is not accepted: use ARCH=x86_64 (the default) or ARCH=aarch64)
endif
EMU_EXCLUDE := one million tasks*,1M sleeping tasks*
EMU_EXCLUDE := $(EMU_EXCLUDE),10000 concurrent loopback conns*,300 short runs that use the network*
TEST_EXCLUDE ?= $(if $(RUNNER),$(EMU_EXCLUDE))
TEST_PROCS ?= $(if $(RUNNER),1 2,1 2 4)

ifeq ($(SAN),address)
  B := build/asan
  SANFLAGS := -fsanitize=address,undefined -fno-sanitize-recover=undefined -DCORUN_NO_JEMALLOC \
    -DCORUN_DEBUG_CHECKS=1
else ifeq ($(SAN),thread)
  B := build/tsan
  SANFLAGS := -fsanitize=thread -DCORUN_NO_JEMALLOC
else ifeq ($(SAN),)
  ifeq ($(MODE),debug)
    B := $(B0)/debug
  else
    B := $(B0)
  endif
  SANFLAGS :=
  ifeq ($(NO_JEMALLOC),1)
    B := $(B)/nojemalloc
    SANFLAGS := -DCORUN_NO_JEMALLOC
  endif
else
  $(error SAN=$(SAN) is not accepted: use SAN=address or SAN=thread, or leave it empty)
endif
RUNQ ?=
ifneq ($(RUNQ),)
  ifeq ($(filter 2 4 8 16 32 64 128 256 512 1024,$(RUNQ)),)
    $(error RUNQ=$(RUNQ) is not accepted: use a power of two from 2 to 1024, or leave it empty)
  endif
  B := $(B)/runq$(RUNQ)
  SANFLAGS += -DCORUN_RUNQ_SIZE=$(RUNQ)
endif
# What `make test` builds: everything, except in a RUNQ build, where benchmarks and examples
# would only measure a ring shrunk on purpose (it builds and runs the tests alone).
# Under emulation too: the tests are what runs there.
TEST_BUILD := $(if $(RUNQ)$(RUNNER),$(B)/corun-tests,all)

ifeq ($(MODE),debug)
  OPT := -O0 -DCORUN_DEBUG_CHECKS=1
else ifeq ($(MODE),release)
  OPT := -O2
else
  $(error MODE=$(MODE) is not accepted: use MODE=release or MODE=debug)
endif

# Frame pointers everywhere so `perf record -g` unwinds task stacks.
CXXFLAGS_ALL := -std=c++20 -Wall -Wextra -Werror -g $(OPT) -fno-omit-frame-pointer \
  -mno-omit-leaf-frame-pointer -pthread -Iinclude -Isrc -MMD -MP $(SANFLAGS) $(CXXFLAGS)
ASFLAGS_ALL := -g $(SANFLAGS)
LIBS := -lhwloc -lnuma -pthread
ifeq ($(findstring CORUN_NO_JEMALLOC,$(SANFLAGS)),)
  LIBS += -ljemalloc
endif
LDFLAGS_ALL := $(SANFLAGS) -pthread $(LDFLAGS)

LIB_CPP := $(sort $(wildcard src/*/*.cpp))
LIB_ASM := $(sort $(wildcard src/arch/*.S))
TEST_CPP := $(sort $(wildcard tests/*.cpp tests/*/*.cpp))
BENCH_CPP := $(sort $(wildcard perf/*.cpp))
EXAMPLES := $(patsubst examples/%.cpp,$(B)/examples/%,$(wildcard examples/*.cpp))

LIB_OBJ := $(LIB_CPP:%.cpp=$(B)/obj/%.o) $(LIB_ASM:%.S=$(B)/obj/%.o)
TEST_OBJ := $(TEST_CPP:%.cpp=$(B)/obj/%.o)
BENCH_OBJ := $(BENCH_CPP:%.cpp=$(B)/obj/%.o)

.PHONY: all test bench deps install format format-check clean check-all check-layers tsa
all: $(B)/libcorun.a $(B)/corun-tests $(B)/corun-bench $(EXAMPLES)

$(B)/obj/%.o: %.cpp
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS_ALL) -c $< -o $@

$(B)/obj/tests/%.o: tests/%.cpp
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS_ALL) -Itests -c $< -o $@

$(B)/obj/%.o: %.S
	@mkdir -p $(dir $@)
	$(CXX) $(ASFLAGS_ALL) -Isrc -c $< -o $@

$(B)/libcorun.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(B)/corun-tests: $(TEST_OBJ) $(B)/libcorun.a
	$(CXX) $(LDFLAGS_ALL) -o $@ $(TEST_OBJ) $(B)/libcorun.a $(LIBS)

# The benchmarks format with {fmt} (the pool's Sprintf family); the library does not.
$(B)/corun-bench: $(BENCH_OBJ) $(B)/libcorun.a
	$(CXX) $(LDFLAGS_ALL) -o $@ $(BENCH_OBJ) $(B)/libcorun.a $(LIBS) -lfmt

$(B)/examples/%: examples/%.cpp $(B)/libcorun.a
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS_ALL) -o $@ $< $(B)/libcorun.a $(LIBS)

deps:
	@bash scripts/deps.sh
	@$(if $(DEPS_MODE),bash scripts/deps.sh $(DEPS_MODE))

# Unit suites (TEST_SUITE("unit.…")) run once; the runtime suites ("rt.…") run again at
# every P count of TEST_PROCS (4 on 2 cores is oversubscribed on purpose); any other
# suite name fails the run (scripts/run-tests.sh).
test: deps check-layers
	@$(MAKE) --no-print-directory $(TEST_BUILD)
	@RUNNER="$(RUNNER)" TEST_EXCLUDE="$(TEST_EXCLUDE)" bash scripts/run-tests.sh $(B) "$(TEST_PROCS)"

# Knobs (COUNT=, CPUS=, BENCHTIME=, ...: the header of scripts/bench-all) pass through the
# environment; BENCH_ARGS='--section timers' runs one section, '--list' lists them.
bench: deps
	@$(MAKE) --no-print-directory all MODE=release SAN= RUNQ= >&2
	@python3 scripts/bench-all $(BENCH_ARGS) build

install: $(B)/libcorun.a
	install -d $(DESTDIR)$(PREFIX)/include/corun $(DESTDIR)$(PREFIX)/lib/pkgconfig
	install -m 644 include/corun/*.hpp $(DESTDIR)$(PREFIX)/include/corun/
	install -m 644 $(B)/libcorun.a $(DESTDIR)$(PREFIX)/lib/
	sed -e 's|@PREFIX@|$(PREFIX)|g' corun.pc.in > $(DESTDIR)$(PREFIX)/lib/pkgconfig/corun.pc

# Nothing above src/sched/ includes sched/sched.hpp, and every layer includes only those
# below it (scripts/check-layers says which rule a line breaks).
check-layers:
	@python3 scripts/check-layers

# clang's thread-safety analysis over the library (compile only, no objects): every field
# marked CORUN_GUARDED_BY is touched with its lock held (base/tsa.hpp). Needs clang++.
TSA_CXX ?= clang++
tsa:
	@bash scripts/deps.sh clang
	@for f in $(LIB_CPP); do \
	  $(TSA_CXX) -std=c++20 -Wall -Wextra -Werror -Wthread-safety -Wthread-safety-beta \
	    -Iinclude -Isrc -fsyntax-only $$f || exit 1; \
	done; echo "tsa: $(words $(LIB_CPP)) files pass clang -Wthread-safety"

# libFuzzer target of the HTTP request parser of examples/httpd.cpp
# (fuzz/http_parser_fuzz.cpp, its invariants at its top): builds build/fuzz/http_parser_fuzz
# with clang++ (ASan+UBSan), writes the seed corpus (fuzz/seeds.sh) to build/fuzz/corpus,
# where libFuzzer also keeps what it finds, and fuzzes for FUZZ_SECONDS. A crash fails the
# target and leaves its input in build/fuzz/crash-*. Not part of `make test`.
FUZZ_CXX ?= clang++
FUZZ_SECONDS ?= 20
.PHONY: fuzz
fuzz: build/fuzz/http_parser_fuzz
	@bash fuzz/seeds.sh build/fuzz/corpus
	build/fuzz/http_parser_fuzz -max_total_time=$(FUZZ_SECONDS) -max_len=12000 \
	  -dict=fuzz/http.dict -artifact_prefix=build/fuzz/ -print_final_stats=1 build/fuzz/corpus

build/fuzz/http_parser_fuzz: fuzz/http_parser_fuzz.cpp examples/http_parser.hpp
	@bash scripts/deps.sh clang
	@mkdir -p $(dir $@)
	$(FUZZ_CXX) -std=c++20 -Wall -Wextra -Werror -g -O1 -fno-omit-frame-pointer \
	  -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -o $@ $<

# Every build CI runs: release, ASan+UBSan, TSan, release with 4-slot run queues.
check-all:
	@$(MAKE) --no-print-directory test
	@$(MAKE) --no-print-directory test SAN=address
	@$(MAKE) --no-print-directory test SAN=thread
	@$(MAKE) --no-print-directory test RUNQ=4

# Tracked and new (untracked, not ignored) sources alike, so a new file is never missed.
FORMAT_FILES = $$(git ls-files --cached --others --exclude-standard '*.cpp' '*.hpp' '*.h')
format:
	clang-format -i $(FORMAT_FILES)

format-check:
	clang-format --dry-run -Werror $(FORMAT_FILES)

clean:
	rm -rf build

-include $(LIB_OBJ:.o=.d) $(TEST_OBJ:.o=.d) $(BENCH_OBJ:.o=.d) $(EXAMPLES:=.d)
