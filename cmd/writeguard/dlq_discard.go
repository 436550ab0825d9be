package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	deadletter "github.com/writeguard/writeguard/dlq"
	"github.com/writeguard/writeguard/envelope"
	"github.com/writeguard/writeguard/replay"
)

// dlqDiscardHelp is "dlq discard --help"'s text, before the flags.
const dlqDiscardHelp = `Usage: writeguard dlq discard [flags]

Marks the pending envelopes the filters select "discarded": they are kept
for inspection but never replayed (a recapture of the same payload makes
one pending again). At least one filter, or --all, is required.

An envelope a running replay holds is not discarded: the replay writes it
or records why not. The command says how many it left and exits 1; run it
again once the replay has ended. (--status quarantined discards
quarantined envelopes.) The discard claims the envelopes it marks with
leases in <dlq>_leases, as replays do, renewed while it runs; one that
dies blocks replays of what it had claimed for --lease at most.

--id ID discards the envelope with that _id, and --undecodable every
envelope the filters select that cannot be decoded, whatever their status
(but replayed): the way to take a hand-edited or foreign envelope out of
the way.
`

// dlqDiscard is "writeguard dlq discard".
func dlqDiscard(ctx context.Context, dlq *mongo.Collection, filter deadletter.Filter, f dlqFlags, stdout, stderr io.Writer) int {
	if len(f.ids) > 0 || f.undecodable {
		return dlqDiscardIDs(ctx, dlq, filter, f, stdout, stderr)
	}
	filter = filter.WithDefaultStatus(envelope.StatusPending)
	var count, busy int64
	var err error
	if f.dryRun {
		var s deadletter.Summary
		s, err = deadletter.Stats(ctx, dlq, filter)
		count = s.Pending
	} else {
		// Through replay's leases: an envelope a running replay holds is
		// not discarded, and the replay does not write one discarded.
		var d replay.DiscardResult
		d, err = replay.Discard(ctx, dlq, filter, replay.WithLease(f.lease))
		count, busy = d.Discarded, d.Busy
		if err == nil && busy > 0 {
			defer fmt.Fprintf(stderr, "writeguard dlq discard: %s not discarded: a running replay holds them "+
				"(it writes them or records why not); run discard again when it has ended\n", plural(busy, "envelope"))
		}
	}
	if err != nil {
		return failure(stderr, "dlq discard", err)
	}
	left, err := deadletter.Stats(ctx, dlq, deadletter.Filter{Statuses: []string{envelope.StatusPending}})
	if err != nil {
		return failure(stderr, "dlq discard", err)
	}
	if f.asJSON {
		if err := writeJSON(stdout, map[string]any{"dry_run": f.dryRun, "discarded": count, "busy": busy, "pending": left.Pending}); err != nil {
			return failure(stderr, "dlq discard", err)
		}
		return discardExit(busy)
	}
	if f.dryRun {
		fmt.Fprintf(stdout, "would discard %s (%s pending in %s.%s)\n", plural(count, "envelope"), n(left.Pending), f.db, f.coll)
	} else {
		fmt.Fprintf(stdout, "discarded %s; %s pending left in %s.%s\n", plural(count, "envelope"), n(left.Pending), f.db, f.coll)
	}
	return discardExit(busy)
}

// discardExit is 1 when a running replay held some of the envelopes.
func discardExit(busy int64) int {
	if busy > 0 {
		return exitFail
	}
	return exitOK
}

// dlqDiscardIDs discards by _id (-id) or the undecodable envelopes the
// filter selects (-undecodable), whatever their status but replayed and
// discarded (deadletter.DiscardIDs).
func dlqDiscardIDs(ctx context.Context, dlq *mongo.Collection, filter deadletter.Filter, f dlqFlags, stdout, stderr io.Writer) int {
	var ids []bson.RawValue
	for _, s := range f.ids {
		v, _ := parseEnvelopeID(s) // checked by checkDLQArgs
		ids = append(ids, v...)
	}
	if f.undecodable {
		q, err := filter.Query(time.Now())
		if err != nil {
			return usageError(stderr, "dlq discard", "%v", err)
		}
		cur, err := dlq.Find(ctx, q, options.Find().SetProjection(bson.D{{Key: "err_info", Value: 0}}))
		if err != nil {
			return failure(stderr, "dlq discard", err)
		}
		for cur.Next(ctx) {
			var de *envelope.DecodeError
			if _, err := envelope.Decode(cur.Current); errors.As(err, &de) {
				ids = append(ids, bson.RawValue{Type: de.ID.Type, Value: append([]byte(nil), de.ID.Value...)})
			}
		}
		err = cur.Err()
		_ = cur.Close(ctx)
		if err != nil {
			return failure(stderr, "dlq discard", err)
		}
	}
	var count int64
	var err error
	if f.dryRun {
		count = int64(len(ids))
	} else if count, err = deadletter.DiscardIDs(ctx, dlq, ids); err != nil {
		return failure(stderr, "dlq discard", err)
	}
	left, err := deadletter.Stats(ctx, dlq, deadletter.Filter{Statuses: []string{envelope.StatusPending}})
	if err != nil {
		return failure(stderr, "dlq discard", err)
	}
	if f.asJSON {
		if err := writeJSON(stdout, map[string]any{"dry_run": f.dryRun, "discarded": count, "pending": left.Pending}); err != nil {
			return failure(stderr, "dlq discard", err)
		}
		return exitOK
	}
	if f.dryRun {
		fmt.Fprintf(stdout, "would discard at most %s (%s pending in %s.%s)\n", plural(count, "envelope"), n(left.Pending), f.db, f.coll)
	} else {
		fmt.Fprintf(stdout, "discarded %s; %s pending left in %s.%s\n", plural(count, "envelope"), n(left.Pending), f.db, f.coll)
	}
	return exitOK
}
