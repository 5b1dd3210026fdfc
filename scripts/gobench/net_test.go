// Go twins of corun's perf/bench_net.cpp, with the same names, ops and metrics, so
// scripts/go-compare (and make bench's go-net section) put them side by side:
//
//	cd scripts/gobench && go test -run NONE -bench 'NetEcho|NetTimerLateness' -cpu 1,2
//
// NetEcho/<deadline|nodeadline>: one server goroutine and the benchmark goroutine as
// client over one loopback TCP connection (Go's default TCP_NODELAY); op = one round trip
// of a message of 1..64 bytes (size i%64+1, the first byte carries it). /deadline: the
// server calls SetReadDeadline(now+5s) before every Read (go-raw's and net/http's
// pattern); /nodeadline: never. Listener, conn and one warm-up round trip are untimed.
// Metrics: ns/op, cpu%.
//
// NetTimerLateness/ReadDeadline=<d>/<load> (corun: TimerLateness/ReadDeadline=<d>/<load>;
// go-compare --map NetTimerLateness=TimerLateness): one goroutine, a connected socket
// that never gets data; each sample is SetReadDeadline(t0+d) then Read, which must fail
// with os.ErrDeadlineExceeded; lateness = time.Since(t0+d). The shape of
// TimerLateness/Sleep1 (time_test.go: one waiter, the same waits, loads and metrics).
// Rejected: putting ReadDeadline under BenchmarkTimerLateness (then the go-lateness
// section, which runs all of it, would also run rows its corun side does not).
package corunbench

import (
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

const (
	maxMessage     = 64
	serverDeadline = 5 * time.Second
)

// readMessage reads one message (its size in its first byte) into buf; 0 at EOF.
func readMessage(c net.Conn, buf []byte, deadline bool) (int, error) {
	got, want := 0, 1
	for got < want {
		if deadline {
			if err := c.SetReadDeadline(time.Now().Add(serverDeadline)); err != nil {
				return 0, err
			}
		}
		n, err := c.Read(buf[got:maxMessage])
		if n == 0 && err == io.EOF && got == 0 {
			return 0, nil
		}
		if err != nil {
			return 0, err
		}
		if got == 0 {
			want = int(buf[0])
		}
		got += n
	}
	if got != want {
		return 0, errors.New("two messages in flight")
	}
	return want, nil
}

func roundTrip(c net.Conn, buf []byte, size int) error {
	buf[0] = byte(size)
	if _, err := c.Write(buf[:size]); err != nil {
		return err
	}
	n, err := readMessage(c, buf, false)
	if err == nil && n != size {
		err = errors.New("short echo")
	}
	return err
}

func benchmarkNetEcho(b *testing.B, deadline bool) {
	b.StopTimer()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	serverErr := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			serverErr <- err
			return
		}
		defer c.Close()
		buf := make([]byte, maxMessage)
		for {
			n, err := readMessage(c, buf, deadline)
			if err != nil || n == 0 {
				serverErr <- err
				return
			}
			if _, err := c.Write(buf[:n]); err != nil {
				serverErr <- err
				return
			}
		}
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, maxMessage)
	for i := range buf {
		buf[i] = byte(i)
	}
	if err := roundTrip(c, buf, 1); err != nil { // warm-up
		b.Fatal(err)
	}
	var m cpuMeter
	b.ResetTimer()
	b.StartTimer()
	m.start()
	for i := 0; i < b.N; i++ {
		if err := roundTrip(c, buf, i%maxMessage+1); err != nil {
			b.Fatal(err)
		}
	}
	m.stop()
	b.StopTimer()
	c.Close()
	if err := <-serverErr; err != nil {
		b.Fatal(err)
	}
	m.report(b)
}

func BenchmarkNetEcho(b *testing.B) {
	b.Run("deadline", func(b *testing.B) { benchmarkNetEcho(b, true) })
	b.Run("nodeadline", func(b *testing.B) { benchmarkNetEcho(b, false) })
}

// quietPair: a connected loopback pair; the first conn never receives data.
func quietPair(b *testing.B) (quiet, other net.Conn) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	other, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	quiet, err = ln.Accept()
	if err != nil {
		b.Fatal(err)
	}
	return quiet, other
}

func readDeadlineLateness(b *testing.B, d time.Duration, busy bool) {
	quiet, other := quietPair(b)
	defer quiet.Close()
	defer other.Close()
	var failure error
	latenessRunTasks(b, busy, 1, func(out []int64) {
		buf := make([]byte, maxMessage)
		for i := range out {
			deadline := time.Now().Add(d)
			if err := quiet.SetReadDeadline(deadline); err != nil {
				failure = err
				return
			}
			if _, err := quiet.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
				failure = errors.New("read did not time out: " + errString(err))
				return
			}
			out[i] = int64(time.Since(deadline))
		}
	})
	if failure != nil {
		b.Fatal(failure)
	}
}

func errString(err error) string {
	if err == nil {
		return "no error"
	}
	return err.Error()
}

func BenchmarkNetTimerLateness(b *testing.B) {
	for _, w := range latenessWaits {
		d := w.d
		runLoads(b, "ReadDeadline="+w.name, func(b *testing.B, busy bool) { readDeadlineLateness(b, d, busy) })
	}
}
