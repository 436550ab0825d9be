package mocks

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// Fake is an in-memory collection for tests: it satisfies
// writeguard.Target (and so writeguard.Collection) without a server.
//
// It behaves like a MongoDB collection for what writeguard needs: a unique
// _id index (none after TimeSeries) plus the unique indexes added with
// Unique, an optional
// validator, ordered and unordered inserts and bulk writes (the server
// stops an ordered write at its first error), and Find with equality and
// $in filters on top-level fields. Every error it returns is a real driver
// error value made by ReplyError from the reply a server would send, so
// code under test sees exactly the types, codes, labels and errInfo it
// would see in production.
//
// A script of Faults, consumed one per write call (every write method:
// InsertOne, InsertMany, BulkWrite, UpdateOne, ..., FindOneAndDelete),
// injects failures: a scripted reply, a lost reply after the
// write was applied, a dropped connection, a write concern error,
// per-document errors. Calls past the end of the script behave normally.
//
// A scripted Reply that the real driver cannot take (a write error index
// outside a BulkWrite's models) makes the Fake panic as the driver does.
//
// Fake is safe for concurrent use. Update models support $set, $unset,
// $inc and $setOnInsert on top-level fields; filters support equality on
// top-level fields and {$in: [...]}. Anything else returns an error saying
// so.
type Fake struct {
	mu        sync.Mutex
	ns        string
	docs      []bson.Raw
	unique    [][]string
	validator func(doc bson.Raw) (errInfo bson.Raw, reject bool)
	script    []Fault
	calls     []Call
	reads     reads // fakeread.go
	// timeSeries: no unique _id index (TimeSeries).
	timeSeries bool
	// hello is the handshake reply Hello returns (Limits).
	hello bson.D
	// topology is what Hello says of the deployment (faketopology.go).
	topology bson.D
	poison   []poisonDoc
}

// The collection types CollectionType reports, as listCollections names
// them (its "type" field).
const (
	TypeCollection = "collection"
	TypeTimeSeries = "timeseries"
)

// CollectionType returns what listCollections reports as the collection's
// "type": TypeTimeSeries after TimeSeries, else TypeCollection. The error
// is always nil; it is there so that an interface a real collection can
// also satisfy fits it.
func (f *Fake) CollectionType(context.Context) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.timeSeries {
		return TypeTimeSeries, nil
	}
	return TypeCollection, nil
}

// Call records one write call the Fake received.
type Call struct {
	// Op is insertOne, insertMany or bulkWrite.
	Op string
	// IDs are the _ids of the documents (insert models) sent, in order.
	IDs []any
	// Docs are the documents (insert models) sent, in order, as marshalled.
	Docs []bson.Raw
	// Models is the number of documents or models sent.
	Models int
	// Fault is the fault applied ("" when the call behaved normally).
	Fault string
}

// NewFake returns an empty Fake for namespace ns ("db.collection").
func NewFake(ns string) *Fake {
	return &Fake{ns: ns}
}

// Name returns the collection part of the namespace.
func (f *Fake) Name() string {
	if i := strings.IndexByte(f.ns, '.'); i >= 0 {
		return f.ns[i+1:]
	}
	return f.ns
}

// Namespace returns "db.collection".
func (f *Fake) Namespace() string { return f.ns }

// Unique adds a unique index on fields (top-level names). It returns f.
func (f *Fake) Unique(fields ...string) *Fake {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.unique = append(f.unique, fields)
	return f
}

// Validator sets a document validator: v returns the errInfo to report and
// true to reject the document with 121 DocumentValidationFailure
// ("Document failed validation"). A nil errInfo is sent without errInfo,
// as servers before 5.0 do. It returns f.
func (f *Fake) Validator(v func(doc bson.Raw) (errInfo bson.Raw, reject bool)) *Fake {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.validator = v
	return f
}

// Script appends faults, consumed one per write call. It returns f.
func (f *Fake) Script(faults ...Fault) *Fake {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.script = append(f.script, faults...)
	return f
}

