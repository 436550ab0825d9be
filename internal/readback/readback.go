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
	"go.mongodb.org/mongo-driver/v2/mongo/readconcern"
	"go.mongodb.org/mongo-driver/v2/mongo/readpref"
)

// Finder is what ByID reads through: a *mongo.Collection or a test double.
type Finder interface {
	Find(ctx context.Context, filter any, opts ...options.Lister[options.FindOptions]) (*mongo.Cursor, error)
}

// PrimaryReads returns the view of f that reads what its primary holds
// (writeguard.PrimaryReader): a *mongo.Collection cloned with read
// preference primary and read concern local; an f with ReadPrimary, its
// view; any other Finder as it is. A read-back must see the primary: a
// secondary that has not replicated a write would read it as absent.
func PrimaryReads(f Finder) Finder {
	switch c := f.(type) {
	case *mongo.Collection:
		return c.Clone(options.Collection().SetReadPreference(readpref.Primary()).SetReadConcern(readconcern.Local()))
	case interface {
		ReadPrimary() interface {
			Find(ctx context.Context, filter any, opts ...options.Lister[options.FindOptions]) (*mongo.Cursor, error)
		}
	}:
		return c.ReadPrimary()
	}
	return f
}

// Key returns a map key for an _id value: its BSON type byte followed by
// its value bytes.
func Key(v bson.RawValue) string { return string(rune(v.Type)) + string(v.Value) }

// Filter returns {_id: {$in: ids}}.
func Filter(ids bson.A) bson.D {
	return bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}}
}

// Chunk bounds the _ids of one query. Each query asks for a first batch
// and a limit of its number of _ids, so the server answers in one reply
// and closes the cursor: no getMore, and no cursor to lose when a
// connection drops under it (FerretDB ties a cursor to its connection and
// fails the getMore with InternalError; servers also cap a first batch at
// 101 documents).
const Chunk = 100

// ByID returns the documents of f whose _id is among ids, keyed by Key, in
// queries of at most Chunk _ids, each answered in one reply. The error is
// the driver's, unwrapped, for the caller to classify.
func ByID(ctx context.Context, f Finder, ids bson.A) (map[string]bson.Raw, error) {
	out := make(map[string]bson.Raw, len(ids))
	for len(ids) > 0 {
		chunk := ids[:min(len(ids), Chunk)]
		ids = ids[len(chunk):]
		if err := byIDOnce(ctx, f, chunk, out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func byIDOnce(ctx context.Context, f Finder, ids bson.A, out map[string]bson.Raw) error {
	n := len(ids)
	cur, err := f.Find(ctx, Filter(ids), options.Find().SetBatchSize(int32(n)).SetLimit(int64(n)))
	if err != nil {
		return err
	}
	defer cur.Close(ctx)
	for cur.Next(ctx) {
		doc := append(bson.Raw(nil), cur.Current...)
		if v, err := doc.LookupErr("_id"); err == nil {
			out[Key(v)] = doc
		}
	}
	return cur.Err()
}
