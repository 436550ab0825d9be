package faultproxy

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"sort"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// Sharded mode: the proxy presents its upstream (or the null backend) to
// the driver as a mongos in front of a sharded collection, and does what
// mongos does with a write command (server code: src/mongo/s/write_ops/
// batch_write_op.cpp, BatchWriteOp::targetBatch, noteBatchResponse,
// noteBatchError, buildClientResponse; batch_write_exec.cpp): it targets
// each statement to a shard by the shard key, sends each shard its part as
// a command of its own (a child batch), and merges the replies into the
// one reply the client gets, in the client's statement numbering.

// Sharding configures WithSharded.
type Sharding struct {
	// Shards names the virtual shards, in order (at least two, distinct,
	// non-empty). Default: "shard01", "shard02".
	Shards []string
	// Key is the shard key: a top-level field, hashed (a hashed shard
	// key). Default "_id".
	Key string
}

// DefaultShards are the shard names of WithSharded when Sharding.Shards is
// empty (read-only: WithSharded copies them when it is applied).
var DefaultShards = []string{"shard01", "shard02"}

// WithSharded presents the proxy as a mongos routing to the virtual shards
// of s, all of them stored in the one upstream server (or the null
// backend). It excludes WithReplicaSet: New returns an error for both. With
// the null backend only hello changes (msg "isdbgrid") and writes are
// split; retryable writes are not recorded (nothing is stored).
//
// Handshake: hello and isMaster say what a mongos says (msg "isdbgrid", no
// setName, hosts or primary; topologyVersion and
// logicalSessionTimeoutMinutes 30, so that the driver uses sessions and
// retryable writes); awaitable hellos are held and streamed as in
// replica-set mode.
//
// Writes: each statement of an insert (its document), update or delete
// (its filter q) goes to the shard given by a hash of its shard key value
// (numbers hash by value, so int32 1 and int64 1 go to one shard); a
// statement whose filter does not fix the key by equality goes to the
// first shard (a real mongos broadcasts an updateMany or deleteMany
// without the shard key to every shard; here every shard is one store, so
// the statement is sent once). An unordered command becomes one child
// batch per shard (statements in client order); an ordered one is sent
// shard by shard in statement order, as runs of consecutive statements on
// one shard, and stops after the first child batch with an error
// (targetBatch, isFinished). The client's reply sums n and nModified,
// maps the writeErrors and upserted indexes back to the client's
// statements and sorts them, and carries a writeConcernError when every
// statement succeeded or, unordered, some did: one shard's error with
// " at <shard>" appended to its errmsg, several as 64 WriteConcernFailed
// "multiple errors reported : ... at <shard> :: and :: ..."
// (buildClientResponse); a WriteConcernErrorReply fault is such an error
// on every shard's reply. A child batch answered ok: 0 becomes one write
// error per statement of that batch (unordered) or one on its first
// statement (ordered) (noteBatchError). FailShard makes a shard fail after
// applying part of its batch.
//
// Retryable writes keep their replica-set semantics: each statement of a
// (lsid, txnNumber) executes once, whichever child batch carries it. A
// multi-document transaction gets 20 IllegalOperation, as in replica-set
// mode. Not emulated: chunk migrations and stale routing (StaleConfig),
// shard-local unique indexes (the store is one), the two-phase protocol
// of an updateOne without the shard key (7.0+), and the 8.0 bulkWrite
// command, which is forwarded whole.
func WithSharded(s Sharding) Option {
	return optionFunc(func(c *config) error {
		out := Sharding{Shards: append([]string(nil), s.Shards...), Key: s.Key}
		if len(out.Shards) == 0 {
			out.Shards = append(out.Shards, DefaultShards...)
		}
		if out.Key == "" {
			out.Key = "_id"
		}
		if len(out.Shards) < 2 {
			return fmt.Errorf("faultproxy: WithSharded needs at least two shards, got %d", len(out.Shards))
		}
		seen := map[string]bool{}
		for i, name := range out.Shards {
			if name == "" {
				return fmt.Errorf("faultproxy: WithSharded: shard %d has an empty name", i)
			}
			if seen[name] {
				return fmt.Errorf("faultproxy: WithSharded: shard name %q twice", name)
			}
			seen[name] = true
		}
		if strings.ContainsAny(out.Key, ".$") {
			return fmt.Errorf("faultproxy: WithSharded: shard key %q must be a top-level field name", out.Key)
		}
		c.sharding = &out
		return nil
	})
}

