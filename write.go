package writeguard

import (
	"context"
	"fmt"
	"reflect"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/writeguard/writeguard/envelope"
	"github.com/writeguard/writeguard/hooks"
	"github.com/writeguard/writeguard/internal/engine"
)

// method describes one guarded method to the write skeleton (guard): its
// name, how it runs inside a transaction, how it checks its arguments and
// hands its inputs to the engine, how one attempt calls the driver, and
// how its result is built when the first attempt did not write everything.
// T is the driver's result type (mongo.InsertOneResult, ...).
type method[T any] struct {
	name string
	// txInputs is the number of inputs a transaction's hooks report.
	txInputs int
	// tx is the driver's own call, made once inside a transaction.
	tx func(ctx context.Context) (*T, error)
	// inputs checks the arguments as the driver does and returns the
	// call's inputs for the engine: whether the write is ordered, its
	// documents or write models, its command kinds and the options an
	// envelope keeps.
	inputs func() (engine.Inputs, error)
	// send makes one attempt.
	send engine.Send
	// neverResend: a write that may have been applied is never sent
	// again, even when marked idempotent (findAndModify: a second run
	// cannot return the first run's document).
	neverResend bool
	// matchedNothing reads a successful attempt's result: whether it
	// matched no document (methods of one write; nil for the others).
	matchedNothing func(result any) bool
	// result is the result returned after retries or with a Report.
	result func(r engine.Result) *T
}

// guard is the one write skeleton of every guarded method: a nil ctx is
// context.Background() (as in the driver); inside a transaction one
// attempt with the driver's own result and error; otherwise the inputs are
// checked, the call is described to the engine in one engine.Spec and run
// once (the engine drives every input to its disposition), and the caller
// gets the driver's result of a first attempt that wrote everything, or
// m.result and nil or a *Report.
func guard[T any](g *Guarded, ctx context.Context, m method[T]) (*T, error) {
	if ctx == nil {
		ctx = context.Background() // as the driver does
	}
	if engine.TransactionRunning(ctx) {
		var res *T
		err := g.eng.InTransaction(ctx, m.name, m.txInputs, func(ctx context.Context) (err error) {
			res, err = m.tx(ctx)
			return err
		})
		return res, err
	}
	in, err := m.inputs()
	if err != nil {
		return nil, err
	}
	r, err := g.eng.Run(ctx, engine.Spec{
		Name: m.name, Inputs: in, Send: m.send,
		Idempotent: idempotent(ctx), IdempotentModels: idempotentModels(ctx), // WithIdempotent, IdempotentModels
		MaybeApplied: maybeApplied(ctx), // Remaining.Context (finish.go)
		NeverResend:  m.neverResend, MatchedNothing: m.matchedNothing,
	})
	if res, ok := r.First().(*T); ok && res != nil && err == nil {
		return res, nil
	}
	return m.result(r), err
}

// InsertOne inserts document through the policy chain. document gets an
// _id before the first attempt when it has none (the caller's value is not
// modified), so retries cannot insert it twice.
//
// When the document ends written or already_written it returns the result
// and nil: exactly what the driver returned when the first attempt wrote
// it. Otherwise it returns a *Report, and a non-nil result, with the _id,
// when the document is stored all the same (written_unconfirmed). The
// InsertedID is the Go value the driver returns for that _id
// (policy.IDValue) on every path.
// Inside a transaction it makes one attempt and returns the driver's
// result and error unchanged. A nil ctx is context.Background(), as in the
// driver.
func (g *Guarded) InsertOne(ctx context.Context, document any, opts ...options.Lister[options.InsertOneOptions]) (*mongo.InsertOneResult, error) {
	return guard(g, ctx, method[mongo.InsertOneResult]{
		name: "insertOne", txInputs: 1,
		tx: func(ctx context.Context) (*mongo.InsertOneResult, error) {
			return g.target.InsertOne(ctx, document, opts...)
		},
		inputs: func() (engine.Inputs, error) {
			// A failing option builder is the driver's to report, on the
			// first attempt; the envelope then keeps no call options.
			co, _ := envelope.InsertOneCallOptions(opts...)
			return engine.Inputs{Ordered: true, Docs: []any{document}, CallOptions: co}, nil
		},
		send: func(ctx context.Context, b engine.Batch) (any, error) {
			res, err := g.target.InsertOne(ctx, b.Doc(0), opts...)
			if res != nil && !res.Acknowledged {
				return res, engine.ErrUnacked
			}
			return res, err
		},
		result: func(r engine.Result) *mongo.InsertOneResult {
			if d := r.Disposition(0); d.Stored() || d == Unacknowledged {
				return &mongo.InsertOneResult{InsertedID: r.ID(0), Acknowledged: d != Unacknowledged}
			}
			return nil
		},
	})
}

