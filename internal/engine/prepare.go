package engine

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"reflect"
	"runtime/debug"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/writeguard/writeguard/policy"
)

// The first step of the write path: every document is encoded once and
// given its _id before the first attempt that sends it, so that no retry
// can store it twice. An insert call does it as it goes, one command
// ahead (prepareAhead), so that it holds the bytes of the documents still
// undecided rather than of the whole call.

// The errors of a document that fails in prepare, kept in its Failure.Err
// (the root names them in Report.Error without quoting them).
var (
	ErrTooLarge    = errors.New("document too large")
	ErrInvalidBSON = errors.New("invalid BSON document")
)

// takeDocs takes the documents of an insert call (Inputs.Docs): docs[i]
// is input i; the call takes docs over and clears each entry once it is
// prepared. They are prepared as the call goes (prepareAhead): each one
// before the first command that carries it, so a call holds the prepared
// bytes of the documents still undecided, not of all of them.
func (c *Call) takeDocs(docs []any, shared bool) {
	// Every item is an insert already: KindInsert is Kind's zero value.
	c.inputs, c.inputsShared, c.next = docs, shared, 0
}

// prepareAhead prepares the next documents of takeDocs in input order,
// until the prepared documents not sent yet fill one command (the
// server's maxWriteBatchSize documents, or maxMessageSizeBytes -
// CommandMargin bytes and one more), or all of them with all set, then
// routes those that failed to prepare. It prepares at least one document
// when none is prepared ahead (whatever the limits say), so that every
// pass of the loop moves on. Each document still gets its _id before the
// first attempt that sends it.
func (c *Call) prepareAhead(ctx context.Context, all bool) {
	start := c.next
	c.prepareNext(ctx, all)
	c.routePrefailed(ctx, c.items[start:c.next])
}

// prepareNext is prepareAhead without the routing.
func (c *Call) prepareNext(ctx context.Context, all bool) {
	if c.next == len(c.items) {
		return
	}
	lim := DefaultLimits
	if !all && len(c.items) > 1 {
		lim = c.limits(ctx)
	}
	budget := lim.MaxMessageSizeBytes - CommandMargin
	n, size := 0, 0
	for i := c.next - 1; i >= 0 && c.items[i].attempts == 0; i-- {
		if c.items[i].state == pending { // prepared ahead by the last pass, not sent
			n, size = n+1, size+len(c.items[i].doc)
		}
	}
	for c.next < len(c.items) && (all || n == 0 || n < lim.MaxWriteBatchSize && size <= budget) {
		it, doc := c.items[c.next], c.inputs[c.next]
		if c.enc == nil && needsEncoder(doc) {
			c.enc = c.e.newDocEncoder() // not for a call of bytes only
		}
		c.prepareDoc(c.enc, it, doc, len(c.items)-c.next)
		if !c.inputsShared {
			c.inputs[c.next] = nil // the caller's value is no longer needed here
		}
		c.next++
		n, size = n+1, size+len(it.doc)
	}
	if c.next == len(c.items) {
		if c.enc != nil {
			c.enc.release()
		}
		c.enc, c.inputs = nil, nil
	} else {
		c.spread = true
	}
}

// needsEncoder reports whether prepareDoc encodes doc (not nil, not the
// caller's own bytes).
func needsEncoder(doc any) bool {
	switch doc.(type) {
	case nil, bson.Raw, []byte:
		return false
	}
	return true
}

// prepareDocs prepares the documents of the insert models of a bulk write
// at once: docs[i] is the document of its[i].
func (c *Call) prepareDocs(its []*item, docs []any) {
	if len(its) == 0 {
		return
	}
	enc := c.e.newDocEncoder()
	defer enc.release()
	for i, it := range its {
		c.prepareDoc(enc, it, docs[i], len(its)-i)
	}
}

