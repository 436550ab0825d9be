package writeguard

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/writeguard/writeguard/hooks"
	"github.com/writeguard/writeguard/internal/loglimit"
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
	cfg        *config
	classifier policy.Classifier
	hooks      hooks.Hooks
	observed   bool // hooks were given: build per-document events
	database   string
	collection string

	logLimit *loglimit.Limiter
}

// Wrap returns a guarded coll. It returns an error naming the first
// invalid option (a nil sink, a Backoff out of range, ...), and an error
// when coll is nil.
func Wrap(coll *mongo.Collection, opts ...Option) (*Guarded, error) {
	if coll == nil {
		return nil, errors.New("writeguard: Wrap(nil collection)")
	}
	g, err := New(coll, opts...)
	if err != nil {
		return nil, err
	}
	g.Collection = coll
	g.database = coll.Database().Name()
	return g, nil
}

// New returns a guarded Target: a *mongo.Collection (prefer Wrap, which
// also exposes the collection's other methods) or a test double. Errors
// are those of Wrap.
func New(t Target, opts ...Option) (*Guarded, error) {
	if t == nil {
		return nil, errors.New("writeguard: New(nil target)")
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	g := &Guarded{
		target:     t,
		cfg:        cfg,
		classifier: cfg.classifier(),
		hooks:      hooks.Compose(cfg.hooks...),
		observed:   len(cfg.hooks) > 0,
		collection: t.Name(),
		logLimit:   loglimit.New(time.Minute, cfg.clock.Now),
	}
	if ns, ok := t.(interface{ Namespace() string }); ok {
		if db, _, found := strings.Cut(ns.Namespace(), "."); found {
			g.database = db
		}
	}
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

// logUnknown logs an unclassified code at most once a minute per code.
func (g *Guarded) logUnknown(ctx context.Context, f *policy.Failure, op string) {
	if !g.logLimit.Allow(int64(f.Code)) {
		return
	}
	g.cfg.logger.LogAttrs(ctx, slog.LevelWarn, "writeguard: unclassified write error; not retried",
		slog.String("operation", op), slog.String("namespace", g.Namespace()),
		slog.Int("code", int(f.Code)), slog.String("code_name", f.CodeName),
		slog.String("origin", f.Origin.String()))
}

func (g *Guarded) logBudget(ctx context.Context, op string, docs int) {
	const budgetKey = 1 << 32 // outside the int32 range of codes
	if !g.logLimit.Allow(budgetKey) {
		return
	}
	g.cfg.logger.LogAttrs(ctx, slog.LevelWarn, "writeguard: retry budget exhausted; retries refused",
		slog.String("operation", op), slog.String("namespace", g.Namespace()), slog.Int("documents", docs))
}