// InsertMany inserts documents (a non-empty slice) through the policy
// chain. Every document without an _id gets one before its first attempt
// (the caller's values are not modified). Documents are encoded as the
// call goes, each just before the first command that carries it (one
// command ahead), so a call larger than one command calls a document's
// MarshalBSON after earlier commands were sent; a document that fails to
// encode, or whose encoder panics (a *PanicError), fails alone. A []any
// is read in place, never written (a slice of another type is copied
// first): it, and the values it holds, must not change until InsertMany
// returns, as with the driver. Only
// documents that failed transiently are re-sent, with the same _id;
// original indices are kept through every retry; an ordered write resumes
// after a handled document and reports its untouched tail not_attempted
// after an unhandled one.
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
	dv := reflect.ValueOf(documents)
	return guard(g, ctx, method[mongo.InsertManyResult]{
		name: "insertMany", txInputs: sliceLen(dv),
		tx: func(ctx context.Context) (*mongo.InsertManyResult, error) {
			return g.target.InsertMany(ctx, documents, opts...)
		},
		inputs: func() (engine.Inputs, error) {
			switch {
			case dv.Kind() != reflect.Slice:
				return engine.Inputs{}, fmt.Errorf("invalid documents: %w", mongo.ErrNotSlice)
			case dv.Len() == 0:
				return engine.Inputs{}, fmt.Errorf("invalid documents: %w", mongo.ErrEmptySlice)
			}
			ordered, err := engine.Ordered(opts, func(o *options.InsertManyOptions) *bool { return o.Ordered })
			if err != nil {
				return engine.Inputs{}, err
			}
			co, _ := envelope.InsertManyCallOptions(opts...) // a failing builder was returned above
			if s, ok := documents.([]any); ok {              // read as it is, never written
				return engine.Inputs{Ordered: ordered, Docs: s, DocsShared: true, CallOptions: co}, nil
			}
			docs := make([]any, dv.Len())
			for i := range docs {
				docs[i] = dv.Index(i).Interface()
			}
			return engine.Inputs{Ordered: ordered, Docs: docs, CallOptions: co}, nil
		},
		send: func(ctx context.Context, b engine.Batch) (any, error) {
			docs := make([]any, len(b))
			for i := range b {
				docs[i] = b.Doc(i)
			}
			res, err := g.target.InsertMany(ctx, docs, opts...)
			if err == nil && res != nil && !res.Acknowledged {
				return res, engine.ErrUnacked
			}
			return res, err
		},
		result: func(r engine.Result) *mongo.InsertManyResult {
			res := &mongo.InsertManyResult{Acknowledged: true}
			for i := range r.Len() {
				if r.Disposition(i).Stored() {
					res.InsertedIDs = append(res.InsertedIDs, r.ID(i))
				}
				if r.Disposition(i) == Unacknowledged {
					res.Acknowledged = false
				}
			}
			return res
		},
	})
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
	total := &mongo.BulkWriteResult{Acknowledged: true}
	return guard(g, ctx, method[mongo.BulkWriteResult]{
		name: "bulkWrite", txInputs: len(models),
		tx: func(ctx context.Context) (*mongo.BulkWriteResult, error) {
			return g.target.BulkWrite(ctx, models, opts...)
		},
		inputs: func() (engine.Inputs, error) {
			if len(models) == 0 {
				return engine.Inputs{}, fmt.Errorf("invalid models: %w", mongo.ErrEmptySlice)
			}
			ordered, err := engine.Ordered(opts, func(o *options.BulkWriteOptions) *bool { return o.Ordered })
			if err == nil {
				err = engine.CheckModels(models) // a nil or unsupported model, named by its index
			}
			if err != nil {
				return engine.Inputs{}, err
			}
			co, _ := envelope.BulkWriteCallOptions(opts...) // a failing builder was returned above
			return engine.Inputs{Ordered: ordered, Models: models, Command: hooks.BulkCommand(models), CallOptions: co}, nil
		},
		send: func(ctx context.Context, b engine.Batch) (any, error) {
			ms := make([]mongo.WriteModel, len(b))
			for i := range b {
				ms[i] = b.Model(i)
			}
			res, err := g.target.BulkWrite(ctx, ms, opts...)
			if res != nil {
				engine.AddBulk(total, res, b)
				if err == nil && !res.Acknowledged {
					return res, engine.ErrUnacked
				}
			}
			return res, err
		},
		result: func(r engine.Result) *mongo.BulkWriteResult {
			// The driver's partial results cannot say which insert of a
			// split bulk write was applied before a lost reply, so
			// inserted documents are counted from the dispositions: every
			// insert model stored once.
			total.InsertedCount = 0
			for i := range r.Len() {
				if r.IsInsert(i) && r.Disposition(i).Stored() {
					total.InsertedCount++
				}
				if r.Disposition(i) == Unacknowledged {
					total.Acknowledged = false
				}
			}
			return total
		},
	})
}

func sliceLen(rv reflect.Value) int {
	if rv.Kind() == reflect.Slice {
		return rv.Len()
	}
	return 0
}
