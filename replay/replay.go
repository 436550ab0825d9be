package replay

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/writeguard/writeguard"
	"github.com/writeguard/writeguard/envelope"
	"github.com/writeguard/writeguard/policy"
)

// DefaultBatchSize is how many envelopes Run reads and writes per batch.
const DefaultBatchSize = 500

// MaxBatchSize bounds WithBatchSize (the server's maxWriteBatchSize).
const MaxBatchSize = 100000

// maxProblems bounds Result.Problems.
const maxProblems = 100

// Option configures Run.
type Option func(*config)

type config struct {
	batch     int
	rate      float64
	filter    envelope.Filter
	dryRun    bool
	validator any
	progress  func(Progress)
	redacted  bool
	errs      []error
	now       func() time.Time
}

// WithBatchSize sets how many envelopes each batch reads and writes
// (default DefaultBatchSize, at most MaxBatchSize). Each batch costs one
// find on the DLQ, one bulk write on the target and one bulk update on the
// DLQ, and holds its envelopes in memory: lower it when originals are
// large (an envelope can approach 16 MiB).
func WithBatchSize(n int) Option {
	return func(c *config) {
		if n < 1 || n > MaxBatchSize {
			c.errs = append(c.errs, fmt.Errorf("replay: WithBatchSize(%d): want 1..%d", n, MaxBatchSize))
			return
		}
		c.batch = n
	}
}

// WithRate limits the replay to docsPerSecond envelopes per second on
// average (0: no limit, the default). Batches are then at most
// docsPerSecond envelopes (at least 1) and are spaced so that the count
// of envelopes sent never runs ahead of the rate by more than one batch.
func WithRate(docsPerSecond float64) Option {
	return func(c *config) {
		if docsPerSecond < 0 || math.IsNaN(docsPerSecond) || math.IsInf(docsPerSecond, 0) {
			c.errs = append(c.errs, fmt.Errorf("replay: WithRate(%v): want a finite rate ≥ 0", docsPerSecond))
			return
		}
		c.rate = docsPerSecond
	}
}

// WithFilter selects the envelopes to replay (see envelope.Filter). An
// empty Statuses means pending only; an empty Namespaces means the
// target's namespace. Listing StatusReplayed replays envelopes again (the
// duplicate-key check then counts them replayed); StatusDiscarded
// envelopes are replayed only when listed.
func WithFilter(f envelope.Filter) Option {
	return func(c *config) { c.filter = f }
}

// WithDryRun makes Run evaluate the selected envelopes against the
// target's validator instead of writing them (see the package
// documentation): the Result has DryRun set and Matched, WouldPass,
// WouldFail and Undetermined filled; nothing is written anywhere.
func WithDryRun() Option {
	return func(c *config) { c.dryRun = true }
}

// WithValidator makes a dry run evaluate validator (a query document such
// as bson.D{{"$jsonSchema", ...}}, as bson.D, bson.M or bson.Raw) instead
// of the target's current one: to try a widened schema before applying
// it. It needs WithDryRun.
func WithValidator(validator any) Option {
	return func(c *config) {
		if validator == nil {
			c.errs = append(c.errs, errors.New("replay: WithValidator(nil)"))
			return
		}
		c.validator = validator
	}
}

// WithProgress calls fn after each batch with the counts so far, from
// Run's goroutine (fn should return quickly).
func WithProgress(fn func(Progress)) Option {
	return func(c *config) { c.progress = fn }
}

// WithRedacted makes Run replay envelopes whose original a sink's
// redaction hook changed (original_redacted): the target then receives
// the redacted document. Without it they are skipped.
func WithRedacted() Option {
	return func(c *config) { c.redacted = true }
}

// Counts are the per-envelope outcomes of a replay.
type Counts struct {
	// Scanned is the number of envelopes read from the DLQ.
	Scanned int64
	// Replayed were written to the target (or found there already) and
	// are now status replayed.
	Replayed int64
	// StillInvalid were rejected again by validation (121, or the
	// envelope's own code): back to pending, attempts + 1.
	StillInvalid int64
	// Conflicts hit a duplicate key that is not their own earlier write;
	// left pending.
	Conflicts int64
	// Failed hit another error (transient errors the target gave up on,
	// a write concern error, ...); left pending, unchanged.
	Failed int64
	// Skipped were not sent: truncated or redacted original, or an
	// original that is not a replayable document or model.
	Skipped int64
}

