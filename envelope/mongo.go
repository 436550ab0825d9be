package envelope

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/writeguard/writeguard/policy"
)

// MaxBSONSize is the largest document a MongoDB server stores, 16 MiB: it
// is policy.MaxBSONSize, kept here under its old name.
const MaxBSONSize = policy.MaxBSONSize

// EnvelopeHeadroom is the room, in bytes, that MongoSink keeps free below
// MaxBSONSize when it decides whether an envelope fits: the fields set by
// the update operators ($inc attempts, $max last_seen, $set status), the
// ones a replay or a discard add later (replayed_at, discarded_at), the
// server's _id, and the update statement around the envelope
// ({q: {fingerprint}, u: {$setOnInsert: ...}, upsert: true}).
const EnvelopeHeadroom = 16 * 1024

// MaxEnvelopeSize is the largest stored envelope MongoSink writes:
// MaxBSONSize − EnvelopeHeadroom bytes. A larger one has its original
// truncated (see MongoSink).
const MaxEnvelopeSize = MaxBSONSize - EnvelopeHeadroom

// maxErrInfoShare is the most of MaxEnvelopeSize an errInfo may take
// before it is replaced by a summary: the original matters more.
const maxErrInfoShare = MaxEnvelopeSize / 4

// maxDroppedNames bounds Envelope.OriginalDropped.
const maxDroppedNames = 100

// DefaultUpsertRetries is how many more times MongoSink.Put sends the
// envelopes that lost a race on the unique fingerprint index (11000): the
// upserts that failed, or, WithInsertFirst, the envelopes deleted between
// their failed insert and their recapture update.
const DefaultUpsertRetries = 3

// SinkOption configures a MongoSink (NewMongoSink) or a FileSink
// (NewFileSink). Options are applied in order, then checked together: a
// nil option or a bad value is an error naming it (all of them joined).
type SinkOption interface {
	apply(*sinkConfig)
}

type sinkOptionFunc func(*sinkConfig)

func (f sinkOptionFunc) apply(c *sinkConfig) { f(c) }

type sinkConfig struct {
	redact        func(bson.Raw) bson.Raw
	redactErrInfo func(bson.Raw) bson.Raw
	upsertRetries int
	insertFirst   bool
	setup         []SetupOption // WithSetup (mongo_safe.go)
	logger        *slog.Logger  // WithLogger (mongo_safe.go)
	now           func() time.Time
	errs          []error
}

// newSinkConfig applies opts; c.err() reports what was wrong with them.
func newSinkConfig(opts []SinkOption) sinkConfig {
	c := sinkConfig{upsertRetries: DefaultUpsertRetries, now: time.Now}
	for i, o := range opts {
		if o == nil {
			c.errs = append(c.errs, fmt.Errorf("envelope: sink option %d is nil", i))
			continue
		}
		o.apply(&c)
	}
	return c
}

func (c *sinkConfig) err() error { return errors.Join(c.errs...) }

// WithRedact sets a hook that rewrites each envelope's original before it
// is stored, e.g. to drop an ssn field. It receives the original (a valid
// BSON document; it must not modify the bytes) and returns the document to
// store, which must be valid BSON: a Put whose hook returns invalid BSON
// fails rather than store the unredacted document. Returning nil stores an
// empty document.
//
// The fingerprint is left as the caller computed it, from the unredacted
// original, so recaptures of the payload still meet the same envelope. An
// envelope whose original the hook changed is stored with
// original_redacted: true, and a replay skips it unless told otherwise
// (its original is no longer the rejected payload).
//
// The hook does not touch err_info, whose consideredValue fields can hold
// the same values: see WithRedactErrInfo.
func WithRedact(f func(original bson.Raw) bson.Raw) SinkOption {
	return sinkOptionFunc(func(c *sinkConfig) { c.redact = f })
}