// prepareDoc prepares the document of one insert: it is encoded once,
// straight into the call's arena with a new ObjectID _id first when it has
// none (one encoding and one copy, the encoder's buffer into the arena; no
// per-document allocation: Batch.Doc hands it to the driver as a sendDoc).
// The caller's own bytes (bson.Raw, []byte) are checked and sent as they
// are when they carry an _id. A panic of the caller's encoder (a
// MarshalBSON) fails this document alone, with Config.Panicked's error
// (the root's *PanicError): the others
// of the call, some of them maybe stored already, keep their outcomes.
// remaining is the number of documents from this one on (the arena's
// estimate).
func (c *Call) prepareDoc(enc *docEncoder, it *item, doc any, remaining int) {
	it.kind = KindInsert
	var err error
	switch d := doc.(type) {
	case nil:
		err = mongo.ErrNilDocument
	case bson.Raw:
		err = c.prepareRaw(it, d)
	case []byte:
		err = c.prepareRaw(it, d)
	default:
		if nilValue(doc) {
			err = fmt.Errorf("%w (a nil %T)", mongo.ErrNilDocument, doc)
			break
		}
		it.doc, it.id, it.idAssigned, err = enc.encode(doc, remaining)
		if p, panicked := err.(*encoderPanic); panicked {
			err = c.e.cfg.Panicked("the document's encoder", p.value, p.stack)
		} else if err != nil {
			err = mongo.MarshalError{Value: doc, Err: err}
		}
	}
	if err != nil {
		c.prefail(it, err)
		return
	}
	c.checkSize(it)
}

// prepareRaw prepares a document the caller handed as bytes: a valid BSON
// document (rather than the server's rejection of the whole command),
// sent as it is when it has an _id, else copied once with a new ObjectID
// _id first.
func (c *Call) prepareRaw(it *item, raw bson.Raw) error {
	if err := raw.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidBSON, err)
	}
	// Validate reads the document its length prefix declares and the
	// driver sends that much (bson.copyDocumentFromBytes): bytes after it
	// are not part of the document.
	raw = raw[:binary.LittleEndian.Uint32(raw)]
	if id, err := raw.LookupErr("_id"); err == nil {
		it.doc, it.id = raw, id
		return nil
	}
	it.doc = bson.Raw(appendWithID(make([]byte, 0, len(raw)+idElementSize), raw, bson.NewObjectID()))
	it.id, it.idAssigned = assignedID(it.doc), true
	return nil
}

func (c *Call) checkSize(it *item) {
	if len(it.doc) > policy.MaxBSONSize {
		c.prefail(it, fmt.Errorf("document is %d bytes, over the %d-byte maximum (BSONObjectTooLarge): %w", len(it.doc), policy.MaxBSONSize, ErrTooLarge))
		it.fail.Code, it.fail.CodeName = 10334, "BSONObjectTooLarge"
	}
}

func (c *Call) prefail(it *item, err error) {
	it.to(prefailed)
	c.anyPrefailed = true
	it.fail = &policy.Failure{Index: it.index, Origin: policy.OriginClient, Shape: policy.ShapeClient, Message: err.Error(), Err: err}
}

// docEncoder encodes the documents of one call into its arena: a
// bson.Encoder on a bson.ValueWriter whose io.Writer is the arena (the
// value writer hands it each finished top-level document in one Write),
// taken from a pool so that a call does not build them per document (as
// bson.Marshal does with its own pools; its result would be a second copy
// of every document).
type docEncoder struct {
	enc   *bson.Encoder
	a     arena
	make  func(io.Writer) *bson.Encoder // the encoder's constructor
	pool  *sync.Pool                    // where it goes back
	types bool                          // the default registry, no options: idFree holds
	// lastType and lastFree: the type of the last document encoded and
	// whether it is idFree (a call's documents are mostly of one type).
	lastType reflect.Type
	lastFree bool
}

// defaultEncoders is the pool of the engines whose Config.NewEncoder is
// nil: the default registry, no options.
var defaultEncoders = defaultPool()

func defaultPool() *sync.Pool {
	p := encoderPool(func(w io.Writer) *bson.Encoder { return bson.NewEncoder(bson.NewDocumentWriter(w)) })
	mk := p.New
	p.New = func() any {
		e := mk().(*docEncoder)
		e.types = true
		return e
	}
	return p
}

// encoderPool returns a pool of docEncoders whose encoders mk makes (an
// encoder's options cannot be unset, so each configuration has its pool).
func encoderPool(mk func(io.Writer) *bson.Encoder) *sync.Pool {
	p := &sync.Pool{}
	p.New = func() any {
		e := &docEncoder{make: mk, pool: p}
		e.enc = mk(&e.a)
		return e
	}
	return p
}

func (e *Engine) newDocEncoder() *docEncoder { return e.encoders.Get().(*docEncoder) }

