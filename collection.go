package writeguard

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/writeguard/writeguard/hooks"
	"github.com/writeguard/writeguard/internal/driveropts"
	"github.com/writeguard/writeguard/internal/engine"
	"github.com/writeguard/writeguard/internal/readback"
	"github.com/writeguard/writeguard/policy"
)

// Collection is the write surface writeguard guards: every write method of
// *mongo.Collection (driver v2), with exactly its signatures. *mongo.Collection
// and *Guarded both satisfy it, so code written against Collection takes
// either. The methods of *mongo.Collection that are not in it are reads
// (Find, FindOne, Aggregate, CountDocuments, Distinct, Watch, ...) or
// administration (Indexes, SearchIndexes, Drop, Clone, ...); a Guarded
// passes them to the driver unchanged (see Guarded).
type Collection interface {
	InsertOne(ctx context.Context, document any, opts ...options.Lister[options.InsertOneOptions]) (*mongo.InsertOneResult, error)
	InsertMany(ctx context.Context, documents any, opts ...options.Lister[options.InsertManyOptions]) (*mongo.InsertManyResult, error)
	BulkWrite(ctx context.Context, models []mongo.WriteModel, opts ...options.Lister[options.BulkWriteOptions]) (*mongo.BulkWriteResult, error)
	UpdateOne(ctx context.Context, filter any, update any, opts ...options.Lister[options.UpdateOneOptions]) (*mongo.UpdateResult, error)
	UpdateByID(ctx context.Context, id any, update any, opts ...options.Lister[options.UpdateOneOptions]) (*mongo.UpdateResult, error)
	UpdateMany(ctx context.Context, filter any, update any, opts ...options.Lister[options.UpdateManyOptions]) (*mongo.UpdateResult, error)
	ReplaceOne(ctx context.Context, filter any, replacement any, opts ...options.Lister[options.ReplaceOptions]) (*mongo.UpdateResult, error)
	DeleteOne(ctx context.Context, filter any, opts ...options.Lister[options.DeleteOneOptions]) (*mongo.DeleteResult, error)
	DeleteMany(ctx context.Context, filter any, opts ...options.Lister[options.DeleteManyOptions]) (*mongo.DeleteResult, error)
	FindOneAndUpdate(ctx context.Context, filter any, update any, opts ...options.Lister[options.FindOneAndUpdateOptions]) *mongo.SingleResult
	FindOneAndReplace(ctx context.Context, filter any, replacement any, opts ...options.Lister[options.FindOneAndReplaceOptions]) *mongo.SingleResult
	FindOneAndDelete(ctx context.Context, filter any, opts ...options.Lister[options.FindOneAndDeleteOptions]) *mongo.SingleResult
}

// Target is what a Guarded writes through: a *mongo.Collection, or a test
// double such as mocks.Fake. Find reads documents back to resolve
// ambiguous inserts, from the primary (see PrimaryReader); ReplaceOne
// serves ConflictReplace. The documents writeguard hands to InsertOne,
// InsertMany and BulkWrite's InsertOneModel are the prepared documents
// (with their _id) as values of an unexported type implementing
// bson.Marshaler, whose MarshalBSON returns the bytes without copying
// them: read them with bson.Marshal or MarshalBSON, not by type.
type Target interface {
	Collection
	Find(ctx context.Context, filter any, opts ...options.Lister[options.FindOptions]) (*mongo.Cursor, error)
	Name() string
}

// PrimaryReader is implemented by a Target that can read what its primary
// holds, whatever its own read preference and read concern (mocks.Fake).
// Every read that decides a disposition (the read-back of a possibly
// applied insert, and so the identification of a duplicate key as the
// call's own write) reads through ReadPrimary's view, with read preference
// primary and read concern local: a lagging secondary would make own
// writes look absent. A hit proves presence on the primary, not
// durability: the write-concern rules still apply. For a
// *mongo.Collection writeguard makes that view itself (a Clone with those
// options); any other Target without this method is read as it is.
type PrimaryReader interface {
	ReadPrimary() interface {
		Find(ctx context.Context, filter any, opts ...options.Lister[options.FindOptions]) (*mongo.Cursor, error)
	}
}