// Limits are the size limits the handshake announces (hello's
// maxWriteBatchSize, maxMessageSizeBytes, maxBsonObjectSize); a zero field
// keeps the server's value. Set them small to make the driver (and code
// that reads them) split its calls into several commands.
type Limits struct {
	// MaxWriteBatchSize is the most statements a write command may hold
	// (server default 100,000). The proxy enforces it as the server does:
	// a larger command gets 16 InvalidLength "Write batch sizes must be
	// between 1 and N. Got M operations." (write_ops parsing).
	MaxWriteBatchSize int32
	// MaxMessageSizeBytes is the largest wire message (server default
	// 48,000,000). The driver splits a write command's documents to fit
	// it, and refuses replies larger than it; so that replies fit, the
	// proxy caps the batchSize of find and getMore at
	// (MaxMessageSizeBytes - 1 KiB) / (MaxBsonObjectSize + 16), at least
	// 1: a document larger than MaxBsonObjectSize may still make a reply
	// too large.
	MaxMessageSizeBytes int32
	// MaxBsonObjectSize is the largest document (server default 16 MiB).
	// It is announced only: the driver does not check it, and the proxy
	// does not enforce it.
	MaxBsonObjectSize int32
}

// WithLimits makes hello and isMaster announce l (with the null backend
// and with an upstream, in every mode). A negative field, a
// MaxMessageSizeBytes below 2 KiB or a MaxBsonObjectSize below 256 bytes
// is an error.
func WithLimits(l Limits) Option {
	return optionFunc(func(c *config) error {
		switch {
		case l.MaxWriteBatchSize < 0 || l.MaxMessageSizeBytes < 0 || l.MaxBsonObjectSize < 0:
			return fmt.Errorf("faultproxy: WithLimits: negative limit in %+v", l)
		case l.MaxMessageSizeBytes != 0 && l.MaxMessageSizeBytes < 2048:
			return fmt.Errorf("faultproxy: WithLimits: maxMessageSizeBytes %d is below 2048", l.MaxMessageSizeBytes)
		case l.MaxBsonObjectSize != 0 && l.MaxBsonObjectSize < 256:
			return fmt.Errorf("faultproxy: WithLimits: maxBsonObjectSize %d is below 256", l.MaxBsonObjectSize)
		}
		c.limits = l
		return nil
	})
}

// FaultShard counts commands on which FailShard acted.
const FaultShard FaultKind = "shard_failure"

// FailShard makes one child batch of a write command (insert, update or
// delete) fail after its shard applied part of it, as mongos reports a
// shard whose reply it lost or that was interrupted: child batch number
// batch of the command (0-based, in the order mongos sends them; taken
// modulo the number of child batches, so any value selects one) applies
// its first applied statements (all of them when larger), its reply is
// lost, and the client's reply carries, for that batch, one write error
// per statement (unordered) or one write error on its first statement,
// after which nothing more is sent (ordered) (noteBatchError), each
// {index, code: e.Code, codeName: e.CodeName, errmsg: "Write results
// unavailable from <shard> :: caused by :: <e.Message>"}
// (batch_write_exec.cpp). The other child batches run normally. Typical
// codes: 6 HostUnreachable, 9001 SocketException, 11602
// InterruptedDueToReplStateChange, 91 ShutdownInProgress, 189
// PrimarySteppedDown. e.Labels and e.Extra are not used (write errors
// carry no labels). Without WithSharded the whole command is one child
// batch on shard DefaultShards[0]. Commands without statements are not
// affected. e.Code must not be 0 and batch and applied must not be
// negative.
func FailShard(batch, applied int, e CommandError) Fault {
	return Fault{kind: FaultShard, batch: batch, k: applied, cmdErr: e}
}