// Progress is what WithProgress reports after each batch.
type Progress struct {
	Counts
	// Batches is the number of batches done.
	Batches int
	// Elapsed is the time since Run started.
	Elapsed time.Duration
}

// Problem describes one envelope that was not replayed for a reason other
// than validation: a conflict, a failure or a skip.
type Problem struct {
	// EnvelopeID is the envelope's _id in the DLQ.
	EnvelopeID bson.RawValue
	// Fingerprint is the envelope's fingerprint.
	Fingerprint string
	// Outcome is "conflict", "failed" or "skipped".
	Outcome string
	// Code is the server's error code (0 for skips and client errors).
	Code int32
	// Reason says why, without document values.
	Reason string
}

// Result is what Run did.
type Result struct {
	Counts
	// Batches is the number of batches processed.
	Batches int
	// ReplayedByDuplicate counts, among Replayed, the envelopes whose
	// document was already in the target (a duplicate key on their own
	// _id): written by an earlier, interrupted run.
	ReplayedByDuplicate int64
	// TargetDeadLettered counts, among StillInvalid, the documents the
	// target dead-lettered itself (see the package documentation); their
	// envelopes were left to the target's sink.
	TargetDeadLettered int64
	// Problems lists up to 100 conflicts, failures and skips.
	Problems []Problem

	// DryRun is true for a dry run, which fills the fields below instead
	// of the Counts (Scanned excepted).
	DryRun bool
	// Matched is the number of envelopes the filter selects.
	Matched int64
	// WouldPass and WouldFail split the insert envelopes among them by
	// whether the validator accepts their original now.
	WouldPass int64
	WouldFail int64
	// Undetermined are the matched envelopes a dry run cannot evaluate:
	// update/replace/delete models, truncated and (without WithRedacted)
	// redacted originals.
	Undetermined int64
	// Validator is the validator the dry run evaluated, nil when the
	// target has none (then every insert envelope would pass).
	Validator bson.Raw

	// Elapsed is the duration of the run.
	Elapsed time.Duration
}

// ErrDryRunUnsupported is wrapped by Run's error when the server cannot
// evaluate a dry run: "dry run unsupported on this server: <reason>".
var ErrDryRunUnsupported = errors.New("dry run unsupported on this server")

// stored is an envelope as read from the DLQ, with its _id.
type stored struct {
	ID                bson.RawValue `bson:"_id"`
	envelope.Envelope `bson:",inline"`
}

// Run replays the envelopes of dlq selected by the options (pending ones
// of the target's namespace by default) through target, in batches of
// increasing _id, and returns the counts (see the package documentation
// for what happens to each envelope).
//
// It returns early with the counts so far and an error when ctx ends, when
// reading or updating the DLQ fails, or when every write of a batch
// failed with a non-validation error (the target is unreachable, say):
// nothing is lost, as every envelope not marked stays pending. It returns
// an error at once for bad options (a bad filter wraps
// envelope.ErrBadFilter), when the target's namespace is unknown and the
// filter names none, and, for a dry run, when the validator cannot be
// read or the server cannot evaluate it (ErrDryRunUnsupported).
func Run(ctx context.Context, dlq *mongo.Collection, target writeguard.Collection, opts ...Option) (Result, error) {
	cfg := config{batch: DefaultBatchSize, now: time.Now}
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	start := cfg.now()
	var res Result
	if dlq == nil {
		return res, errors.New("replay: nil dead-letter collection")
	}
	if target == nil {
		return res, errors.New("replay: nil target")
	}
	if cfg.validator != nil && !cfg.dryRun {
		cfg.errs = append(cfg.errs, errors.New("replay: WithValidator needs WithDryRun"))
	}
	if len(cfg.errs) > 0 {
		return res, errors.Join(cfg.errs...)
	}
	f := cfg.filter.WithDefaultStatus(envelope.StatusPending)
	if len(f.Namespaces) == 0 {
		ns := Namespace(target)
		if ns == "" {
			return res, fmt.Errorf("replay: the target (%T) has no known namespace: name one in the filter's Namespaces", target)
		}
		f.Namespaces = []string{ns}
	}
	q, err := f.Query(start)
	if err != nil {
		return res, err
	}
	if cfg.dryRun {
		res, err = dryRun(ctx, dlq, target, q, &cfg)
		res.Elapsed = cfg.now().Sub(start)
		return res, err
	}

	r := &runner{cfg: &cfg, dlq: dlq, target: target, res: &res, start: start}
	err = r.run(ctx, q)
	res.Elapsed = cfg.now().Sub(start)
	return res, err
}