// WithRedactErrInfo sets a hook that rewrites each envelope's errInfo
// before it is stored (the server's errInfo repeats the offending values
// in consideredValue). Same rules as WithRedact; failing_keywords and
// failing_paths, computed from the full errInfo, are kept.
func WithRedactErrInfo(f func(errInfo bson.Raw) bson.Raw) SinkOption {
	return sinkOptionFunc(func(c *sinkConfig) { c.redactErrInfo = f })
}

// WithUpsertRetries sets how many more times MongoSink.Put sends the
// envelopes that lost a race on the fingerprint index
// (DefaultUpsertRetries by default; 0: return the error at once; negative:
// an error). Ignored by FileSink.
func WithUpsertRetries(n int) SinkOption {
	return sinkOptionFunc(func(c *sinkConfig) {
		if n < 0 {
			c.errs = append(c.errs, fmt.Errorf("envelope: WithUpsertRetries(%d): want ≥ 0", n))
			return
		}
		c.upsertRetries = n
	})
}

// WithInsertFirst makes MongoSink.Put insert new envelopes and update
// recaptured ones in bulk instead of sending one upsert per envelope: the
// same result, much faster on servers that scan the collection for every
// upsert (FerretDB v1; see MongoSink). Ignored by FileSink.
func WithInsertFirst() SinkOption {
	return sinkOptionFunc(func(c *sinkConfig) { c.insertFirst = true })
}

// MongoSink is a Sink that stores envelopes in a MongoDB collection, the
// dead-letter collection (DLQ), prepared by EnsureCollection. It is safe
// for concurrent use.
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
//	$inc:         {attempts: <Envelope.Attempts, at least 1>}
//	$max:         {last_seen: <Envelope.LastSeen>}
//	$set:         {status: "pending"}
//
// so the first capture of a payload inserts its envelope and every later
// one (a recapture) adds its attempts, moves last_seen forward and puts
// the status back to pending, leaving the first capture's fields alone.
// last_seen uses $max rather than $set so that a late or retried Put of an
// older capture never moves it backwards (the TTL index counts from it).
// Envelopes of one Put with the same fingerprint are merged first (their
// attempts added, the earliest first_seen and latest last_seen kept).
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
// distinct (attempts, last_seen) pair, each applying RecaptureUpdate (200
// recaptures into a DLQ of 1,000: about 2.3 s on FerretDB, which scans
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
// (MaxBSONSize) with EnvelopeHeadroom to spare. When it would not, Put
// does not fail and does not drop the payload: an errInfo over a quarter
// of that is replaced by {writeguard_truncated: true, size,
// failingDocumentId} (failing_keywords and failing_paths, derived from the
// full errInfo, are kept); then the original is cut to the top-level
// fields that fit, in document order (_id first when it comes first;
// greedy: a field too large is skipped and smaller later ones still go
// in), and stored with original_truncated: true, original_size (the full
// size in bytes) and original_dropped (the names left out). Such an
// envelope is for inspection only; a replay skips it.
//
// # Lost indexes
//
// Before each Put writes, it lists the collection's indexes (one
// listIndexes command) and checks that the unique index on fingerprint is
// there. A collection dropped while the application runs comes back on
// the next insert or upsert without any index (the server creates it
// implicitly), and without the unique index recaptures would become new
// envelopes (WithInsertFirst) and concurrent captures could make two, so
// a replay would write one payload twice. When the index is gone (or the
// collection), Put first runs EnsureCollection with the options of
// WithSetup, logs what it did (WithLogger) and counts it
// (Reestablished), then stores; when that cannot give back the unique
// index (e.g. duplicates of a fingerprint already exist), Put stores
// nothing and returns an error wrapping ErrIndexMissing. A drop between
// the check and the write is not seen until the next Put. A user not
// allowed to list indexes (13 Unauthorized; the readWrite role may) gets
// no check: Put stores as before, and WithLogger's logger is told once.
//
// # Partial failures
//
// PutEach (PartialSink) says which envelopes of a failed Put the
// collection holds: it reads them back by fingerprint.
type MongoSink struct {
	coll    *mongo.Collection
	cfg     sinkConfig
	err     error // a construction error every Put returns
	stripes [sinkStripes]sync.Mutex

	setupMu       sync.Mutex   // one re-establishment at a time
	reestablished atomic.Int64 // Reestablished
	unacked       atomic.Bool  // a write came back unacknowledged (w: 0)
	uncheckable   atomic.Bool  // listIndexes refused (13): said once
}

