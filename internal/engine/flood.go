package engine

import (
	"sync"
	"time"
)

// floodSlots is the number of slots a FloodWindow is cut into: the share
// slides by a tenth of the window.
const floodSlots = 10

// FloodWindow counts, over a sliding window, the inputs guarded calls
// settled and those they dead-lettered: the dead-letter flood breaker's
// state (the root's WithDeadLetterBreaker). It is open while the window
// holds at least minDocs inputs and the dead-lettered share is at or above
// threshold. It is safe for concurrent use.
type FloodWindow struct {
	width     int64 // nanoseconds per slot
	minDocs   int64
	threshold float64

	mu    sync.Mutex
	slots [floodSlots]floodSlot
	open  bool
}

// floodSlot counts the inputs of one tenth of the window, starting at
// start (a multiple of the slot width since the Unix epoch).
type floodSlot struct {
	start      int64 // slot number: UnixNano / width
	docs, dead int64
}

// FloodState is what Record saw: the window's counts after the call, the
// dead-lettered share, whether the breaker is open, and whether this call
// opened or closed it.
type FloodState struct {
	Docs, Dead     int64
	Share          float64
	Open           bool
	Opened, Closed bool
}

// NewFloodWindow returns a closed window of the given length (at least
// floodSlots nanoseconds), minimum count and threshold share (0 to 1).
func NewFloodWindow(window time.Duration, minDocs int, threshold float64) *FloodWindow {
	return &FloodWindow{width: max(int64(window)/floodSlots, 1), minDocs: int64(minDocs), threshold: threshold}
}

// Record adds a call's settled and dead-lettered inputs at now and returns
// the window's state.
func (w *FloodWindow) Record(now time.Time, docs, dead int) FloodState {
	slot := now.UnixNano() / w.width
	w.mu.Lock()
	defer w.mu.Unlock()
	s := &w.slots[slot%floodSlots]
	if s.start != slot {
		*s = floodSlot{start: slot}
	}
	s.docs += int64(docs)
	s.dead += int64(dead)
	var st FloodState
	for i := range w.slots {
		if o := &w.slots[i]; o.start > slot-floodSlots && o.start <= slot {
			st.Docs += o.docs
			st.Dead += o.dead
		}
	}
	if st.Docs > 0 {
		st.Share = float64(st.Dead) / float64(st.Docs)
	}
	open := st.Docs >= w.minDocs && st.Share >= w.threshold
	st.Opened, st.Closed = open && !w.open, !open && w.open
	w.open, st.Open = open, open
	return st
}