// Seed stores docs directly, bypassing validators and faults (a duplicate
// _id is an error, except on a TimeSeries Fake).
func (f *Fake) Seed(docs ...any) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, d := range docs {
		raw, err := bson.Marshal(d)
		if err != nil {
			return err
		}
		if _, err := bson.Raw(raw).LookupErr("_id"); err != nil {
			return errors.New("mocks: Seed needs documents with an _id")
		}
		if we := f.checkUnique(raw, -1); we != nil {
			return fmt.Errorf("mocks: Seed: duplicate key %v", we)
		}
		f.docs = append(f.docs, raw)
	}
	return nil
}

// Docs returns a copy of the stored documents in insertion order.
func (f *Fake) Docs() []bson.Raw {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]bson.Raw(nil), f.docs...)
}

// Calls returns the write calls received so far.
func (f *Fake) Calls() []Call {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Call(nil), f.calls...)
}

// Fault is one scripted behaviour of a write call. Make one with the
// constructors below.
type Fault struct {
	name      string
	apply     bool      // run the write against the store
	reply     bson.Raw  // answer with this reply instead
	network   bool      // return a network error
	wce       bson.D    // add this writeConcernError
	labels    []string  // top-level errorLabels to add
	docErrors []docFail // per-document errors
	hang      bool      // after applying, wait for the context to end
	unacked   bool      // acknowledge nothing (w: 0)
	partial   int       // with reply or network: apply the first partial-1 writes first
	err       error     // fail with this client-side error, applying nothing
	after     error     // apply the write, then fail with this error (faketopology.go AppliedThen)
}

type docFail struct {
	id     any
	fields bson.D
}

// Pass behaves normally.
func Pass() Fault { return Fault{name: "", apply: true} }

// Reply answers with reply (a server reply in Extended JSON, e.g.
// `{"ok":0,"code":91,"errorLabels":["RetryableWriteError"]}`) without
// applying the write. It panics on invalid Extended JSON: a test bug.
func Reply(extJSON string) Fault {
	var raw bson.Raw
	if err := bson.UnmarshalExtJSON([]byte(extJSON), false, &raw); err != nil {
		panic(fmt.Sprintf("mocks.Reply: %v", err))
	}
	return Fault{name: "reply", reply: raw}
}

// LoseReply applies the write, then fails with a network error: the server
// applied it, the client never heard.
func LoseReply() Fault { return Fault{name: "lose_reply", apply: true, network: true} }

// Hang applies the write, then holds the reply until the call's context
// ends and returns the context's error wrapped as the driver does for a
// deadline during a read: the write was applied, the client timed out.
func Hang() Fault { return Fault{name: "hang", apply: true, hang: true} }

// Unacknowledged applies the write and answers as an unacknowledged write
// concern (w: 0) does: results with Acknowledged false and no error, even
// for documents that failed.
func Unacknowledged() Fault { return Fault{name: "unacknowledged", apply: true, unacked: true} }

// DropConnection fails with a network error without applying the write.
func DropConnection() Fault { return Fault{name: "drop_connection", network: true} }

// WriteConcernError applies the write and adds a writeConcernError {code,
// codeName, errmsg} and the given top-level error labels to the reply.
func WriteConcernError(code int32, codeName, errmsg string, labels ...string) Fault {
	return Fault{name: "write_concern_error", apply: true,
		wce:    bson.D{{Key: "code", Value: code}, {Key: "codeName", Value: codeName}, {Key: "errmsg", Value: errmsg}},
		labels: labels}
}

// DocError applies the write but fails the document whose _id equals id
// with the write error {code, errmsg}; the server's ordered semantics
// apply. Several DocErrors can be combined with Combine.
func DocError(id any, code int32, errmsg string) Fault {
	return Fault{name: "doc_error", apply: true, docErrors: []docFail{{id: id, fields: bson.D{{Key: "code", Value: code}, {Key: "errmsg", Value: errmsg}}}}}
}

// PoolCleared fails the call the way the driver does when the connection
// pool was cleared while the call waited for a connection: nothing is
// sent, and the error (no code, no label, not a network error) says
// Retryable() true, like the driver's own pool-cleared error
// (x/mongo/driver/topology, CMAP spec PoolClearedError).
func PoolCleared() Fault {
	return Fault{name: "pool_cleared", err: PoolClearedError{Address: "localhost:27017"}}
}

