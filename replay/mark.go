package replay

import (
	"context"
	"fmt"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/writeguard/writeguard/envelope"
	"github.com/writeguard/writeguard/policy"
)

// judge sets, for each entry, whether its outcome is a failed replay of
// the envelope (rejected again, a conflict, a write error of the target
// for it; not an error of the whole command, a network error say, which
// says nothing of the envelope) and whether that failure reaches the
// quarantine limit.
func (r *runner) judge(entries []*entry) {
	for _, e := range entries {
		switch e.out {
		case outInvalid, outInvalidByTarget, outConflict:
			e.failed = true
		case outFailed:
			e.failed = e.docErr
		}
		if e.failed && r.cfg.quarantineAfter > 0 && e.env.ReplayFailures+1 >= r.cfg.quarantineAfter {
			e.quarantine = true
		}
	}
}

// mark records the batch's outcomes in the DLQ with one unordered bulk
// write of updateMany statements (one per distinct update), then records
// each envelope as done by this run (see recordDone) and counts those
// this runner recorded first. Envelopes whose claim was lost are left
// out (counted in Result.LeasesLost). Every envelope of the batch gets
// replay_run and replay_tried_at, so that no runner of this run tries it
// again.
func (r *runner) mark(ctx context.Context, all []*entry) error {
	// An envelope whose claim was lost is its new owner's to mark.
	entries := make([]*entry, 0, len(all))
	for _, e := range all {
		if e.out == outLost {
			r.res.LeasesLost++
			r.problem(e, "lost")
			continue
		}
		entries = append(entries, e)
	}
	if len(entries) == 0 {
		return nil
	}
	now := r.cfg.serverNow()
	if err := r.writeMarks(ctx, now, entries); err != nil {
		return fmt.Errorf("replay: recording the outcomes of a batch in the dead-letter collection "+
			"(the documents written stay pending and will be recognised by _id on the next run): %w", err)
	}
	mine, err := r.recordDone(ctx, entries, now)
	if err != nil {
		return err
	}
	var c Counts
	for _, e := range entries {
		if mine[leaseKey(e.env.ID)] {
			r.count(e, &c)
		}
	}
	r.res.Batches++
	r.res.Counts.add(c)
	r.sh.progress(c)
	return nil
}

// count adds one envelope's outcome to c and to the runner's result.
func (r *runner) count(e *entry, c *Counts) {
	c.Scanned++
	c.Written += int64(e.written)
	switch e.out {
	case outReplayed, outReplayedDup:
		c.Replayed++
		if e.out == outReplayedDup {
			r.res.ReplayedByDuplicate++
		}
	case outInvalid:
		c.StillInvalid++
	case outInvalidByTarget:
		c.StillInvalid++
		r.res.TargetDeadLettered++
	case outConflict:
		c.Conflicts++
		r.problem(e, "conflict")
	case outSkipped:
		c.Skipped++
		r.problem(e, "skipped")
	case outRefused:
		c.Refused++
		r.problem(e, "refused")
	case outHeld:
		c.Held++
		r.problem(e, "held")
	default:
		c.Failed++
		r.problem(e, "failed")
	}
	if e.quarantine {
		c.Quarantined++
		r.problem(e, "quarantined")
	}
}

func (r *runner) problem(e *entry, outcome string) {
	if len(r.res.Problems) < maxProblems {
		r.res.Problems = append(r.res.Problems, Problem{
			EnvelopeID: e.env.ID, Fingerprint: e.env.Fingerprint, Outcome: outcome, Code: e.code, Reason: policy.ScrubValues(e.reason),
		})
	}
}

