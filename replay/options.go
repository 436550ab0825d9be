package replay

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/writeguard/writeguard/dlq"
	"github.com/writeguard/writeguard/envelope"
)

// DefaultBatchSize is how many envelopes Run reads and writes per batch.
const DefaultBatchSize = 500

// MaxBatchSize bounds WithBatchSize (the server's maxWriteBatchSize).
const MaxBatchSize = 100000

// DefaultLease is how long a runner holds the envelopes it claimed before
// another runner may take them (WithLease): 5 minutes.
const DefaultLease = 5 * time.Minute

// MinLease bounds WithLease from below: 100 ms.
const MinLease = 100 * time.Millisecond

// MaxWorkers bounds WithWorkers.
const MaxWorkers = 64

// DefaultQuarantineAfter is how many failed replays of one envelope make
// it quarantined (WithQuarantineAfter): 5.
const DefaultQuarantineAfter = 5

// LeaseCollectionSuffix is appended to the dead-letter collection's name
// to name the collection holding the leases, unless WithLeaseCollection
// names another: "dlq" → "dlq_leases".
const LeaseCollectionSuffix = "_leases"

// maxProblems bounds Result.Problems.
const maxProblems = 100

// Option configures Run. Options are applied in order, then checked
// together: Run returns every bad value at once (errors.Join), and a nil
// Option is an error.
type Option interface {
	apply(*config)
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	batch     int
	rate      float64
	filter    dlq.Filter
	dryRun    bool
	validator any
	progress  func(Progress)
	redacted  bool
	withheld  WithheldFunc
	workers   int
	lease     time.Duration
	leaseSet  bool // WithLease was given
	leases    *mongo.Collection
	// clock is the server's clock (set by Run and Discard); nil: now.
	clock *serverClock
	owner string
	run   string
	errs  []error
	now   func() time.Time

	into              []string
	ops               Operations
	multi             bool
	quarantineAfter   int
	includeQuarantine bool
	includeHeld       bool
	// targetRefused says why the target's namespace is refused (set by
	// Run): every envelope is then refused.
	targetRefused string
}

// allowed reports whether ns is named by WithInto (or, without it, is the
// target's namespace, which Run puts in into).
func (c *config) allowed(ns string) bool {
	for _, n := range c.into {
		if n == ns {
			return true
		}
	}
	return false
}

// serverNow is the time a runner writes in and compares with the lease
// collection and records in the DLQ: the server's (serverClock), in UTC
// to the millisecond.
func (c *config) serverNow() time.Time {
	if c.clock != nil {
		return c.clock.now()
	}
	return c.now().UTC().Truncate(time.Millisecond)
}

// startClock reads the server's clock through the lease collection's
// database, and fails when it is off from this host's by more than the
// lease (ErrClockSkew).
func (c *config) startClock(ctx context.Context) error {
	c.clock = &serverClock{local: c.now, db: c.leases.Database(), lease: c.lease}
	return c.clock.sync(ctx)
}

func newConfig(opts []Option) *config {
	c := &config{batch: DefaultBatchSize, workers: 1, lease: DefaultLease, now: time.Now,
		ops: DefaultOperations, quarantineAfter: DefaultQuarantineAfter}
	for i, o := range opts {
		if o == nil {
			c.errs = append(c.errs, fmt.Errorf("replay: option %d is nil", i))
			continue
		}
		o.apply(c)
	}
	if c.validator != nil && !c.dryRun {
		c.errs = append(c.errs, errors.New("replay: WithValidator needs WithDryRun"))
	}
	return c
}

// WithBatchSize sets how many envelopes each batch reads and writes
// (default DefaultBatchSize, at most MaxBatchSize). Each batch costs a
// find of candidate _ids on the DLQ, a find and an insert on the lease
// collection, a find of the claimed envelopes, one bulk write on the
// target, one bulk update on the DLQ and one delete of the leases, and
// holds its envelopes in memory: lower it when originals are large (an
// envelope can approach 16 MiB).
func WithBatchSize(n int) Option {
	return optionFunc(func(c *config) {
		if n < 1 || n > MaxBatchSize {
			c.errs = append(c.errs, fmt.Errorf("replay: WithBatchSize(%d): want 1..%d", n, MaxBatchSize))
			return
		}
		c.batch = n
	})
}

// WithRate limits the replay to docsPerSecond envelopes per second on
// average (0: no limit, the default), per worker: it counts envelopes,
// not documents (an envelope of multiplicity n writes n copies, see
// Counts.Written). Batches are then at most docsPerSecond envelopes (at
// least 1) and are spaced so that the count of envelopes sent never runs
// ahead of the rate by more than one batch.
func WithRate(docsPerSecond float64) Option {
	return optionFunc(func(c *config) {
		if docsPerSecond < 0 || math.IsNaN(docsPerSecond) || math.IsInf(docsPerSecond, 0) {
			c.errs = append(c.errs, fmt.Errorf("replay: WithRate(%v): want a finite rate ≥ 0", docsPerSecond))
			return
		}
		c.rate = docsPerSecond
	})
}

