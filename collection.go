package writeguard

import (
	"context"
	"errors"
	"strings"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/writeguard/writeguard/hooks"
	"github.com/writeguard/writeguard/internal/engine"
	"github.com/writeguard/writeguard/policy"
)

// Collection is the write surface writeguard guards: InsertOne, InsertMany
// and BulkWrite with exactly the signatures of *mongo.Collection (driver
// v2). *mongo.Collection and *Guarded both satisfy it, so code written
// against Collection takes either.
type Collection interface {
	InsertOne(ctx context.Context, document any, opts ...options.Lister[options.InsertOneOptions]) (*mongo.InsertOneResult, error)
	InsertMany(ctx context.Context, documents any, opts ...options.Lister[options.InsertManyOptions]) (*mongo.InsertManyResult, error)
	BulkWrite(ctx context.Context, models []mongo.WriteModel, opts ...options.Lister[options.BulkWriteOptions]) (*mongo.BulkWriteResult, error)
}

// Target is what a Guarded writes through: a *mongo.Collection, or a test
// double such as mocks.Fake. Find reads documents back to resolve
// ambiguous inserts; ReplaceOne serves ConflictReplace.
type Target interface {
	Collection
	Find(ctx context.Context, filter any, opts ...options.Lister[options.FindOptions]) (*mongo.Cursor, error)
	ReplaceOne(ctx context.Context, filter any, replacement any, opts ...options.Lister[options.ReplaceOptions]) (*mongo.UpdateResult, error)
	Name() string
}

var (
	_ Collection = (*mongo.Collection)(nil)
	_ Target     = (*mongo.Collection)(nil)
	_ Collection = (*Guarded)(nil)
)

// Guarded is a collection whose InsertOne, InsertMany and BulkWrite go
// through writeguard's policy chain: prepare (marshal once, assign _id),
// attempt, extract failures, classify, route (retry, dead-letter, conflict
// handler, fail), report.
//
// It embeds the *mongo.Collection it wraps, so every other method (Find,
// UpdateOne, Indexes, ...) is the driver's own and adopting writeguard is a
// one-line change. A Guarded built with New on another Target embeds nil:
// only the three guarded methods work then.
//
// A Guarded is safe for concurrent use; its retry budget is shared by all
// its calls.
type Guarded struct {
	*mongo.Collection

	target     Target
	classifier policy.Classifier
	database   string
	collection string
	eng        *engine.Engine
}

// Wrap returns a guarded coll. It returns an error naming the first
// invalid option (a nil sink, a Backoff out of range, ...), and an error
// when coll is nil.
func Wrap(coll *mongo.Collection, opts ...Option) (*Guarded, error) {
	if coll == nil {
		return nil, errors.New("writeguard: Wrap(nil collection)")
	}
	g, err := newGuarded(coll, coll.Database().Name(), opts)
	if err != nil {
		return nil, err
	}
	g.Collection = coll
	return g, nil
}

// New returns a guarded Target: a *mongo.Collection (prefer Wrap, which
// also exposes the collection's other methods) or a test double. Errors
// are those of Wrap.
func New(t Target, opts ...Option) (*Guarded, error) {
	if t == nil {
		return nil, errors.New("writeguard: New(nil target)")
	}
	db := ""
	if ns, ok := t.(interface{ Namespace() string }); ok {
		if d, _, found := strings.Cut(ns.Namespace(), "."); found {
			db = d
		}
	}
	return newGuarded(t, db, opts)
}

func newGuarded(t Target, db string, opts []Option) (*Guarded, error) {
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	g := &Guarded{target: t, classifier: cfg.classifier(), database: db, collection: t.Name()}
	g.eng = engine.New(engine.Config{
		Namespace: g.Namespace(), Database: db, Collection: g.collection,
		Classifier: g.classifier, Backoff: cfg.backoff, Budget: cfg.budget,
		Sink: cfg.sink, Fallback: cfg.fallback, Resolve: g.resolver(cfg.conflict),
		Hooks: hooks.Compose(cfg.hooks...), Observed: len(cfg.hooks) > 0,
		Logger: cfg.logger, Clock: cfg.clock,
		ThrottledAttempts: cfg.throttledAttempts, UpsertRetries: cfg.upsertRetries,
		AllowUnacked: cfg.allowUnacked, Reader: t, Report: newReport,
	})
	return g, nil
}

// Namespace returns "<database>.<collection>" (just the collection name
// when the target has no database).
func (g *Guarded) Namespace() string {
	if g.database == "" {
		return g.collection
	}
	return g.database + "." + g.collection
}

// Target returns the collection g writes through.
func (g *Guarded) Target() Target { return g.target }

// Classifier returns the classifier chain g uses: the WithClassifier
// classifiers, then the table.
func (g *Guarded) Classifier() policy.Classifier { return g.classifier }
