package dlq

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/writeguard/writeguard/envelope"
)

// MongoSink is an envelope.Sink that stores envelopes in the dead-letter
// collection (DLQ), prepared by EnsureCollection. It is safe for
// concurrent use.
//
// Each Put is one unordered bulk write of one upsert per distinct
// fingerprint (the driver splits it into several commands only past the
// server's limits: 100,000 statements or 48 MB per message), filtered by
// {fingerprint} and made of
//
//	$setOnInsert: schema_version, original (+ original_truncated,
//	              original_size, original_dropped, original_redacted),
//	              document_id, id_assigned, err_info, failing_keywords,
//	              failing_paths, code, code_name, errmsg, labels,
//	              namespace, operation, batch_index, first_seen,
//	              trace_id, span_id
//	$inc:         {attempts: <envelope.Envelope.Attempts, at least 1>}
//	$max:         {last_seen: <envelope.Envelope.LastSeen>,
//	               multiplicity: <envelope.Envelope.Copies()>}
//	$set:         {status: "pending"}
//
// so the first capture of a payload inserts its envelope and every later
// one (a recapture) adds its attempts, moves last_seen forward and puts
// the status back to pending, leaving the first capture's fields alone.
// last_seen uses $max rather than $set so that a late or retried Put of an
// older capture never moves it backwards (the TTL index counts from it).
// Envelopes of one Put with the same fingerprint are merged first (their
// attempts added, the earliest first_seen, the latest last_seen and the
// largest multiplicity kept). The multiplicity (how many identical
// inputs one call carried) is the largest any capture saw, in a Put
// and across Puts ($max), so a call that sends the same inputs again, a
// retried Put or a fallback file loaded back does not multiply it; the
// caller of Put counts it (the guarded collection does, per call).
//
// # Insert-first mode (FerretDB)
//
// Every upsert is a query by fingerprint, and FerretDB v1 uses no index
// for queries: each statement scans the whole collection. Measured on the
// embedded server: one Put of 200 new envelopes into a DLQ of 150 took
// 7.7 s, of 1,000 into an empty DLQ over two minutes. WithInsertFirst
// stores a Put instead with one unordered insert of complete documents
// (StoredDocument; first captures, milliseconds: 1,000 in about 0.1 s),
// then, for the inserts that failed with 11000 (recaptures), one bulk
// write of updateMany {fingerprint: {$in: [...]}} statements, one per
// distinct (attempts, last_seen) pair, each applying
// envelope.RecaptureUpdate (200 recaptures into a DLQ of 1,000: about 2.3 s on FerretDB, which scans
// once per updated document). The stored result is the same; on MongoDB
// both modes are index lookups, insert-first costing a second round trip
// when a Put holds recaptures.
//
// # Races
//
// Two first captures of one payload racing each other both try to insert;
// the unique index on fingerprint lets one win and the other fails with a
// duplicate key (11000). MongoDB 4.2+ retries such an upsert itself, but
// not always (and FerretDB never does, and sends no keyPattern/keyValue
// with the error), so Put sends the upserts that failed with 11000 again,
// up to WithUpsertRetries times: by then the envelope exists and the
// upsert is an update. (In insert-first mode the loser's 11000 sends it
// to the recapture update; an envelope deleted in between, by the TTL
// monitor say, is inserted again, within the same bound.) N concurrent
// captures of one payload end as one envelope with attempts N, on servers
// whose updates are atomic.
//
// Within one MongoSink, Puts that share a fingerprint are also
// serialized (by 64 striped locks, taken in order): FerretDB v1 runs an
// update as an unlocked read-modify-write and loses concurrent $inc
// updates of one document (8 goroutines × 10 $inc of one counter,
// measured: 46 counted of 80), so without this N concurrent captures
// through one guarded collection could count fewer than N attempts there.
// Captures of one payload through different sinks or processes are
// counted exactly only on servers with atomic updates (MongoDB); on
// FerretDB they still end as one envelope, with attempts ≥ 1.
//
// # Field names
//
// original, err_info and call_options are stored as sub-documents, which
// dlq queries and the dry run read, unless the server could refuse them
// there (subdocument rules: dotted, "$"-prefixed, empty or duplicated
// keys, strings that are not UTF-8, deep nesting): then as their exact
// bytes, BSON binary subtype 0 in <field>_raw, listed with the reason in
// binary. An upsert (or, WithInsertFirst, an insert) the server still
// refuses with a field-name code (2, 52, 56, 57) is sent once more with
// every document field as bytes.
// envelope.Decode reads both forms; the collection's validator accepts both.
//
// # Idempotence
//
// A Put that returns an error may have stored some or all of its
// envelopes (a lost reply, a partial bulk write). The guarded collection
// retries it with the same envelopes: no second envelope is created (the
// unique fingerprint), but the attempts of the envelopes stored by the
// failed try are counted again. attempts is a count of captures "at
// least", exact whenever no Put had to be retried.
//
// # Size
//
// The stored envelope must fit MongoDB's 16 MiB document limit
// (envelope.MaxBSONSize) with envelope.EnvelopeHeadroom to spare. When
// it would not, Put does not fail and does not cut the original
// (envelope.PrepareStored): diagnostics are cut only when that lets the
// whole original fit (an errInfo of at most envelope.SmallErrInfo bytes
// never is); otherwise the original is stored whole, in pieces, in the
// side collection "<dlq>_pieces" (see PiecesCollectionSuffix), before its
// envelope, which records it in original_pieces. An envelope whose pieces
// cannot be stored is not stored either: its error says why, and the
// guarded collection hands it to the fallback sink (which has no size
// limit) or reports the document dead_letter_failed, the document in the
// Report. (Envelopes stored before this kept a cut original with
// original_truncated; a replay skips them.)
//
// # Lost indexes
//
// Before a Put writes, it lists the collection's indexes (one
// listIndexes command) and checks that the unique index on fingerprint is
// there: at most every WithIndexCheckInterval (5 s by default; 0: before
// every Put), and at once after a Put that failed. A dropped or replaced
// index changes no insert's or upsert's reply, so this staleness is
// bounded, not zero: the Puts within the interval after a drop write as
// if the index were there (see WithIndexCheckInterval). A collection dropped while the application runs comes back on
// the next insert or upsert without any index (the server creates it
// implicitly), and without the unique index recaptures would become new
// envelopes (WithInsertFirst) and concurrent captures could make two, so
// a replay would write one payload twice. When the index is gone (or the
// collection), Put first runs EnsureCollection with the options of
// WithSetup, logs what it did (WithLogger) and counts it
// (Reestablished), then stores; when that cannot give back the unique
// index (e.g. duplicates of a fingerprint already exist), Put stores
// nothing and returns an error wrapping ErrIndexMissing. A drop between
// the check and the write is not seen until the next check. A user not
// allowed to list indexes (13 Unauthorized; the readWrite role may) gets
// no check: Put stores as before, and WithLogger's logger is told once.
type MongoSink struct {
	coll    *mongo.Collection
	cfg     sinkConfig
	err     error // a construction error every Put returns
	stripes [sinkStripes]sync.Mutex

	setupMu       sync.Mutex   // one re-establishment at a time
	reestablished atomic.Int64 // Reestablished
	unacked       atomic.Bool  // a write came back unacknowledged (w: 0)
	uncheckable   atomic.Bool  // listIndexes refused (13): said once
	checkedAt     atomic.Int64 // UnixNano of the last check that found the index; 0: none
	recheck       atomic.Bool  // a Put failed since: the next one checks
	indexChecks   atomic.Int64 // IndexChecks
}