// PoolClearedError has the shape of the driver's error for a checkout from
// a cleared connection pool: its Retryable method returns true (the
// driver's RetryablePoolError interface), and it carries no server code or
// label.
type PoolClearedError struct {
	// Address is the server whose pool was cleared.
	Address string
}

// Error says which pool was cleared.
func (e PoolClearedError) Error() string {
	return "connection pool for " + e.Address + " was cleared because another operation failed with: connection reset by peer"
}

// Retryable returns true: the driver deems every pool-cleared error
// retryable.
func (PoolClearedError) Retryable() bool { return true }

// ApplyFirst applies the first k writes of the call (as the server commits
// the start of a batch before it is interrupted), then answers as then
// does without applying anything more: then is a Reply (an ok: 0
// interruption such as {"ok":0,"code":11600,"codeName":"InterruptedAtShutdown"})
// or DropConnection (the reply is lost). k larger than the call applies
// every write. It panics when then is neither: a test bug.
func ApplyFirst(k int, then Fault) Fault {
	if then.reply == nil && !then.network || then.apply {
		panic("mocks.ApplyFirst: then must be a Reply or DropConnection")
	}
	then.name, then.partial = "apply_first_then_"+then.name, k+1
	return then
}

// Combine merges the per-document errors of several DocError faults.
func Combine(faults ...Fault) Fault {
	out := Fault{name: "doc_error", apply: true}
	for _, f := range faults {
		out.docErrors = append(out.docErrors, f.docErrors...)
	}
	return out
}

func (f *Fake) nextFault() Fault {
	if len(f.script) == 0 {
		return Pass()
	}
	ft := f.script[0]
	f.script = f.script[1:]
	return ft
}

// op is one write of a call, in order.
type op struct {
	kind   string // insert, update, replace, delete
	doc    bson.Raw
	filter bson.Raw
	update bson.Raw
	multi  bool
	upsert bool
}

type counts struct {
	inserted, matched, modified, deleted, upserted int64
	upsertedIDs                                    map[int64]any
}

// InsertOne implements writeguard.Collection.
func (f *Fake) InsertOne(ctx context.Context, document any, _ ...options.Lister[options.InsertOneOptions]) (*mongo.InsertOneResult, error) {
	raw, id, err := marshalWithID(document)
	if err != nil {
		return nil, err
	}
	_, err = f.exec(ctx, OpInsertOne, []op{{kind: "insert", doc: raw}}, true)
	if errors.Is(err, errUnacknowledged) {
		return &mongo.InsertOneResult{InsertedID: id}, nil
	}
	if err != nil {
		return nil, err
	}
	return &mongo.InsertOneResult{InsertedID: id, Acknowledged: true}, nil
}

// InsertMany implements writeguard.Collection. Only the ordered option is
// read.
func (f *Fake) InsertMany(ctx context.Context, documents any, opts ...options.Lister[options.InsertManyOptions]) (*mongo.InsertManyResult, error) {
	dv := reflect.ValueOf(documents)
	if dv.Kind() != reflect.Slice {
		return nil, fmt.Errorf("invalid documents: %w", mongo.ErrNotSlice)
	}
	if dv.Len() == 0 {
		return nil, fmt.Errorf("invalid documents: %w", mongo.ErrEmptySlice)
	}
	var o options.InsertManyOptions
	listAll(opts, &o)
	ops := make([]op, dv.Len())
	ids := make([]any, dv.Len())
	for i := range ops {
		raw, id, err := marshalWithID(dv.Index(i).Interface())
		if err != nil {
			return nil, err
		}
		ops[i], ids[i] = op{kind: "insert", doc: raw}, id
	}
	ordered := o.Ordered == nil || *o.Ordered
	c, err := f.exec(ctx, OpInsertMany, ops, ordered)
	if errors.Is(err, errUnacknowledged) {
		return &mongo.InsertManyResult{InsertedIDs: ids}, nil
	}
	res := &mongo.InsertManyResult{Acknowledged: true}
	if c != nil {
		res.InsertedIDs = ids[:0:0]
		for i, ok := range c.ok {
			if ok {
				res.InsertedIDs = append(res.InsertedIDs, ids[i])
			}
		}
	}
	if err != nil && c == nil {
		return nil, err
	}
	return res, err
}

