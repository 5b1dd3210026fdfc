// base/tsa.hpp — clang's thread-safety analysis annotations (-Wthread-safety).
//
// What it is: macros that tell clang which lock guards which field and which function
// needs, takes or drops which lock, so that `clang++ -Wthread-safety -Werror` (the CI
// step `make tsa`) rejects a guarded field touched without its lock. They expand to
// nothing for other compilers (g++ builds the shipped library). Names follow abseil's
// thread_annotations.h and marl's tsa.h, so a reader of either knows them.
//
// Where the analysis cannot follow the code it is told so, locally and with the reason:
// a lock taken by a task and dropped by the scheduler's park commit once the task is off
// its stack (sched/park.hpp) is released in a function the analysis never sees paired
// with the acquire, so those functions carry CORUN_NO_TSA and a comment.
// Rejected: annotating through std::mutex (libstdc++'s is not annotated); a runtime
// checker only (lock ranks, base/lock.hpp, catch orders at run time; this catches a
// missing lock at compile time, before any test runs).
#pragma once

#if defined(__clang__)
#define CORUN_TSA(x) __attribute__((x))
#else
#define CORUN_TSA(x)
#endif

#define CORUN_CAPABILITY(name) CORUN_TSA(capability(name))
#define CORUN_SCOPED_CAPABILITY CORUN_TSA(scoped_lockable)
#define CORUN_GUARDED_BY(l) CORUN_TSA(guarded_by(l))
#define CORUN_PT_GUARDED_BY(l) CORUN_TSA(pt_guarded_by(l))
#define CORUN_REQUIRES(...) CORUN_TSA(requires_capability(__VA_ARGS__))
#define CORUN_EXCLUDES(...) CORUN_TSA(locks_excluded(__VA_ARGS__))
#define CORUN_ACQUIRE(...) CORUN_TSA(acquire_capability(__VA_ARGS__))
#define CORUN_RELEASE(...) CORUN_TSA(release_capability(__VA_ARGS__))
#define CORUN_TRY_ACQUIRE(...) CORUN_TSA(try_acquire_capability(__VA_ARGS__))
#define CORUN_RETURN_CAPABILITY(l) CORUN_TSA(lock_returned(l))
#define CORUN_ASSERT_CAPABILITY(x) CORUN_TSA(assert_capability(x))
#define CORUN_NO_TSA CORUN_TSA(no_thread_safety_analysis)
