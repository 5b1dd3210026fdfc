// Go twin of corun's TimerLateness (perf/bench_time.cpp): how late time.Sleep and
// time.AfterFunc wake, idle and with every P busy, with the same names, ops and metrics,
// so scripts/go-compare puts them side by side:
//
//	cd scripts/gobench && go test -run NONE -bench TimerLateness -cpu 1,2
//
// TimerLateness/<Kind>=<d>/<load>: 100 goroutines each do b.N back-to-back waits of d;
// op = one wait by each of the 100 goroutines. Lateness = time the goroutine runs again
// (Sleep) or the callback starts (AfterFunc) minus (time.Now() just before the call + d).
// Metrics: p50-ns, p99-ns, max-ns (nearest rank over all 100 x b.N raw samples, allocated
// before the timer) and cpu%. load=busy: GOMAXPROCS extra goroutines each spin 5 µs on the
// clock and call runtime.Gosched(), until the measured part is over.
// corun's Floor=<d> rows (a bare futex wait on a thread with 1 ns timer slack) have no
// twin: they measure the kernel, not a runtime.
// Rejected: Go 1.19's BenchmarkParallelTimerLatency shape (GOMAXPROCS-1 timers, sysmon
// deep-sleep warm-up): it is not the shape corun measures, and Go's own package has it.
package corunbench

import (
	"runtime"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

const (
	latenessTasks = 100
	spinChunk     = 5 * time.Microsecond
)

// busyLoad: n goroutines that spin spinChunk and yield until stop(); all are running
// when startBusy returns.
type busyLoad struct {
	stopFlag, started int32
	finished          sync.WaitGroup
}

func startBusy(n int) *busyLoad {
	l := &busyLoad{}
	l.finished.Add(n)
	for i := 0; i < n; i++ {
		go func() {
			atomic.AddInt32(&l.started, 1)
			for atomic.LoadInt32(&l.stopFlag) == 0 {
				for until := time.Now().Add(spinChunk); time.Now().Before(until); {
				}
				runtime.Gosched()
			}
			l.finished.Done()
		}()
	}
	for atomic.LoadInt32(&l.started) < int32(n) {
		runtime.Gosched()
	}
	return l
}

func (l *busyLoad) stop() {
	atomic.StoreInt32(&l.stopFlag, 1)
	l.finished.Wait()
}

func reportLateness(b *testing.B, samples [][]int64) {
	var all []int64
	for _, s := range samples {
		all = append(all, s...)
	}
	if len(all) == 0 {
		return
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	if all[0] < 0 {
		b.Fatalf("woke %d ns before the deadline", -all[0])
	}
	percentile := func(permille int) float64 { // the ceil(q n)-th smallest
		return float64(all[(permille*len(all)+999)/1000-1])
	}
	b.ReportMetric(percentile(500), "p50-ns")
	b.ReportMetric(percentile(990), "p99-ns")
	b.ReportMetric(float64(all[len(all)-1]), "max-ns")
}

// latenessRun starts latenessTasks goroutines, each running wait(out) to fill its sample
// slice of b.N, under the given load, and reports the metrics.
func latenessRun(b *testing.B, busy bool, wait func(out []int64)) {
	latenessRunTasks(b, busy, latenessTasks, wait)
}

// latenessRunTasks is latenessRun with `tasks` goroutines (Sleep1: one, as corun's).
func latenessRunTasks(b *testing.B, busy bool, tasks int, wait func(out []int64)) {
	b.StopTimer()
	samples := make([][]int64, tasks)
	for t := range samples {
		samples[t] = make([]int64, b.N)
	}
	var load *busyLoad
	if busy {
		load = startBusy(runtime.GOMAXPROCS(0))
	}
	var done sync.WaitGroup
	done.Add(tasks)
	var m cpuMeter
	b.ResetTimer()
	b.StartTimer()
	m.start()
	for t := range samples {
		go func(out []int64) {
			wait(out)
			done.Done()
		}(samples[t])
	}
	done.Wait()
	m.stop()
	b.StopTimer()
	if load != nil {
		load.stop()
	}
	reportLateness(b, samples)
	m.report(b)
}

func sleepLateness(b *testing.B, d time.Duration, busy bool) {
	sleepLatenessTasks(b, d, busy, latenessTasks)
}

func sleepLatenessTasks(b *testing.B, d time.Duration, busy bool, tasks int) {
	latenessRunTasks(b, busy, tasks, func(out []int64) {
		for i := range out {
			t0 := time.Now()
			time.Sleep(d)
			out[i] = int64(time.Since(t0) - d)
		}
	})
}

func afterFuncLateness(b *testing.B, d time.Duration, busy bool) {
	latenessRun(b, busy, func(out []int64) {
		late := make(chan int64, 1)
		for i := range out {
			deadline := time.Now().Add(d)
			time.AfterFunc(d, func() { late <- int64(time.Since(deadline)) })
			out[i] = <-late
		}
	})
}

// latenessWaits are the waits of every lateness benchmark (corun's perf/lateness.hpp).
var latenessWaits = []struct {
	name string
	d    time.Duration
}{{"1us", time.Microsecond}, {"50us", 50 * time.Microsecond}, {"1ms", time.Millisecond}}

// runLoads runs f as name/idle and name/busy (load=busy in the header above).
func runLoads(b *testing.B, name string, f func(b *testing.B, busy bool)) {
	b.Run(name, func(b *testing.B) {
		b.Run("idle", func(b *testing.B) { f(b, false) })
		b.Run("busy", func(b *testing.B) { f(b, true) })
	})
}

func BenchmarkTimerLateness(b *testing.B) {
	for _, w := range latenessWaits {
		d := w.d
		runLoads(b, "Sleep="+w.name, func(b *testing.B, busy bool) { sleepLateness(b, d, busy) })
		runLoads(b, "Sleep1="+w.name, func(b *testing.B, busy bool) { sleepLatenessTasks(b, d, busy, 1) })
	}
	runLoads(b, "AfterFunc=50us", func(b *testing.B, busy bool) {
		afterFuncLateness(b, 50*time.Microsecond, busy)
	})
}