// release returns e to its pool, without the call's arena, unless it
// encoded a document larger than maxPooledDoc: its value writer's buffer
// has grown to that size, and the pool would keep it.
func (e *docEncoder) release() {
	big := e.a.largest > maxPooledDoc
	e.a = arena{}
	if !big {
		e.pool.Put(e)
	}
}

// maxPooledDoc is the largest document (64 KiB) after which an encoder is
// not pooled.
const maxPooledDoc = 64 << 10

// reset starts a fresh value writer after a failed encoding: the old one
// may be in the middle of a document.
func (e *docEncoder) reset() { e.enc = e.make(&e.a) }

// encode encodes doc (remaining documents of the call from this one on:
// remaining) with the engine's encoder (Config.NewEncoder; by default the
// default registry, as bson.Marshal does) into the arena, with a new ObjectID _id first when it has none. The result is
// the document's bytes in the arena, its _id, and whether the _id is
// writeguard's.
//
// A panic of the document's own encoder (a MarshalBSON) is returned as a
// *encoderPanic (recovered here, in a defer of this function, so that the
// happy path allocates nothing for it).
func (e *docEncoder) encode(doc any, remaining int) (raw bson.Raw, id bson.RawValue, assigned bool, err error) {
	defer func() {
		if r := recover(); r != nil {
			e.reset() // the value writer may be in the middle of a document
			raw, id, assigned = nil, bson.RawValue{}, false
			err = &encoderPanic{value: r, stack: debug.Stack()}
		}
	}()
	e.a.remaining, e.a.writes = remaining, 0
	if t := reflect.TypeOf(doc); t != e.lastType {
		e.lastType, e.lastFree = t, e.types && idFree(t)
	}
	e.a.noID = e.lastFree
	if err := e.enc.Encode(doc); err != nil {
		e.reset()
		return nil, bson.RawValue{}, false, err
	}
	if e.a.writes != 1 {
		return nil, bson.RawValue{}, false, fmt.Errorf("encoded %d documents, want 1", e.a.writes)
	}
	return e.a.last, e.a.id, e.a.assigned, nil
}

// arena holds the prepared documents of one call in chunks: the first
// sized for every document of the call at the first one's size, the next
// for the remaining ones at the mean size so far, up to maxChunk (a larger
// document gets a chunk of its own). Each document is a sub-slice with no
// spare capacity.
type arena struct {
	chunk     []byte
	remaining int // documents from the one being encoded on
	written   int // bytes written so far
	count     int // documents written so far
	largest   int // the largest document written
	// Per Write: the document written, its _id, whether the _id is new,
	// and the number of Writes since encode started.
	last     bson.Raw
	id       bson.RawValue
	assigned bool
	writes   int
	noID     bool     // the document's type cannot write an _id (idFree): no lookup
	oids     oidBlock // the new ObjectIDs (objectid.go): one clock read and one atomic add per block
}

// maxChunk bounds an arena chunk (1 MiB): a very large call's arena grows
// in steps, and a wrong estimate (a first document much larger than the
// others) wastes at most that much.
const maxChunk = 1 << 20

// Write copies the encoded document p (the value writer reuses it) into
// the arena, with a new ObjectID _id first when p has none.
func (a *arena) Write(p []byte) (int, error) {
	a.writes++
	a.assigned = a.noID
	if !a.noID {
		_, err := bson.Raw(p).LookupErr("_id")
		a.assigned = err != nil
	}
	need := len(p)
	if a.assigned {
		need += idElementSize
	}
	if cap(a.chunk)-len(a.chunk) < need {
		mean := need
		if a.count > 0 {
			mean = max(need, a.written/a.count)
		}
		size := min(max(mean, mean*a.remaining), maxChunk)
		a.chunk = make([]byte, 0, max(size, need))
	}
	start := len(a.chunk)
	if a.assigned {
		a.chunk = appendWithID(a.chunk, p, a.oids.take(a.remaining, time.Now))
	} else {
		a.chunk = append(a.chunk, p...)
	}
	a.last = bson.Raw(a.chunk[start:len(a.chunk):len(a.chunk)])
	if a.assigned {
		a.id = assignedID(a.last)
	} else {
		a.id = a.last.Lookup("_id") // in the arena's copy, not the encoder's buffer
	}
	a.written += len(a.last)
	a.count++
	a.largest = max(a.largest, len(p))
	return len(p), nil
}

// assignedID is the _id of a document appendWithID wrote.
func assignedID(doc bson.Raw) bson.RawValue {
	return bson.RawValue{Type: bson.TypeObjectID, Value: doc[9 : 9+12]}
}