// BulkWrite implements writeguard.Collection for insert, update (one and
// many), replace and delete models. Only the ordered option is read.
func (f *Fake) BulkWrite(ctx context.Context, models []mongo.WriteModel, opts ...options.Lister[options.BulkWriteOptions]) (*mongo.BulkWriteResult, error) {
	if len(models) == 0 {
		return nil, fmt.Errorf("invalid models: %w", mongo.ErrEmptySlice)
	}
	var o options.BulkWriteOptions
	listAll(opts, &o)
	ops := make([]op, len(models))
	for i, m := range models {
		o, err := toOp(m)
		if err != nil {
			return nil, fmt.Errorf("invalid model at index %d: %w", i, err)
		}
		ops[i] = o
	}
	ordered := o.Ordered == nil || *o.Ordered
	c, err := f.exec(ctx, OpBulkWrite, ops, ordered)
	if errors.Is(err, errUnacknowledged) {
		return &mongo.BulkWriteResult{}, nil
	}
	if c == nil {
		return nil, err
	}
	return &mongo.BulkWriteResult{InsertedCount: c.inserted, MatchedCount: c.matched, ModifiedCount: c.modified,
		DeletedCount: c.deleted, UpsertedCount: c.upserted, UpsertedIDs: c.upsertedIDs, Acknowledged: true}, err
}

type execResult struct {
	counts
	ok []bool
}

// exec runs ops under the next fault and returns the per-op outcome and
// the driver error for the reply.
func (f *Fake) exec(ctx context.Context, opName string, ops []op, ordered bool) (*execResult, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	ft, res, err := f.execUnderLock(opName, ops, ordered)
	var dp *DriverPanicError
	if errors.As(err, &dp) {
		// The real driver panics on this reply (a write error index
		// outside the command): so does the Fake, as a *mongo.Collection
		// would.
		panic(dp.Value)
	}
	if ft.hang {
		<-ctx.Done()
		// As the driver reports a deadline or cancellation while reading
		// the reply: labelled NetworkError, wrapping the context's error.
		return nil, mongo.CommandError{Message: "connection(localhost:27017) incomplete read of message header: " + ctx.Err().Error(),
			Labels: []string{"NetworkError"}, Wrapped: ctx.Err()}
	}
	if ft.unacked {
		return nil, errUnacknowledged
	}
	return res, err
}

var errUnacknowledged = errors.New("unacknowledged")

// execUnderLock picks the call's fault and runs it with the Fake locked,
// unlocking it whatever happens (a panic of a test's validator or of the
// Fake itself must not leave the next call waiting for the lock).
func (f *Fake) execUnderLock(opName string, ops []op, ordered bool) (Fault, *execResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ft, poisoned := f.poisonFault(ops)
	if !poisoned {
		ft = f.nextFault()
	}
	res, err := f.execLocked(ft, opName, ops, ordered)
	return ft, res, err
}