// sinkStripes is the number of locks MongoSink.Put spreads fingerprints
// over.
const sinkStripes = 64

var (
	_ envelope.Sink        = (*MongoSink)(nil)
	_ envelope.PartialSink = (*MongoSink)(nil)
)

// NewMongoSink returns a sink storing envelopes in coll. coll must have
// the unique index on fingerprint that EnsureCollection creates: without
// it concurrent first captures of one payload can make two envelopes
// (and, WithInsertFirst, every recapture would). It never panics: a nil
// coll or a nil option gives a sink whose every Put returns an error
// naming it, as does a bad option value (NewCheckedMongoSink reports
// them at once instead).
//
// coll's write concern must be acknowledged (w ≥ 1, the default): with
// w: 0 the server confirms nothing, so Put could not know that an
// envelope is stored. Put detects it from the reply (the driver's result
// says Acknowledged false) and returns an error saying so, wrapping
// ErrUnacknowledgedSink, rather than report unconfirmed envelopes as
// stored.
func NewMongoSink(coll *mongo.Collection, opts ...SinkOption) *MongoSink {
	s, err := NewCheckedMongoSink(coll, opts...)
	if err != nil {
		return &MongoSink{coll: coll, cfg: newSinkConfig(nil), err: err}
	}
	return s
}

