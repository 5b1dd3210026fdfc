// corun/corun.hpp — everything public: include this, or one header per concern.
#pragma once

#include <corun/chan.hpp>
#include <corun/context.hpp>
#include <corun/net.hpp>
#include <corun/pool.hpp>
#include <corun/runtime.hpp>
#include <corun/stats.hpp>
#include <corun/sync.hpp>
#include <corun/time.hpp>
