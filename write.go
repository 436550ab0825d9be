package writeguard

import (
	"context"
	"errors"
	"fmt"
	"reflect"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/writeguard/writeguard/envelope"
	"github.com/writeguard/writeguard/hooks"
	"github.com/writeguard/writeguard/policy"
)

// MaxDocumentSize is the largest document the server accepts, 16 MiB
// (policy.MaxBSONSize). A larger document is routed as Invalid before any
// attempt.
const MaxDocumentSize = policy.MaxBSONSize

// InsertOne inserts document through the policy chain. document gets an
// _id before the first attempt when it has none (the caller's value is not
// modified), so retries cannot insert it twice.
//
// On success it returns exactly what the driver returns. Otherwise it
// returns a *Report; the result is non-nil, with the _id, when the document
// is stored (already_written, written_unconfirmed); its InsertedID is the
// Go value the driver returns for that _id (policy.IDValue) on every path.
// Inside a transaction it makes one attempt and returns the driver's
// result and error unchanged. A nil ctx is context.Background(), as in the
// driver.
func (g *Guarded) InsertOne(ctx context.Context, document any, opts ...options.Lister[options.InsertOneOptions]) (*mongo.InsertOneResult, error) {
	if ctx == nil {
		ctx = context.Background() // as the driver does
	}
	if inTransaction(ctx) {
		var res *mongo.InsertOneResult
		err := g.inTransaction(ctx, "insertOne", 1, func(ctx context.Context) (err error) {
			res, err = g.target.InsertOne(ctx, document, opts...)
			return err
		})
		return res, err
	}
	c := g.newCall("insertOne", true)
	c.callOpts, _ = envelope.InsertOneCallOptions(opts...) // the driver reports a bad option itself
	c.newItems(1)
	c.prepareDoc(c.items[0], document)
	c.send = func(ctx context.Context, batch []*item) (any, error) {
		res, err := g.target.InsertOne(ctx, batch[0].boxed, opts...)
		if res != nil && !res.Acknowledged {
			return res, errUnacked
		}
		return res, err
	}
	first, err := c.run(ctx)
	if err == nil {
		if res, ok := first.(*mongo.InsertOneResult); ok && res != nil {
			return res, nil
		}
	}
	it := c.items[0]
	if it.disp.Stored() || it.disp == Unacknowledged {
		return &mongo.InsertOneResult{InsertedID: it.idValue(), Acknowledged: it.disp != Unacknowledged}, err
	}
	return nil, err
}

