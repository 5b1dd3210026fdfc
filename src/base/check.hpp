// base/check.hpp — tiered invariant checks (mimalloc's assert levels, Go's
// verifyTimers): CORUN_CHECK is always on and must be cheap (a load and a compare on a
// line we touch anyway); CORUN_DCHECK runs only where CORUN_DEBUG_CHECKS=1 (MODE=debug and
// the ASan build) and may walk whole structures. Every layer may include this file.
// A failed check is a runtime bug or memory corruption: it prints what broke and aborts.
#pragma once

#include <cstdio>
#include <cstdlib>

#ifndef CORUN_DEBUG_CHECKS
#define CORUN_DEBUG_CHECKS 0
#endif

#define CORUN_CHECK(cond, ...)                                                              \
  do {                                                                                      \
    if (__builtin_expect(!(cond), 0)) {                                                     \
      std::fprintf(stderr, "corun: internal check failed (%s) at %s:%d: ", #cond, __FILE__, \
                   __LINE__);                                                               \
      std::fprintf(stderr, __VA_ARGS__);                                                    \
      std::fputc('\n', stderr);                                                             \
      std::abort();                                                                         \
    }                                                                                       \
  } while (0)

#if CORUN_DEBUG_CHECKS
#define CORUN_DCHECK(cond, ...) CORUN_CHECK(cond, __VA_ARGS__)
#else
#define CORUN_DCHECK(cond, ...) ((void)0)
#endif