// WithFilter selects the envelopes to replay (see dlq.Filter). An
// empty Statuses means pending only; an empty Namespaces means the
// target's namespace. Listing StatusReplayed replays envelopes again (the
// duplicate-key check then counts them replayed); StatusDiscarded
// envelopes are replayed only when listed.
func WithFilter(f dlq.Filter) Option {
	return optionFunc(func(c *config) { c.filter = f })
}

// WithDryRun makes Run evaluate the selected envelopes against the
// target's validator instead of writing them (see the package
// documentation): the Result has DryRun set and Matched, WouldPass,
// WouldFail and Undetermined filled; nothing is written anywhere.
func WithDryRun() Option {
	return optionFunc(func(c *config) { c.dryRun = true })
}

// WithValidator makes a dry run evaluate validator (a query document such
// as bson.D{{"$jsonSchema", ...}}, as bson.D, bson.M or bson.Raw) instead
// of the target's current one: to try a widened schema before applying
// it. It needs WithDryRun; nil is an error.
func WithValidator(validator any) Option {
	return optionFunc(func(c *config) {
		if validator == nil {
			c.errs = append(c.errs, errors.New("replay: WithValidator(nil): want a validator document"))
			return
		}
		c.validator = validator
	})
}

// WithProgress calls fn after each batch with the counts so far (summed
// over the workers). Calls are serialized; fn should return quickly.
func WithProgress(fn func(Progress)) Option {
	return optionFunc(func(c *config) { c.progress = fn })
}

// WithRedacted makes Run replay envelopes whose original a sink's
// redaction hook changed (original_redacted): the target then receives
// the redacted document. Without it they are skipped.
func WithRedacted() Option {
	return optionFunc(func(c *config) { c.redacted = true })
}

// WithWorkers runs n runners in parallel in this Run (1..MaxWorkers,
// default 1). They share the run's identity (WithRunID), so each envelope
// is tried by one of them only; each claims its batches with leases as
// separate processes do (see the package documentation).
func WithWorkers(n int) Option {
	return optionFunc(func(c *config) {
		if n < 1 || n > MaxWorkers {
			c.errs = append(c.errs, fmt.Errorf("replay: WithWorkers(%d): want 1..%d", n, MaxWorkers))
			return
		}
		c.workers = n
	})
}

// WithLease sets how long a claim lasts without renewal (default
// DefaultLease, at least MinLease; for Discard, DefaultDiscardLease). A
// runner renews its leases every third of it while it works on their
// envelopes, so a runner that stops (killed, paused, cut off from the
// DLQ) blocks them for at most this long before another may take them
// over. A runner that lost its claim that way sends no update, replace or
// delete of it (see the package documentation, Fencing); an insert it
// sends meets its own _id and is recognised. Lease times are the
// server's (hello's localTime): a host whose clock is off by more than
// the lease is refused (ErrClockSkew).
func WithLease(d time.Duration) Option {
	return optionFunc(func(c *config) {
		if d < MinLease {
			c.errs = append(c.errs, fmt.Errorf("replay: WithLease(%v): want at least %v", d, MinLease))
			return
		}
		c.lease, c.leaseSet = d, true
	})
}

// WithLeaseCollection stores the leases in coll instead of the dead-letter
// collection's name plus LeaseCollectionSuffix, in its database. Every
// runner draining one DLQ must use the same lease collection. nil is an
// error.
func WithLeaseCollection(coll *mongo.Collection) Option {
	return optionFunc(func(c *config) {
		if coll == nil {
			c.errs = append(c.errs, errors.New("replay: WithLeaseCollection(nil): want a collection"))
			return
		}
		c.leases = coll
	})
}

// WithOwner names the runner in its leases (default: a random name; with
// WithWorkers, the name plus "/<worker number>"). Operators read it in the
// lease collection; it must differ between runners. An empty name is an
// error.
func WithOwner(name string) Option {
	return optionFunc(func(c *config) {
		if name == "" {
			c.errs = append(c.errs, errors.New("replay: WithOwner(\"\"): want a name"))
			return
		}
		c.owner = name
	})
}

