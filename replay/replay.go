package replay

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/writeguard/writeguard"
	"github.com/writeguard/writeguard/envelope"
)

// Counts are the per-envelope outcomes of a replay.
type Counts struct {
	// Scanned is the number of envelopes tried: claimed, replayed and
	// marked (each counted by one runner of the run only; see the package
	// documentation). Envelopes another runner held are not counted.
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
	// Refused were not sent because the replay may not run them: a
	// namespace not named (WithInto) or always refused, a kind of write
	// not allowed (WithOperations), a multi-document write or a filter
	// without an _id condition (WithMultiDocument). Left pending with
	// the reason recorded (replay_reason).
	Refused int64
	// Held are updates, replaces and deletes whose replay was in flight
	// when an earlier runner died (not sent again), or whose write failed
	// in a way that does not say whether it was applied: whether the
	// target applied them is unknown. Left pending with replay_hold set,
	// for an operator (see WithIncludeHeld).
	Held int64
	// Quarantined counts, among StillInvalid, Conflicts and Failed, the
	// envelopes this run made (or left) quarantined: their failed
	// replays reached the limit (WithQuarantineAfter).
	Quarantined int64
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
// than validation: a conflict, a failure, a skip, a refusal, a hold, or
// a quarantine (validation failures included).
type Problem struct {
	// EnvelopeID is the envelope's _id in the DLQ.
	EnvelopeID bson.RawValue
	// Fingerprint is the envelope's fingerprint.
	Fingerprint string
	// Outcome is "conflict", "failed", "skipped", "refused", "held" or
	// "quarantined".
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
	// LeasesHeld counts the times a runner met a selected envelope that
	// another runner held (it waits for those, then looks again).
	LeasesHeld int64
	// Problems lists up to 100 conflicts, failures, skips, refusals,
	// holds and quarantines.
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

// stored is an envelope as read from the DLQ, with its _id and the
// fields replay keeps besides those of envelope.Envelope.
type stored struct {
	ID                bson.RawValue `bson:"_id"`
	envelope.Envelope `bson:",inline"`
	// ReplayHold is envelope.FieldReplayHold.
	ReplayHold string `bson:"replay_hold,omitempty"`
	// decodeErr says why the envelope cannot be decoded
	// (envelope.DecodeError: which field, never its value); it is
	// skipped, and nothing else of its batch is held up.
	decodeErr string
}

// Run replays the envelopes of dlq selected by the options (pending ones
// of the target's namespace by default) through target, in batches of
// increasing _id, and returns the counts (see the package documentation
// for what happens to each envelope, and for how concurrent runners share
// the work through leases).
//
// It returns early with the counts so far and an error when ctx ends, when
// reading or updating the DLQ or the lease collection fails, or when every
// write of a batch failed with a non-validation error (the target is
// unreachable, say): nothing is lost, as every envelope not marked stays
// pending and its lease is released or expires. It returns an error at
// once for bad options (every one named; a bad filter wraps
// dlq.ErrBadFilter), for a nil dlq or target, when the target's
// namespace is unknown and the filter names none, and, for a dry run, when
// the validator cannot be read or the server cannot evaluate it
// (ErrDryRunUnsupported).
func Run(ctx context.Context, dlq *mongo.Collection, target writeguard.Collection, opts ...Option) (Result, error) {
	cfg := newConfig(opts)
	start := cfg.now()
	var res Result
	if dlq == nil {
		cfg.errs = append(cfg.errs, errors.New("replay: Run: nil dead-letter collection (dlq)"))
	}
	if target == nil {
		cfg.errs = append(cfg.errs, errors.New("replay: Run: nil target"))
	}
	if len(cfg.errs) > 0 {
		return res, errors.Join(cfg.errs...)
	}
	q, err := selection(cfg, target, start)
	if err != nil {
		return res, err
	}
	if cfg.dryRun {
		res, err = dryRun(ctx, dlq, target, q, cfg)
		res.Elapsed = cfg.now().Sub(start)
		return res, err
	}
	if cfg.leases == nil {
		cfg.leases = dlq.Database().Collection(dlq.Name() + LeaseCollectionSuffix)
	}
	tns := Namespace(target)
	if tns == "" {
		return res, fmt.Errorf("replay: the target (%T) has no known namespace: replay writes only into a namespace it can check", target)
	}
	if len(cfg.into) == 0 {
		cfg.into = []string{tns}
	}
	if why := refusedNamespace(tns, dlq, cfg.leases); why != "" {
		cfg.targetRefused = "target " + why
	} else if !cfg.allowed(tns) {
		cfg.targetRefused = "target namespace " + quote(tns) + " not named for this replay (WithInto, --into)"
	}
	if cfg.run == "" {
		cfg.run = randomID()
	}
	if cfg.owner == "" {
		cfg.owner = randomID()
	}
	if err := ensureLeases(ctx, cfg.leases); err != nil {
		return res, err
	}
	res, err = drain(ctx, cfg, dlq, target, q, start)
	res.Elapsed = cfg.now().Sub(start)
	return res, err
}

// selection returns the query of the envelopes to replay: the filter,
// pending by default (and quarantined with WithIncludeQuarantined), in
// the target's namespace by default, not held (unless WithIncludeHeld).
func selection(cfg *config, target writeguard.Collection, now time.Time) (bson.D, error) {
	f := cfg.filter.WithDefaultStatus(envelope.StatusPending)
	if cfg.includeQuarantine && !slices.Contains(f.Statuses, envelope.StatusQuarantined) {
		f.Statuses = append(slices.Clip(f.Statuses), envelope.StatusQuarantined)
	}
	if len(f.Namespaces) == 0 {
		ns := Namespace(target)
		if ns == "" {
			return nil, fmt.Errorf("replay: the target (%T) has no known namespace: name one in the filter's Namespaces", target)
		}
		f.Namespaces = []string{ns}
	}
	q, err := f.Query(now)
	if err != nil || cfg.includeHeld {
		return q, err
	}
	return append(q, bson.E{Key: envelope.FieldReplayHold, Value: bson.D{{Key: "$exists", Value: false}}}), nil
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

// drain runs cfg.workers runners over q and sums their results. The first
// runner error stops the others and is returned.
func drain(ctx context.Context, cfg *config, dlq *mongo.Collection, target writeguard.Collection, q bson.D, start time.Time) (Result, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Envelopes tried by this run are left to no other of its runners,
	// and those tried by anyone since this run started (another process,
	// with its own run id) are not tried again by this run: so that
	// every run ends, and each try is a real one.
	since := start.UTC().Truncate(time.Millisecond)
	q = bson.D{{Key: "$and", Value: bson.A{q,
		bson.D{{Key: "replay_run", Value: bson.D{{Key: "$ne", Value: cfg.run}}}},
		bson.D{{Key: "$or", Value: bson.A{
			bson.D{{Key: "replay_tried_at", Value: bson.D{{Key: "$exists", Value: false}}}},
			bson.D{{Key: "replay_tried_at", Value: bson.D{{Key: "$lt", Value: since}}}},
		}}},
	}}}
	// Claims look leases up by key: index it (best effort; an existing
	// index makes this a no-op, and a server refusing it only costs
	// scans of the lease collection).
	_, _ = cfg.leases.Indexes().CreateOne(ctx, mongo.IndexModel{Keys: bson.D{{Key: "key", Value: 1}}})
	sh := &shared{cfg: cfg, start: start}
	runners := make([]*runner, cfg.workers)
	var wg sync.WaitGroup
	for i := range runners {
		owner := cfg.owner
		if cfg.workers > 1 {
			owner = fmt.Sprintf("%s/%d", cfg.owner, i+1)
		}
		r := &runner{cfg: cfg, sh: sh, dlq: dlq, target: target, owner: owner, start: start}
		runners[i] = r
		wg.Go(func() {
			if err := r.run(ctx, q); err != nil {
				sh.fail(err)
				cancel()
			}
		})
	}
	wg.Wait()
	var res Result
	for _, r := range runners {
		res.add(&r.res)
	}
	return res, sh.err
}

// shared is the state of one Run's runners.
type shared struct {
	cfg   *config
	start time.Time
	mu    sync.Mutex
	err   error
	total Counts
	batch int
}

func (s *shared) fail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err == nil {
		s.err = err
	}
}

// progress adds a batch's counts and reports the totals.
func (s *shared) progress(c Counts) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.total.add(c)
	s.batch++
	if s.cfg.progress != nil {
		s.cfg.progress(Progress{Counts: s.total, Batches: s.batch, Elapsed: s.cfg.now().Sub(s.start)})
	}
}

func (c *Counts) add(o Counts) {
	c.Scanned += o.Scanned
	c.Replayed += o.Replayed
	c.StillInvalid += o.StillInvalid
	c.Conflicts += o.Conflicts
	c.Failed += o.Failed
	c.Skipped += o.Skipped
	c.Refused += o.Refused
	c.Held += o.Held
	c.Quarantined += o.Quarantined
}

func (r *Result) add(o *Result) {
	r.Counts.add(o.Counts)
	r.Batches += o.Batches
	r.ReplayedByDuplicate += o.ReplayedByDuplicate
	r.TargetDeadLettered += o.TargetDeadLettered
	r.LeasesHeld += o.LeasesHeld
	for _, p := range o.Problems {
		if len(r.Problems) < maxProblems {
			r.Problems = append(r.Problems, p)
		}
	}
}

// runner is one worker of a Run.
type runner struct {
	cfg    *config
	sh     *shared
	dlq    *mongo.Collection
	target writeguard.Collection
	owner  string
	res    Result
	start  time.Time
	sent   int64 // envelopes sent to the target, for the rate limit
}

// batchSize is the number of envelopes per batch: WithBatchSize, or less
// under a rate limit.
func (r *runner) batchSize() int {
	batch := r.cfg.batch
	if r.cfg.rate > 0 {
		if per := int(r.cfg.rate); per < batch {
			batch = max(per, 1)
		}
	}
	return batch
}

// run makes passes over the selection until one meets no envelope that
// another runner holds: those are waited for, as their runner may stop
// without finishing them (then their lease expires and this runner takes
// them).
func (r *runner) run(ctx context.Context, q bson.D) error {
	poll := min(max(r.cfg.lease/20, 10*time.Millisecond), time.Second)
	for {
		held, err := r.pass(ctx, q)
		if err != nil || !held {
			return err
		}
		if err := sleep(ctx, poll); err != nil {
			return err
		}
	}
}

// pass reads the selection's _ids in batches of increasing _id, claims
// each batch and replays what it got. held reports whether another runner
// held some of them.
func (r *runner) pass(ctx context.Context, q bson.D) (held bool, err error) {
	batch := r.batchSize()
	var last bson.RawValue
	for {
		if err := ctx.Err(); err != nil {
			return held, err
		}
		page := q
		if last.Type != 0 {
			page = bson.D{{Key: "$and", Value: bson.A{q, bson.D{{Key: "_id", Value: bson.D{{Key: "$gt", Value: last}}}}}}}
		}
		ids, err := r.candidates(ctx, page, batch)
		if err != nil || len(ids) == 0 {
			return held, err
		}
		last = ids[len(ids)-1]
		cl, err := r.claim(ctx, q, ids)
		if err != nil {
			return held, err
		}
		if cl.held > 0 {
			held = true
			r.res.LeasesHeld += int64(cl.held)
		}
		if len(cl.envs) > 0 {
			if err := r.process(ctx, cl); err != nil {
				return held, err
			}
		}
		if len(ids) < batch {
			return held, nil
		}
	}
}

// candidates returns the _ids of the next n envelopes of q.
func (r *runner) candidates(ctx context.Context, q bson.D, n int) ([]bson.RawValue, error) {
	cur, err := r.dlq.Find(ctx, q, options.Find().SetSort(bson.D{{Key: "_id", Value: 1}}).
		SetLimit(int64(n)).SetBatchSize(int32(n)).SetProjection(bson.D{{Key: "_id", Value: 1}}))
	if err != nil {
		return nil, fmt.Errorf("replay: reading the dead-letter collection: %w", err)
	}
	defer cur.Close(ctx)
	var ids []bson.RawValue
	for cur.Next(ctx) {
		if v, err := cur.Current.LookupErr("_id"); err == nil {
			ids = append(ids, bson.RawValue{Type: v.Type, Value: append([]byte(nil), v.Value...)})
		}
	}
	if err := cur.Err(); err != nil {
		return nil, fmt.Errorf("replay: reading the dead-letter collection: %w", err)
	}
	return ids, nil
}

func (r *runner) read(ctx context.Context, q bson.D, n int) ([]stored, error) {
	cur, err := r.dlq.Find(ctx, q, options.Find().SetSort(bson.D{{Key: "_id", Value: 1}}).SetLimit(int64(n)).SetBatchSize(int32(n)))
	if err != nil {
		return nil, fmt.Errorf("replay: reading the dead-letter collection: %w", err)
	}
	defer cur.Close(ctx)
	var out []stored
	for cur.Next(ctx) {
		id := cur.Current.Lookup("_id")
		s := stored{ID: bson.RawValue{Type: id.Type, Value: append([]byte(nil), id.Value...)}}
		// envelope.Decode: any format, binary originals included; an
		// envelope that cannot be decoded is data, not a failure.
		env, err := envelope.Decode(cur.Current)
		var de *envelope.DecodeError
		switch {
		case errors.As(err, &de):
			s.decodeErr = de.Error()
		case err != nil:
			return nil, fmt.Errorf("replay: reading the dead-letter collection: %w", err)
		default:
			s.Envelope = env
			if v, ok := cur.Current.Lookup(envelope.FieldReplayHold).StringValueOK(); ok {
				s.ReplayHold = v
			}
		}
		out = append(out, s)
	}
	if err := cur.Err(); err != nil {
		return nil, fmt.Errorf("replay: reading the dead-letter collection: %w", err)
	}
	return out, nil
}

// process replays a claimed batch and releases its leases, and once the
// envelopes are marked the earlier claims of them. The leases of writes
// sent (marked in flight) and not marked are kept, to expire: the next
// runner then holds those envelopes (see Lease.InFlight).
func (r *runner) process(ctx context.Context, cl claimed) error {
	st := &batchState{keep: map[string]bool{}}
	defer func() {
		ids := make([]string, 0, len(cl.leases)+len(cl.stale))
		for _, id := range cl.leases {
			if !st.keep[id] {
				ids = append(ids, id)
			}
		}
		if st.marked {
			ids = append(ids, cl.stale...)
		}
		r.release(ctx, ids)
	}()
	if err := r.pace(ctx, len(cl.envs)); err != nil {
		return err
	}
	return r.batch(ctx, cl, st)
}

// batchState is what process needs to know of a batch at its end.
type batchState struct {
	// keep holds the lease ids marked in flight, until the batch is
	// marked.
	keep map[string]bool
	// marked is set once the outcomes are recorded in the DLQ.
	marked bool
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
	return sleep(ctx, due.Sub(r.cfg.now()))
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
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
	outRefused
	outHeld
)

var outcomeNames = [...]string{"pending", "replayed", "replayed_by_duplicate", "still_invalid", "dead_lettered_by_target",
	"duplicate", "conflict", "failed", "skipped", "refused", "held"}

// The hold reasons (envelope.FieldReplayHold) of an update, replace or
// delete whose replay may or may not have been applied: in flight when
// its runner died, or failed in a way that does not say (a lost reply, a
// timeout after sending: policy.Failure.Ambiguous).
const (
	holdInFlight = "in_flight_when_runner_died"
	holdUnknown  = "write_outcome_unknown"
)

func (o outcome) String() string { return outcomeNames[o] }

// entry is one envelope of a batch on its way.
type entry struct {
	env    *stored
	call   string // the envelope's call_options bytes: entries are sent grouped by them
	model  mongo.WriteModel
	insert bool
	docID  bson.RawValue
	out    outcome
	code   int32
	reason string
	// codeName is the server's codeName of code, if any.
	codeName string
	// docErr is set when the failure is the server's answer for this
	// document or model (a write error), not for the whole command.
	docErr bool
	// ambiguous is set when the write may have been applied although it
	// failed (policy.Failure.Ambiguous: a lost reply, a timeout or an
	// interruption after sending, a write concern error).
	ambiguous bool
	// failed is set when the outcome is a failed replay of the envelope
	// (counted in replay_failures); quarantine when that count reaches
	// the limit.
	failed, quarantine bool
}

// prepare turns a batch into entries and returns those to send (the
// others are skipped, refused or held). inFlight maps envelope keys to
// the time of an earlier claim marked in flight (claimed.inFlight).
func (r *runner) prepare(ctx context.Context, envs []stored, inFlight map[string]time.Time) (entries, send []*entry) {
	entries = make([]*entry, len(envs))
	for i := range envs {
		e := &entry{env: &envs[i], call: string(envs[i].CallOptions)}
		entries[i] = e
		if envs[i].decodeErr != "" {
			e.out, e.reason = outSkipped, envs[i].decodeErr
			continue
		}
		// A write sent by a runner that died before marking it: applied
		// or not, nobody knows, unless a try was recorded since (the
		// runner died after marking, before releasing its lease). Held
		// whatever this run would do with it (skip it, refuse it), as
		// the in-flight lease, the only record of it, goes once the
		// envelope is marked. An insert (an original with an _id) needs
		// no hold: its _id makes a second write a duplicate key.
		if at, ok := inFlight[leaseKey(envs[i].ID)]; ok && envs[i].ReplayTriedAt.Before(at) {
			if _, err := envs[i].Original.LookupErr("_id"); err != nil {
				e.out, e.reason = outHeld, holdInFlight
				continue
			}
		}
		env := &envs[i].Envelope
		if len(env.Withheld) > 0 && r.cfg.withheld != nil {
			supplied, reason := supplyWithheld(ctx, r.cfg.withheld, env)
			if reason != "" {
				e.out, e.reason = outSkipped, reason
				continue
			}
			env = supplied
			envs[i].Original = supplied.Original // the duplicate-key read-back compares with it
		}
		m, insert, reason := buildModel(env, r.cfg.redacted)
		if reason != "" {
			e.out, e.reason = outSkipped, reason
			continue
		}
		if why := r.guard(envs[i].Namespace, m); why != "" {
			e.out, e.reason = outRefused, why
			continue
		}
		e.model, e.insert = m, insert
		if insert {
			e.docID, _ = envs[i].Original.LookupErr("_id")
		}
		send = append(send, e)
	}
	return entries, send
}

func (r *runner) batch(ctx context.Context, cl claimed, st *batchState) error {
	entries, send := r.prepare(ctx, cl.envs, cl.inFlight)
	var writeErr error
	if len(send) > 0 {
		// Updates, replaces and deletes are not idempotent by _id as
		// inserts are: their leases say "in flight" while they are sent.
		var flying []string
		for _, e := range send {
			if !e.insert {
				flying = append(flying, cl.leaseOf[leaseKey(e.env.ID)])
			}
		}
		if len(flying) > 0 {
			if err := r.markInFlight(ctx, flying); err != nil {
				return err
			}
			for _, id := range flying {
				st.keep[id] = true
			}
		}
		for _, group := range byCallOptions(send) {
			r.send(ctx, group, &writeErr)
		}
	}
	failed, docErrs := 0, 0
	for _, e := range send {
		if e.out != outFailed {
			continue
		}
		failed++
		if e.docErr {
			docErrs++
		}
		// An update, replace or delete that may have been applied is
		// not run again by the next run: held, as after a death.
		if !e.insert && e.ambiguous {
			e.out = outHeld
			e.reason = holdUnknown
		}
	}
	// Every write of the batch failed, none with an error of its own:
	// the target is unreachable, say. Stop.
	targetDown := len(send) > 0 && failed == len(send) && docErrs == 0
	r.judge(entries)
	// Record what was sent even when ctx ended meanwhile (Ctrl-C): the
	// writes are done, their outcomes known; for up to 10 s.
	mctx := ctx
	if ctx.Err() != nil {
		var cancel context.CancelFunc
		mctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
	}
	if err := r.mark(mctx, entries); err != nil {
		return err
	}
	st.marked = true
	clear(st.keep)
	if targetDown {
		if err := ctx.Err(); err != nil {
			return err
		}
		if writeErr == nil {
			for _, e := range send {
				if e.out == outFailed {
					writeErr = errors.New(e.reason)
					break
				}
			}
		}
		return fmt.Errorf("replay: every write of batch %d failed; stopping: %w", r.res.Batches, writeErr)
	}
	return nil
}

// judge sets, for each entry, whether its outcome is a failed replay of
// the envelope (rejected again, a conflict, a write error of the target
// for it; not an error of the whole command, a network error say, which
// says nothing of the envelope) and whether that failure reaches the
// quarantine limit.
func (r *runner) judge(entries []*entry) {
	for _, e := range entries {
		switch e.out {
		case outInvalid, outInvalidByTarget, outConflict:
			e.failed = true
		case outFailed:
			e.failed = e.docErr
		}
		if e.failed && r.cfg.quarantineAfter > 0 && e.env.ReplayFailures+1 >= r.cfg.quarantineAfter {
			e.quarantine = true
		}
	}
}

// mark records the batch's outcomes in the DLQ with one unordered bulk
// write of updateMany statements (one per distinct update), then records
// each envelope as done by this run (see recordDone) and counts those
// this runner recorded first. Every envelope of the batch gets
// replay_run and replay_tried_at, so that no runner of this run tries it
// again.
func (r *runner) mark(ctx context.Context, entries []*entry) error {
	now := r.cfg.now().UTC().Truncate(time.Millisecond)
	if err := r.writeMarks(ctx, now, entries); err != nil {
		return fmt.Errorf("replay: recording the outcomes of a batch in the dead-letter collection "+
			"(the documents written stay pending and will be recognised by _id on the next run): %w", err)
	}
	mine, err := r.recordDone(ctx, entries, now)
	if err != nil {
		return err
	}
	var c Counts
	for _, e := range entries {
		if mine[leaseKey(e.env.ID)] {
			r.count(e, &c)
		}
	}
	r.res.Batches++
	r.res.Counts.add(c)
	r.sh.progress(c)
	return nil
}

// count adds one envelope's outcome to c and to the runner's result.
func (r *runner) count(e *entry, c *Counts) {
	c.Scanned++
	switch e.out {
	case outReplayed, outReplayedDup:
		c.Replayed++
		if e.out == outReplayedDup {
			r.res.ReplayedByDuplicate++
		}
	case outInvalid:
		c.StillInvalid++
	case outInvalidByTarget:
		c.StillInvalid++
		r.res.TargetDeadLettered++
	case outConflict:
		c.Conflicts++
		r.problem(e, "conflict")
	case outSkipped:
		c.Skipped++
		r.problem(e, "skipped")
	case outRefused:
		c.Refused++
		r.problem(e, "refused")
	case outHeld:
		c.Held++
		r.problem(e, "held")
	default:
		c.Failed++
		r.problem(e, "failed")
	}
	if e.quarantine {
		c.Quarantined++
		r.problem(e, "quarantined")
	}
}

func (r *runner) problem(e *entry, outcome string) {
	if len(r.res.Problems) < maxProblems {
		r.res.Problems = append(r.res.Problems, Problem{
			EnvelopeID: e.env.ID, Fingerprint: e.env.Fingerprint, Outcome: outcome, Code: e.code, Reason: e.reason,
		})
	}
}

// recordDone inserts, for each envelope of the batch, the record
// "<key>.run.<run id>" in the lease collection, and returns the keys whose
// record this runner inserted. A runner that overran its lease and
// another that took the envelope over both replay and mark it (the
// marks are the same); the unique _id of this record lets one of them
// count it, so the counts of a run add up to the envelopes it tried.
func (r *runner) recordDone(ctx context.Context, entries []*entry, now time.Time) (map[string]bool, error) {
	docs := make([]any, len(entries))
	ids := make([]string, len(entries))
	for i, e := range entries {
		ids[i] = leaseKey(e.env.ID) + ".run." + r.cfg.run
		docs[i] = bson.D{{Key: "_id", Value: ids[i]}, {Key: "envelope_id", Value: e.env.ID}, {Key: "run", Value: r.cfg.run},
			{Key: "owner", Value: r.owner}, {Key: "claimed_at", Value: now}, {Key: "outcome", Value: e.out.String()}}
	}
	err := retry(ctx, func() error {
		_, err := r.cfg.leases.InsertMany(ctx, docs, options.InsertMany().SetOrdered(false))
		if err != nil && onlyDuplicates(err) {
			return nil
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("replay: recording a batch as done (its envelopes are marked): %w", err)
	}
	owned, err := r.ownLeases(ctx, ids, now)
	if err != nil {
		return nil, err
	}
	out := make(map[string]bool, len(owned))
	for id := range owned {
		k, _, _ := strings.Cut(id, ".")
		out[k] = true
	}
	return out, nil
}

// writeMarks sends the outcome updates, one updateMany per distinct
// update (see markUpdate). The write is sent again on a retryable error
// (see retryable); each statement selects only the envelopes whose
// replay_tried_at is not yet this mark's time, so a statement applied by
// an earlier try is not applied again and attempts (incremented) stays
// exact, as does replay_failures (set).
func (r *runner) writeMarks(ctx context.Context, now time.Time, entries []*entry) error {
	type group struct {
		update bson.D
		guard  bool
		ids    bson.A
	}
	var order []string
	groups := map[string]*group{}
	for _, e := range entries {
		upd := r.markUpdate(e, now)
		// An envelope discarded meanwhile stays discarded (see Discard).
		guard := e.env.Status != envelope.StatusDiscarded
		b, err := bson.Marshal(bson.D{{Key: "u", Value: upd}, {Key: "g", Value: guard}})
		if err != nil {
			return err
		}
		g := groups[string(b)]
		if g == nil {
			g = &group{update: upd, guard: guard}
			groups[string(b)] = g
			order = append(order, string(b))
		}
		g.ids = append(g.ids, e.env.ID)
	}
	models := make([]mongo.WriteModel, 0, len(order))
	for _, k := range order {
		g := groups[k]
		filter := bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: g.ids}}},
			{Key: "replay_tried_at", Value: bson.D{{Key: "$ne", Value: now}}}}
		if g.guard {
			filter = append(filter, bson.E{Key: "status", Value: bson.D{{Key: "$ne", Value: envelope.StatusDiscarded}}})
		}
		models = append(models, mongo.NewUpdateManyModel().SetFilter(filter).SetUpdate(g.update))
	}
	if len(models) == 0 {
		return nil
	}
	return retry(ctx, func() error {
		_, err := r.dlq.BulkWrite(ctx, models, options.BulkWrite().SetOrdered(false))
		return err
	})
}

