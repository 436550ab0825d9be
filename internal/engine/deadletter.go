package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"time"

	"github.com/writeguard/writeguard/envelope"
	"github.com/writeguard/writeguard/hooks"
	"github.com/writeguard/writeguard/policy"
)

// deadLetterGather is how many invalid documents of one call are gathered
// before they are handed to the sink in one Put; the rest go before the
// call waits a backoff, and at its end. An ordered write that meets many invalid documents ends one
// command at each of them, and one Put per command would multiply the
// sink's writes.
const deadLetterGather = 256

// park sets invalid items aside for the sink: they leave the write (an
// ordered write resumes after them, as after any handled document) and are
// handed to the sink in gathered Puts (flushDeadLetters). Without a sink
// they end failed at once.
func (c *Call) park(ctx context.Context, its []*item) {
	if len(its) == 0 {
		return
	}
	if c.e.cfg.Sink == nil {
		for _, it := range its {
			it.reason = ReasonNotRetried
			c.settle(it, policy.Failed)
		}
		return
	}
	for _, it := range its {
		it.to(parked)
	}
	c.parked = append(c.parked, its...)
	if len(c.parked) >= deadLetterGather {
		c.flushDeadLetters(ctx)
	}
}

// flushDeadLetters hands the parked items to the sink.
func (c *Call) flushDeadLetters(ctx context.Context) {
	its := c.parked
	c.parked = nil
	c.deadLetter(ctx, its)
}

// deadLetter hands parked Invalid items to the sink as one batch (park
// parks nothing without a sink). A failing Put is retried with the write
// backoff while its error classifies as retryable; then the fallback sink
// is tried; what no sink stored ends "dead_letter_failed", its document
// kept in the Report.
func (c *Call) deadLetter(ctx context.Context, its []*item) {
	if len(its) == 0 {
		return
	}
	ctx, release := graceContext(ctx, c.e.cfg.DeadLetterGrace)
	defer release()
	e := c.e
	now := e.cfg.Clock.Now().UTC().Truncate(time.Millisecond)
	envs := make([]envelope.Envelope, len(its))
	var traceID, spanID string
	if e.hooks.TraceIDs != nil {
		traceID, spanID = e.hooks.TraceIDs(ctx)
	}
	for i, it := range its {
		envs[i] = c.envelopeFor(it, now, traceID, spanID)
		it.more().keywords = envs[i].FailingKeywords
	}
	envs, owner := c.collapse(envs)
	errs := c.putAll(ctx, envs)
	for i, it := range its {
		if err := errs[owner[i]]; err != nil {
			it.more().err = err
			it.reason = ReasonSinkFailed
			c.settle(it, policy.DeadLetterFailed)
		} else {
			c.settle(it, policy.DeadLettered)
		}
	}
}

// collapse merges the envelopes of one gathered Put that share a
// fingerprint (identical inputs: documents without _id that differ in
// nothing else, identical models) into one, whose Attempts adds theirs
// and whose Multiplicity is the number of such inputs this call has
// handed to the sink so far (c.copies, across its gathered Puts: the
// sinks keep the largest they see, so the call's last Put of a
// fingerprint carries its total). An insert whose _id the caller gave
// counts once: its copies are one document. owner[i] is the index in
// out of envs[i].
func (c *Call) collapse(envs []envelope.Envelope) (out []envelope.Envelope, owner []int) {
	at := make(map[string]int, len(envs))
	owner = make([]int, len(envs))
	for i, env := range envs {
		k, ok := at[env.Fingerprint]
		if !ok {
			k = len(out)
			at[env.Fingerprint] = k
			out = append(out, env)
		} else {
			out[k].Attempts += env.Attempts
		}
		owner[i] = k
		if env.Kind != envelope.KindInsertOne || env.IDAssigned {
			if c.copies == nil {
				c.copies = map[string]int{}
			}
			c.copies[env.Fingerprint]++
		}
	}
	for k := range out {
		out[k].Multiplicity = max(c.copies[out[k].Fingerprint], 1)
	}
	return out, owner
}

// putAll stores envs in the sink, then those it did not confirm in the
// fallback sink, and returns one error per envelope (nil: stored).
func (c *Call) putAll(ctx context.Context, envs []envelope.Envelope) []error {
	e := c.e
	errs := c.put(ctx, e.cfg.Sink, envs, false)
	for i, err := range errs {
		if err != nil {
			errs[i] = &SinkError{Kind: e.sinkKind(err), Err: err}
		}
	}
	if e.cfg.Fallback != nil {
		// Only the envelopes the sink did not confirm go to the fallback.
		var idx []int
		var rest []envelope.Envelope
		for i, err := range errs {
			if err != nil {
				idx, rest = append(idx, i), append(rest, envs[i])
			}
		}
		if len(rest) > 0 {
			ferrs := c.put(ctx, e.cfg.Fallback, rest, true)
			for k, i := range idx {
				if ferrs[k] == nil {
					errs[i] = nil
				} else {
					se := errs[i].(*SinkError)
					se.Kind += "; fallback: " + e.sinkKind(ferrs[k])
					se.Err = fmt.Errorf("%w; fallback sink: %w", se.Err, ferrs[k])
				}
			}
		}
	}
	return errs
}

// SinkError is the error of a document whose envelope no sink stored
// (disposition dead_letter_failed): Kind names the sink's failure by code
// and class, without values ("13 Unauthorized, permanent"; "client:
// context deadline exceeded, ..."; with a fallback sink, "<sink's>;
// fallback: <fallback's>"), Err is the sinks' error.
type SinkError struct {
	Kind string
	Err  error
}