// shardNames returns the shard names of the proxy's mode.
func (p *Proxy) shardNames() []string {
	if p.cfg.sharding != nil {
		return p.cfg.sharding.Shards
	}
	return DefaultShards[:1]
}

// shardOf returns the index of the shard statement st of a command named
// name goes to.
func (p *Proxy) shardOf(name string, st bson.Raw) int {
	sh := p.cfg.sharding
	if sh == nil {
		return 0
	}
	doc := st
	if name != "insert" {
		q, ok := st.Lookup("q").DocumentOK()
		if !ok {
			return 0
		}
		doc = q
	}
	v, err := doc.LookupErr(sh.Key)
	if err != nil {
		return 0
	}
	if d, ok := v.DocumentOK(); ok && name != "insert" {
		if first, err := d.IndexErr(0); err == nil && strings.HasPrefix(first.Key(), "$") {
			return 0 // an operator ({$in: ...}, {$gt: ...}): not targeted by equality
		}
	}
	return int(hashKey(v) % uint64(len(sh.Shards)))
}

// hashKey hashes a shard key value (FNV-1a, then the MurmurHash3 64-bit
// finalizer so that every bit depends on every byte: small integers
// differ only in a few bytes); numbers hash by value.
func hashKey(v bson.RawValue) uint64 {
	h := fnv.New64a()
	if f, ok := numberOf(v); ok {
		var b [9]byte
		b[0] = 'n'
		binary.LittleEndian.PutUint64(b[1:], math.Float64bits(f))
		_, _ = h.Write(b[:])
	} else {
		_, _ = h.Write([]byte{byte(v.Type)})
		_, _ = h.Write(v.Value)
	}
	x := h.Sum64()
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb9fe1a85ec53
	x ^= x >> 33
	return x
}

// childBatch is the part of a client's write command mongos sends to one
// shard.
type childBatch struct {
	shard int
	idx   []int // the client's statement indexes, in order
}

// childBatches splits a write command's statements as mongos targets them
// (targetBatch): unordered, one batch per shard in shard order; ordered,
// runs of consecutive statements going to one shard.
func (p *Proxy) childBatches(name string, stmts []bson.Raw, ordered bool) []childBatch {
	var out []childBatch
	if ordered {
		for i, st := range stmts {
			sh := p.shardOf(name, st)
			if n := len(out); n > 0 && out[n-1].shard == sh {
				out[n-1].idx = append(out[n-1].idx, i)
				continue
			}
			out = append(out, childBatch{shard: sh, idx: []int{i}})
		}
		return out
	}
	byShard := map[int]*childBatch{}
	for i, st := range stmts {
		sh := p.shardOf(name, st)
		b := byShard[sh]
		if b == nil {
			b = &childBatch{shard: sh}
			byShard[sh] = b
		}
		b.idx = append(b.idx, i)
	}
	for sh := range p.shardNames() {
		if b := byShard[sh]; b != nil {
			out = append(out, *b)
		}
	}
	return out
}

// shardWCE is a child batch's write concern error.
type shardWCE struct {
	shard string
	wce   bson.D
}

// mongosReply accumulates the child batches' replies (buildClientResponse).
type mongosReply struct {
	n, nModified int
	upserted     bson.A
	writeErrors  bson.A
	wces         []shardWCE
	labels       []string // top-level errorLabels sent with the writeConcernError
}

// batchErrors adds the write errors noteBatchError makes of a child
// batch's failure: one per statement (unordered), one on the first
// (ordered).
func (m *mongosReply) batchErrors(b childBatch, ordered bool, code int32, codeName, errmsg string) {
	idx := b.idx
	if ordered {
		idx = idx[:1]
	}
	for _, i := range idx {
		we := bson.D{{Key: "index", Value: int32(i)}, {Key: "code", Value: code}}
		if codeName != "" {
			we = append(we, bson.E{Key: "codeName", Value: codeName})
		}
		m.writeErrors = append(m.writeErrors, append(we, bson.E{Key: "errmsg", Value: errmsg}))
	}
}

