package writeguard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/writeguard/writeguard/internal/engine"
)

// ErrDeadLetterFlood matches (errors.Is) the error of a call that
// dead-lettered documents while the dead-letter flood breaker was open
// (see WithDeadLetterBreaker). Such a call is not Handled, although its
// documents are in the dead-letter sink: the share of dead-lettered
// documents says that something upstream changed (a validator, a
// producer) and a person must look.
var ErrDeadLetterFlood = errors.New("writeguard: dead-letter flood")

// Defaults of BreakerConfig, used for its zero fields.
const (
	// DefaultBreakerThreshold is the share of dead-lettered documents
	// (0.5: half) over the window at or above which the breaker opens.
	DefaultBreakerThreshold = 0.5
	// DefaultBreakerWindow is the sliding window the share is measured
	// over.
	DefaultBreakerWindow = time.Minute
	// DefaultBreakerMinDocuments is the number of documents the window
	// must hold before the share counts: a handful of bad documents in a
	// quiet minute is not a flood.
	DefaultBreakerMinDocuments = 100
)

// BreakerConfig configures the dead-letter flood breaker. A zero field
// takes its default.
type BreakerConfig struct {
	// Threshold is the share of dead-lettered documents, in (0, 1], at or
	// above which the breaker opens (default DefaultBreakerThreshold).
	Threshold float64
	// Window is how far back the share looks, ≥ 1 s (default
	// DefaultBreakerWindow). It is measured in tenths: a document counts
	// for between 0.9 and 1 window.
	Window time.Duration
	// MinDocuments is the number of documents, ≥ 1, the window must hold
	// before the breaker may open (default DefaultBreakerMinDocuments).
	MinDocuments int
}

// withDefaults returns c with its zero fields set to the defaults.
func (c BreakerConfig) withDefaults() BreakerConfig {
	if c.Threshold == 0 {
		c.Threshold = DefaultBreakerThreshold
	}
	if c.Window == 0 {
		c.Window = DefaultBreakerWindow
	}
	if c.MinDocuments == 0 {
		c.MinDocuments = DefaultBreakerMinDocuments
	}
	return c
}

// validate returns an error naming the first field out of range.
func (c BreakerConfig) validate() error {
	switch {
	case !(c.Threshold > 0 && c.Threshold <= 1):
		return fmt.Errorf("writeguard: WithDeadLetterBreaker: Threshold %v: want a share in (0, 1]", c.Threshold)
	case c.Window < time.Second:
		return fmt.Errorf("writeguard: WithDeadLetterBreaker: Window %v: want ≥ 1s", c.Window)
	case c.MinDocuments < 1:
		return fmt.Errorf("writeguard: WithDeadLetterBreaker: MinDocuments %d: want ≥ 1", c.MinDocuments)
	}
	return nil
}

// WithDeadLetterBreaker turns the dead-letter flood breaker on. The
// breaker counts, over a sliding window, the documents the guarded
// collection's calls settled and those they dead-lettered. While the
// window holds at least cfg.MinDocuments documents and the dead-lettered
// share is at or above cfg.Threshold, the breaker is open, and every call
// that dead-letters a document returns a *Report that is not Handled,
// matches ErrDeadLetterFlood and carries a *FloodError (errors.As) saying
// the share. The documents are still dead-lettered: the breaker changes
// what the caller is told, never where a document goes. It closes by
// itself when the share falls below the threshold (good documents dilute
// it, or the dead-lettered ones leave the window). Opening and closing are
// logged (WithLogger, Warn and Info).
//
// Default: off. Which share of dead letters is alarming is a property of
// the pipeline — a backfill of legacy data may park a third of its rows
// and be healthy, a clean API feed parks none — and a call that is not
// Handled makes many callers retry or stop, turning a backlog that is
// safely parked into an outage. Off by default, the flood is still
// visible: writeguard.call.inputs{writeguard.disposition="dead_lettered"}
// and the shipped alert rule WriteguardDeadLetterShareHigh watch the same
// share. Turn the breaker on where a person must stop the pipeline.
//
// Each Guarded has its own breaker; a call inside a transaction, which
// routes nothing, is not counted. A field out of range (see BreakerConfig)
// makes New and Wrap fail with an error naming it.
func WithDeadLetterBreaker(cfg BreakerConfig) Option {
	return optionFunc(func(c *config) {
		cfg = cfg.withDefaults()
		if err := cfg.validate(); err != nil {
			c.errs = append(c.errs, err)
			return
		}
		c.breaker = newBreaker(cfg)
	})
}

// FloodError is the reason a call that dead-lettered while the flood
// breaker was open is not Handled: the window's figures when the call
// ended. A *Report carries it (errors.As); it matches ErrDeadLetterFlood.
type FloodError struct {
	// Share is DeadLettered / Documents, in [0, 1].
	Share float64
	// Documents and DeadLettered are the window's counts, this call
	// included.
	Documents, DeadLettered int64
	// Threshold and Window are the breaker's configuration.
	Threshold float64
	Window    time.Duration
	// CallDeadLettered is the number of this call's documents that were
	// dead-lettered (all of them are in the sink).
	CallDeadLettered int
}

// Error says why the call is not handled, with the window's figures. It
// carries no document value.
func (e *FloodError) Error() string {
	return fmt.Sprintf("writeguard: dead-letter flood: %.0f%% of the last %v's %d documents were dead-lettered (breaker threshold %.0f%%); this call's %d dead-lettered documents are in the sink, nothing was lost",
		100*e.Share, e.Window, e.Documents, 100*e.Threshold, e.CallDeadLettered)
}