// idElementSize is the size of an ObjectID _id element: type byte, "_id",
// NUL, 12 bytes.
const idElementSize = 1 + 3 + 1 + 12

// appendWithID appends to dst the document raw with a new first element
// _id: oid, as the driver's ensureID does, but once, before the first
// attempt.
func appendWithID(dst []byte, raw bson.Raw, oid bson.ObjectID) []byte {
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0, byte(bson.TypeObjectID))
	dst = append(dst, "_id"...)
	dst = append(dst, 0)
	dst = append(dst, oid[:]...)
	dst = append(dst, raw[4:]...)
	n := int32(len(dst) - start)
	dst[start], dst[start+1], dst[start+2], dst[start+3] = byte(n), byte(n>>8), byte(n>>16), byte(n>>24)
	return dst
}

// prepareModels reads every model's kind (Inputs.Models, which passed
// CheckModels), prepares the documents of the insert models together
// (prepareDocs) and sends each insert model as a copy holding its
// prepared document; other models are sent as they are. A nil or
// unsupported model is an error naming its index.
func (c *Call) prepareModels(models []mongo.WriteModel) error {
	var inserts []*item
	var docs []any
	rare := make([]itemRare, len(models)) // every model's rare part, at once
	for i, m := range models {
		it := c.items[i]
		it.rare = &rare[i]
		if err := c.prepareModel(it, m); err != nil {
			return err
		}
		if im, ok := m.(*mongo.InsertOneModel); ok {
			inserts, docs = append(inserts, it), append(docs, im.Document)
		}
	}
	c.prepareDocs(inserts, docs)
	for _, it := range inserts {
		if it.state != prefailed || it.doc != nil {
			it.rare.send = &mongo.InsertOneModel{Document: sendDoc{&it.doc}}
		}
	}
	return nil
}

// nilValue reports whether v is a typed nil pointer (a document the
// encoder would write as a BSON null, failing with a message about the
// value writer's state; a model the driver would dereference). A nil map
// is left to the encoder: with NilMapAsEmpty it is an empty document.
func nilValue(v any) bool {
	rv := reflect.ValueOf(v)
	return rv.Kind() == reflect.Pointer && rv.IsNil()
}

// CheckModels checks the write models of a call as the driver does before
// it sends anything: a nil model, a typed nil pointer, or a model of a type
// other than the driver's six (InsertOneModel, UpdateOneModel,
// UpdateManyModel, ReplaceOneModel, DeleteOneModel, DeleteManyModel) is an
// invalid argument, and the error names its index. Inputs.Models must pass
// it.
func CheckModels(models []mongo.WriteModel) error {
	for i, m := range models {
		if _, _, err := kindOf(i, m); err != nil {
			return err
		}
	}
	return nil
}

// kindOf returns the kind of model m, at index i of its call, and whether
// it is an upsert; or the invalid-argument error naming i.
func kindOf(i int, m mongo.WriteModel) (kind Kind, upsert bool, err error) {
	if m != nil && nilValue(m) {
		return 0, false, fmt.Errorf("invalid model at index %d: a nil %T: %w", i, m, mongo.ErrNilDocument)
	}
	switch mm := m.(type) {
	case *mongo.InsertOneModel:
		return KindInsert, false, nil
	case *mongo.UpdateOneModel:
		return KindUpdate, mm.Upsert != nil && *mm.Upsert, nil
	case *mongo.UpdateManyModel:
		return KindUpdate, mm.Upsert != nil && *mm.Upsert, nil
	case *mongo.ReplaceOneModel:
		return KindReplace, mm.Upsert != nil && *mm.Upsert, nil
	case *mongo.DeleteOneModel, *mongo.DeleteManyModel:
		return KindDelete, false, nil
	case nil:
		return 0, false, fmt.Errorf("invalid model at index %d: %w", i, mongo.ErrNilDocument)
	}
	return 0, false, fmt.Errorf("invalid model at index %d: unsupported write model %T", i, m)
}

// prepareModel records the kind of one model (kindOf).
func (c *Call) prepareModel(it *item, m mongo.WriteModel) error {
	kind, upsert, err := kindOf(it.index, m)
	if err != nil {
		return err
	}
	r := it.more()
	r.model, r.send, it.cmd, it.kind, it.upsert = m, m, cmdOf(m), kind, upsert
	return nil
}