// UniqueIDTarget is implemented by a Target that can say whether _id is
// unique where its documents land (mocks.Fake; false for a time-series
// collection). See WithUniqueID.
type UniqueIDTarget interface {
	UniqueID(ctx context.Context) (bool, error)
}

// HelloTarget is implemented by a Target that can give the server's
// handshake reply (mocks.Fake): its maxWriteBatchSize,
// maxMessageSizeBytes and maxBsonObjectSize bound the commands writeguard
// forms. A *mongo.Collection is asked with the hello command; any other
// Target gets the defaults every server states (100000 statements,
// 48000000 bytes, 16 MiB).
type HelloTarget interface {
	Hello(ctx context.Context) (bson.Raw, error)
}

var (
	_ Collection = (*mongo.Collection)(nil)
	_ Target     = (*mongo.Collection)(nil)
	_ Collection = (*Guarded)(nil)
)

// Guarded is a collection whose write methods (every method of
// Collection: InsertOne, InsertMany, BulkWrite, UpdateOne, UpdateByID,
// UpdateMany, ReplaceOne, DeleteOne, DeleteMany, FindOneAndUpdate,
// FindOneAndReplace, FindOneAndDelete) go through writeguard's policy
// chain: prepare (marshal once, assign _id), attempt, extract failures,
// classify, route (retry, dead-letter, conflict handler, fail), report.
//
// It embeds the *mongo.Collection it wraps, so every other method is the
// driver's own, unguarded: the reads (Find, FindOne, Aggregate,
// CountDocuments, EstimatedDocumentCount, Distinct, Watch) and the
// administration (Indexes, SearchIndexes, Drop, Clone, Database, Name).
// Adopting writeguard is a one-line change. A Guarded built with New on
// another Target embeds nil: only the guarded methods work then.
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
// are those of Wrap; a nil pointer in the interface (a typed nil such as
// (*mongo.Collection)(nil)) is refused with an error naming its type, as
// a nil Target is.
func New(t Target, opts ...Option) (*Guarded, error) {
	if t == nil {
		return nil, errors.New("writeguard: New(nil target)")
	}
	if v := reflect.ValueOf(t); v.Kind() == reflect.Pointer && v.IsNil() {
		return nil, fmt.Errorf("writeguard: New(%T(nil)): the target is a typed nil", t)
	}
	db := ""
	if c, ok := t.(*mongo.Collection); ok && c != nil {
		db = c.Database().Name()
	} else if ns, ok := t.(interface{ Namespace() string }); ok {
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
	h := hooks.Compose(cfg.hooks...)
	g.eng = engine.New(engine.Config{
		Namespace: g.Namespace(), Database: db, Collection: g.collection,
		Classifier: g.classifier, Backoff: cfg.backoff, Budget: cfg.budget,
		Sink: cfg.sink, Fallback: cfg.fallback, DeadLetterGrace: cfg.deadLetterGrace, Resolve: g.resolver(cfg.conflict),
		Hooks: h, Observed: len(cfg.hooks) > 0,
		Logger: cfg.logger, Clock: cfg.clock,
		ThrottledAttempts: cfg.throttledAttempts, UpsertRetries: cfg.upsertRetries,
		AllowUnacked: cfg.allowUnacked, Reader: readback.PrimaryReads(t), Report: reportFor(cfg.uniqueID),
		UniqueID: engine.UniqueID(t, cfg.uniqueID), Limits: engine.LimitsOf(t),
		Deployment: engine.DeploymentOf(t), NoDriverRetries: cfg.noDriverRetries, VerdictCodes: cfg.verdictCodes, // proofs (issue 28)
		Settled:    cfg.breaker.settled(g.Namespace(), cfg.logger, cfg.clock), // breaker.go
		NewEncoder: driveropts.Encoder(cfg.registry, cfg.bsonOpts),
		Panicked:   newPanicError,                    // panic.go
		Limit:      cfg.limiter(db, g.collection, h), // limit.go
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