// Namespace returns "<database>.<collection>" of a target: that of a
// *mongo.Collection, or what its Namespace method returns
// (*writeguard.Guarded, mocks.Fake); "" when unknown.
func Namespace(target writeguard.Collection) string {
	switch t := target.(type) {
	case *mongo.Collection:
		return t.Database().Name() + "." + t.Name()
	case interface{ Namespace() string }:
		return t.Namespace()
	}
	return ""
}

type runner struct {
	cfg    *config
	dlq    *mongo.Collection
	target writeguard.Collection
	res    *Result
	start  time.Time
	sent   int64 // envelopes sent to the target, for the rate limit
}

func (r *runner) run(ctx context.Context, q bson.D) error {
	batch := r.cfg.batch
	if r.cfg.rate > 0 {
		if per := int(r.cfg.rate); per < batch {
			batch = max(per, 1)
		}
	}
	var last bson.RawValue
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		page := q
		if last.Type != 0 {
			page = bson.D{{Key: "$and", Value: bson.A{q, bson.D{{Key: "_id", Value: bson.D{{Key: "$gt", Value: last}}}}}}}
		}
		envs, err := r.read(ctx, page, batch)
		if err != nil {
			return err
		}
		if len(envs) == 0 {
			return nil
		}
		last = envs[len(envs)-1].ID
		if err := r.pace(ctx, len(envs)); err != nil {
			return err
		}
		if err := r.batch(ctx, envs); err != nil {
			return err
		}
		if r.cfg.progress != nil {
			r.cfg.progress(Progress{Counts: r.res.Counts, Batches: r.res.Batches, Elapsed: r.cfg.now().Sub(r.start)})
		}
		if len(envs) < batch {
			return nil
		}
	}
}

func (r *runner) read(ctx context.Context, q bson.D, n int) ([]stored, error) {
	cur, err := r.dlq.Find(ctx, q, options.Find().SetSort(bson.D{{Key: "_id", Value: 1}}).SetLimit(int64(n)).SetBatchSize(int32(n)))
	if err != nil {
		return nil, fmt.Errorf("replay: reading the dead-letter collection: %w", err)
	}
	var out []stored
	if err := cur.All(ctx, &out); err != nil {
		return nil, fmt.Errorf("replay: reading the dead-letter collection: %w", err)
	}
	return out, nil
}