// add merges an ok child reply; it returns whether the reply had write
// errors.
func (m *mongosReply) add(reply bson.D, b childBatch, shard string) (hadErrors bool, err error) {
	if v, ok := field(reply, "n"); ok {
		n, _ := asInt(v)
		m.n += n
	}
	if v, ok := field(reply, "nModified"); ok {
		n, _ := asInt(v)
		m.nModified += n
	}
	for _, key := range []string{"upserted", "writeErrors"} {
		v, ok := field(reply, key)
		if !ok {
			continue
		}
		arr, isArr := v.(bson.A)
		if !isArr {
			return false, fmt.Errorf("faultproxy: shard %s: %s is %T, not an array", shard, key, v)
		}
		mapped := remapIndexes(arr, b.idx)
		if key == "upserted" {
			m.upserted = append(m.upserted, mapped...)
		} else {
			m.writeErrors = append(m.writeErrors, mapped...)
			hadErrors = len(mapped) > 0
		}
	}
	if v, ok := field(reply, "writeConcernError"); ok {
		if d, isDoc := v.(bson.D); isDoc {
			m.wces = append(m.wces, shardWCE{shard: shard, wce: d})
		}
	}
	return hadErrors, nil
}

// reply builds the client's reply to a command of total statements.
func (m *mongosReply) reply(name string, total int, ordered bool) bson.D {
	out := bson.D{{Key: "n", Value: int32(m.n)}}
	if name == "update" {
		out = append(out, bson.E{Key: "nModified", Value: int32(m.nModified)})
	}
	if len(m.upserted) > 0 {
		sort.SliceStable(m.upserted, func(i, j int) bool { return indexOf(m.upserted[i]) < indexOf(m.upserted[j]) })
		out = append(out, bson.E{Key: "upserted", Value: m.upserted})
	}
	if len(m.writeErrors) > 0 {
		sort.SliceStable(m.writeErrors, func(i, j int) bool { return indexOf(m.writeErrors[i]) < indexOf(m.writeErrors[j]) })
		out = append(out, bson.E{Key: "writeErrors", Value: m.writeErrors})
	}
	errs := len(m.writeErrors)
	if len(m.wces) > 0 && (errs == 0 || !ordered && errs < total) {
		out = append(out, bson.E{Key: "writeConcernError", Value: m.mergedWCE()})
		if len(m.labels) > 0 {
			out = append(out, bson.E{Key: "errorLabels", Value: m.labels})
		}
	}
	return append(out, bson.E{Key: "ok", Value: 1.0})
}

// mergedWCE is the client's writeConcernError (buildClientResponse).
func (m *mongosReply) mergedWCE() bson.D {
	msgOf := func(d bson.D) string {
		v, _ := field(d, "errmsg")
		s, _ := v.(string)
		return s
	}
	if len(m.wces) == 1 {
		w := m.wces[0]
		out := bson.D{}
		for _, e := range w.wce {
			if e.Key == "errmsg" {
				e.Value = msgOf(w.wce) + " at " + w.shard
			}
			out = append(out, e)
		}
		return out
	}
	var b strings.Builder
	b.WriteString("multiple errors reported : ")
	for i, w := range m.wces {
		if i > 0 {
			b.WriteString(" :: and :: ")
		}
		name, _ := field(w.wce, "codeName")
		fmt.Fprintf(&b, "%v: %s at %s", name, msgOf(w.wce), w.shard)
	}
	return bson.D{{Key: "code", Value: int32(64)}, {Key: "codeName", Value: "WriteConcernFailed"}, {Key: "errmsg", Value: b.String()}}
}

