// sync/chan_timer.hpp — a channel that a timer sends on: the timer layer binds its record
// (new_timer, after, Ticker) to the record's channel, and a receiver about to park on that
// channel fires the timer itself if it is already due (Go 1.23's maybeRunChan; chan.cpp).
//
// Lifetime: the channel keeps a plain pointer to the record, guarded by the channel's
// lock. The record's destruction unbinds it under that lock before the memory goes, and a
// receiver takes a reference (TimerNode::try_hold) under the lock before it drops the lock
// to fire; a record whose count already reached zero refuses, and its destruction waits on
// the lock the receiver holds. Go needs none of this: its GC keeps c.timer alive.
// Rejected: a counted reference from the channel to the record (the record holds the
// channel's handle: a cycle neither side would break while a Ticker's reader holds a copy);
// firing from the lock-free poll (select with otherwise, try_recv): the pointer needs the
// lock, which the poll's "would block" answer avoids.
#pragma once

#include <corun/chan.hpp>

#include "sched/timers.hpp"

namespace corun::detail {

// try_send without its preemption point: a timer's send. fire() may run in a task (the
// receiver that fires a due timer) holding the record's send_mu, and a yield there would
// leave every other firer of that record spinning on it.
bool chan_offer(ChanHeader* h, void* src);

// Binds t (nullptr: unbinds) to channel h, under h's lock. A record binds once, after it
// made the channel and before it is armed, and unbinds on destruction.
void chan_bind_timer(ChanHeader* h, sched::TimerNode* t) noexcept;

}  // namespace corun::detail