// Error returns "writeguard: dead-letter sink failed (<Kind>): <Err>",
// Err's text scrubbed of the values it may quote (policy.ScrubValues).
func (e *SinkError) Error() string {
	return "writeguard: dead-letter sink failed (" + e.Kind + "): " + policy.ScrubError(e.Err)
}

// Unwrap returns Err.
func (e *SinkError) Unwrap() error { return e.Err }

// sinkKind names a sink's failure: its code and code name (FailureKind;
// a file sink's system error by its errno text, a context's end as
// such), then its class under the collection's classifier.
func (e *Engine) sinkKind(err error) string {
	fs := policy.Extract(err)
	if len(fs) == 0 {
		return "unknown"
	}
	f := &fs[0]
	kind := FailureKind(f)
	var errno syscall.Errno
	switch {
	case f.Code != 0:
	case errors.Is(err, context.DeadlineExceeded):
		kind = "client: " + context.DeadlineExceeded.Error()
	case errors.Is(err, context.Canceled):
		kind = "client: " + context.Canceled.Error()
	case errors.As(err, &errno):
		kind = "system: " + errno.Error()
	}
	return kind + ", " + e.cfg.Classifier.Classify(*f).String()
}

// graceContext returns the context of a gathered dead-letter Put: ctx's
// values without its cancellation, ended grace after ctx ends (its
// deadline passes or it is cancelled, before or during the Put) and at
// the latest grace after ctx's deadline. So a call whose writes ended in
// time also dead-letters them, even when its context ends between its
// last write command and the Put (the finishing pattern of a call made
// with a deadline), and returns at most about grace after its deadline.
// grace 0 (or less) keeps ctx as it is. release frees the timer.
func graceContext(ctx context.Context, grace time.Duration) (context.Context, func()) {
	if grace <= 0 {
		return ctx, func() {}
	}
	gctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	cancels := []func(){cancel}
	if dl, ok := ctx.Deadline(); ok {
		var c2 context.CancelFunc
		gctx, c2 = context.WithDeadline(gctx, dl.Add(grace))
		cancels = append(cancels, c2)
	}
	var timer *time.Timer
	var mu sync.Mutex
	stop := context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		timer = time.AfterFunc(grace, cancel)
	})
	return gctx, func() {
		stop()
		mu.Lock()
		if timer != nil {
			timer.Stop()
		}
		mu.Unlock()
		for _, c := range cancels {
			c()
		}
	}
}

// put stores envs in sink and returns one error per envelope (nil:
// stored). It calls envelope.PutEach, so a sink that says which envelopes
// of a gathered Put it stored (envelope.PartialSink) has only the others
// sent again, retrying retryable errors with the write backoff
// (retrySide); the documents whose envelope was stored are dead-lettered
// even when others of the same Put were not.
func (c *Call) put(ctx context.Context, sink envelope.Sink, envs []envelope.Envelope, fallback bool) []error {
	e := c.e
	errs := make([]error, len(envs))
	pending := make([]int, len(envs)) // indexes of envs not yet confirmed
	for i := range pending {
		pending[i] = i
	}
	err := c.retrySide(ctx, e.cfg.Backoff.MaxAttempts, func(attempt int) error {
		sub := make([]envelope.Envelope, len(pending))
		for k, i := range pending {
			sub[k] = envs[i]
		}
		dctx := ctx
		var t0 time.Time
		if e.observed {
			dctx = e.hooks.DeadLetterStarted(ctx, &hooks.DeadLetterStart{Op: c.op, Envelopes: len(sub), Attempt: attempt, Fallback: fallback})
			t0 = e.cfg.Clock.Now()
		}
		// envelope.PutEach: per envelope when the sink can say it
		// (envelope.PartialSink), else Put's error for every one.
		var each []error
		perr := e.recovered("dead-letter sink", func() error {
			each = envelope.PutEach(dctx, sink, sub)
			return nil
		})
		var first error
		if perr != nil {
			each = make([]error, len(sub))
			for k := range each {
				each[k] = perr
			}
		}
		left := pending[:0]
		for k, i := range pending {
			errs[i] = each[k]
			if each[k] != nil {
				left = append(left, i)
				if first == nil {
					first = each[k]
				}
			}
		}
		pending = left
		if e.observed {
			e.hooks.DeadLetterFinished(dctx, &hooks.DeadLetterEnd{Op: c.op, Envelopes: len(sub), Attempt: attempt, Fallback: fallback, Duration: e.cfg.Clock.Now().Sub(t0), Err: first})
		}
		return first
	})
	if err != nil {
		// The last error of the side retries (a retry stopped by the
		// context says so) stands for every envelope still unconfirmed.
		for _, i := range pending {
			errs[i] = err
		}
	}
	return errs
}

// envelopeFor builds the envelope of an Invalid item (envelope.New: the
// model→envelope conversion lives in package envelope); traceID and
// spanID come from the hooks (hooks.Hooks.TraceIDs), empty without them.
func (c *Call) envelopeFor(it *item, now time.Time, traceID, spanID string) envelope.Envelope {
	capture := envelope.Capture{
		Document: it.doc, DocumentID: it.id, IDAssigned: it.idAssigned, Call: c.callOpts, Failure: it.fail,
		Namespace: c.e.Namespace(), Operation: c.op.Name, BatchIndex: it.index, Now: now, TraceID: traceID, SpanID: spanID,
		Encoder: c.e.cfg.NewEncoder,
	}
	if it.kind != KindInsert {
		capture.Model = it.model()
	}
	return envelope.New(capture)
}