// execSharded runs a write command as mongos does (see WithSharded and
// FailShard) and returns the client's reply. df is a RejectDocuments
// fault, applied inside each child batch.
func (s *session) execSharded(x *exchange, df *Fault) (bson.Raw, error) {
	cmd, stmts, ordered := x.cmd, x.stmts, x.cmd.Ordered()
	names := s.p.shardNames()
	batches := s.p.childBatches(cmd.Name, stmts, ordered)
	fail := -1
	if x.fired && x.fault.kind == FaultShard && len(batches) > 0 {
		fail = x.fault.batch % len(batches)
	}
	var m mongosReply
	for i, b := range batches {
		shard := names[b.shard]
		part := make([]bson.Raw, len(b.idx))
		for j, k := range b.idx {
			part[j] = stmts[k]
		}
		if i == fail {
			if k := min(x.fault.k, len(part)); k > 0 {
				if _, err := s.forwardChild(cmd.WithStatements(part[:k]), b.idx[:k], shard, x, df); err != nil {
					return nil, err
				}
			} else {
				s.p.counters.shard(shard, 0)
			}
			e := x.fault.cmdErr
			cause := e.Message
			if cause == "" {
				cause = e.CodeName
			}
			if cause == "" {
				cause = fmt.Sprintf("error %d", e.Code)
			}
			m.batchErrors(b, ordered, e.Code, e.CodeName, "Write results unavailable from "+shard+" :: caused by :: "+cause)
			if ordered {
				break
			}
			continue
		}
		raw, err := s.forwardChild(cmd.WithStatements(part), b.idx, shard, x, df)
		if err != nil {
			return nil, err
		}
		var reply bson.D
		if err := bson.Unmarshal(raw, &reply); err != nil {
			return nil, fmt.Errorf("faultproxy: decode the reply of shard %s: %w", shard, err)
		}
		if !replyOK(reply) {
			code, _ := field(reply, "code")
			c, _ := asInt(code)
			codeName, _ := field(reply, "codeName")
			cn, _ := codeName.(string)
			errmsg, _ := field(reply, "errmsg")
			em, _ := errmsg.(string)
			m.batchErrors(b, ordered, int32(c), cn, em)
			if ordered {
				break
			}
			continue
		}
		hadErrors, err := m.add(reply, b, shard)
		if err != nil {
			return nil, err
		}
		if x.fired && x.fault.kind == FaultWriteConcernError {
			// Each shard waited for the write concern and failed; mongos
			// merges what the shards said.
			m.wces = append(m.wces, shardWCE{shard: shard, wce: wceDoc(x.fault.wce)})
			m.labels = x.fault.wce.Labels
			x.wceDone = true
		}
		if ordered && hadErrors {
			break
		}
	}
	return bson.Marshal(m.reply(cmd.Name, len(stmts), ordered))
}

// forwardChild sends one child batch (client statement indexes idx) to
// the store: through the emulated validator or a RejectDocuments fault
// when there is one, and through the retryable-write record when the
// command is a retryable write.
func (s *session) forwardChild(child *Command, idx []int, shard string, x *exchange, df *Fault) (bson.Raw, error) {
	s.p.counters.shard(shard, len(idx))
	if s.txn != nil {
		s.txn.scope = idx
		defer func() { s.txn.scope = nil }()
	}
	if x.validator != nil || df != nil {
		return s.execStatements(child, child.Statements(), x.validator, df)
	}
	return s.forward(child)
}

// shardedWrite reports whether the proxy runs x as mongos does: a write
// command with statements, in sharded mode or under a FailShard fault.
func (s *session) shardedWrite(x *exchange) bool {
	if !hasStatements(x.cmd.Name) || len(x.stmts) == 0 {
		return false
	}
	return s.p.cfg.sharding != nil || x.fired && x.fault.kind == FaultShard
}

// mongosFields are the hello fields of a mongos, in the server's order:
// the writable-primary flag, topologyVersion, msg "isdbgrid"
// (src/mongo/s/commands/cluster_hello_cmd.cpp).
func (p *Proxy) mongosFields(legacy bool) bson.D {
	return append(p.writablePrimaryFields(legacy), bson.E{Key: "msg", Value: "isdbgrid"})
}

// limitValue returns the announced value of a hello limit field, and
// whether Limits sets it.
func (p *Proxy) limitValue(key string) (int32, bool) {
	var v int32
	switch key {
	case "maxWriteBatchSize":
		v = p.cfg.limits.MaxWriteBatchSize
	case "maxMessageSizeBytes":
		v = p.cfg.limits.MaxMessageSizeBytes
	case "maxBsonObjectSize":
		v = p.cfg.limits.MaxBsonObjectSize
	}
	return v, v != 0
}