// markUpdate returns the update recording e's outcome: replayed
// envelopes get status replayed and replayed_at, and lose replay_reason
// and replay_hold; those rejected again attempts + 1, last_seen and
// status pending; every failed replay replay_failures + 1 (and status
// quarantined at the limit); every envelope not written a replay_reason;
// held ones replay_hold; every one replay_run and replay_tried_at.
func (r *runner) markUpdate(e *entry, now time.Time) bson.D {
	set := bson.D{{Key: "replay_run", Value: r.cfg.run}, {Key: "replay_tried_at", Value: now}}
	var upd bson.D
	switch e.out {
	case outReplayed, outReplayedDup:
		set = append(set, bson.E{Key: "status", Value: envelope.StatusReplayed}, bson.E{Key: "replayed_at", Value: now})
		return bson.D{{Key: "$set", Value: set}, {Key: "$unset", Value: bson.D{
			{Key: envelope.FieldReplayReason, Value: ""}, {Key: envelope.FieldReplayHold, Value: ""}}}}
	case outInvalid:
		set = append(set, bson.E{Key: "last_seen", Value: now}, bson.E{Key: "status", Value: envelope.StatusPending})
		upd = append(upd, bson.E{Key: "$inc", Value: bson.D{{Key: "attempts", Value: int32(1)}}})
	case outHeld:
		set = append(set, bson.E{Key: envelope.FieldReplayHold, Value: e.reason})
	}
	reason := e.out.String()
	switch {
	case e.out == outHeld:
		reason += ": " + e.reason
		if e.code != 0 {
			reason += fmt.Sprintf(" (%d %s)", e.code, e.codeName)
		}
	case e.code != 0:
		reason += fmt.Sprintf(": %d %s", e.code, e.codeName)
	case e.out != outInvalid && e.out != outInvalidByTarget && e.out != outConflict && e.out != outFailed:
		reason += ": " + e.reason
	}
	if e.failed {
		n := e.env.ReplayFailures + 1
		set = append(set, bson.E{Key: envelope.FieldReplayFailures, Value: int32(n)})
		if e.quarantine {
			set = setStatus(set, envelope.StatusQuarantined)
			reason = fmt.Sprintf("quarantined after %d failed replays (limit %d); last: %s", n, r.cfg.quarantineAfter, reason)
		}
	}
	set = append(set, bson.E{Key: envelope.FieldReplayReason, Value: strings.TrimSpace(reason)})
	upd = append(upd, bson.E{Key: "$set", Value: set})
	if e.out != outHeld {
		upd = append(upd, bson.E{Key: "$unset", Value: bson.D{{Key: envelope.FieldReplayHold, Value: ""}}})
	}
	return upd
}