// NewCheckedMongoSink is NewMongoSink returning its errors instead of
// deferring them to Put: a nil coll, nil options and bad option values,
// each named, joined with errors.Join.
func NewCheckedMongoSink(coll *mongo.Collection, opts ...SinkOption) (*MongoSink, error) {
	cfg := newSinkConfig(opts)
	if coll == nil {
		cfg.errs = append([]error{errors.New("dlq: NewMongoSink(nil): no dead-letter collection")}, cfg.errs...)
	}
	if err := cfg.err(); err != nil {
		return nil, err
	}
	return &MongoSink{coll: coll, cfg: cfg}, nil
}

// ErrUnacknowledgedSink is wrapped by MongoSink.Put's error when the
// dead-letter collection's write concern is unacknowledged (w: 0).
var ErrUnacknowledgedSink = errors.New("dlq: the dead-letter collection's write concern is unacknowledged (w: 0): " +
	"the server confirmed nothing, so no envelope is known to be stored; give the sink a collection with w ≥ 1")

// acked returns ErrUnacknowledgedSink for a write the server did not
// acknowledge, and remembers it: the collection's write concern does not
// change, so later Puts refuse at once, without sending anything.
func (s *MongoSink) acked(acknowledged bool) error {
	if !acknowledged {
		s.unacked.Store(true)
		return ErrUnacknowledgedSink
	}
	return nil
}

// Collection returns the dead-letter collection s writes to.
func (s *MongoSink) Collection() *mongo.Collection { return s.coll }

// Put stores envs (see MongoSink) in one unordered bulk write of upserts
// (or, WithInsertFirst, one insert plus one bulk update for recaptures),
// retrying the envelopes that lose a race on the fingerprint index. It
// returns nil when every envelope is stored, and otherwise an error
// wrapping the driver's (a mongo.BulkWriteException for per-envelope
// failures, so the guarded collection can classify it and retry transient
// ones), an error naming an envelope the redaction hooks made invalid, an
// error saying that envelopes were still racing after WithUpsertRetries
// rounds, or an error wrapping ErrIndexMissing (see MongoSink, "Lost
// indexes"). An empty envs is a no-op. PutEach says which envelopes were
// stored when some were not.
func (s *MongoSink) Put(ctx context.Context, envs []envelope.Envelope) error {
	_, err := s.put(ctx, envs, true)
	return err
}

// PutEach is Put reporting per envelope (see envelope.PartialSink): entry
// i is nil when envs[i] is stored (its envelope, merged with the others of its
// fingerprint, was inserted or updated), and otherwise the reason, a
// mongo.BulkWriteException holding only that envelope's write error when
// the server refused it. An envelope the redaction hooks made invalid
// fails alone. A write concern error, a network error or an
// unacknowledged write fails every envelope of the statements it
// concerned: the server confirmed none of them.
func (s *MongoSink) PutEach(ctx context.Context, envs []envelope.Envelope) []error {
	out, err := s.put(ctx, envs, false)
	if out == nil {
		out = make([]error, len(envs))
		if err != nil {
			for i := range out {
				out[i] = err
			}
		}
	}
	return out
}

// put stores envs and returns each envelope's error (nil: stored; a nil
// slice: the error concerns every envelope) and the error Put returns.
// all: an envelope that cannot be prepared fails the call before
// anything is written.
func (s *MongoSink) put(ctx context.Context, envs []envelope.Envelope, all bool) ([]error, error) {
	if s.err != nil {
		return nil, s.err
	}
	if len(envs) == 0 {
		return nil, nil
	}
	if s.unacked.Load() {
		return nil, ErrUnacknowledgedSink
	}
	// Each envelope is prepared alone (redaction, withheld fields, size),
	// then merged by the fingerprint it is stored under.
	out := make([]error, len(envs))
	prepared := make([]envelope.Envelope, 0, len(envs))
	pidx := make([]int, len(envs)) // envs[i] -> prepared index, -1 when it failed
	var first error
	for i := range envs {
		env, err := envelope.PrepareStored(envs[i], s.cfg.protection)
		if err == nil && !s.cfg.insertFirst {
			_, err = upsertModel(env, "") // fails the way the bulk write's marshalling would
		}
		if err != nil {
			if all {
				return nil, err
			}
			out[i], pidx[i] = err, -1
			first = cmpOr(first, err)
			continue
		}
		pidx[i] = len(prepared)
		prepared = append(prepared, env)
	}
	if len(prepared) == 0 {
		return out, first
	}
	ready := mergeByFingerprint(prepared)
	unlock := s.lock(ready)
	defer unlock()
	if err := s.checkIndexes(ctx); err != nil {
		return nil, err
	}
	byFP, err := s.write(ctx, ready)
	if err != nil || len(byFP) > 0 {
		s.recheck.Store(true) // any error: the next Put checks the indexes at once
	}
	for i, p := range pidx {
		if p >= 0 {
			out[i] = byFP[prepared[p].Fingerprint]
		}
	}
	return out, cmpOr(first, err)
}