// hasLimits reports whether WithLimits changes any limit.
func (p *Proxy) hasLimits() bool { return p.cfg.limits != Limits{} }

// withLimits replaces the limit fields of a hello reply with the
// configured ones.
func (p *Proxy) withLimits(d bson.D) bson.D {
	for i, e := range d {
		if v, ok := p.limitValue(e.Key); ok {
			d[i].Value = v
		}
	}
	return d
}

// batchTooLarge returns the server's error reply to a write command with
// more statements than the announced maxWriteBatchSize, or nil.
func (p *Proxy) batchTooLarge(cmd *Command, stmts []bson.Raw) bson.D {
	max := p.cfg.limits.MaxWriteBatchSize
	if max == 0 || !hasStatements(cmd.Name) || len(stmts) <= int(max) {
		return nil
	}
	return errorReplyDoc(CommandError{Code: 16, CodeName: "InvalidLength",
		Message: fmt.Sprintf("Write batch sizes must be between 1 and %d. Got %d operations.", max, len(stmts))})
}

// readBatchCap returns the batchSize cap for find and getMore under
// Limits (0: no cap).
func (p *Proxy) readBatchCap() int32 {
	msg := p.cfg.limits.MaxMessageSizeBytes
	if msg == 0 {
		return 0
	}
	obj := p.cfg.limits.MaxBsonObjectSize
	if obj == 0 {
		obj = 16 * 1024 * 1024
	}
	return max(1, (msg-1024)/(obj+16))
}

// cappedRead returns cmd with its batchSize capped (readBatchCap) when it
// is a find or getMore, or nil when it needs no change.
func (p *Proxy) cappedRead(cmd *Command) (*Command, error) {
	limit := p.readBatchCap()
	if limit == 0 || cmd.Name != "find" && cmd.Name != "getMore" {
		return nil, nil
	}
	var body bson.D
	if err := bson.Unmarshal(cmd.Body, &body); err != nil {
		return nil, fmt.Errorf("faultproxy: decode %s: %w", cmd.Name, err)
	}
	if v, ok := field(body, "batchSize"); ok {
		if n, isInt := asInt(v); isInt && n > 0 && n <= int(limit) {
			return nil, nil
		}
	}
	out := *cmd
	body = setField(body, "batchSize", limit)
	raw, err := bson.Marshal(body)
	if err != nil {
		return nil, err
	}
	out.Body = raw
	return &out, nil
}

// wceDoc is the writeConcernError document of w, as addWriteConcernError
// makes it.
func wceDoc(w WriteConcernError) bson.D {
	msg := w.Message
	if msg == "" {
		msg = fmt.Sprintf("faultproxy: injected write concern error %d", w.Code)
	}
	d := bson.D{{Key: "code", Value: w.Code}}
	if w.CodeName != "" {
		d = append(d, bson.E{Key: "codeName", Value: w.CodeName})
	}
	d = append(d, bson.E{Key: "errmsg", Value: msg})
	if w.ErrInfo != nil {
		d = append(d, bson.E{Key: "errInfo", Value: w.ErrInfo})
	}
	return d
}

// setField replaces field key of d or appends it.
func setField(d bson.D, key string, v any) bson.D {
	for i, e := range d {
		if e.Key == key {
			d[i].Value = v
			return d
		}
	}
	return append(d, bson.E{Key: key, Value: v})
}

// errShardingAndReplicaSet is New's error for WithSharded with
// WithReplicaSet.
var errShardingAndReplicaSet = errors.New("faultproxy: WithSharded and WithReplicaSet exclude each other (a mongos is not a replica-set member)")

// ShardOf returns the name of the shard a statement of a write command
// named command ("insert", "update" or "delete") goes to: for an insert
// the statement is the document, for an update or delete the statement
// ({q, u, ...} or {q, limit}). It is what the proxy uses to split a
// command (see WithSharded); without WithSharded it is DefaultShards[0].
func (p *Proxy) ShardOf(command string, statement bson.Raw) string {
	return p.shardNames()[p.shardOf(command, statement)]
}