// InsertMany inserts documents (a non-empty slice) through the policy
// chain. Every document without an _id gets one before the first attempt
// (the caller's values are not modified). Only documents that failed
// transiently are re-sent, with the same _id; original indices are kept
// through every retry; an ordered write resumes after a handled document.
//
// On success it returns exactly what the driver returns (or, after
// retries, a result listing every document's _id in input order).
// Otherwise it returns a *Report with one Outcome per document and a
// result whose InsertedIDs lists the stored documents in input order.
// InsertedIDs hold the Go values the driver returns for the _ids
// (policy.IDValue) on every path. documents that is not a slice, or is
// empty, gets the driver's invalid-argument error (mongo.ErrNotSlice,
// mongo.ErrEmptySlice). A nil ctx is context.Background(), as in the
// driver.
func (g *Guarded) InsertMany(ctx context.Context, documents any, opts ...options.Lister[options.InsertManyOptions]) (*mongo.InsertManyResult, error) {
	if ctx == nil {
		ctx = context.Background() // as the driver does
	}
	if inTransaction(ctx) {
		var res *mongo.InsertManyResult
		err := g.inTransaction(ctx, "insertMany", sliceLen(documents), func(ctx context.Context) (err error) {
			res, err = g.target.InsertMany(ctx, documents, opts...)
			return err
		})
		return res, err
	}
	dv := reflect.ValueOf(documents)
	if dv.Kind() != reflect.Slice {
		return nil, fmt.Errorf("invalid documents: %w", mongo.ErrNotSlice)
	}
	if dv.Len() == 0 {
		return nil, fmt.Errorf("invalid documents: %w", mongo.ErrEmptySlice)
	}
	ordered, err := orderedOption(opts, func(o *options.InsertManyOptions) *bool { return o.Ordered })
	if err != nil {
		return nil, err
	}
	c := g.newCall("insertMany", ordered)
	c.callOpts, _ = envelope.InsertManyCallOptions(opts...) // the driver reports a bad option itself
	c.newItems(dv.Len())
	docs := make([]any, dv.Len())
	for i := range docs {
		docs[i] = dv.Index(i).Interface()
	}
	c.prepareDocs(c.items, docs)
	c.send = func(ctx context.Context, batch []*item) (any, error) {
		docs := make([]any, len(batch))
		for i, it := range batch {
			docs[i] = it.boxed
		}
		res, err := g.target.InsertMany(ctx, docs, opts...)
		if err == nil && res != nil && !res.Acknowledged {
			return res, errUnacked
		}
		return res, err
	}
	first, err := c.run(ctx)
	if err == nil {
		if res, ok := first.(*mongo.InsertManyResult); ok && res != nil {
			return res, nil
		}
	}
	res := &mongo.InsertManyResult{Acknowledged: true}
	for _, it := range c.items {
		if it.disp.Stored() {
			res.InsertedIDs = append(res.InsertedIDs, it.idValue())
		}
		if it.disp == Unacknowledged {
			res.Acknowledged = false
		}
	}
	return res, err
}

// BulkWrite runs models through the policy chain, routing each model by
// its index. Insert models get an _id before the first attempt (a copy of
// the model is sent; the caller's model is not modified). Update, replace
// and delete models are re-sent after an ambiguous failure (lost reply,
// timeout, write concern error) only when ctx comes from WithIdempotent;
// an upsert that hits a duplicate key is run again up to
// WithUpsertConflictRetries times.
//
// On success it returns exactly what the driver returns; after retries
// InsertedCount counts the insert models stored (each once), the other
// counts are summed over the attempts (an update re-sent after a lost
// reply under WithIdempotent may be counted twice), and UpsertedIDs are
// keyed by the caller's indices. Otherwise it returns that result and a
// *Report. Inside a transaction it makes one attempt and returns the
// driver's result and error unchanged. An empty models slice, or a nil or
// unsupported model, is an invalid argument, as in the driver: nothing is
// sent and the error (no Report) names the index. A nil ctx is
// context.Background(), as in the driver.
func (g *Guarded) BulkWrite(ctx context.Context, models []mongo.WriteModel, opts ...options.Lister[options.BulkWriteOptions]) (*mongo.BulkWriteResult, error) {
	if ctx == nil {
		ctx = context.Background() // as the driver does
	}
	if inTransaction(ctx) {
		var res *mongo.BulkWriteResult
		err := g.inTransaction(ctx, "bulkWrite", len(models), func(ctx context.Context) (err error) {
			res, err = g.target.BulkWrite(ctx, models, opts...)
			return err
		})
		return res, err
	}
	if len(models) == 0 {
		return nil, fmt.Errorf("invalid models: %w", mongo.ErrEmptySlice)
	}
	ordered, err := orderedOption(opts, func(o *options.BulkWriteOptions) *bool { return o.Ordered })
	if err != nil {
		return nil, err
	}
	c := g.newCall("bulkWrite", ordered)
	c.callOpts, _ = envelope.BulkWriteCallOptions(opts...) // the driver reports a bad option itself
	c.op.Command = hooks.BulkCommand(models)
	c.idempotent = idempotent(ctx)
	c.newItems(len(models))
	if err := c.prepareModels(models); err != nil {
		return nil, err
	}
	total := &mongo.BulkWriteResult{Acknowledged: true}
	c.send = func(ctx context.Context, batch []*item) (any, error) {
		ms := make([]mongo.WriteModel, len(batch))
		for i, it := range batch {
			ms[i] = it.send
		}
		res, err := g.target.BulkWrite(ctx, ms, opts...)
		if res != nil {
			addBulk(total, res, batch)
			if err == nil && !res.Acknowledged {
				return res, errUnacked
			}
		}
		return res, err
	}
	first, err := c.run(ctx)
	if err == nil {
		if res, ok := first.(*mongo.BulkWriteResult); ok && res != nil {
			return res, nil
		}
	}
	// The driver's partial results cannot say which insert of a split
	// bulk write was applied before a lost reply, so inserted documents
	// are counted from the dispositions: every insert model stored once.
	total.InsertedCount = 0
	for _, it := range c.items {
		if it.kind == policy.KindInsert && it.disp.Stored() {
			total.InsertedCount++
		}
		if it.disp == Unacknowledged {
			total.Acknowledged = false
		}
	}
	return total, err
}

