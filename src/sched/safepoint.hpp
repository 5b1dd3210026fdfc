// sched/safepoint.hpp — per-P safe points: the scheduler's narrow contract for a layer
// that keeps per-P data only the P's owner touches (the pool's shards, with plain loads
// and stores on their fast path) and must still reach every P's copy now and then.
//
// A layer registers one hook at static initialisation; request_safepoint then has it run
// once for every P at a point where no task runs on that P: the caller's own P at once
// (the caller is a task between operations), idle Ps by the caller while it holds them
// out of the idle list, running Ps by their owner at its next trip through find_runnable
// (at least every 61st task pick) or before it idles them. A P whose M sits in blocking()
// runs it when the P next schedules or is handed off. Only a P that runs one task without
// ever parking delays its turn. Protocol and its races: safepoint.cpp.
#pragma once

#include <cstdint>

namespace corun::sched {

struct Runtime;

// Runs for P `proc` of the run `run_id` (sched/proc.hpp), on the scheduler's stack, with
// no lock held and no task running on that P. Must not park.
using SafepointFn = void (*)(int proc, std::uint64_t run_id) noexcept;
void register_safepoint_hook(SafepointFn fn) noexcept;  // at static initialisation
void request_safepoint(Runtime* rt) noexcept;           // from a task on a P of rt
bool safepoint_pending(Runtime* rt) noexcept;           // some P has not run the last request yet

}  // namespace corun::sched
