// Go twins of corun's perf/bench_chan.cpp benchmarks that Go's runtime package lacks:
// Chain, ChainBuf, Sieve, Powser (the programs of Go CL 20835's tables) and
// ChanRequestResponse (tail latency). Same shapes, ops and metrics as the C++ versions
// (read their comments for the details); each reports cpu% = process CPU time
// (getrusage) / wall time of the timed region, as corun's b.report_cpu() does.
//
//	cd scripts/gobench && go test -run NONE -bench . -cpu 1,2 -benchtime 100x
//
// Where the C++ versions must leave no task behind, so do these: Sieve stops its
// generator with a flag and drains; every channel op of Powser's streams is a select
// with a per-op quit channel, and a stream that sees quit calls runtime.Goexit (corun:
// throws, caught at the task's root). Powser's teardown is untimed in both.
// Rejected: leaking goroutines per op as test/chan/*.go do (they exit the process; a
// benchmark would accumulate millions of parked goroutines).
package corunbench

import (
	"fmt"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// cpuMeter accumulates wall and process CPU time over the timed region (start/stop pairs
// placed beside b.StartTimer/b.StopTimer) and reports their ratio as cpu%, and the CPU
// time per op as cpu-ns/op (corun's perf/bench.hpp report_cpu reports both).
type cpuMeter struct {
	wall, cpu time.Duration
	t0        time.Time
	c0        time.Duration
}

func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func (m *cpuMeter) start() {
	m.t0 = time.Now()
	m.c0 = processCPU()
}

func (m *cpuMeter) stop() {
	m.wall += time.Since(m.t0)
	m.cpu += processCPU() - m.c0
}

func (m *cpuMeter) report(b *testing.B) {
	if m.wall > 0 {
		b.ReportMetric(100*m.cpu.Seconds()/m.wall.Seconds(), "cpu%")
		if b.N > 0 {
			b.ReportMetric(float64(m.cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
		}
	}
}

// ---- Chain, ChainBuf -------------------------------------------------------------------
// 100 goroutines in series over 100 channels (unbuffered / capacity 1); the benchmark
// goroutine pushes b.N values into the first and closes it; each goroutine closes its
// output when its input is drained; the last one sums. Started once per run (untimed).
// op = one value through all 100 channels.

func benchmarkChain(b *testing.B, capacity int) {
	const length = 100
	ch := make([]chan int64, length)
	for k := range ch {
		ch[k] = make(chan int64, capacity)
	}
	var exited sync.WaitGroup
	exited.Add(length)
	for k := 0; k+1 < length; k++ {
		go func(in <-chan int64, out chan<- int64) {
			for v := range in {
				out <- v
			}
			close(out)
			exited.Done()
		}(ch[k], ch[k+1])
	}
	var sum int64 // written by the last goroutine, read after exited.Wait()
	go func(in <-chan int64) {
		for v := range in {
			sum += v
		}
		exited.Done()
	}(ch[length-1])
	var m cpuMeter
	b.ResetTimer()
	m.start()
	for i := 0; i < b.N; i++ {
		ch[0] <- int64(i)
	}
	close(ch[0])
	exited.Wait()
	m.stop()
	b.StopTimer()
	if want := int64(b.N) * int64(b.N-1) / 2; sum != want {
		b.Fatalf("Chain: the values summed to %d, expected %d", sum, want)
	}
	m.report(b)
}

func BenchmarkChain(b *testing.B)    { benchmarkChain(b, 0) }
func BenchmarkChainBuf(b *testing.B) { benchmarkChain(b, 1) }

// ---- Sieve -----------------------------------------------------------------------------
// test/chan/sieve1.go per op: a fresh generator + sieve goroutine + filters compute the
// first 25 primes (checked); then stop is set, the benchmark goroutine drains primes
// until the chain, closing from the generator down, closes it, and all are joined.
// op = one such sieve.

var first25Primes = [...]int{2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59,
	61, 67, 71, 73, 79, 83, 89, 97}

func sieveOnce(b *testing.B) {
	primes := make(chan int)
	var stop int32
	var exited sync.WaitGroup
	exited.Add(1)
	go func() {
		ch := make(chan int)
		// The sieve goroutine is counted, so the counter cannot reach 0 here. ch is passed
		// as a parameter: the loop below reassigns it.
		exited.Add(1)
		go func(ch chan<- int) {
			for i := 2; atomic.LoadInt32(&stop) == 0; i++ {
				ch <- i
			}
			close(ch)
			exited.Done()
		}(ch)
		for {
			prime, ok := <-ch // not `range ch`: ch changes every iteration
			if !ok {
				break
			}
			primes <- prime
			ch1 := make(chan int)
			exited.Add(1)
			go func(in <-chan int, out chan<- int, p int) {
				for i := range in {
					if i%p != 0 {
						out <- i
					}
				}
				close(out)
				exited.Done()
			}(ch, ch1, prime)
			ch = ch1
		}
		close(primes)
		exited.Done()
	}()
	for _, want := range first25Primes {
		if got, ok := <-primes; !ok || got != want {
			b.Fatalf("Sieve: got %d (open %v), want %d", got, ok, want)
		}
	}
	atomic.StoreInt32(&stop, 1)
	for range primes {
	}
	exited.Wait()
}

func BenchmarkSieve(b *testing.B) {
	var m cpuMeter
	m.start()
	for i := 0; i < b.N; i++ {
		sieveOnce(b)
	}
	m.stop()
	m.report(b)
}

// ---- Powser ----------------------------------------------------------------------------
// test/chan/powser1.go (McIlroy's power series on demand channels), ported exactly as in
// perf/bench_chan.cpp: the same constructors, the same checks to powserTerms terms
// (Ones, Add, Diff, Integ, Cmul, Sub, Mul, Exp, ATan, sin^2 + cos^2 = 1), a fresh
// network per op, untimed teardown. powserTerms = 18: 20 overflows int64 (the C++ twin
// checks every operation for overflow; Go would wrap silently).

const powserTerms = 18

type rat struct {
	num, den int64 // den == 0: end of series
}

func gcd(u, v int64) int64 {
	if u < 0 {
		return gcd(-u, v)
	}
	if u == 0 {
		return v
	}
	return gcd(v%u, u)
}

func i2tor(u, v int64) rat {
	g := gcd(u, v)
	if v > 0 {
		return rat{u / g, v / g}
	}
	return rat{-u / g, -v / g}
}

func itor(u int64) rat { return i2tor(u, 1) }

var (
	ratZero  = itor(0)
	ratOne   = itor(1)
	ratFinis = i2tor(1, 0)
)

func end(u rat) int {
	if u.den == 0 {
		return 1
	}
	return 0
}

func add(u, v rat) rat {
	g := gcd(u.den, v.den)
	return i2tor(u.num*(v.den/g)+v.num*(u.den/g), u.den*(v.den/g))
}

func mul(u, v rat) rat {
	g1 := gcd(u.num, v.den)
	g2 := gcd(u.den, v.num)
	return rat{(u.num / g1) * (v.num / g2), (u.den / g2) * (v.den / g1)}
}

func neg(u rat) rat { return i2tor(-u.num, u.den) }

// expOnes: the coefficients of exp(Ones) (constant term ignored), sequentially:
// (n+1) z[n+1] = sum_k z[k] (n-k+1), z[0] = 1.
func expOnes(n int) []rat {
	z := make([]rat, n)
	z[0] = ratOne
	for m := 0; m+1 < n; m++ {
		s := ratZero
		for k := 0; k <= m; k++ {
			s = add(s, mul(z[k], itor(int64(m-k+1))))
		}
		z[m+1] = mul(s, i2tor(1, int64(m+1)))
	}
	return z
}

type dch struct {
	req chan int64
	dat chan rat
}

func mkdch() *dch            { return &dch{make(chan int64), make(chan rat)} }
func mkdch2() *[2]*dch       { return &[2]*dch{mkdch(), mkdch()} }
func (u rat) String() string { return fmt.Sprintf("%d/%d", u.num, u.den) }

// psNet is one op's stream network: every stream goroutine is started with spawn,
// counted in exited, and calls runtime.Goexit from a channel op once quit is closed.
type psNet struct {
	quit   chan struct{}
	exited sync.WaitGroup
	seqno  int64
}

func (n *psNet) spawn(f func()) {
	n.exited.Add(1)
	go func() {
		defer n.exited.Done()
		f()
	}()
}

func (n *psNet) shutdown() {
	close(n.quit)
	n.exited.Wait()
}

func (n *psNet) nextSeqno() int64 { return atomic.AddInt64(&n.seqno, 1) }

func recv[T any](n *psNet, c chan T) T {
	select {
	case v := <-c:
		return v
	case <-n.quit:
		runtime.Goexit()
	}
	panic("unreachable")
}

func send[T any](n *psNet, c chan T, v T) {
	select {
	case c <- v:
	case <-n.quit:
		runtime.Goexit()
	}
}

func (n *psNet) dosplit(in *dch, out *[2]*dch, wait chan int) {
	both := false // do not service both channels
	select {
	case <-out[0].req:
	case <-wait:
		both = true
		select {
		case <-out[0].req:
		case <-out[1].req:
			out[0], out[1] = out[1], out[0]
		case <-n.quit:
			runtime.Goexit()
		}
	case <-n.quit:
		runtime.Goexit()
	}
	send(n, in.req, n.nextSeqno())
	release := make(chan int)
	n.spawn(func() { n.dosplit(in, out, release) })
	dat := recv(n, in.dat)
	send(n, out[0].dat, dat)
	if !both {
		recv(n, wait)
	}
	recv(n, out[1].req)
	send(n, out[1].dat, dat)
	send(n, release, 0)
}

func (n *psNet) split(in *dch, out *[2]*dch) {
	release := make(chan int)
	n.spawn(func() { n.dosplit(in, out, release) })
	send(n, release, 0)
}

func (n *psNet) put(dat rat, out *dch) {
	recv(n, out.req)
	send(n, out.dat, dat)
}

func (n *psNet) get(in *dch) rat {
	send(n, in.req, n.nextSeqno())
	return recv(n, in.dat)
}

func (n *psNet) get2(in0, in1 *dch) [2]rat {
	req := [2]chan int64{in0.req, in1.req}
	var dat [2]chan rat
	var out [2]rat
	for k := 4; k > 0; k-- {
		s := n.nextSeqno()
		select {
		case req[0] <- s:
			dat[0] = in0.dat
			req[0] = nil
		case req[1] <- s:
			dat[1] = in1.dat
			req[1] = nil
		case it := <-dat[0]:
			out[0] = it
			dat[0] = nil
		case it := <-dat[1]:
			out[1] = it
			dat[1] = nil
		case <-n.quit:
			runtime.Goexit()
		}
	}
	return out
}

func (n *psNet) copy(in, out *dch) {
	for {
		recv(n, out.req)
		send(n, out.dat, n.get(in))
	}
}

func (n *psNet) repeat(dat rat, out *dch) {
	for {
		n.put(dat, out)
	}
}

// Split: the pair is read before the split goroutine may swap it.
func (n *psNet) Split(U *dch) [2]*dch {
	UU := mkdch2()
	pair := *UU
	n.spawn(func() { n.split(U, UU) })
	return pair
}

func (n *psNet) Add(U, V *dch) *dch {
	Z := mkdch()
	n.spawn(func() {
		for {
			recv(n, Z.req)
			uv := n.get2(U, V)
			switch end(uv[0]) + 2*end(uv[1]) {
			case 0:
				send(n, Z.dat, add(uv[0], uv[1]))
			case 1:
				send(n, Z.dat, uv[1])
				n.copy(V, Z)
			case 2:
				send(n, Z.dat, uv[0])
				n.copy(U, Z)
			case 3:
				send(n, Z.dat, ratFinis)
			}
		}
	})
	return Z
}

func (n *psNet) Cmul(c rat, U *dch) *dch {
	Z := mkdch()
	n.spawn(func() {
		done := false
		for !done {
			recv(n, Z.req)
			u := n.get(U)
			if end(u) != 0 {
				done = true
			} else {
				send(n, Z.dat, mul(c, u))
			}
		}
		send(n, Z.dat, ratFinis)
	})
	return Z
}

func (n *psNet) Sub(U, V *dch) *dch { return n.Add(U, n.Cmul(neg(ratOne), V)) }

func (n *psNet) Rep(c rat) *dch {
	Z := mkdch()
	n.spawn(func() { n.repeat(c, Z) })
	return Z
}

func (n *psNet) Mul(U, V *dch) *dch {
	Z := mkdch()
	n.spawn(func() {
		recv(n, Z.req)
		uv := n.get2(U, V)
		if end(uv[0]) != 0 || end(uv[1]) != 0 {
			send(n, Z.dat, ratFinis)
		} else {
			send(n, Z.dat, mul(uv[0], uv[1]))
			UU := n.Split(U)
			VV := n.Split(V)
			W := n.Add(n.Cmul(uv[0], VV[0]), n.Cmul(uv[1], UU[0]))
			recv(n, Z.req)
			send(n, Z.dat, n.get(W))
			n.copy(n.Add(W, n.Mul(UU[1], VV[1])), Z)
		}
	})
	return Z
}

func (n *psNet) Diff(U *dch) *dch {
	Z := mkdch()
	n.spawn(func() {
		recv(n, Z.req)
		u := n.get(U)
		if end(u) == 0 {
			done := false
			for i := int64(1); !done; i++ {
				u = n.get(U)
				if end(u) != 0 {
					done = true
				} else {
					send(n, Z.dat, mul(itor(i), u))
					recv(n, Z.req)
				}
			}
		}
		send(n, Z.dat, ratFinis)
	})
	return Z
}

func (n *psNet) Integ(c rat, U *dch) *dch {
	Z := mkdch()
	n.spawn(func() {
		n.put(c, Z)
		done := false
		for i := int64(1); !done; i++ {
			recv(n, Z.req)
			u := n.get(U)
			if end(u) != 0 {
				done = true
			}
			send(n, Z.dat, mul(i2tor(1, i), u))
		}
		send(n, Z.dat, ratFinis)
	})
	return Z
}

func (n *psNet) Exp(U *dch) *dch {
	ZZ := mkdch2()
	zz := *ZZ
	n.split(n.Integ(ratOne, n.Mul(zz[0], n.Diff(U))), ZZ)
	return zz[1]
}

func (n *psNet) MonSubst(U *dch, c0 rat, k int) *dch {
	Z := mkdch()
	n.spawn(func() {
		c := ratOne
		for {
			recv(n, Z.req)
			u := n.get(U)
			send(n, Z.dat, mul(u, c))
			c = mul(c, c0)
			if end(u) != 0 {
				send(n, Z.dat, ratFinis)
				break
			}
			for i := 1; i < k; i++ {
				recv(n, Z.req)
				send(n, Z.dat, ratZero)
			}
		}
	})
	return Z
}

func (n *psNet) check(b *testing.B, U *dch, c rat, count int, what string) {
	for i := 0; i < count; i++ {
		if r := n.get(U); r != c {
			b.Fatalf("Powser: %s term %d: got %v, want %v", what, i, r, c)
		}
	}
}

func (n *psNet) checka(b *testing.B, U *dch, a []rat, what string) {
	for _, r := range a {
		n.check(b, U, r, 1, what)
	}
}

func (n *psNet) runChecks(b *testing.B, terms int) {
	ones := n.Rep(ratOne)
	twos := n.Rep(itor(2))
	a := make([]rat, terms)

	n.check(b, ones, ratOne, 5, "Ones")
	n.check(b, n.Add(ones, ones), itor(2), 0, "Add Ones Ones")
	n.check(b, n.Add(ones, twos), itor(3), 0, "Add Ones Twos")
	d := n.Diff(ones)
	for i := range a {
		a[i] = itor(int64(i + 1))
	}
	n.checka(b, d, a, "Diff")
	in := n.Integ(ratZero, ones)
	a[0] = ratZero
	for i := 1; i < terms; i++ {
		a[i] = i2tor(1, int64(i))
	}
	n.checka(b, in, a, "Integ")
	n.check(b, n.Cmul(neg(ratOne), twos), itor(-2), 10, "CMul")
	n.check(b, n.Sub(ones, twos), itor(-1), 0, "Sub Ones Twos")
	m := n.Mul(ones, ones)
	for i := range a {
		a[i] = itor(int64(i + 1))
	}
	n.checka(b, m, a, "Mul")
	n.checka(b, n.Exp(ones), expOnes(terms), "Exp")
	at := n.Integ(ratZero, n.MonSubst(ones, neg(ratOne), 2))
	for c, i := 1, 0; i < terms; i++ {
		if i%2 == 0 {
			a[i] = ratZero
		} else {
			a[i] = i2tor(int64(c), int64(i))
			c *= -1
		}
	}
	n.checka(b, at, a, "ATan")

	// sin = Integ(0, cos), cos = Integ(1, -sin); sin^2 + cos^2 = 1 0 0 0 ...
	SS := mkdch2()
	CC := mkdch2()
	ss := *SS
	cc := *CC
	n.split(n.Integ(ratOne, n.Cmul(neg(ratOne), ss[0])), CC)
	n.split(n.Integ(ratZero, cc[0]), SS)
	s := n.Split(ss[1])
	c := n.Split(cc[1])
	for i := range a {
		a[i] = ratZero
	}
	a[0] = ratOne
	n.checka(b, n.Add(n.Mul(s[0], s[1]), n.Mul(c[0], c[1])), a, "sin^2+cos^2")
}

func BenchmarkPowser(b *testing.B) {
	goTable := []rat{itor(1), itor(1), i2tor(3, 2), i2tor(13, 6), i2tor(73, 24),
		i2tor(167, 40), i2tor(4051, 720), i2tor(37633, 5040), i2tor(43817, 4480),
		i2tor(4596553, 362880)}
	for i, r := range expOnes(10) {
		if r != goTable[i] {
			b.Fatalf("Powser: expOnes disagrees with powser1.go's table at %d", i)
		}
	}
	var m cpuMeter
	b.ResetTimer()
	m.start()
	for i := 0; i < b.N; i++ {
		n := &psNet{quit: make(chan struct{})}
		n.runChecks(b, powserTerms)
		m.stop()
		b.StopTimer()
		n.shutdown()
		b.StartTimer()
		m.start()
	}
	m.stop()
	b.StopTimer()
	m.report(b)
}

// ---- ChanRequestResponse ---------------------------------------------------------------
// One server goroutine per P answers requests from one shared unbuffered channel on the
// reply channel each request carries; 4 x GOMAXPROCS clients loop: stamp, send, receive
// the reply, stamp. Each client makes its reply channel (capacity 1) once and reuses it.
// op = one round trip (b.N split evenly between the clients); p50-ns, p99-ns, p999-ns:
// nearest-rank percentiles of the round-trip times; max-ns, mean-ns; starved% (the share
// of all round-trip time in round trips over 100 µs); cpu%.

type crrReply struct{ v int64 }

type crrRequest struct {
	v     int64
	reply chan crrReply
}

func BenchmarkChanRequestResponse(b *testing.B) {
	procs := runtime.GOMAXPROCS(0)
	servers, clients := procs, 4*procs
	b.StopTimer()
	samples := make([][]int64, clients)
	for c := range samples {
		k := b.N / clients
		if c < b.N%clients {
			k++
		}
		samples[c] = make([]int64, k)
	}
	requests := make(chan crrRequest)
	var serversExited, clientsDone sync.WaitGroup
	serversExited.Add(servers)
	for s := 0; s < servers; s++ {
		go func() {
			for r := range requests {
				r.reply <- crrReply{r.v + 1}
			}
			serversExited.Done()
		}()
	}
	var m cpuMeter
	b.ResetTimer()
	b.StartTimer()
	m.start()
	clientsDone.Add(clients)
	for c := 0; c < clients; c++ {
		go func(lat []int64) {
			reply := make(chan crrReply, 1)
			for i := range lat {
				t0 := time.Now()
				requests <- crrRequest{int64(i), reply}
				r := <-reply
				lat[i] = int64(time.Since(t0))
				if r.v != int64(i)+1 {
					panic("ChanRequestResponse: wrong reply")
				}
			}
			clientsDone.Done()
		}(samples[c])
	}
	clientsDone.Wait()
	m.stop()
	b.StopTimer()
	close(requests)
	serversExited.Wait()

	all := make([]int64, 0, b.N)
	for _, s := range samples {
		all = append(all, s...)
	}
	if len(all) == 0 {
		return
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	percentile := func(permille int) float64 { // the ceil(q n)-th smallest
		return float64(all[(permille*len(all)+999)/1000-1])
	}
	b.ReportMetric(percentile(500), "p50-ns")
	b.ReportMetric(percentile(990), "p99-ns")
	b.ReportMetric(percentile(999), "p999-ns")
	b.ReportMetric(float64(all[len(all)-1]), "max-ns")
	var sum float64
	for _, v := range all {
		sum += float64(v)
	}
	b.ReportMetric(sum/float64(len(all)), "mean-ns")
	var starved float64 // round trips over 100 µs: clients passed over (corun's twin says more)
	for _, v := range all {
		if v > 100000 {
			starved += float64(v)
		}
	}
	if sum > 0 {
		b.ReportMetric(100*starved/sum, "starved%")
	}
	m.report(b)
}