func (f *Fake) execLocked(ft Fault, opName string, ops []op, ordered bool) (*execResult, error) {
	call := Call{Op: opName, Models: len(ops), Fault: ft.name}
	for _, o := range ops {
		if o.kind == "insert" {
			v, _ := o.doc.LookupErr("_id")
			call.IDs = append(call.IDs, v)
			call.Docs = append(call.Docs, o.doc)
		}
	}
	f.calls = append(f.calls, call)
	if ft.err != nil {
		return nil, ft.err
	}
	if ft.partial > 0 {
		var c counts
		for i := 0; i < len(ops) && i < ft.partial-1; i++ {
			f.apply(i, ops[i], &c)
		}
	}
	if ft.reply != nil {
		if opName == OpBulkWrite {
			if err := bulkIndexPanic(ft.reply, len(ops)); err != nil {
				return nil, err
			}
		}
		_, err := ReplyResult(opName, ft.reply)
		return nil, err
	}
	res := &execResult{ok: make([]bool, len(ops))}
	res.upsertedIDs = map[int64]any{}
	var writeErrors bson.A
	if ft.apply {
		for i, o := range ops {
			we := ft.docError(o)
			if we == nil {
				we = f.apply(i, o, &res.counts)
			}
			if we != nil {
				writeErrors = append(writeErrors, append(bson.D{{Key: "index", Value: int32(i)}}, we...))
				if ordered {
					break
				}
				continue
			}
			res.ok[i] = true
		}
	}
	if ft.network {
		return nil, NetworkError(opName)
	}
	if ft.after != nil {
		return nil, ft.after
	}
	reply := bson.D{{Key: "ok", Value: 1}, {Key: "n", Value: int32(res.inserted + res.matched + res.upserted + res.deleted)}}
	if len(writeErrors) > 0 {
		reply = append(reply, bson.E{Key: "writeErrors", Value: writeErrors})
	}
	if ft.wce != nil {
		reply = append(reply, bson.E{Key: "writeConcernError", Value: ft.wce})
	}
	if len(ft.labels) > 0 {
		reply = append(reply, bson.E{Key: "errorLabels", Value: ft.labels})
	}
	if len(writeErrors) == 0 && ft.wce == nil {
		return res, nil
	}
	raw, err := bson.Marshal(reply)
	if err != nil {
		return nil, err
	}
	_, err = ReplyResult(opName, raw)
	return res, err
}

func (ft Fault) docError(o op) bson.D {
	if o.kind != "insert" {
		return nil
	}
	id, err := o.doc.LookupErr("_id")
	if err != nil {
		return nil
	}
	for _, d := range ft.docErrors {
		want, err := bson.Marshal(bson.D{{Key: "v", Value: d.id}})
		if err != nil {
			continue
		}
		if wv, err := bson.Raw(want).LookupErr("v"); err == nil && wv.Equal(id) {
			return d.fields
		}
	}
	return nil
}

// apply runs one op against the store; it returns the write error fields
// ({code, errmsg, ...}) or nil.
func (f *Fake) apply(i int, o op, c *counts) bson.D {
	switch o.kind {
	case "insert":
		if we := f.validate(o.doc); we != nil {
			return we
		}
		if we := f.checkUnique(o.doc, -1); we != nil {
			return we
		}
		f.docs = append(f.docs, o.doc)
		c.inserted++
	case "delete":
		for j := 0; j < len(f.docs); j++ {
			if matches(f.docs[j], o.filter) {
				f.docs = append(f.docs[:j], f.docs[j+1:]...)
				c.deleted++
				j--
				if !o.multi {
					break
				}
			}
		}
	case "update", "replace":
		found := false
		for j := range f.docs {
			if !matches(f.docs[j], o.filter) {
				continue
			}
			found = true
			next, err := applyUpdate(f.docs[j], o, false)
			if err != nil {
				return bson.D{{Key: "code", Value: int32(2)}, {Key: "errmsg", Value: err.Error()}}
			}
			if we := f.validate(next); we != nil {
				return we
			}
			if we := f.checkUnique(next, j); we != nil {
				return we
			}
			c.matched++
			if !bytes.Equal(next, f.docs[j]) {
				c.modified++
			}
			f.docs[j] = next
			if !o.multi {
				break
			}
		}
		if !found && o.upsert {
			base, _ := bson.Marshal(bson.D{})
			next, err := applyUpdate(seedFromFilter(o.filter, base), o, true)
			if err != nil {
				return bson.D{{Key: "code", Value: int32(2)}, {Key: "errmsg", Value: err.Error()}}
			}
			next, id, _ := ensureID(next)
			if we := f.validate(next); we != nil {
				return we
			}
			if we := f.checkUnique(next, -1); we != nil {
				return we
			}
			f.docs = append(f.docs, next)
			c.upserted++
			if c.upsertedIDs == nil { // ApplyFirst's partial counts start without one
				c.upsertedIDs = map[int64]any{}
			}
			c.upsertedIDs[int64(i)] = id
		}
	}
	return nil
}