// Is reports whether target is ErrDeadLetterFlood.
func (e *FloodError) Is(target error) bool { return target == ErrDeadLetterFlood }

// DeadLetterFlood returns Share. otelhook reads it (through an interface,
// as it does Report.ErrorType) to mark the call's span and count the
// call in writeguard.dead_letter.flood.
func (e *FloodError) DeadLetterFlood() float64 { return e.Share }

// breaker is one Guarded's dead-letter flood breaker: its configuration
// and its sliding window (floodWindow).
type breaker struct {
	cfg    BreakerConfig
	window *floodWindow
}

func newBreaker(cfg BreakerConfig) *breaker {
	return &breaker{cfg: cfg, window: newFloodWindow(cfg.Window, cfg.MinDocuments, cfg.Threshold)}
}

// settled returns the engine's Settled callback of b (nil when b is nil,
// the breaker off): it records each call's settled and dead-lettered
// inputs, logs a transition, and returns the reason the call is not
// handled when the breaker is open and the call dead-lettered, else nil.
func (b *breaker) settled(namespace string, logger *slog.Logger, clk engine.Clock) func(context.Context, int, int) error {
	if b == nil {
		return nil
	}
	now := time.Now
	if clk != nil {
		now = clk.Now
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return func(ctx context.Context, inputs, dead int) error {
		st := b.window.record(now(), inputs, dead)
		attrs := []slog.Attr{
			slog.String("namespace", namespace), slog.Float64("share", st.Share),
			slog.Int64("documents", st.Docs), slog.Int64("dead_lettered", st.Dead),
			slog.Float64("threshold", b.cfg.Threshold), slog.Duration("window", b.cfg.Window),
		}
		switch {
		case st.Opened:
			logger.LogAttrs(ctx, slog.LevelWarn, "writeguard: dead-letter flood breaker open; calls that dead-letter are not handled", attrs...)
		case st.Closed:
			logger.LogAttrs(ctx, slog.LevelInfo, "writeguard: dead-letter flood breaker closed", attrs...)
		}
		if !st.Open || dead == 0 {
			return nil
		}
		return &FloodError{Share: st.Share, Documents: st.Docs, DeadLettered: st.Dead,
			Threshold: b.cfg.Threshold, Window: b.cfg.Window, CallDeadLettered: dead}
	}
}

// floodSlots is the number of slots a floodWindow is cut into: the share
// slides by a tenth of the window.
const floodSlots = 10

// floodWindow counts, over a sliding window, the inputs guarded calls
// settled and those they dead-lettered: the dead-letter flood breaker's
// state (WithDeadLetterBreaker). It is open while the window holds at
// least minDocs inputs and the dead-lettered share is at or above
// threshold. It is safe for concurrent use.
type floodWindow struct {
	width     int64 // nanoseconds per slot
	minDocs   int64
	threshold float64

	mu     sync.Mutex
	slots  [floodSlots]floodSlot
	open   bool
	latest int64 // the highest slot number seen; valid when seen
	seen   bool
}

// floodSlot counts the inputs of one tenth of the window, starting at
// start (a multiple of the slot width since the Unix epoch).
type floodSlot struct {
	start      int64 // slot number: UnixNano / width
	docs, dead int64
}

// floodState is what record saw: the window's counts after the call, the
// dead-lettered share, whether the breaker is open, and whether this call
// opened or closed it.
type floodState struct {
	Docs, Dead     int64
	Share          float64
	Open           bool
	Opened, Closed bool
}

// newFloodWindow returns a closed window of the given length (at least
// floodSlots nanoseconds), minimum count and threshold share (0 to 1).
func newFloodWindow(window time.Duration, minDocs int, threshold float64) *floodWindow {
	return &floodWindow{width: max(int64(window)/floodSlots, 1), minDocs: int64(minDocs), threshold: threshold}
}

// record adds a call's settled and dead-lettered inputs at now and returns
// the window's state. Any clock reading is accepted: before 1970, the
// zero time, far in the future (the distance from the epoch saturates at
// about ±292 years) or earlier than a reading already recorded (a clock
// stepped back: the inputs count in the latest slot seen, so the window
// never moves backwards and loses nothing).
func (w *floodWindow) record(now time.Time, docs, dead int) floodState {
	w.mu.Lock()
	defer w.mu.Unlock()
	slot := w.slotOf(now)
	s := &w.slots[slotIndex(slot)]
	if s.start != slot {
		*s = floodSlot{start: slot}
	}
	s.docs += int64(docs)
	s.dead += int64(dead)
	var st floodState
	for i := range w.slots {
		if o := &w.slots[i]; o.start <= slot && slot-o.start < floodSlots && slot-o.start >= 0 {
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

// flood returns the FloodError the call attached to r, nil when none.
func (r *Report) flood() *FloodError {
	for _, e := range r.extra {
		if fe, ok := e.(*FloodError); ok {
			return fe
		}
	}
	return nil
}

// slotOf returns the slot number of now: the floor of its distance from
// the Unix epoch (time.Time.Sub saturates, so any reading has one)
// divided by the slot width, never below the latest slot seen. Callers
// hold w.mu.
func (w *floodWindow) slotOf(now time.Time) int64 {
	d := int64(now.Sub(time.Unix(0, 0)))
	slot := d / w.width
	if d%w.width != 0 && d < 0 {
		slot-- // floor, so that slots before 1970 are a width wide too
	}
	if w.seen && slot < w.latest {
		slot = w.latest
	}
	w.latest, w.seen = slot, true
	return slot
}

// slotIndex maps a slot number, of any sign, to its index in slots.
func slotIndex(slot int64) int {
	i := slot % floodSlots
	if i < 0 {
		i += floodSlots
	}
	return int(i)
}
