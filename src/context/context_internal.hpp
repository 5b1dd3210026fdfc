// context/context_internal.hpp — test-only views of a context node (Go's export_test.go
// idea): the tests include it directly; nothing in the library or the public headers
// does. Each call takes the node's lock, so the answer is a snapshot.
#pragma once

#include <cstddef>

#include <corun/context.hpp>

namespace corun::detail {

// Children currently linked to c (0 for background()).
std::size_t context_children(const Context& c) noexcept;
// True if c has its own deadline timer and it is still armed.
bool context_timer_armed(const Context& c) noexcept;
// Context nodes alive in the process, or -1 when the build does not count them (only
// builds with CORUN_DEBUG_CHECKS count: a shared counter would cost every Ps a contended
// cache line per context).
long context_live_nodes() noexcept;

}  // namespace corun::detail
