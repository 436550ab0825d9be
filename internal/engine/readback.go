package engine

import (
	"context"
	"fmt"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/writeguard/writeguard/internal/readback"
	"github.com/writeguard/writeguard/policy"
)

// readBackAll reads back, in one query, the inserts in td.readBack (and the
// pending possibly applied inserts in others) and applies
// policy.AfterReadBack to each: its own earlier write, someone else's
// document or absent after a duplicate key (to the conflict handler), or
// absent when stopping (fallback). If the read fails, td.readBack items
// are retried while retrying, and end fallback when stopping, with the
// read error kept.
func (c *Call) readBackAll(ctx context.Context, td *todo, fallback policy.Disposition, others []*item) {
	if len(td.readBack) == 0 {
		return
	}
	ids := make(bson.A, 0, len(td.readBack)+len(others))
	for _, it := range td.readBack {
		ids = append(ids, it.id)
	}
	var extra []*item
	for _, it := range others {
		if it.state != retrying && !contains(td.readBack, it) {
			extra = append(extra, it)
			ids = append(ids, it.id)
		}
	}
	stored, err := c.readBack(ctx, ids)
	if err != nil {
		for _, it := range td.readBack {
			it.more().err = fmt.Errorf("writeguard: reading back a possibly applied insert: %w", err)
			switch {
			case c.noUniqueID:
				it.reason = ReasonNotResendable
				c.settle(it, policy.OutcomeUnknown) // never re-sent: see AfterReadBackNoUniqueID
			case fallback == "":
				c.toRetrying(it)
			default:
				c.settle(it, fallback)
			}
		}
		return
	}
	for _, it := range td.readBack {
		doc, found := stored[readback.Key(it.id)]
		same := found && policy.SameDocument(doc, it.doc)
		unconf := it.ev == unconfirmed
		if found && !same && !c.noUniqueID {
			// another document holds the _id, which is unique: ours is not
			// stored. Where _id is not unique a second document under it
			// proves nothing about ours (AfterReadBackNoUniqueID).
			it.ev = noEvidence
		}
		c.apply(it, c.afterReadBack(found, same, unconf, fallback), td)
	}
	for _, it := range extra {
		if doc, found := stored[readback.Key(it.id)]; found && policy.SameDocument(doc, it.doc) {
			c.apply(it, c.afterReadBack(true, true, it.ev == unconfirmed, fallback), td)
		}
	}
}

// afterReadBack is AfterReadBack, or AfterReadBackNoUniqueID where _id is
// not unique.
func (c *Call) afterReadBack(found, same, unconf bool, fallback policy.Disposition) Decision {
	if c.noUniqueID {
		return AfterReadBackNoUniqueID(found, same, unconf)
	}
	return AfterReadBack(found, same, unconf, fallback)
}

func contains(its []*item, x *item) bool {
	for _, it := range its {
		if it == x {
			return true
		}
	}
	return false
}

// readBack reads the stored documents with the given _ids
// (readback.ByID: queries answered in one reply each), gathered with the
// read-backs of the engine's other calls that arrive while one runs
// (readback.Coalescer). A retryable read error is retried with the write
// backoff, up to 3 counted reads (retrySide).
func (c *Call) readBack(ctx context.Context, ids bson.A) (map[string]bson.Raw, error) {
	var out map[string]bson.Raw
	err := c.retrySide(ctx, 3, func(int) (err error) {
		out, err = c.e.reads.ByID(ctx, c.e.cfg.Reader, ids)
		return err
	})
	return out, err
}
