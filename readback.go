package writeguard

import (
	"context"
	"fmt"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/writeguard/writeguard/policy"
)

// readBackAll reads back, in one query, the inserts in td.readBack (and the
// pending possibly applied inserts in others) and applies
// policy.AfterReadBack to each: its own earlier write, someone else's
// document or absent after a duplicate key (to the conflict handler), or
// absent when stopping (fallback). If the read fails, td.readBack items
// are retried while retrying, and end fallback when stopping, with the
// read error kept.
func (c *call) readBackAll(ctx context.Context, td *todo, fallback Disposition, others []*item) {
	if len(td.readBack) == 0 {
		return
	}
	ids := make(bson.A, 0, len(td.readBack)+len(others))
	for _, it := range td.readBack {
		ids = append(ids, it.id)
	}
	var extra []*item
	for _, it := range others {
		if !it.retry && !contains(td.readBack, it) {
			extra = append(extra, it)
			ids = append(ids, it.id)
		}
	}
	stored, err := c.readBack(ctx, ids)
	if err != nil {
		for _, it := range td.readBack {
			it.err = fmt.Errorf("writeguard: reading back a possibly applied insert: %w", err)
			if fallback == "" {
				it.retry = true
			} else {
				c.settle(it, fallback)
			}
		}
		return
	}
	for _, it := range td.readBack {
		doc, found := stored[idKey(it.id)]
		same := found && policy.SameDocument(doc, it.doc)
		if found && !same {
			it.maybe = false // another document holds the _id: ours is not stored
		}
		c.apply(it, policy.AfterReadBack(found, same, it.unconf, fallback), td)
	}
	for _, it := range extra {
		if doc, found := stored[idKey(it.id)]; found && policy.SameDocument(doc, it.doc) {
			c.apply(it, policy.AfterReadBack(true, true, it.unconf, fallback), td)
		}
	}
}

func idKey(v bson.RawValue) string { return string(rune(v.Type)) + string(v.Value) }

func contains(its []*item, x *item) bool {
	for _, it := range its {
		if it == x {
			return true
		}
	}
	return false
}

// readBackChunk bounds the _ids of one read-back query. Each query asks
// for a first batch and a limit of its number of _ids, so the server
// answers in one reply and closes the cursor: no getMore, and no cursor to
// lose when a connection drops under it (FerretDB ties a cursor to its
// connection and fails the getMore with InternalError).
const readBackChunk = 100

// readBack reads the stored documents with the given _ids, in queries of
// at most readBackChunk _ids. A retryable read error is retried with the
// write backoff, up to 3 counted reads per query (retrySide).
func (c *call) readBack(ctx context.Context, ids bson.A) (map[string]bson.Raw, error) {
	out := make(map[string]bson.Raw, len(ids))
	for len(ids) > 0 {
		chunk := ids[:min(len(ids), readBackChunk)]
		ids = ids[len(chunk):]
		var got map[string]bson.Raw
		err := c.retrySide(ctx, 3, func(int) (err error) {
			got, err = c.readOnce(ctx, chunk)
			return err
		})
		if err != nil {
			return nil, err
		}
		for k, v := range got {
			out[k] = v
		}
	}
	return out, nil
}

func (c *call) readOnce(ctx context.Context, ids bson.A) (map[string]bson.Raw, error) {
	filter := bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}}
	cur, err := c.g.target.Find(ctx, filter, options.Find().SetBatchSize(int32(len(ids))).SetLimit(int64(len(ids))))
	if err != nil {
		return nil, err
	}
	defer cur.Close(ctx)
	out := map[string]bson.Raw{}
	for cur.Next(ctx) {
		doc := append(bson.Raw(nil), cur.Current...)
		if v, err := doc.LookupErr("_id"); err == nil {
			out[idKey(v)] = doc
		}
	}
	return out, cur.Err()
}
