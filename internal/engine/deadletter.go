package engine

import (
	"context"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

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

// deadLetter hands Invalid items to the sink as one batch. Without a sink
// they end "failed". A failing Put is retried with the write backoff while
// its error classifies as retryable; then the fallback sink is tried; what
// no sink stored ends "dead_letter_failed", its document kept in the
// Report.
func (c *Call) deadLetter(ctx context.Context, its []*item) {
	if len(its) == 0 {
		return
	}
	e := c.e
	if e.cfg.Sink == nil {
		for _, it := range its {
			c.settle(it, policy.Failed)
		}
		return
	}
	now := e.cfg.Clock.Now().UTC().Truncate(time.Millisecond)
	envs := make([]envelope.Envelope, len(its))
	var traceID, spanID string
	if e.hooks.TraceIDs != nil {
		traceID, spanID = e.hooks.TraceIDs(ctx)
	}
	for i, it := range its {
		envs[i] = c.envelopeFor(it, now, traceID, spanID)
		it.keywords = envs[i].FailingKeywords
	}
	err := c.put(ctx, e.cfg.Sink, envs, false)
	if err != nil && e.cfg.Fallback != nil {
		if ferr := c.put(ctx, e.cfg.Fallback, envs, true); ferr == nil {
			err = nil
		} else {
			err = fmt.Errorf("%w; fallback sink: %w", err, ferr)
		}
	}
	for _, it := range its {
		if err != nil {
			it.err = fmt.Errorf("writeguard: dead-letter sink: %w", err)
			c.settle(it, policy.DeadLetterFailed)
		} else {
			c.settle(it, policy.DeadLettered)
		}
	}
}

// put calls sink.Put, retrying retryable errors with the write backoff.
func (c *Call) put(ctx context.Context, sink envelope.Sink, envs []envelope.Envelope, fallback bool) error {
	e := c.e
	return c.retrySide(ctx, e.cfg.Backoff.MaxAttempts, func(attempt int) error {
		dctx := ctx
		var t0 time.Time
		if e.observed {
			dctx = e.hooks.DeadLetterStarted(ctx, &hooks.DeadLetterStart{Op: c.op, Envelopes: len(envs), Attempt: attempt, Fallback: fallback})
			t0 = e.cfg.Clock.Now()
		}
		err := recovered("dead-letter sink", func() error { return sink.Put(dctx, envs) })
		if e.observed {
			e.hooks.DeadLetterFinished(dctx, &hooks.DeadLetterEnd{Op: c.op, Envelopes: len(envs), Attempt: attempt, Fallback: fallback, Duration: e.cfg.Clock.Now().Sub(t0), Err: err})
		}
		return err
	})
}

// envelopeFor builds the envelope of an Invalid item; traceID and spanID
// come from the hooks (hooks.Hooks.TraceIDs), empty without them.
func (c *Call) envelopeFor(it *item, now time.Time, traceID, spanID string) envelope.Envelope {
	f := it.fail
	original, idAssigned := it.doc, false
	if it.kind == KindInsert {
		idAssigned = it.idAssigned
	} else {
		original = modelDocument(it.model)
	}
	env := envelope.Envelope{
		SchemaVersion:   envelope.SchemaVersion,
		Fingerprint:     envelope.Fingerprint(original, idAssigned),
		Original:        original,
		DocumentID:      it.id,
		IDAssigned:      idAssigned,
		ErrInfo:         f.ErrInfo,
		FailingKeywords: envelope.FailingKeywords(f.ErrInfo),
		FailingPaths:    envelope.FailingPaths(f.ErrInfo),
		Code:            f.Code,
		CodeName:        f.CodeName,
		ErrMsg:          f.Message,
		Labels:          f.Labels,
		Namespace:       c.e.Namespace(),
		Operation:       c.op.Name,
		BatchIndex:      it.index,
		FirstSeen:       now,
		LastSeen:        now,
		Attempts:        1,
		Status:          envelope.StatusPending,
		TraceID:         traceID,
		SpanID:          spanID,
	}
	return env
}

// modelDocument describes a non-insert write model as a document for the
// dead-letter envelope: {op, model}, where model is the canonical Extended
// JSON of {filter, update|replacement, upsert}. Filters and updates hold
// $-prefixed keys ($set, $gt), which a stored document cannot carry
// through an update's $setOnInsert, so they are kept as text; canonical
// Extended JSON loses no BSON type. replay decodes it.
func modelDocument(m mongo.WriteModel) bson.Raw {
	var op string
	var d bson.D
	switch mm := m.(type) {
	case *mongo.UpdateOneModel:
		op, d = "updateOne", bson.D{{Key: "filter", Value: mm.Filter}, {Key: "update", Value: mm.Update}, {Key: "upsert", Value: mm.Upsert != nil && *mm.Upsert}}
	case *mongo.UpdateManyModel:
		op, d = "updateMany", bson.D{{Key: "filter", Value: mm.Filter}, {Key: "update", Value: mm.Update}, {Key: "upsert", Value: mm.Upsert != nil && *mm.Upsert}}
	case *mongo.ReplaceOneModel:
		op, d = "replaceOne", bson.D{{Key: "filter", Value: mm.Filter}, {Key: "replacement", Value: mm.Replacement}, {Key: "upsert", Value: mm.Upsert != nil && *mm.Upsert}}
	case *mongo.DeleteOneModel:
		op, d = "deleteOne", bson.D{{Key: "filter", Value: mm.Filter}}
	case *mongo.DeleteManyModel:
		op, d = "deleteMany", bson.D{{Key: "filter", Value: mm.Filter}}
	}
	js, err := bson.MarshalExtJSON(d, true, false)
	out := bson.D{{Key: "op", Value: op}, {Key: "model", Value: string(js)}}
	if err != nil {
		out = bson.D{{Key: "op", Value: fmt.Sprintf("%T", m)}, {Key: "marshal_error", Value: err.Error()}}
	}
	raw, _ := bson.Marshal(out)
	return raw
}