func (f *Fake) validate(doc bson.Raw) bson.D {
	if f.validator == nil {
		return nil
	}
	info, reject := f.validator(doc)
	if !reject {
		return nil
	}
	we := bson.D{{Key: "code", Value: int32(121)}, {Key: "errmsg", Value: "Document failed validation"}}
	if info != nil {
		we = append(we, bson.E{Key: "errInfo", Value: info})
	}
	return we
}

// checkUnique returns an 11000 write error when doc duplicates a stored
// document (other than the one at skip) on _id or a unique index.
func (f *Fake) checkUnique(doc bson.Raw, skip int) bson.D {
	indexes := f.unique
	if !f.timeSeries {
		indexes = append([][]string{{"_id"}}, f.unique...)
	}
	for _, fields := range indexes {
		var key bson.D
		missing := 0
		for _, fld := range fields {
			v, err := doc.LookupErr(fld)
			if err != nil {
				missing++
				key = append(key, bson.E{Key: fld, Value: nil})
				continue
			}
			key = append(key, bson.E{Key: fld, Value: v})
		}
		for j, other := range f.docs {
			if j == skip {
				continue
			}
			same := true
			for _, fld := range fields {
				if !sameKey(doc.Lookup(fld), other.Lookup(fld)) {
					same = false
					break
				}
			}
			if !same {
				continue
			}
			pattern := bson.D{}
			name := ""
			for _, fld := range fields {
				pattern = append(pattern, bson.E{Key: fld, Value: int32(1)})
				name += fld + "_1_"
			}
			name = strings.TrimSuffix(name, "_")
			if len(fields) == 1 && fields[0] == "_id" {
				name = "_id_"
			}
			kv, _ := bson.MarshalExtJSON(key, false, false)
			return bson.D{{Key: "code", Value: int32(11000)}, {Key: "keyPattern", Value: pattern}, {Key: "keyValue", Value: key},
				{Key: "errmsg", Value: fmt.Sprintf("E11000 duplicate key error collection: %s index: %s dup key: %s", f.ns, name, kv)}}
		}
	}
	return nil
}

// Find implements writeguard.Target: filters with equality on top-level
// fields and {field: {$in: [...]}}.
// Reads through Find follow the Fake's read preference (see Lag); reads
// through ReadPrimary see what the primary holds.
func (f *Fake) Find(ctx context.Context, filter any, _ ...options.Lister[options.FindOptions]) (*mongo.Cursor, error) {
	return f.find(filter, false)
}

// sameKey compares two values of a unique index's field as the server's
// index does: a missing field is null (a non-sparse unique index holds one
// null key), and numbers compare by value whatever their BSON type
// (int32 1, int64 1 and double 1.0 are one key).
func sameKey(a, b bson.RawValue) bool {
	if nullKey(a) || nullKey(b) {
		return nullKey(a) && nullKey(b)
	}
	if x, ok := a.AsFloat64OK(); ok {
		y, ok := b.AsFloat64OK()
		return ok && x == y
	}
	return a.Equal(b)
}

func nullKey(v bson.RawValue) bool {
	return v.Type == 0 || v.Type == bson.TypeNull || v.Type == bson.TypeUndefined
}

// bulkIndexPanic returns the *DriverPanicError the v2.10 driver's BulkWrite
// raises for reply when a write error or upserted index names no model of
// a command of n models (mongo/bulk_write.go runBatch indexes its models
// and their input positions by it), nil when every index is in range.
func bulkIndexPanic(reply bson.Raw, n int) error {
	for _, key := range []string{"writeErrors", "upserted"} {
		arr, ok := reply.Lookup(key).ArrayOK()
		if !ok {
			continue
		}
		vals, _ := arr.Values()
		for _, v := range vals {
			doc, ok := v.DocumentOK()
			if !ok {
				continue
			}
			i, ok := doc.Lookup("index").AsInt64OK()
			if !ok || i >= 0 && i < int64(n) {
				continue
			}
			return &DriverPanicError{Op: OpBulkWrite, Value: indexPanic(i, n)}
		}
	}
	return nil
}

// indexPanic returns the runtime error that indexing a slice of length n
// at i raises.
func indexPanic(i int64, n int) (v any) {
	defer func() { v = recover() }()
	models := make([]struct{}, n)
	_ = models[i]
	return nil
}
