// Package readback reads stored documents back by _id, in one query: the
// check both the guarded write (an insert whose reply was lost) and replay
// (an insert that met a duplicate key) make to tell "my own earlier write"
// from "another document".
package readback

import (
	"context"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// Finder is what ByID reads through: a *mongo.Collection or a test double.
type Finder interface {
	Find(ctx context.Context, filter any, opts ...options.Lister[options.FindOptions]) (*mongo.Cursor, error)
}

// Key returns a map key for an _id value: its BSON type byte followed by
// its value bytes.
func Key(v bson.RawValue) string { return string(rune(v.Type)) + string(v.Value) }

// Filter returns {_id: {$in: ids}}.
func Filter(ids bson.A) bson.D {
	return bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}}
}

// ByID returns the documents of f whose _id is among ids, keyed by Key, in
// one find whose first reply holds them all (batchSize len(ids): no
// getMore, so no cursor to lose when the pool is cleared under it). The
// error is the driver's, unwrapped, for the caller to classify.
func ByID(ctx context.Context, f Finder, ids bson.A) (map[string]bson.Raw, error) {
	cur, err := f.Find(ctx, Filter(ids), options.Find().SetBatchSize(int32(max(len(ids), 1))))
	if err != nil {
		return nil, err
	}
	defer cur.Close(ctx)
	out := make(map[string]bson.Raw, len(ids))
	for cur.Next(ctx) {
		doc := append(bson.Raw(nil), cur.Current...)
		if v, err := doc.LookupErr("_id"); err == nil {
			out[Key(v)] = doc
		}
	}
	return out, cur.Err()
}