// sinkStripes is the number of locks MongoSink.Put spreads fingerprints
// over.
const sinkStripes = 64

var _ Sink = (*MongoSink)(nil)

// NewMongoSink returns a Sink storing envelopes in coll. coll must have
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
		cfg.errs = append([]error{errors.New("envelope: NewMongoSink(nil): no dead-letter collection")}, cfg.errs...)
	}
	if err := cfg.err(); err != nil {
		return nil, err
	}
	return &MongoSink{coll: coll, cfg: cfg}, nil
}

// ErrUnacknowledgedSink is wrapped by MongoSink.Put's error when the
// dead-letter collection's write concern is unacknowledged (w: 0).
var ErrUnacknowledgedSink = errors.New("envelope: the dead-letter collection's write concern is unacknowledged (w: 0): " +
	"the server confirmed nothing, so no envelope is known to be stored; give the sink a collection with w ≥ 1")

// acked returns ErrUnacknowledgedSink for a write the server did not
// acknowledge.
func acked(acknowledged bool) error {
	if !acknowledged {
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
// indexes"). A sink whose write came back unacknowledged (w: 0) returns
// ErrUnacknowledgedSink at once from then on, sending nothing. An empty
// envs is a no-op.
func (s *MongoSink) Put(ctx context.Context, envs []Envelope) error {
	err := s.put(ctx, envs)
	if errors.Is(err, ErrUnacknowledgedSink) {
		s.unacked.Store(true)
	}
	return err
}

func (s *MongoSink) put(ctx context.Context, envs []Envelope) error {
	if s.err != nil {
		return s.err
	}
	if len(envs) == 0 {
		return nil
	}
	if s.unacked.Load() {
		return ErrUnacknowledgedSink
	}
	merged := mergeByFingerprint(envs)
	for i := range merged {
		env, err := prepareForStore(merged[i], s.cfg)
		if err != nil {
			return err
		}
		merged[i] = env
	}
	unlock := s.lock(merged)
	defer unlock()
	if err := s.checkIndexes(ctx); err != nil {
		return err
	}
	if s.cfg.insertFirst {
		return s.putInsertFirst(ctx, merged)
	}
	return s.putUpserts(ctx, merged)
}

// putUpserts stores prepared envelopes with one bulk write of upserts,
// sending again those that failed with a duplicate key.
func (s *MongoSink) putUpserts(ctx context.Context, envs []Envelope) error {
	models := make([]mongo.WriteModel, len(envs))
	for i := range envs {
		m, err := upsertModel(envs[i])
		if err != nil {
			return err
		}
		models[i] = m
	}
	for round := 0; ; round++ {
		res, err := s.coll.BulkWrite(ctx, models, options.BulkWrite().SetOrdered(false))
		if err == nil {
			return acked(res.Acknowledged)
		}
		var bwe mongo.BulkWriteException
		if !errors.As(err, &bwe) || bwe.WriteConcernError != nil || len(bwe.WriteErrors) == 0 || round >= s.cfg.upsertRetries {
			return fmt.Errorf("envelope: storing %d envelopes: %w", len(models), err)
		}
		var again []mongo.WriteModel
		for _, f := range policy.Extract(err) {
			if !policy.IsDuplicateKey(f) || f.Index < 0 || f.Index >= len(models) {
				return fmt.Errorf("envelope: storing %d envelopes: %w", len(models), err)
			}
			again = append(again, models[f.Index])
		}
		models = again
	}
}

// putInsertFirst stores prepared envelopes with one insert, then one
// update of the recaptured ones (WithInsertFirst).
func (s *MongoSink) putInsertFirst(ctx context.Context, envs []Envelope) error {
	docs := make([]bson.Raw, len(envs))
	for i := range envs {
		var err error
		if docs[i], err = bson.Marshal(storedFields(envs[i])); err != nil {
			return fmt.Errorf("envelope: marshalling the envelope of fingerprint %s: %w", envs[i].Fingerprint, err)
		}
	}
	pending := make([]int, len(envs))
	for i := range pending {
		pending[i] = i
	}
	for round := 0; ; round++ {
		dups, err := s.insert(ctx, docs, pending)
		if err != nil || len(dups) == 0 {
			return err
		}
		missing, err := s.update(ctx, envs, dups)
		if err != nil || len(missing) == 0 {
			return err
		}
		if round >= s.cfg.upsertRetries {
			return fmt.Errorf("envelope: %d envelopes were inserted and deleted concurrently %d times; giving up", len(missing), round+1)
		}
		pending = missing
	}
}

// insert inserts docs[i] for i in idx, unordered, and returns the indexes
// (into docs) whose insert failed with a duplicate key.
func (s *MongoSink) insert(ctx context.Context, docs []bson.Raw, idx []int) ([]int, error) {
	batch := make([]any, len(idx))
	for k, i := range idx {
		batch[k] = docs[i]
	}
	res, err := s.coll.InsertMany(ctx, batch, options.InsertMany().SetOrdered(false))
	if err == nil {
		return nil, acked(res.Acknowledged)
	}
	var bwe mongo.BulkWriteException
	if !errors.As(err, &bwe) || bwe.WriteConcernError != nil || len(bwe.WriteErrors) == 0 {
		return nil, fmt.Errorf("envelope: storing %d envelopes: %w", len(idx), err)
	}
	dups := make([]int, 0, len(bwe.WriteErrors))
	for _, f := range policy.Extract(err) {
		if !policy.IsDuplicateKey(f) || f.Index < 0 || f.Index >= len(idx) {
			return nil, fmt.Errorf("envelope: storing %d envelopes: %w", len(idx), err)
		}
		dups = append(dups, idx[f.Index])
	}
	return dups, nil
}

// update applies the recapture update to the envelopes envs[i], i in
// idx, and returns those it found no envelope for.
func (s *MongoSink) update(ctx context.Context, envs []Envelope, idx []int) ([]int, error) {
	type key struct {
		attempts int
		lastSeen int64
	}
	groups := map[key][]string{}
	var order []key
	for _, i := range idx {
		k := key{envs[i].Attempts, envs[i].LastSeen.UnixMilli()}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], envs[i].Fingerprint)
	}
	models := make([]mongo.WriteModel, 0, len(order))
	for _, k := range order {
		models = append(models, mongo.NewUpdateManyModel().
			SetFilter(bson.D{{Key: "fingerprint", Value: bson.D{{Key: "$in", Value: groups[k]}}}}).
			SetUpdate(RecaptureUpdate(k.attempts, time.UnixMilli(k.lastSeen).UTC())))
	}
	res, err := s.coll.BulkWrite(ctx, models, options.BulkWrite().SetOrdered(false))
	if err != nil {
		return nil, fmt.Errorf("envelope: updating %d recaptured envelopes: %w", len(idx), err)
	}
	if err := acked(res.Acknowledged); err != nil {
		return nil, err
	}
	if res.MatchedCount >= int64(len(idx)) {
		return nil, nil
	}
	// Some envelopes are gone since their insert failed: find which.
	fps := make([]string, len(idx))
	for k, i := range idx {
		fps[k] = envs[i].Fingerprint
	}
	cur, err := s.coll.Find(ctx, bson.D{{Key: "fingerprint", Value: bson.D{{Key: "$in", Value: fps}}}},
		options.Find().SetProjection(bson.D{{Key: "_id", Value: 0}, {Key: "fingerprint", Value: 1}}))
	if err != nil {
		return nil, fmt.Errorf("envelope: checking %d recaptured envelopes: %w", len(idx), err)
	}
	var found []struct {
		Fingerprint string `bson:"fingerprint"`
	}
	if err := cur.All(ctx, &found); err != nil {
		return nil, fmt.Errorf("envelope: checking %d recaptured envelopes: %w", len(idx), err)
	}
	there := make(map[string]bool, len(found))
	for _, f := range found {
		there[f.Fingerprint] = true
	}
	var missing []int
	for _, i := range idx {
		if !there[envs[i].Fingerprint] {
			missing = append(missing, i)
		}
	}
	return missing, nil
}

