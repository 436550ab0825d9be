// Package readback reads stored documents back by _id, in one query: the
// check both the guarded write (an insert whose reply was lost) and replay
// (an insert that met a duplicate key) make to tell "my own earlier write"
// from "another document".
package readback

import (
	"context"
	"errors"
	"sync"

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
	return byIDChunks(ctx, f, ids, Chunk)
}

// byIDChunks is ByID in queries of at most chunk _ids.
func byIDChunks(ctx context.Context, f Finder, ids bson.A, chunk int) (map[string]bson.Raw, error) {
	out := make(map[string]bson.Raw, len(ids))
	for len(ids) > 0 {
		chunk := ids[:min(len(ids), chunk)]
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

// GroupChunk bounds the _ids of one query of a gathered group
// (Coalescer): larger than Chunk, since a group exists to make one query
// of many read-backs. A reply over the server's 16 MiB limit leaves a
// cursor that the driver reads on with getMore.
const GroupChunk = 1000

// Coalescer gathers the read-backs of concurrent callers (the calls of
// one guarded collection) while one runs: the callers that arrive
// meanwhile are read together, in one query of up to GroupChunk _ids, as
// soon as it ends. After a failover every writer whose write was applied
// with its reply lost reads back at about the same time; on a server
// without an index for the query (FerretDB v1.24 scans the collection for
// every $in) each read is a scan, and N concurrent scans each take about
// N times as long. The zero Coalescer is ready to use.
type Coalescer struct {
	mu      sync.Mutex
	running bool
	next    *group
}

// group is the read-backs gathered while another ran.
type group struct {
	ids  bson.A
	lead chan struct{} // closed when the group may run: its first member runs it
	done chan struct{} // closed when its result is set
	out  map[string]bson.Raw
	err  error
}

// ByID is ByID through the coalescer: it runs at once when no read-back
// of c runs, and otherwise joins the group that runs next. A group read
// that failed on its runner's context is read again alone.
func (c *Coalescer) ByID(ctx context.Context, f Finder, ids bson.A) (map[string]bson.Raw, error) {
	c.mu.Lock()
	if !c.running {
		c.running = true
		c.mu.Unlock()
		defer c.handOver()
		return ByID(ctx, f, ids)
	}
	g := c.next
	first := g == nil
	if first {
		g = &group{lead: make(chan struct{}), done: make(chan struct{})}
		c.next = g
	}
	g.ids = append(g.ids, ids...)
	c.mu.Unlock()
	if first {
		return c.runGroup(ctx, f, g)
	}
	select {
	case <-g.done:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if g.err != nil && ctx.Err() == nil && contextError(g.err) {
		return ByID(ctx, f, ids) // the runner's context ended, not ours
	}
	return g.out, g.err
}

// runGroup waits for its turn, then reads the group's _ids for all its
// members and hands over to the next group. If its context ends first,
// the group is dropped: its other members read alone.
func (c *Coalescer) runGroup(ctx context.Context, f Finder, g *group) (map[string]bson.Raw, error) {
	select {
	case <-g.lead:
	case <-ctx.Done():
		c.mu.Lock()
		led := c.next != g // handOver gave it the lead meanwhile
		if !led {
			c.next = nil
		}
		c.mu.Unlock()
		g.err = ctx.Err()
		close(g.done)
		if led {
			c.handOver()
		}
		return nil, ctx.Err()
	}
	c.mu.Lock()
	ids := g.ids // no member joins once the group leads
	c.mu.Unlock()
	g.out, g.err = byIDChunks(ctx, f, ids, GroupChunk)
	close(g.done)
	c.handOver()
	return g.out, g.err
}

// handOver ends a read: the group gathered meanwhile leads next, or the
// coalescer is idle.
func (c *Coalescer) handOver() {
	c.mu.Lock()
	defer c.mu.Unlock()
	g := c.next
	if g == nil {
		c.running = false
		return
	}
	c.next = nil
	close(g.lead)
}

func contextError(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}
