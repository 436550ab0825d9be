package engine

import (
	"context"
	"sync"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// One driver call, one server command. The driver splits an InsertMany by
// maxWriteBatchSize and maxMessageSizeBytes, and a BulkWrite into one
// command per run of one command kind; when a later command fails it
// returns that command's error alone (mongo-go-driver v2 mongo/bulk_write.go
// createBatches and execute; x/mongo/driver/operation.go Execute,
// batches.go AppendBatchSequence). writeguard forms the commands itself,
// so that every failure belongs to one command and proves things only about
// that command's statements.

// cmdKind is the server command a statement goes out in, as the driver's
// writeCommandKind: insert; update for updateOne and replaceOne; update
// for updateMany; delete for deleteOne; delete for deleteMany (five kinds:
// the driver never mixes them in one command).
type cmdKind uint8

const (
	cmdInsert cmdKind = iota
	cmdUpdateOne
	cmdUpdateMany
	cmdDeleteOne
	cmdDeleteMany
	cmdKinds
)

// Limits are the server's limits on one write command, from its handshake
// reply (hello): maxWriteBatchSize statements, maxMessageSizeBytes for the
// whole message, maxBsonObjectSize for one document.
type Limits struct {
	MaxWriteBatchSize   int
	MaxMessageSizeBytes int
	MaxBsonObjectSize   int
}

// DefaultLimits are the limits every MongoDB server since 3.6 states in its
// hello reply, used when the handshake cannot be read: maxWriteBatchSize
// 100000 (mongodb/mongo src/mongo/db/ops/write_ops.h kMaxWriteBatchSize),
// maxMessageSizeBytes 48000000 (src/mongo/rpc/message.h
// MaxMessageSizeBytes), maxBsonObjectSize 16 MiB (src/mongo/bson/bsonobj.h
// BSONObjMaxUserSize).
var DefaultLimits = Limits{MaxWriteBatchSize: 100000, MaxMessageSizeBytes: 48000000, MaxBsonObjectSize: 16 * 1024 * 1024}

// CommandMargin is the part of maxMessageSizeBytes writeguard keeps for the
// message's own bytes: the OP_MSG header and flags, the command document
// (insert, $db, ordered, lsid, txnNumber, writeConcern, $clusterTime, ...)
// and the document sequence's header. The driver's limit covers the whole
// message (batches.go AppendBatchSequence counts from the start of the
// message), so the statements of one command get maxMessageSizeBytes −
// CommandMargin bytes. Under client-side encryption the driver splits at 2
// MiB instead: writeguard does not see that, and such a call may still be
// split by the driver.
const CommandMargin = 16 * 1024

// statementOverhead is added to a non-insert statement's marshalled parts
// for the keys and flags of its statement document ({q, u, upsert, multi}
// or {q, limit}).
const statementOverhead = 64

// withDefaults fills zero or negative limits with DefaultLimits.
func (l Limits) withDefaults() Limits {
	if l.MaxWriteBatchSize <= 0 {
		l.MaxWriteBatchSize = DefaultLimits.MaxWriteBatchSize
	}
	if l.MaxMessageSizeBytes <= 0 {
		l.MaxMessageSizeBytes = DefaultLimits.MaxMessageSizeBytes
	}
	if l.MaxBsonObjectSize <= 0 {
		l.MaxBsonObjectSize = DefaultLimits.MaxBsonObjectSize
	}
	return l
}

// ParseHello reads the limits from a hello reply; fields it lacks take
// DefaultLimits.
func ParseHello(reply bson.Raw) Limits {
	var l Limits
	if v, ok := reply.Lookup("maxWriteBatchSize").AsInt64OK(); ok {
		l.MaxWriteBatchSize = int(v)
	}
	if v, ok := reply.Lookup("maxMessageSizeBytes").AsInt64OK(); ok {
		l.MaxMessageSizeBytes = int(v)
	}
	if v, ok := reply.Lookup("maxBsonObjectSize").AsInt64OK(); ok {
		l.MaxBsonObjectSize = int(v)
	}
	return l.withDefaults()
}

// commands splits batch (pending statements in input order) into the
// server commands the driver would send for them, each within the
// limits: consecutive runs of one kind when ordered, one group per kind
// (insert, updateOne, updateMany, deleteOne, deleteMany) when unordered, as
// the driver's createBatches does; then each run is cut where it would go
// over maxWriteBatchSize statements or maxMessageSizeBytes − CommandMargin
// bytes. A single statement is always a command of its own.
func (c *Call) commands(ctx context.Context, batch []*item) [][]*item {
	if len(batch) == 1 {
		c.oneCmd[0] = batch
		return c.oneCmd[:]
	}
	lim := c.limits(ctx)
	var runs [][]*item
	var count [cmdKinds]int
	for _, it := range batch {
		count[it.cmd]++
	}
	switch {
	case count[batch[0].cmd] == len(batch): // one kind (every insert call): one run
		runs = [][]*item{batch}
	case c.ordered: // consecutive runs of a kind: slices of batch
		start := 0
		for i := 1; i <= len(batch); i++ {
			if i == len(batch) || batch[i].cmd != batch[start].cmd {
				runs = append(runs, batch[start:i:i])
				start = i
			}
		}
	default:
		var byKind [cmdKinds][]*item
		for _, it := range batch {
			if byKind[it.cmd] == nil {
				byKind[it.cmd] = make([]*item, 0, count[it.cmd])
			}
			byKind[it.cmd] = append(byKind[it.cmd], it)
		}
		for _, r := range byKind {
			if len(r) > 0 {
				runs = append(runs, r)
			}
		}
	}
	var out [][]*item
	budget := lim.MaxMessageSizeBytes - CommandMargin
	for _, r := range runs {
		start, size := 0, 0
		for i, it := range r {
			s := it.statementSize()
			if i > start && (i-start == lim.MaxWriteBatchSize || size+s > budget) {
				out = append(out, r[start:i:i])
				start, size = i, 0
			}
			size += s
		}
		out = append(out, r[start:])
	}
	return out
}

// limits returns the server's limits, asked of Config.Limits once per call
// (nil: DefaultLimits).
func (c *Call) limits(ctx context.Context) Limits {
	if !c.limAsked {
		c.lim = DefaultLimits
		if f := c.e.cfg.Limits; f != nil {
			c.lim = f(ctx).withDefaults()
		}
		c.limAsked = true
	}
	return c.lim
}

// statementSize is the bytes the statement takes in its command: the
// prepared document of an insert; a non-insert model's filter, update or
// replacement and options, marshalled once to be measured, plus the keys of
// its statement document. A part that does not marshal counts 0: the
// driver reports it when it builds the command.
func (it *item) statementSize() int {
	if it.size > 0 {
		return it.size
	}
	if it.kind == KindInsert {
		it.size = len(it.doc)
		return it.size
	}
	s := sizers.Get().(*sizer)
	defer s.release()
	add := func(key string, v any, set bool) {
		if set {
			s.parts = append(s.parts, bson.E{Key: key, Value: v})
		}
	}
	switch m := it.model().(type) {
	case *mongo.UpdateOneModel:
		add("q", m.Filter, true)
		add("u", m.Update, true)
		add("c", m.Collation, m.Collation != nil)
		add("f", m.ArrayFilters, m.ArrayFilters != nil)
		add("h", m.Hint, m.Hint != nil)
	case *mongo.UpdateManyModel:
		add("q", m.Filter, true)
		add("u", m.Update, true)
		add("c", m.Collation, m.Collation != nil)
		add("f", m.ArrayFilters, m.ArrayFilters != nil)
		add("h", m.Hint, m.Hint != nil)
	case *mongo.ReplaceOneModel:
		add("q", m.Filter, true)
		add("u", m.Replacement, true)
		add("c", m.Collation, m.Collation != nil)
		add("h", m.Hint, m.Hint != nil)
	case *mongo.DeleteOneModel:
		add("q", m.Filter, true)
		add("c", m.Collation, m.Collation != nil)
		add("h", m.Hint, m.Hint != nil)
	case *mongo.DeleteManyModel:
		add("q", m.Filter, true)
		add("c", m.Collation, m.Collation != nil)
		add("h", m.Hint, m.Hint != nil)
	}
	it.size = s.size() + statementOverhead
	return it.size
}

// sizer measures a statement without keeping its bytes: a pooled
// bson.Encoder whose value writer hands each finished document to a byte
// counter (bson.Marshal would build and return a copy per statement). The
// parts that are nil are left out, as the driver leaves them out of the
// statement it sends (mongo/bulk_write.go updateDoc.marshal,
// createDeleteDoc).
type sizer struct {
	enc   *bson.Encoder
	n     int
	parts bson.D
}

var sizers = sync.Pool{New: func() any {
	s := &sizer{}
	s.enc = bson.NewEncoder(bson.NewDocumentWriter(s))
	return s
}}

// Write counts the bytes of an encoded document.
func (s *sizer) Write(p []byte) (int, error) { s.n += len(p); return len(p), nil }

// size returns the encoded size of s.parts as a document, 0 when a part
// does not marshal (the driver reports it when it builds the command).
func (s *sizer) size() int {
	s.n = 0
	if err := s.enc.Encode(s.parts); err != nil {
		// The value writer may be in the middle of a document: start a
		// fresh one.
		s.enc = bson.NewEncoder(bson.NewDocumentWriter(s))
		return 0
	}
	return s.n
}

// release clears the parts (the pool must not keep the caller's values)
// and returns s to the pool unless it measured a statement larger than
// maxPooledDoc (its value writer's buffer has grown to that size).
func (s *sizer) release() {
	clear(s.parts)
	s.parts = s.parts[:0]
	if s.n <= maxPooledDoc {
		sizers.Put(s)
	}
}

// cmdOf returns the command kind of a write model.
func cmdOf(m mongo.WriteModel) cmdKind {
	switch m.(type) {
	case *mongo.UpdateOneModel, *mongo.ReplaceOneModel:
		return cmdUpdateOne
	case *mongo.UpdateManyModel:
		return cmdUpdateMany
	case *mongo.DeleteOneModel:
		return cmdDeleteOne
	case *mongo.DeleteManyModel:
		return cmdDeleteMany
	}
	return cmdInsert
}

// wroteAll reports whether every statement of cmd ended stored or handled:
// an ordered write goes on to its next command only then.
func wroteAll(cmd []*item) bool {
	for _, it := range cmd {
		if it.state != done || !(it.disp.Stored() || it.disp.Handled()) {
			return false
		}
	}
	return true
}

// allLive reports whether every statement of cmd still waits for an
// attempt: a command that carries a statement with its disposition is not
// sent (the stop rule, loop.go pass).
func allLive(cmd []*item) bool {
	for _, it := range cmd {
		if !it.live() {
			return false
		}
	}
	return true
}
