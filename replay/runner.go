package replay

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/writeguard/writeguard"
	"github.com/writeguard/writeguard/dlq"
	"github.com/writeguard/writeguard/envelope"
)

// stored is an envelope as read from the DLQ, with its _id and the
// fields replay keeps besides those of envelope.Envelope.
type stored struct {
	ID                bson.RawValue `bson:"_id"`
	envelope.Envelope `bson:",inline"`
	// ReplayHold is envelope.FieldReplayHold.
	ReplayHold string `bson:"replay_hold,omitempty"`
	// decodeErr says why the envelope cannot be decoded
	// (envelope.DecodeError: which field, never its value) or its
	// original cannot be reassembled from its pieces; it is skipped, and
	// nothing else of its batch is held up.
	decodeErr string
}

// runner is one worker of a Run.
type runner struct {
	cfg    *config
	sh     *shared
	dlq    *mongo.Collection
	target writeguard.Collection
	owner  string
	res    Result
	start  time.Time
	sent   int64 // envelopes sent to the target, for the rate limit
}

// batchSize is the number of envelopes per batch: WithBatchSize, or less
// under a rate limit.
func (r *runner) batchSize() int {
	batch := r.cfg.batch
	if r.cfg.rate > 0 {
		if per := int(r.cfg.rate); per < batch {
			batch = max(per, 1)
		}
	}
	return batch
}

// run makes passes over the selection until one meets no envelope that
// another runner holds: those are waited for, as their runner may stop
// without finishing them (then their lease expires and this runner takes
// them).
func (r *runner) run(ctx context.Context, q bson.D) error {
	poll := min(max(r.cfg.lease/20, 10*time.Millisecond), time.Second)
	for {
		held, err := r.pass(ctx, q)
		if err != nil || !held {
			return err
		}
		if err := sleep(ctx, poll); err != nil {
			return err
		}
	}
}

// pass reads the selection's _ids in batches of increasing _id, claims
// each batch and replays what it got. held reports whether another runner
// held some of them.
func (r *runner) pass(ctx context.Context, q bson.D) (held bool, err error) {
	batch := r.batchSize()
	var last bson.RawValue
	for {
		if err := ctx.Err(); err != nil {
			return held, err
		}
		page := q
		if last.Type != 0 {
			page = bson.D{{Key: "$and", Value: bson.A{q, bson.D{{Key: "_id", Value: bson.D{{Key: "$gt", Value: last}}}}}}}
		}
		ids, err := r.candidates(ctx, page, batch)
		if err != nil || len(ids) == 0 {
			return held, err
		}
		last = ids[len(ids)-1]
		// The rate's wait comes before the claim (a claim held through
		// it could lapse); what is claimed counts as sent.
		if err := r.pace(ctx, 0); err != nil {
			return held, err
		}
		cl, err := r.claim(ctx, q, ids)
		if err != nil {
			return held, err
		}
		r.sent += int64(len(cl.envs))
		if cl.held > 0 {
			held = true
			r.res.LeasesHeld += int64(cl.held)
		}
		if len(cl.envs) > 0 {
			if err := r.process(ctx, cl); err != nil {
				return held, err
			}
		}
		if len(ids) < batch {
			return held, nil
		}
	}
}

// candidates returns the _ids of the next n envelopes of q.
func (r *runner) candidates(ctx context.Context, q bson.D, n int) ([]bson.RawValue, error) {
	cur, err := r.dlq.Find(ctx, q, options.Find().SetSort(bson.D{{Key: "_id", Value: 1}}).
		SetLimit(int64(n)).SetBatchSize(int32(n)).SetProjection(bson.D{{Key: "_id", Value: 1}}))
	if err != nil {
		return nil, fmt.Errorf("replay: reading the dead-letter collection: %w", err)
	}
	defer cur.Close(ctx)
	var ids []bson.RawValue
	for cur.Next(ctx) {
		if v, err := cur.Current.LookupErr("_id"); err == nil {
			ids = append(ids, bson.RawValue{Type: v.Type, Value: append([]byte(nil), v.Value...)})
		}
	}
	if err := cur.Err(); err != nil {
		return nil, fmt.Errorf("replay: reading the dead-letter collection: %w", err)
	}
	return ids, nil
}