// pace waits, with a rate limit, until sending n more envelopes keeps the
// average at or below the rate (counting from the start of the run, the
// envelopes already sent are due at sent/rate).
func (r *runner) pace(ctx context.Context, n int) error {
	defer func() { r.sent += int64(n) }()
	if r.cfg.rate <= 0 || r.sent == 0 {
		return nil
	}
	due := r.start.Add(time.Duration(float64(r.sent) / r.cfg.rate * float64(time.Second)))
	d := due.Sub(r.cfg.now())
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// outcome of one envelope in a batch.
type outcome uint8

const (
	outPending outcome = iota
	outReplayed
	outReplayedDup
	outInvalid
	outInvalidByTarget
	outDuplicate // to resolve by reading the target
	outConflict
	outFailed
	outSkipped
)

// entry is one envelope of a batch on its way.
type entry struct {
	env    *stored
	model  mongo.WriteModel
	insert bool
	docID  bson.RawValue
	out    outcome
	code   int32
	reason string
}

func (r *runner) batch(ctx context.Context, envs []stored) error {
	r.res.Batches++
	r.res.Scanned += int64(len(envs))
	entries := make([]*entry, len(envs))
	var send []*entry
	for i := range envs {
		e := &entry{env: &envs[i]}
		entries[i] = e
		m, insert, reason := buildModel(&envs[i].Envelope, r.cfg.redacted)
		if reason != "" {
			e.out, e.reason = outSkipped, reason
			continue
		}
		e.model, e.insert = m, insert
		if insert {
			e.docID, _ = envs[i].Original.LookupErr("_id")
		}
		send = append(send, e)
	}
	var writeErr error
	if len(send) > 0 {
		models := make([]mongo.WriteModel, len(send))
		for i, e := range send {
			models[i] = e.model
		}
		_, writeErr = r.target.BulkWrite(ctx, models, options.BulkWrite().SetOrdered(false))
		classify(send, writeErr)
		r.resolveDuplicates(ctx, send)
	}
	if err := r.mark(ctx, entries); err != nil {
		return err
	}
	failed := 0
	for _, e := range send {
		if e.out == outFailed {
			failed++
		}
	}
	if len(send) > 0 && failed == len(send) {
		if err := ctx.Err(); err != nil {
			return err
		}
		if writeErr == nil {
			writeErr = errors.New(send[0].reason)
		}
		return fmt.Errorf("replay: every write of batch %d failed; stopping: %w", r.res.Batches, writeErr)
	}
	return nil
}

// codeDocumentValidationFailure is the server's code for a document its
// validator rejects; isInvalid also counts the envelope's own code.
const codeDocumentValidationFailure = 121

func isDuplicateKey(code int32) bool { return code == 11000 || code == 11001 || code == 12582 }

// classify sets each sent entry's outcome from the target's answer: a
// *writeguard.Report (per-document dispositions) or a driver error (per
// index write errors; an error for the whole command, a network error
// say, fails every entry without one of its own).
func classify(send []*entry, err error) {
	if err == nil {
		for _, e := range send {
			e.out = outReplayed
		}
		return
	}
	var rep *writeguard.Report
	if errors.As(err, &rep) && len(rep.Outcomes) == len(send) {
		for i, o := range rep.Outcomes {
			e := send[i]
			f := o.Failure
			if f != nil {
				e.code, e.reason = f.Code, failureReason(f)
			}
			switch d := o.Disposition; {
			case d == writeguard.Written || d == writeguard.AlreadyWritten || d == writeguard.ConflictReplaced:
				e.out = outReplayed
			case d == writeguard.DeadLettered:
				e.out = outInvalidByTarget
			case f != nil && isInvalid(f.Code, e):
				e.out = outInvalid
			case f != nil && isDuplicateKey(f.Code):
				e.out = outDuplicate
			default:
				e.out = outFailed
				if e.reason == "" {
					e.reason = "disposition " + string(d)
				} else {
					e.reason = "disposition " + string(d) + ": " + e.reason
				}
				if o.Err != nil {
					e.reason += ": " + o.Err.Error()
				}
			}
		}
		return
	}
	fails := policy.Extract(err)
	perDoc := map[int]*policy.Failure{}
	var whole *policy.Failure
	for i := range fails {
		f := &fails[i]
		if f.Index >= 0 && f.Index < len(send) && f.Origin != policy.OriginWriteConcern {
			perDoc[f.Index] = f
		} else if whole == nil {
			whole = f
		}
	}
	for i, e := range send {
		f := perDoc[i]
		switch {
		case f != nil && isInvalid(f.Code, e):
			e.out, e.code, e.reason = outInvalid, f.Code, failureReason(f)
		case f != nil && isDuplicateKey(f.Code):
			e.out, e.code, e.reason = outDuplicate, f.Code, failureReason(f)
		case f != nil:
			e.out, e.code, e.reason = outFailed, f.Code, failureReason(f)
		case whole != nil:
			// A write concern error (applied, not confirmed) or a
			// whole-command error: the next run resolves it by _id.
			e.out, e.code, e.reason = outFailed, whole.Code, failureReason(whole)
		default:
			e.out = outReplayed
		}
	}
}

func isInvalid(code int32, e *entry) bool {
	return code == codeDocumentValidationFailure || (code != 0 && code == e.env.Code && !isDuplicateKey(code))
}

func failureReason(f *policy.Failure) string {
	s := f.Message
	if f.Code != 0 {
		s = fmt.Sprintf("%d %s: %s", f.Code, f.CodeName, f.Message)
	}
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	return s
}

// resolveDuplicates reads back, in one query, the inserts that hit a
// duplicate key: a stored document with the same _id that equals the
// original (or whose _id writeguard assigned) is this payload, written
// earlier: replayed. Anything else is a conflict.
func (r *runner) resolveDuplicates(ctx context.Context, send []*entry) {
	var dups []*entry
	ids := bson.A{}
	for _, e := range send {
		if e.out != outDuplicate {
			continue
		}
		if !e.insert || e.docID.Type == 0 {
			e.out = outConflict
			continue
		}
		dups = append(dups, e)
		ids = append(ids, e.docID)
	}
	if len(dups) == 0 {
		return
	}
	found, err := readBack(ctx, r.target, ids)
	if err != nil {
		for _, e := range dups {
			e.out = outFailed
			e.reason = "duplicate key; reading the target back failed: " + err.Error()
		}
		return
	}
	for _, e := range dups {
		doc, ok := found[idKey(e.docID)]
		switch {
		case ok && (policy.SameDocument(doc, e.env.Original) || e.env.IDAssigned):
			e.out = outReplayedDup
		case ok:
			e.out = outConflict
			e.reason = "duplicate key: the target holds another document with this _id"
		case found == nil:
			e.out = outConflict
			e.reason = "duplicate key; the target cannot be read back (no Find): " + e.reason
		default:
			e.out = outConflict
			e.reason = "duplicate key on another unique index: " + e.reason
		}
	}
}

type finder interface {
	Find(ctx context.Context, filter any, opts ...options.Lister[options.FindOptions]) (*mongo.Cursor, error)
}

// readBack returns the target's documents with these _ids keyed by idKey,
// or nil (no error) when the target cannot be read.
func readBack(ctx context.Context, target writeguard.Collection, ids bson.A) (map[string]bson.Raw, error) {
	var fd finder
	switch t := target.(type) {
	case interface{ Target() writeguard.Target }:
		fd = t.Target()
	case finder:
		fd = t
	default:
		return nil, nil
	}
	cur, err := fd.Find(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}})
	if err != nil {
		return nil, err
	}
	defer cur.Close(ctx)
	out := map[string]bson.Raw{}
	for cur.Next(ctx) {
		doc := append(bson.Raw(nil), cur.Current...)
		if v, err := doc.LookupErr("_id"); err == nil {
			out[idKey(v)] = doc
		}
	}
	return out, cur.Err()
}

