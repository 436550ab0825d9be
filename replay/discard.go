package replay

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/writeguard/writeguard/dlq"
	"github.com/writeguard/writeguard/envelope"
)

// DiscardResult is what Discard did.
type DiscardResult struct {
	// Discarded is the number of envelopes marked discarded.
	Discarded int64
	// Busy is the number of selected envelopes a replay held (a live
	// lease): not discarded. The replay decides them; discard them after
	// it ended, if they are still pending.
	Busy int64
	// BusyIDs are the _ids of up to 100 of them.
	BusyIDs []bson.RawValue
}

// DefaultDiscardLease is how long Discard's claims last without renewal
// unless WithLease says otherwise: 1 minute. Discard renews them while
// it works (every third of the lease), so the lease bounds only how long
// a discard that stopped (killed, cut off from the DLQ) blocks replays of
// the envelopes it had claimed.
const DefaultDiscardLease = time.Minute

// Discard marks the envelopes of the dead-letter collection coll that f
// selects (pending ones when f lists no status) as given up, as
// dlq.Discard does, but agreeing with the replays that may be running:
// it claims each envelope with a lease in the lease collection (the
// DLQ's name + LeaseCollectionSuffix, or WithLeaseCollection;
// WithBatchSize sets how many per claim), and marks only the envelopes
// it claimed, renewing its claims while it marks them (WithLease, default
// DefaultDiscardLease: a discard killed after its claim blocks replays of
// those envelopes for at most that long). An envelope a replay holds is not
// discarded but counted Busy: the replay writes it or records why not,
// and the operator sees that the discard did not take. A replay that
// claims an envelope after Discard marked it no longer selects it. So of
// a discard and a replay racing for one envelope, one wins, and the
// result says which: never "discarded" followed by a write.
//
// Options other than WithBatchSize, WithLease, WithLeaseCollection and
// WithOwner are ignored. It returns dlq.ErrEmptyFilter for a zero f, f's
// error (wrapping dlq.ErrBadFilter), an error wrapping ErrClockSkew (see
// WithLease), or the driver's, with what it had done.
func Discard(ctx context.Context, coll *mongo.Collection, f dlq.Filter, opts ...Option) (DiscardResult, error) {
	var res DiscardResult
	if coll == nil {
		return res, errors.New("replay: Discard: nil dead-letter collection (dlq)")
	}
	if f.IsZero() {
		return res, dlq.ErrEmptyFilter
	}
	cfg := newConfig(opts)
	if len(cfg.errs) > 0 {
		return res, errors.Join(cfg.errs...)
	}
	if cfg.leases == nil {
		cfg.leases = coll.Database().Collection(coll.Name() + LeaseCollectionSuffix)
	}
	if cfg.owner == "" {
		cfg.owner = "discard-" + randomID()
	}
	cfg.run = "discard-" + randomID()
	if !cfg.leaseSet {
		cfg.lease = DefaultDiscardLease
	}
	if err := cfg.startClock(ctx); err != nil {
		return res, err
	}
	q, err := f.WithDefaultStatus(envelope.StatusPending).Query(cfg.now())
	if err != nil {
		return res, err
	}
	q = bson.D{{Key: "$and", Value: bson.A{q, bson.D{{Key: "status", Value: bson.D{{Key: "$ne", Value: envelope.StatusDiscarded}}}}}}}
	r := &runner{cfg: cfg, dlq: coll, owner: cfg.owner}
	var last bson.RawValue
	for {
		page := q
		if last.Type != 0 {
			page = bson.D{{Key: "$and", Value: bson.A{q, bson.D{{Key: "_id", Value: bson.D{{Key: "$gt", Value: last}}}}}}}
		}
		ids, err := r.candidates(ctx, page, cfg.batch)
		if err != nil || len(ids) == 0 {
			return res, err
		}
		last = ids[len(ids)-1]
		n, busy, err := r.discardBatch(ctx, q, ids)
		res.Discarded += n
		res.Busy += int64(len(busy))
		for _, id := range busy {
			if len(res.BusyIDs) < maxProblems {
				res.BusyIDs = append(res.BusyIDs, id)
			}
		}
		if err != nil || len(ids) < cfg.batch {
			return res, err
		}
	}
}

// discardBatch claims ids, marks those it claimed that q still selects
// discarded (its claims renewed meanwhile), and releases its leases. It
// returns the count marked and the _ids of the envelopes held by a
// replay.
func (r *runner) discardBatch(ctx context.Context, q bson.D, ids []bson.RawValue) (int64, []bson.RawValue, error) {
	won, busy, err := r.claimForDiscard(ctx, ids)
	if err != nil || len(won) == 0 {
		return 0, busy, err
	}
	stop := r.renew(ctx, newLeaseSet(leaseIDs(won)...))
	defer func() {
		stop()
		r.release(ctx, leaseIDs(won))
	}()
	in := bson.A{}
	for _, l := range won {
		in = append(in, l.EnvelopeID)
	}
	var n int64
	err = retry(ctx, func() error {
		res, err := r.dlq.UpdateMany(ctx, bson.D{{Key: "$and", Value: bson.A{q, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: in}}}}}}},
			bson.D{{Key: "$set", Value: bson.D{{Key: "status", Value: envelope.StatusDiscarded}, {Key: "discarded_at", Value: r.cfg.serverNow()}}}},
			options.UpdateMany())
		if err == nil {
			n = res.ModifiedCount
		}
		return err
	})
	if err != nil {
		return 0, busy, fmt.Errorf("replay: discard: %w", err)
	}
	return n, busy, nil
}

// claimForDiscard takes a lease on each envelope of ids that no live
// lease holds, and returns the leases it won and the _ids of the
// envelopes held by another (a replay, say).
func (r *runner) claimForDiscard(ctx context.Context, ids []bson.RawValue) ([]Lease, []bson.RawValue, error) {
	if err := r.cfg.clock.sync(ctx); err != nil {
		return nil, nil, err
	}
	tried, _, _, err := r.nextSlots(ctx, ids)
	if err != nil {
		return nil, nil, err
	}
	free := make(map[string]bool, len(tried))
	docs := make([]any, len(tried))
	for i, l := range tried {
		free[l.Key], docs[i] = true, l
	}
	var busy []bson.RawValue
	for _, id := range ids {
		if !free[leaseKey(id)] {
			busy = append(busy, id)
		}
	}
	won, _, err := r.insertLeases(ctx, docs, tried)
	if err != nil {
		return nil, busy, err
	}
	wonKey := map[string]bool{}
	for _, l := range won {
		wonKey[l.Key] = true
	}
	for _, l := range tried {
		if !wonKey[l.Key] {
			busy = append(busy, l.EnvelopeID)
		}
	}
	return won, busy, nil
}