// WithRunID sets the identity of the replay run (default: a random one per
// Run). Each envelope is tried once per run: the runners of one run skip
// the envelopes any of them already tried (replay_run), so an envelope
// rejected again is not retried by a second runner. Processes draining
// one backlog together pass the same id; a later run, to retry the
// envelopes left pending, uses a new one. An empty id is an error.
func WithRunID(id string) Option {
	return optionFunc(func(c *config) {
		if id == "" {
			c.errs = append(c.errs, errors.New("replay: WithRunID(\"\"): want an id"))
			return
		}
		c.run = id
	})
}

// WithInto names the namespaces ("<database>.<collection>") the replay
// may write into; without it, the target's own namespace only (the one
// the guarded collection was built with). Run writes into its target
// only: the target's namespace must be named, and so must each
// envelope's (an envelope of another namespace is replayed into the
// target only when both are named: a renamed collection, say). Whatever
// is named, replay refuses the admin, local and config databases, system
// collections ("system.*"), the dead-letter collection, its side
// collections ("<dlq>_*") and the lease collection. An envelope refused
// stays pending, its reason recorded (replay_reason) and counted
// (Result.Refused, Problems). An empty name is an error.
//
// Why: an envelope's namespace and original are data that anyone with
// write access to the DLQ can forge (see the package documentation).
func WithInto(namespaces ...string) Option {
	return optionFunc(func(c *config) {
		for _, ns := range namespaces {
			if ns == "" {
				c.errs = append(c.errs, errors.New("replay: WithInto(\"\"): want <database>.<collection>"))
				return
			}
		}
		c.into = append(c.into, namespaces...)
	})
}

// WithOperations sets which kinds of write the replay may run (default
// DefaultOperations: inserts only). Updates, replaces and deletes replay
// the models of bulkWrite envelopes; those of them that may change
// several documents need WithMultiDocument too. An envelope whose kind is
// not allowed is refused (pending, reason recorded, counted). An empty
// set is an error.
func WithOperations(ops Operations) Option {
	return optionFunc(func(c *config) {
		if ops == 0 || ops&^(Inserts|Updates|Replaces|Deletes) != 0 {
			c.errs = append(c.errs, fmt.Errorf("replay: WithOperations(%d): want a non-empty set of Inserts, Updates, Replaces, Deletes", ops))
			return
		}
		c.ops = ops
	})
}

// WithMultiDocument lets the replay run updateMany and deleteMany models,
// and update, replace and delete models whose filter has no _id
// condition (a top-level _id equal to a value, {$eq: v} or {$in: [...]}):
// writes that may change any number of documents, e.g. a forged
// {op: "deleteMany", filter: {}}. Without it they are refused.
func WithMultiDocument() Option {
	return optionFunc(func(c *config) { c.multi = true })
}

// WithQuarantineAfter sets how many failed replays (replay_failures:
// rejected again, a conflict, an error of the target for that envelope)
// make an envelope quarantined (default DefaultQuarantineAfter; 0: never).
// A quarantined envelope is skipped unless WithIncludeQuarantined. A
// negative n is an error.
func WithQuarantineAfter(n int) Option {
	return optionFunc(func(c *config) {
		if n < 0 {
			c.errs = append(c.errs, fmt.Errorf("replay: WithQuarantineAfter(%d): want ≥ 0 (0: never)", n))
			return
		}
		c.quarantineAfter = n
	})
}

// WithIncludeQuarantined makes the replay try quarantined envelopes too
// (status quarantined), deliberately: one written becomes replayed, one
// failing again stays quarantined with one more failure.
func WithIncludeQuarantined() Option {
	return optionFunc(func(c *config) { c.includeQuarantine = true })
}

// WithIncludeHeld makes the replay run the envelopes it holds for an
// operator (replay_hold: an update, replace or delete in flight when its
// runner died, which may or may not have been applied). Use it after
// checking the target: the write may be applied a second time.
func WithIncludeHeld() Option {
	return optionFunc(func(c *config) { c.includeHeld = true })
}

// WithheldFunc returns the complete original of an envelope whose fields
// were withheld (envelope.Envelope.Withheld: the server refused them for
// not being encrypted), e.g. by reading the document again from its
// source and encrypting it. The document must hold every withheld path
// (for a model, in the model document); otherwise, or on an error, the
// envelope is skipped, with the reason in Result.Problems.
type WithheldFunc func(ctx context.Context, env envelope.Envelope) (bson.Raw, error)

// WithWithheldValues lets Run replay envelopes with withheld fields,
// taking their complete original from f. Without it such envelopes are
// skipped: a replay never writes a document with a field silently missing.
func WithWithheldValues(f WithheldFunc) Option {
	return optionFunc(func(c *config) {
		if f == nil {
			c.errs = append(c.errs, errors.New("replay: WithWithheldValues(nil)"))
			return
		}
		c.withheld = f
	})
}