func idKey(v bson.RawValue) string { return string(rune(v.Type)) + string(v.Value) }

// mark records the batch's outcomes in the DLQ with one unordered bulk
// write of (at most) two updateMany statements, and counts them.
func (r *runner) mark(ctx context.Context, entries []*entry) error {
	now := r.cfg.now().UTC().Truncate(time.Millisecond)
	var replayed, invalid bson.A
	for _, e := range entries {
		switch e.out {
		case outReplayed:
			r.res.Replayed++
			replayed = append(replayed, e.env.ID)
		case outReplayedDup:
			r.res.Replayed++
			r.res.ReplayedByDuplicate++
			replayed = append(replayed, e.env.ID)
		case outInvalid:
			r.res.StillInvalid++
			invalid = append(invalid, e.env.ID)
		case outInvalidByTarget:
			r.res.StillInvalid++
			r.res.TargetDeadLettered++
		case outConflict:
			r.res.Conflicts++
			r.problem(e, "conflict")
		case outSkipped:
			r.res.Skipped++
			r.problem(e, "skipped")
		default:
			r.res.Failed++
			r.problem(e, "failed")
		}
	}
	var models []mongo.WriteModel
	if len(replayed) > 0 {
		models = append(models, mongo.NewUpdateManyModel().
			SetFilter(bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: replayed}}}}).
			SetUpdate(bson.D{{Key: "$set", Value: bson.D{
				{Key: "status", Value: envelope.StatusReplayed},
				{Key: "replayed_at", Value: now},
			}}}))
	}
	if len(invalid) > 0 {
		models = append(models, mongo.NewUpdateManyModel().
			SetFilter(bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: invalid}}}}).
			SetUpdate(bson.D{
				{Key: "$inc", Value: bson.D{{Key: "attempts", Value: int32(1)}}},
				{Key: "$set", Value: bson.D{
					{Key: "last_seen", Value: now},
					{Key: "status", Value: envelope.StatusPending},
				}},
			}))
	}
	if len(models) == 0 {
		return nil
	}
	if _, err := r.dlq.BulkWrite(ctx, models, options.BulkWrite().SetOrdered(false)); err != nil {
		return fmt.Errorf("replay: recording the outcomes of batch %d in the dead-letter collection "+
			"(the documents written stay pending and will be recognised by _id on the next run): %w", r.res.Batches, err)
	}
	return nil
}