// RecaptureUpdate is the update MongoSink applies to the envelope of a
// payload captured again: {$inc: {attempts}, $max: {last_seen}, $set:
// {status: "pending"}}.
func RecaptureUpdate(attempts int, lastSeen time.Time) bson.D {
	return bson.D{
		{Key: "$inc", Value: bson.D{{Key: "attempts", Value: int32(attempts)}}},
		{Key: "$max", Value: bson.D{{Key: "last_seen", Value: lastSeen}}},
		{Key: "$set", Value: bson.D{{Key: "status", Value: StatusPending}}},
	}
}

// lock takes the stripe locks of envs' fingerprints, in ascending order,
// and returns the function that releases them.
func (s *MongoSink) lock(envs []Envelope) func() {
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
func mergeByFingerprint(envs []Envelope) []Envelope {
	out := make([]Envelope, 0, len(envs))
	at := make(map[string]int, len(envs))
	for _, e := range envs {
		if e.Fingerprint == "" {
			e.Fingerprint = Fingerprint(e.Original, e.IDAssigned)
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
		if !e.FirstSeen.IsZero() && (m.FirstSeen.IsZero() || e.FirstSeen.Before(m.FirstSeen)) {
			m.FirstSeen = e.FirstSeen
		}
		if e.LastSeen.After(m.LastSeen) {
			m.LastSeen = e.LastSeen
		}
	}
	return out
}

// prepareForStore applies the defaults, the redaction hooks and the size
// limit to env.
func prepareForStore(env Envelope, cfg sinkConfig) (Envelope, error) {
	if env.SchemaVersion == 0 {
		env.SchemaVersion = SchemaVersion
	}
	now := cfg.now().UTC().Truncate(time.Millisecond)
	if env.FirstSeen.IsZero() {
		env.FirstSeen = now
	}
	if env.LastSeen.IsZero() {
		env.LastSeen = env.FirstSeen
	}
	if env.FailingKeywords == nil {
		env.FailingKeywords = FailingKeywords(env.ErrInfo)
	}
	if env.FailingPaths == nil {
		env.FailingPaths = FailingPaths(env.ErrInfo)
	}
	env.Status = StatusPending
	if cfg.redact != nil {
		red, err := applyRedact(cfg.redact, env.Original)
		if err != nil {
			return env, fmt.Errorf("envelope: redaction hook for fingerprint %s: %w", env.Fingerprint, err)
		}
		if !bytes.Equal(red, env.Original) {
			env.Original, env.OriginalRedacted = red, true
		}
	}
	if cfg.redactErrInfo != nil && len(env.ErrInfo) > 0 {
		red, err := applyRedact(cfg.redactErrInfo, env.ErrInfo)
		if err != nil {
			return env, fmt.Errorf("envelope: errInfo redaction hook for fingerprint %s: %w", env.Fingerprint, err)
		}
		env.ErrInfo = red
	}
	return fitEnvelope(env, MaxEnvelopeSize), nil
}

func applyRedact(f func(bson.Raw) bson.Raw, doc bson.Raw) (bson.Raw, error) {
	in := append(bson.Raw(nil), doc...) // the hook may not keep or change ours
	out := f(in)
	if out == nil {
		return bson.Raw{5, 0, 0, 0, 0}, nil
	}
	if err := out.Validate(); err != nil {
		return nil, fmt.Errorf("returned invalid BSON: %w", err)
	}
	return out, nil
}

// storedSize returns the size in bytes of env stored as a document (its
// $setOnInsert fields plus the operators' fields), or an error if env
// cannot be marshalled.
func storedSize(env Envelope) (int, error) {
	raw, err := bson.Marshal(insertFields(env))
	if err != nil {
		return 0, err
	}
	// fingerprint, attempts, last_seen, status, as stored.
	const operatorFields = 1 + len("fingerprint") + 1 + 4 + 64 + 1 +
		1 + len("attempts") + 1 + 4 +
		1 + len("last_seen") + 1 + 8 +
		1 + len("status") + 1 + 4 + len(StatusDiscarded) + 1
	return len(raw) + operatorFields, nil
}

// fitEnvelope makes env fit in limit bytes as stored: first a large
// errInfo gives way, then the original is cut to its top-level fields
// that fit. It never fails: at worst the original keeps no field.
func fitEnvelope(env Envelope, limit int) Envelope {
	size, err := storedSize(env)
	if err != nil || size <= limit {
		return env
	}
	if len(env.ErrInfo) > maxErrInfoShare {
		env.ErrInfo = errInfoSummary(env.ErrInfo)
		if size, err = storedSize(env); err != nil || size <= limit {
			return env
		}
	}
	full := env.Original
	// Room for original_truncated, original_size and original_dropped
	// (at most maxDroppedNames names of at most maxDroppedNameLen bytes).
	const reserve = 64 + maxDroppedNames*(maxDroppedNameLen+3+8)
	budget := limit - (size - len(full)) - reserve
	kept, dropped := truncateDocument(full, budget)
	if len(dropped) > maxDroppedNames {
		dropped = dropped[:maxDroppedNames]
	}
	for i, name := range dropped {
		if len(name) > maxDroppedNameLen {
			dropped[i] = validString([]byte(name[:maxDroppedNameLen]))
		}
	}
	env.Original = kept
	env.OriginalTruncated = true
	env.OriginalSize = len(full)
	env.OriginalDropped = dropped
	if size, err = storedSize(env); err == nil && size > limit {
		env.OriginalDropped = nil // cannot happen with the reserve above
	}
	return env
}

// maxDroppedNameLen bounds each name in Envelope.OriginalDropped, in bytes.
const maxDroppedNameLen = 256

// errInfoSummary replaces an oversized errInfo by a small document saying
// so, keeping failingDocumentId when it is small.
func errInfoSummary(errInfo bson.Raw) bson.Raw {
	d := bson.D{{Key: "writeguard_truncated", Value: true}, {Key: "size", Value: int64(len(errInfo))}}
	if v, err := errInfo.LookupErr("failingDocumentId"); err == nil && len(v.Value) <= 1024 {
		d = append(d, bson.E{Key: "failingDocumentId", Value: v})
	}
	raw, err := bson.Marshal(d)
	if err != nil {
		return nil
	}
	return raw
}

// truncateDocument returns the document made of doc's top-level elements
// that fit in budget bytes (document framing included), taken greedily in
// document order, and the keys of the elements left out. A doc that is
// not valid BSON yields an empty document and a nil list.
func truncateDocument(doc bson.Raw, budget int) (bson.Raw, []string) {
	out := []byte{0, 0, 0, 0}
	var dropped []string
	it := newElemIter(doc)
	used := 5
	for {
		key, t, val, ok := it.next()
		if !ok {
			break
		}
		n := 1 + len(key) + 1 + len(val)
		if used+n > budget {
			dropped = append(dropped, validString(key))
			continue
		}
		used += n
		out = append(out, byte(t))
		out = append(out, key...)
		out = append(out, 0)
		out = append(out, val...)
	}
	return bson.Raw(finishContainer(out, 0)), dropped
}

// insertFields returns the fields of env set only when its envelope is
// created (a recapture leaves them alone), in stored order.
func insertFields(env Envelope) bson.D {
	d := bson.D{
		{Key: "schema_version", Value: int32(env.SchemaVersion)},
		{Key: "original", Value: rawOrEmpty(env.Original)},
	}
	if env.OriginalTruncated {
		d = append(d, bson.E{Key: "original_truncated", Value: true}, bson.E{Key: "original_size", Value: int64(env.OriginalSize)})
		if len(env.OriginalDropped) > 0 {
			d = append(d, bson.E{Key: "original_dropped", Value: env.OriginalDropped})
		}
	}
	if env.OriginalRedacted {
		d = append(d, bson.E{Key: "original_redacted", Value: true})
	}
	if env.DocumentID.Type != 0 {
		d = append(d, bson.E{Key: "document_id", Value: env.DocumentID})
	}
	d = append(d, bson.E{Key: "id_assigned", Value: env.IDAssigned})
	if len(env.ErrInfo) > 0 {
		d = append(d, bson.E{Key: "err_info", Value: env.ErrInfo})
	}
	d = append(d,
		bson.E{Key: "failing_keywords", Value: nonNil(env.FailingKeywords)},
		bson.E{Key: "failing_paths", Value: nonNil(env.FailingPaths)},
		bson.E{Key: "code", Value: env.Code},
	)
	if env.CodeName != "" {
		d = append(d, bson.E{Key: "code_name", Value: env.CodeName})
	}
	d = append(d, bson.E{Key: "errmsg", Value: env.ErrMsg})
	if len(env.Labels) > 0 {
		d = append(d, bson.E{Key: "labels", Value: env.Labels})
	}
	d = append(d,
		bson.E{Key: "namespace", Value: env.Namespace},
		bson.E{Key: "operation", Value: env.Operation},
		bson.E{Key: "batch_index", Value: int32(env.BatchIndex)},
		bson.E{Key: "first_seen", Value: env.FirstSeen},
	)
	if env.TraceID != "" {
		d = append(d, bson.E{Key: "trace_id", Value: env.TraceID})
	}
	if env.SpanID != "" {
		d = append(d, bson.E{Key: "span_id", Value: env.SpanID})
	}
	return d
}

func rawOrEmpty(r bson.Raw) bson.Raw {
	if len(r) == 0 {
		return bson.Raw{5, 0, 0, 0, 0}
	}
	return r
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// upsertModel returns the upsert of one prepared envelope.
func upsertModel(env Envelope) (mongo.WriteModel, error) {
	soi, err := bson.Marshal(insertFields(env))
	if err != nil {
		return nil, fmt.Errorf("envelope: marshalling the envelope of fingerprint %s: %w", env.Fingerprint, err)
	}
	update := append(bson.D{{Key: "$setOnInsert", Value: bson.Raw(soi)}}, RecaptureUpdate(env.Attempts, env.LastSeen)...)
	return mongo.NewUpdateOneModel().
		SetFilter(bson.D{{Key: "fingerprint", Value: env.Fingerprint}}).
		SetUpdate(update).
		SetUpsert(true), nil
}

// storedFields returns a prepared envelope as MongoSink inserts it: the
// fingerprint, the capture's fields, attempts, last_seen and status.
func storedFields(env Envelope) bson.D {
	d := append(bson.D{{Key: "fingerprint", Value: env.Fingerprint}}, insertFields(env)...)
	return append(d,
		bson.E{Key: "attempts", Value: int32(env.Attempts)},
		bson.E{Key: "last_seen", Value: env.LastSeen},
		bson.E{Key: "status", Value: StatusPending},
	)
}

// StoredDocument returns env as MongoSink stores it for a first capture
// (after the defaults, the redaction hooks of opts and the size limit):
// fingerprint, the Envelope's fields, attempts, last_seen and status, as
// one document without the _id the server assigns. For tests and tools.
func StoredDocument(env Envelope, opts ...SinkOption) (bson.Raw, error) {
	cfg := newSinkConfig(opts)
	if err := cfg.err(); err != nil {
		return nil, err
	}
	merged := mergeByFingerprint([]Envelope{env})
	e, err := prepareForStore(merged[0], cfg)
	if err != nil {
		return nil, err
	}
	return bson.Marshal(storedFields(e))
}