// recordDone inserts, for each envelope of the batch, the record
// "<key>.run.<run id>" in the lease collection, and returns the keys whose
// record this runner inserted. A runner that overran its lease and
// another that took the envelope over both replay and mark it (the
// marks are the same); the unique _id of this record lets one of them
// count it, so the counts of a run add up to the envelopes it tried.
func (r *runner) recordDone(ctx context.Context, entries []*entry, now time.Time) (map[string]bool, error) {
	docs := make([]any, len(entries))
	ids := make([]string, len(entries))
	for i, e := range entries {
		ids[i] = leaseKey(e.env.ID) + ".run." + r.cfg.run
		docs[i] = bson.D{{Key: "_id", Value: ids[i]}, {Key: "envelope_id", Value: e.env.ID}, {Key: "run", Value: r.cfg.run},
			{Key: "owner", Value: r.owner}, {Key: "claimed_at", Value: now}, {Key: "outcome", Value: e.out.String()}}
	}
	err := retry(ctx, func() error {
		_, err := r.cfg.leases.InsertMany(ctx, docs, options.InsertMany().SetOrdered(false))
		if err != nil && onlyDuplicates(err) {
			return nil
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("replay: recording a batch as done (its envelopes are marked): %w", err)
	}
	owned, err := r.ownLeases(ctx, ids, now)
	if err != nil {
		return nil, err
	}
	out := make(map[string]bool, len(owned))
	for id := range owned {
		k, _, _ := strings.Cut(id, ".")
		out[k] = true
	}
	return out, nil
}

// writeMarks sends the outcome updates, one updateMany per distinct
// update (see markUpdate). The write is sent again on a retryable error
// (see retryable); each statement selects only the envelopes whose
// replay_tried_at is not yet this mark's time, so a statement applied by
// an earlier try is not applied again and attempts (incremented) stays
// exact, as does replay_failures (set).
func (r *runner) writeMarks(ctx context.Context, now time.Time, entries []*entry) error {
	type group struct {
		update bson.D
		guard  bool
		ids    bson.A
	}
	var order []string
	groups := map[string]*group{}
	for _, e := range entries {
		upd := r.markUpdate(e, now)
		// An envelope discarded meanwhile stays discarded (see Discard).
		guard := e.env.Status != envelope.StatusDiscarded
		b, err := bson.Marshal(bson.D{{Key: "u", Value: upd}, {Key: "g", Value: guard}})
		if err != nil {
			return err
		}
		g := groups[string(b)]
		if g == nil {
			g = &group{update: upd, guard: guard}
			groups[string(b)] = g
			order = append(order, string(b))
		}
		g.ids = append(g.ids, e.env.ID)
	}
	models := make([]mongo.WriteModel, 0, len(order))
	for _, k := range order {
		g := groups[k]
		filter := bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: g.ids}}},
			{Key: "replay_tried_at", Value: bson.D{{Key: "$ne", Value: now}}}}
		if g.guard {
			filter = append(filter, bson.E{Key: "status", Value: bson.D{{Key: "$ne", Value: envelope.StatusDiscarded}}})
		}
		models = append(models, mongo.NewUpdateManyModel().SetFilter(filter).SetUpdate(g.update))
	}
	if len(models) == 0 {
		return nil
	}
	return retry(ctx, func() error {
		_, err := r.dlq.BulkWrite(ctx, models, options.BulkWrite().SetOrdered(false))
		return err
	})
}

// markUpdate returns the update recording e's outcome: replayed
// envelopes get status replayed and replayed_at, and lose replay_reason
// and replay_hold; those rejected again attempts + 1, last_seen and
// status pending; every failed replay replay_failures + 1 (and status
// quarantined at the limit); every envelope not written a replay_reason;
// held ones replay_hold; every one replay_run and replay_tried_at.
func (r *runner) markUpdate(e *entry, now time.Time) bson.D {
	set := bson.D{{Key: "replay_run", Value: r.cfg.run}, {Key: "replay_tried_at", Value: now}}
	var upd bson.D
	switch e.out {
	case outReplayed, outReplayedDup:
		set = append(set, bson.E{Key: "status", Value: envelope.StatusReplayed}, bson.E{Key: "replayed_at", Value: now})
		return bson.D{{Key: "$set", Value: set}, {Key: "$unset", Value: bson.D{
			{Key: envelope.FieldReplayReason, Value: ""}, {Key: envelope.FieldReplayHold, Value: ""}}}}
	case outInvalid:
		set = append(set, bson.E{Key: "last_seen", Value: now}, bson.E{Key: "status", Value: envelope.StatusPending})
		upd = append(upd, bson.E{Key: "$inc", Value: bson.D{{Key: "attempts", Value: int32(1)}}})
	case outHeld:
		set = append(set, bson.E{Key: envelope.FieldReplayHold, Value: e.reason})
	}
	reason := e.out.String()
	switch {
	case e.out == outHeld:
		reason += ": " + e.reason
		if e.code != 0 {
			reason += fmt.Sprintf(" (%d %s)", e.code, e.codeName)
		}
	case e.code != 0:
		reason += fmt.Sprintf(": %d %s", e.code, e.codeName)
	case e.out != outInvalid && e.out != outInvalidByTarget && e.out != outConflict && e.out != outFailed:
		reason += ": " + e.reason
	}
	if e.failed {
		n := e.env.ReplayFailures + 1
		set = append(set, bson.E{Key: envelope.FieldReplayFailures, Value: int32(n)})
		if e.quarantine {
			set = setStatus(set, envelope.StatusQuarantined)
			reason = fmt.Sprintf("quarantined after %d failed replays (limit %d); last: %s", n, r.cfg.quarantineAfter, reason)
		}
	}
	set = append(set, bson.E{Key: envelope.FieldReplayReason, Value: strings.TrimSpace(reason)})
	upd = append(upd, bson.E{Key: "$set", Value: set})
	if e.out != outHeld {
		upd = append(upd, bson.E{Key: "$unset", Value: bson.D{{Key: envelope.FieldReplayHold, Value: ""}}})
	}
	return upd
}

// setStatus sets (or replaces) status in a $set document.
func setStatus(set bson.D, status string) bson.D {
	for i := range set {
		if set[i].Key == "status" {
			set[i].Value = status
			return set
		}
	}
	return append(set, bson.E{Key: "status", Value: status})
}