func addBulk(total, res *mongo.BulkWriteResult, batch []*item) {
	total.InsertedCount += res.InsertedCount
	total.MatchedCount += res.MatchedCount
	total.ModifiedCount += res.ModifiedCount
	total.DeletedCount += res.DeletedCount
	total.UpsertedCount += res.UpsertedCount
	for idx, id := range res.UpsertedIDs {
		if idx >= 0 && int(idx) < len(batch) {
			if total.UpsertedIDs == nil {
				total.UpsertedIDs = map[int64]any{}
			}
			total.UpsertedIDs[int64(batch[idx].index)] = id
		}
	}
}

var errUnacked = errors.New("writeguard: unacknowledged write")

func inTransaction(ctx context.Context) bool {
	s := mongo.SessionFromContext(ctx)
	return s != nil && s.TransactionRunning()
}

// inTransaction runs one attempt inside the caller's transaction: no
// routing, no retry, no dead-lettering; the driver's error goes back to
// the caller unchanged so that the transaction (the unit of retry) can be
// retried as a whole. Hooks see the operation and its single attempt.
func (g *Guarded) inTransaction(ctx context.Context, opName string, n int, send func(context.Context) error) error {
	op := &hooks.Operation{Name: opName, Database: g.database, Collection: g.collection, BatchSize: n, Ordered: true, InTransaction: true}
	t0 := g.cfg.clock.Now()
	ctx = g.hooks.OperationStarted(ctx, op)
	actx := g.hooks.AttemptStarted(ctx, &hooks.AttemptStart{Op: op, Attempt: 1, Documents: n})
	a0 := g.cfg.clock.Now()
	err := send(actx)
	end := &hooks.AttemptEnd{Op: op, Attempt: 1, Documents: n, Duration: g.cfg.clock.Now().Sub(a0), Err: err}
	fails := policy.Extract(err)
	if len(fails) > 0 {
		end.Code, end.Class, end.Failures = fails[0].Code, g.classifier.Classify(fails[0]), len(fails)
	}
	g.hooks.AttemptFinished(actx, end)
	g.hooks.OperationFinished(ctx, &hooks.OperationEnd{Op: op, Attempts: 1, Err: err, Code: end.Code, Class: end.Class,
		Duration: g.cfg.clock.Now().Sub(t0)})
	return err
}

func sliceLen(v any) int {
	rv := reflect.ValueOf(v)
	if rv.Kind() == reflect.Slice {
		return rv.Len()
	}
	return 0
}

// orderedOption reads the ordered option from a call's options (driver default:
// true), applying them as the driver does.
func orderedOption[T any](opts []options.Lister[T], get func(*T) *bool) (bool, error) {
	var o T
	for _, l := range opts {
		if l == nil {
			continue
		}
		for _, set := range l.List() {
			if err := set(&o); err != nil {
				return false, err
			}
		}
	}
	v := get(&o)
	return v == nil || *v, nil
}
