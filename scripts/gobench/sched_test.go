// Package corunbench holds Go twins of corun's perf/bench_sched.cpp benchmarks that Go's
// own runtime tests lack (Gosched, WaitGroup/Mutex hand-off, memory per parked
// goroutine), with the same op definitions, so scripts/go-compare can put them side by
// side: `cd scripts/gobench && go test -run NONE -bench . -cpu 1,2`. No dependencies.
package corunbench

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// op = one runtime.Gosched() by the measured goroutine while GOMAXPROCS background
// goroutines yield in a loop (corun: Yield).
func BenchmarkYield(b *testing.B) {
	others := runtime.GOMAXPROCS(0)
	var stop, started int32
	var finished sync.WaitGroup
	finished.Add(others)
	for i := 0; i < others; i++ {
		go func() {
			atomic.AddInt32(&started, 1)
			for atomic.LoadInt32(&stop) == 0 {
				runtime.Gosched()
			}
			finished.Done()
		}()
	}
	for atomic.LoadInt32(&started) < int32(others) {
		runtime.Gosched()
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		runtime.Gosched()
	}
	b.StopTimer()
	atomic.StoreInt32(&stop, 1)
	finished.Wait()
}

// op = one round trip between two goroutines through two WaitGroups (corun:
// WaitGroupHandoff).
func BenchmarkWaitGroupHandoff(b *testing.B) {
	rounds := b.N
	var toPartner, toMain, finished sync.WaitGroup
	toPartner.Add(1)
	finished.Add(1)
	go func() {
		for i := 0; i < rounds; i++ {
			toPartner.Wait()
			if i+1 < rounds {
				toPartner.Add(1)
			}
			toMain.Done()
		}
		finished.Done()
	}()
	b.ResetTimer()
	for i := 0; i < rounds; i++ {
		toMain.Add(1)
		toPartner.Done()
		toMain.Wait()
	}
	b.StopTimer()
	finished.Wait()
}

// op = one Lock+Unlock of one shared Mutex by GOMAXPROCS goroutines (corun: MutexHandoff).
func BenchmarkMutexHandoff(b *testing.B) {
	var mu sync.Mutex
	counter := 0
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			mu.Lock()
			counter++
			mu.Unlock()
		}
	})
}

func rssBytes() int64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "VmRSS:") {
			f := strings.Fields(line)
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb * 1024
		}
	}
	return 0
}

// op = spawn one goroutine and run it until it parks on a shared WaitGroup; B/task =
// resident memory growth per parked goroutine (corun: ParkedTasks). Run with
// -benchtime 1000000x for corun's n.
func BenchmarkParkedTasks(b *testing.B) {
	n := b.N
	var gate, parked, finished sync.WaitGroup
	gate.Add(1)
	parked.Add(n)
	finished.Add(n)
	runtime.GC()
	before := rssBytes()
	b.ResetTimer()
	for i := 0; i < n; i++ {
		go func() {
			parked.Done()
			gate.Wait()
			finished.Done()
		}()
	}
	parked.Wait()
	b.StopTimer()
	after := rssBytes()
	gate.Done()
	finished.Wait()
	b.ReportMetric(float64(after-before)/float64(n), "B/task")
}
