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
	// without an _id condition (WithMultiDocument), or a multiplicity
	// writeguard never stores (envelope.Envelope.MultiplicityProblem:
	// above envelope.MaxMultiplicity, or above 1 on an insert whose _id
	// the caller gave). Left pending with the reason recorded
	// (replay_reason).
	Refused int64
	// Held are updates, replaces and deletes whose replay was in flight
	// when an earlier runner died (not sent again), or whose write failed
	// in a way that does not say whether it was applied: whether the
	// target applied them is unknown. Left pending with replay_hold set,
	// for an operator (see WithIncludeHeld).
	Held int64
	// Written is the number of writes this run applied to the target:
	// the documents inserted and the updates, replaces and deletes run,
	// an envelope of multiplicity n (envelope.Envelope.Multiplicity)
	// counting its n copies; a write found there already (a duplicate
	// of its own _id: ReplayedByDuplicate) is not counted. Replayed
	// counts envelopes, Written documents.
	Written int64
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

// Problem describes one envelope that was not replayed: a conflict, a
// failure, a skip, a refusal, a hold, a lost lease, or a quarantine. An
// envelope still invalid under the target's schema is counted in
// Counts.StillInvalid, not listed here, unless it is quarantined by that
// failure (then its Problem's Outcome is "quarantined").
type Problem struct {
	// EnvelopeID is the envelope's _id in the DLQ.
	EnvelopeID bson.RawValue
	// Fingerprint is the envelope's fingerprint.
	Fingerprint string
	// Outcome is "conflict", "failed", "skipped", "refused", "held",
	// "quarantined" or "lost" (Result.LeasesLost).
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
	// LeasesLost counts the updates, replaces and deletes not sent
	// because their claim was lost before the send (the runner was
	// paused past its lease and another took the envelope over, or an
	// operator edited the lease collection): left to their new owner,
	// not marked by this runner; each is listed in Problems (outcome
	// "lost").
	LeasesLost int64
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
// namespace is unknown and the filter names none, when this host's clock is
// off from the server's by more than the lease (an error wrapping
// ErrClockSkew: nothing claimed), and, for a dry run, when the validator
// cannot be read or the server cannot evaluate it (ErrDryRunUnsupported).
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
	if err := cfg.startClock(ctx); err != nil {
		return res, err
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
	since := cfg.serverNow()
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
	c.Written += o.Written
}

func (r *Result) add(o *Result) {
	r.Counts.add(o.Counts)
	r.Batches += o.Batches
	r.ReplayedByDuplicate += o.ReplayedByDuplicate
	r.TargetDeadLettered += o.TargetDeadLettered
	r.LeasesHeld += o.LeasesHeld
	r.LeasesLost += o.LeasesLost
	for _, p := range o.Problems {
		if len(r.Problems) < maxProblems {
			r.Problems = append(r.Problems, p)
		}
	}
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
