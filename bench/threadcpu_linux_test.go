//go:build linux

package bench

import (
	"runtime"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// threadCPU returns the CPU time, user and system, that the calling OS
// thread has used: clock_gettime(2) CLOCK_THREAD_CPUTIME_ID, the
// scheduler's nanosecond runtime of the thread brought up to date at the
// call. Call it from a goroutine locked to its thread
// (runtime.LockOSThread): another goroutine's work, another process's,
// and the runtime's background threads (the GC's mark workers, the
// scavenger) are not counted; the GC assists the goroutine makes are.
//
// Not getrusage(2) RUSAGE_THREAD, although it reads the same counter:
// getrusage takes the thread's runtime as of the scheduler's last update
// of it (a tick or a context switch), so the CPU a call spends after its
// last block is charged to whatever runs next, and on this machine's
// kernel it read a third or less of a CPU-bound section's time
// (BenchmarkThreadClocks).
func threadCPU() time.Duration { return clockCPU(unix.CLOCK_THREAD_CPUTIME_ID) }

// processCPU returns the CPU time of the whole process, every thread
// (CLOCK_PROCESS_CPUTIME_ID): the GC's background work included.
func processCPU() time.Duration { return clockCPU(unix.CLOCK_PROCESS_CPUTIME_ID) }

func clockCPU(id int32) time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(id, &ts); err != nil {
		panic("clock_gettime: " + err.Error())
	}
	return time.Duration(ts.Nano())
}

// rusageThreadCPU is getrusage(2) RUSAGE_THREAD, user plus system time.
func rusageThreadCPU() time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_THREAD, &ru); err != nil {
		panic("getrusage: " + err.Error())
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// threadCPUSupported reports whether threadCPU reads a thread's CPU time.
const threadCPUSupported = true

var spinSink uint64

// BenchmarkThreadClocks reads the same CPU-bound section (no system call,
// no block; 50,000 and 500,000 multiply-adds, about 30 µs and 0.25 ms
// here) with both thread clocks, on a
// goroutine locked to its thread, and reports each clock's mean reading
// per section (rusage-µs, clock-µs) and their ratio (rusage/clock): how
// far getrusage's RUSAGE_THREAD is from the thread's CPU time when read
// around one call.
func BenchmarkThreadClocks(b *testing.B) {
	for _, n := range []int{50_000, 500_000} {
		b.Run("spin="+strconv.Itoa(n), func(b *testing.B) {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			var ru, ck time.Duration
			k := 0
			for b.Loop() {
				r0, c0 := rusageThreadCPU(), threadCPU()
				for i := range n {
					spinSink += uint64(i) * uint64(i)
				}
				r1, c1 := rusageThreadCPU(), threadCPU()
				ru, ck = ru+r1-r0, ck+c1-c0
				k++
			}
			b.ReportMetric(float64(ru.Microseconds())/float64(k), "rusage-µs")
			b.ReportMetric(float64(ck.Microseconds())/float64(k), "clock-µs")
			b.ReportMetric(float64(ru)/float64(ck), "rusage/clock")
		})
	}
}