func (r *runner) problem(e *entry, outcome string) {
	if len(r.res.Problems) >= maxProblems {
		return
	}
	r.res.Problems = append(r.res.Problems, Problem{
		EnvelopeID: e.env.ID, Fingerprint: e.env.Fingerprint, Outcome: outcome, Code: e.code, Reason: e.reason,
	})
}

// modelOps are the "op" values of a non-insert model's envelope original
// ({op, model}, model the canonical Extended JSON of {filter,
// update|replacement, upsert}, as writeguard builds it).
var modelOps = map[string]bool{"updateOne": true, "updateMany": true, "replaceOne": true, "deleteOne": true, "deleteMany": true}

// buildModel returns the write model replaying env: an insertOne of its
// original, or, for a bulkWrite envelope whose original describes an
// update, replace or delete model (it then has a string "op" among
// modelOps and no top-level _id, which an insert's original always has),
// that model. reason is non-empty when env is to be skipped.
func buildModel(env *envelope.Envelope, redacted bool) (m mongo.WriteModel, insert bool, reason string) {
	switch {
	case env.OriginalTruncated:
		return nil, false, "original truncated to fit 16 MiB: not replayable"
	case env.OriginalRedacted && !redacted:
		return nil, false, "original redacted by the sink (replay with WithRedacted to send it anyway)"
	case len(env.Original) == 0:
		return nil, false, "no original"
	}
	orig := env.Original
	if err := orig.Validate(); err != nil {
		return nil, false, "original is not valid BSON: " + err.Error()
	}
	if _, err := orig.LookupErr("_id"); err == nil {
		return mongo.NewInsertOneModel().SetDocument(orig), true, ""
	}
	opv, err := orig.LookupErr("op")
	op, isStr := opv.StringValueOK()
	if err != nil || !isStr || !modelOps[op] {
		return nil, false, "original has no _id (an insert would get a new one on every replay)"
	}
	// writeguard stores the model's parts as canonical Extended JSON in
	// "model" (they hold $-prefixed keys); older envelopes hold them as
	// fields of the original itself.
	if mv, err := orig.LookupErr("model"); err == nil {
		js, ok := mv.StringValueOK()
		if !ok {
			return nil, false, op + " model whose model field is not Extended JSON text"
		}
		var parts bson.Raw
		if err := bson.UnmarshalExtJSON([]byte(js), true, &parts); err != nil {
			return nil, false, op + " model whose Extended JSON does not parse: " + err.Error()
		}
		orig = parts
	}
	filter, ok := docField(orig, "filter")
	if !ok {
		return nil, false, op + " model without a filter document"
	}
	upsert := false
	if v, err := orig.LookupErr("upsert"); err == nil {
		upsert, _ = v.BooleanOK()
	}
	switch op {
	case "updateOne", "updateMany":
		v, err := orig.LookupErr("update")
		if err != nil {
			return nil, false, op + " model without an update"
		}
		var upd any
		switch v.Type {
		case bson.TypeEmbeddedDocument:
			upd = v.Document()
		case bson.TypeArray:
			vals, err := v.Array().Values()
			if err != nil {
				return nil, false, op + " model with an invalid pipeline"
			}
			stages := make([]bson.Raw, 0, len(vals))
			for _, s := range vals {
				d, ok := s.DocumentOK()
				if !ok {
					return nil, false, op + " model with a pipeline stage that is not a document"
				}
				stages = append(stages, d)
			}
			upd = stages
		default:
			return nil, false, op + " model whose update is not a document or pipeline"
		}
		if op == "updateOne" {
			return mongo.NewUpdateOneModel().SetFilter(filter).SetUpdate(upd).SetUpsert(upsert), false, ""
		}
		return mongo.NewUpdateManyModel().SetFilter(filter).SetUpdate(upd).SetUpsert(upsert), false, ""
	case "replaceOne":
		rep, ok := docField(orig, "replacement")
		if !ok {
			return nil, false, "replaceOne model without a replacement document"
		}
		return mongo.NewReplaceOneModel().SetFilter(filter).SetReplacement(rep).SetUpsert(upsert), false, ""
	case "deleteOne":
		return mongo.NewDeleteOneModel().SetFilter(filter), false, ""
	default: // deleteMany
		return mongo.NewDeleteManyModel().SetFilter(filter), false, ""
	}
}

func docField(doc bson.Raw, key string) (bson.Raw, bool) {
	v, err := doc.LookupErr(key)
	if err != nil {
		return nil, false
	}
	return v.DocumentOK()
}