// setStatus sets (or replaces) status in a $set document.
func setStatus(set bson.D, status string) bson.D {
	for i := range set {
		if set[i].Key == "status" {
			set[i].Value = status
			return set
		}
	}
	return append(set, bson.E{Key: "status", Value: status})
}

// send writes one group of entries of equal call options with one
// unordered BulkWrite (each envelope is one write of its own: see
// envelope.CallOptions) and classifies each entry's outcome; *writeErr
// keeps the last whole error.
func (r *runner) send(ctx context.Context, group []*entry, writeErr *error) {
	models := make([]mongo.WriteModel, len(group))
	for i, e := range group {
		models[i] = e.model
	}
	opts, _, err := envelope.ParseCallOptions(bson.Raw(group[0].call))
	if err != nil {
		for _, e := range group {
			e.out, e.reason = outSkipped, "call options not replayable: "+err.Error()
		}
		return
	}
	if opts == nil {
		opts = options.BulkWrite()
	}
	_, err = r.target.BulkWrite(ctx, models, opts.SetOrdered(false))
	if err != nil {
		*writeErr = err
	}
	classify(group, err)
	resolveDuplicates(ctx, r.target, group)
}

// byCallOptions splits entries into groups of equal call options, in
// order of first appearance.
func byCallOptions(entries []*entry) [][]*entry {
	var groups [][]*entry
	at := map[string]int{}
	for _, e := range entries {
		i, ok := at[e.call]
		if !ok {
			i = len(groups)
			at[e.call] = i
			groups = append(groups, nil)
		}
		groups[i] = append(groups[i], e)
	}
	return groups
}

