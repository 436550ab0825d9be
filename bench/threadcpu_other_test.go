//go:build !linux

package bench

import "time"

// threadCPU is not available outside Linux (RUSAGE_THREAD is Linux's);
// the thread-CPU benchmarks skip themselves.
func threadCPU() time.Duration { return 0 }

func processCPU() time.Duration { return 0 }

const threadCPUSupported = false