// write stores prepared, merged envelopes: the originals set apart first
// (writePieces: an envelope is stored only once its original is), then
// the envelopes, with upserts or insert-first. It returns the error of
// each envelope not stored, by fingerprint, and the error Put returns.
func (s *MongoSink) write(ctx context.Context, ready []envelope.Envelope) (map[string]error, error) {
	byFP := map[string]error{}
	var first error
	whole := make([]envelope.Envelope, 0, len(ready))
	for _, env := range ready {
		if env.OriginalPieces != nil {
			if err := s.writePieces(ctx, env); err != nil {
				byFP[env.Fingerprint], first = err, cmpOr(first, err)
				continue
			}
		}
		whole = append(whole, env)
	}
	if len(whole) == 0 {
		return byFP, first
	}
	var failed map[int]error
	var err error
	if s.cfg.insertFirst {
		failed, err = s.putInsertFirst(ctx, whole)
	} else {
		failed, err = s.putUpserts(ctx, whole)
	}
	for i, ferr := range failed {
		byFP[whole[i].Fingerprint] = ferr
	}
	return byFP, cmpOr(first, err)
}

// lock takes the stripe locks of envs' fingerprints, in ascending order,
// and returns the function that releases them.
func (s *MongoSink) lock(envs []envelope.Envelope) func() {
	var need [sinkStripes]bool
	for i := range envs {
		need[stripeOf(envs[i].Fingerprint)] = true
	}
	var held []int
	for i, n := range need {
		if n {
			s.stripes[i].Lock()
			held = append(held, i)
		}
	}
	return func() {
		for _, i := range held {
			s.stripes[i].Unlock()
		}
	}
}

// stripeOf maps a fingerprint to a stripe (FNV-1a of its bytes).
func stripeOf(fp string) int {
	h := uint32(2166136261)
	for i := 0; i < len(fp); i++ {
		h ^= uint32(fp[i])
		h *= 16777619
	}
	return int(h % sinkStripes)
}

// mergeByFingerprint merges envelopes with the same fingerprint (missing
// fingerprints are computed from the original), keeping the first one's
// fields, adding attempts and widening first_seen/last_seen.
func mergeByFingerprint(envs []envelope.Envelope) []envelope.Envelope {
	out := make([]envelope.Envelope, 0, len(envs))
	at := make(map[string]int, len(envs))
	for _, e := range envs {
		if e.Fingerprint == "" {
			e.Fingerprint = envelope.Fingerprint(e.Original, e.IDAssigned)
		}
		if e.Attempts < 1 {
			e.Attempts = 1
		}
		i, ok := at[e.Fingerprint]
		if !ok {
			at[e.Fingerprint] = len(out)
			out = append(out, e)
			continue
		}
		m := &out[i]
		m.Attempts += e.Attempts
		// The largest multiplicity, as across Puts: the guarded
		// collection sends one envelope per fingerprint and Put,
		// carrying its call's count so far, and a fallback file loaded
		// back holds the same envelope once per Put that wrote it.
		m.Multiplicity = max(m.Copies(), e.Copies())
		if !e.FirstSeen.IsZero() && (m.FirstSeen.IsZero() || e.FirstSeen.Before(m.FirstSeen)) {
			m.FirstSeen = e.FirstSeen
		}
		if e.LastSeen.After(m.LastSeen) {
			m.LastSeen = e.LastSeen
		}
	}
	return out
}

// StoredDocument returns env as a MongoSink with opts stores it for a
// first capture (after the defaults, the protection and redaction of
// opts, and the size limit: envelope.PrepareStored): fingerprint, the envelope's
// fields, attempts, last_seen and status, as one document without the _id
// the server assigns. For tests and tools. It returns the options' errors
// (joined), envelope.Protect's, or the marshalling error.
func StoredDocument(env envelope.Envelope, opts ...SinkOption) (bson.Raw, error) {
	cfg := newSinkConfig(opts)
	if err := cfg.err(); err != nil {
		return nil, err
	}
	e, err := envelope.PrepareStored(env, cfg.protection)
	if err != nil {
		return nil, err
	}
	return bson.Marshal(envelope.StoredFields(e, ""))
}