// supplyWithheld asks the caller's function for the complete original of
// an envelope with withheld fields and checks that it holds them all. It
// returns a copy of env carrying it, or why the envelope is skipped.
func supplyWithheld(ctx context.Context, f WithheldFunc, env *envelope.Envelope) (*envelope.Envelope, string) {
	doc, err := f(ctx, *env)
	if err != nil {
		return nil, "withheld fields not supplied: " + err.Error()
	}
	if err := doc.Validate(); err != nil {
		return nil, "supplied original is not valid BSON: " + err.Error()
	}
	if err := envelope.MissingWithheld(env, doc); err != nil {
		return nil, err.Error()
	}
	out := *env
	out.Original, out.Withheld = doc, nil
	return &out, ""
}

// ensureLeases creates the lease collection before the first claim, so
// that runs started together do not race to create it implicitly with
// their first insert: a server answers the loser with 48
// NamespaceExists (error_codes.yml), and FerretDB's SQLite backend with
// an InternalError "table ... already exists"; both mean it is there.
func ensureLeases(ctx context.Context, leases *mongo.Collection) error {
	err := leases.Database().CreateCollection(ctx, leases.Name())
	var ce mongo.CommandError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ce) && (ce.Code == 48 || strings.Contains(ce.Message, "already exists")):
		return nil
	}
	return fmt.Errorf("replay: creating the lease collection %s: %w", leases.Name(), err)
}