func (r *runner) read(ctx context.Context, q bson.D, n int) ([]stored, error) {
	cur, err := r.dlq.Find(ctx, q, options.Find().SetSort(bson.D{{Key: "_id", Value: 1}}).SetLimit(int64(n)).SetBatchSize(int32(n)))
	if err != nil {
		return nil, fmt.Errorf("replay: reading the dead-letter collection: %w", err)
	}
	defer cur.Close(ctx)
	var out []stored
	for cur.Next(ctx) {
		id := cur.Current.Lookup("_id")
		s := stored{ID: bson.RawValue{Type: id.Type, Value: append([]byte(nil), id.Value...)}}
		// envelope.Decode: any format, binary originals included; an
		// envelope that cannot be decoded is data, not a failure.
		env, err := envelope.Decode(cur.Current)
		var de *envelope.DecodeError
		switch {
		case errors.As(err, &de):
			s.decodeErr = de.Error()
		case err != nil:
			return nil, fmt.Errorf("replay: reading the dead-letter collection: %w", err)
		default:
			s.Envelope = env
			if v, ok := cur.Current.Lookup(envelope.FieldReplayHold).StringValueOK(); ok {
				s.ReplayHold = v
			}
			if err := r.reassemble(ctx, &s); err != nil {
				return nil, err
			}
		}
		out = append(out, s)
	}
	if err := cur.Err(); err != nil {
		return nil, fmt.Errorf("replay: reading the dead-letter collection: %w", err)
	}
	return out, nil
}

// reassemble gives s its original when it was set apart in pieces
// (envelope.Envelope.OriginalPieces): read from the DLQ's side collection
// and checked (dlq.ReadOriginal). An envelope whose pieces are missing or
// damaged is skipped with the reason; a read that fails is an error.
func (r *runner) reassemble(ctx context.Context, s *stored) error {
	if s.OriginalPieces == nil {
		return nil
	}
	orig, err := dlq.ReadOriginal(ctx, r.dlq, s.Envelope)
	switch {
	case errors.Is(err, dlq.ErrPiecesMissing):
		s.decodeErr = "original stored in pieces cannot be reassembled: " + err.Error()
	case err != nil:
		return fmt.Errorf("replay: %w", err)
	default:
		s.Original = orig
	}
	return nil
}

// process replays a claimed batch and releases its leases, and once the
// envelopes are marked their earlier slots. The leases are renewed while
// it works. The send tokens of writes sent and not marked are kept, to
// expire: the next runner then holds those envelopes (see Lease.InFlight).
func (r *runner) process(ctx context.Context, cl claimed) error {
	st := &batchState{tokens: newLeaseSet(), work: newLeaseSet(cl.leases...)}
	stop := r.renew(ctx, st.work)
	defer func() {
		stop()
		ids := cl.leases
		if st.marked {
			ids = append(ids, st.tokens.list()...)
		}
		r.release(ctx, ids)
		if st.marked {
			r.releaseStale(ctx, cl.stale, cl.at)
		}
	}()
	return r.batch(ctx, cl, st)
}

// batchState is what process needs to know of a batch at its end.
type batchState struct {
	// tokens holds the send tokens taken: released once the batch is
	// marked, else kept to expire (see Lease.InFlight).
	tokens *leaseSet
	// work holds the leases renewed while the batch runs: the claims,
	// then the send tokens too.
	work *leaseSet
	// marked is set once the outcomes are recorded in the DLQ.
	marked bool
}

// pace waits, with a rate limit, until sending more envelopes keeps the
// average at or below the rate (counting from the start of the run, the
// envelopes already sent are due at sent/rate), then counts n more sent.
func (r *runner) pace(ctx context.Context, n int) error {
	defer func() { r.sent += int64(n) }()
	if r.cfg.rate <= 0 || r.sent == 0 {
		return nil
	}
	due := r.start.Add(time.Duration(float64(r.sent) / r.cfg.rate * float64(time.Second)))
	return sleep(ctx, due.Sub(r.cfg.now()))
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// batch replays one claimed batch: prepare, send (the updates, replaces
// and deletes fenced first: see fence), hold what may have been applied,
// judge, mark. It returns an error when every write of the batch failed,
// none with an error of its own (the target is unreachable, say).
func (r *runner) batch(ctx context.Context, cl claimed, st *batchState) error {
	entries, send := r.prepare(ctx, cl.envs, cl.inFlight)
	send, writeErr, err := r.sendAll(ctx, cl, st, send)
	if err != nil {
		return err
	}
	targetDown := holdAmbiguous(send)
	r.judge(entries)
	if err := r.markBatch(ctx, entries, st); err != nil {
		return err
	}
	if !targetDown {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return r.targetDownError(send, writeErr)
}

// markBatch records the outcomes of a batch in the DLQ, even when ctx
// ended meanwhile (Ctrl-C): the writes are done, their outcomes known;
// for up to 10 s then. Once marked, the send tokens can go.
func (r *runner) markBatch(ctx context.Context, entries []*entry, st *batchState) error {
	mctx := ctx
	if ctx.Err() != nil {
		var cancel context.CancelFunc
		mctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
	}
	if err := r.mark(mctx, entries); err != nil {
		return err
	}
	st.marked = true
	return nil
}

// targetDownError is the error that stops a run whose batch had every
// write fail: writeErr, or the first failed entry's reason.
func (r *runner) targetDownError(send []*entry, writeErr error) error {
	if writeErr == nil {
		for _, e := range send {
			if e.out == outFailed {
				writeErr = errors.New(e.reason)
				break
			}
		}
	}
	return fmt.Errorf("replay: every write of batch %d failed; stopping: %w", r.res.Batches, writeErr)
}
