package writeguard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"reflect"
	"slices"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/writeguard/writeguard/envelope"
	"github.com/writeguard/writeguard/hooks"
	"github.com/writeguard/writeguard/internal/engine"
	"github.com/writeguard/writeguard/policy"
)

// Option configures a guarded collection. Options are applied in order by
// Wrap and New, then validated once; a bad value makes Wrap return an
// error naming it.
type Option interface {
	apply(*config)
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	classifiers       []policy.Classifier
	table             policy.Classifier
	backoff           policy.Backoff
	budget            *policy.Budget
	sink              envelope.Sink
	fallback          envelope.Sink
	deadLetterGrace   time.Duration // WithDeadLetterGrace
	conflict          ConflictHandler
	hooks             []hooks.Hooks
	logger            *slog.Logger
	clock             engine.Clock // nil: the wall clock
	throttledAttempts int
	upsertRetries     int
	allowUnacked      bool
	breaker           *breaker             // WithDeadLetterBreaker; nil: off
	uniqueID          *bool                // declared by WithUniqueID; nil: learned from the target
	registry          *bson.Registry       // WithRegistry; nil: the default
	bsonOpts          *options.BSONOptions // WithBSONOptions; nil: none
	noDriverRetries   bool                 // WithDriverRetryWrites(false)
	verdictCodes      []int32              // WithVerdictCodes
	limit             *AdaptiveLimit       // WithAdaptiveLimit; nil: DefaultAdaptiveLimit; Max 0: off (limit.go)
	errs              []error
}

func newConfig(opts []Option) (*config, error) {
	c := &config{
		table:             policy.Default(),
		backoff:           policy.DefaultBackoff(),
		budget:            policy.DefaultBudget(),
		conflict:          ConflictFail(),
		throttledAttempts: DefaultThrottledAttempts,
		upsertRetries:     DefaultUpsertConflictRetries,
		deadLetterGrace:   DefaultDeadLetterGrace,
	}
	for _, o := range opts {
		if o == nil {
			return nil, errors.New("writeguard: nil Option")
		}
		o.apply(c)
	}
	if err := c.backoff.Validate(); err != nil {
		c.errs = append(c.errs, err)
	}
	c.backoff = c.backoff.WithDefaults()
	if c.throttledAttempts < 1 {
		c.errs = append(c.errs, fmt.Errorf("writeguard: WithThrottledAttempts must be ≥ 1, got %d", c.throttledAttempts))
	}
	if c.upsertRetries < 0 {
		c.errs = append(c.errs, fmt.Errorf("writeguard: WithUpsertConflictRetries must be ≥ 0, got %d", c.upsertRetries))
	}
	if c.fallback != nil && c.sink == nil {
		c.errs = append(c.errs, errors.New("writeguard: WithFallbackDeadLetter needs WithDeadLetter"))
	}
	if len(c.errs) > 0 {
		return nil, errors.Join(c.errs...)
	}
	return c, nil
}

func (c *config) classifier() policy.Classifier {
	return policy.Chain(append(append([]policy.Classifier{}, c.classifiers...), c.table)...)
}

// Defaults of the options below.
const (
	// DefaultThrottledAttempts bounds writeguard's own attempts for a
	// Throttled failure. The driver already retries retryable overload
	// errors inside each attempt (maxAdaptiveRetries, default 2, when
	// retryWrites is on), so the server sees at most
	// (1+maxAdaptiveRetries)·2 = 6 commands for one overloaded write
	// instead of a product of two full retry loops.
	DefaultThrottledAttempts = 2
	// DefaultUpsertConflictRetries is how many times an upsert that lost
	// a race on a unique index (11000) is run again, unchanged, before it
	// goes to the conflict handler.
	DefaultUpsertConflictRetries = 2
)

// WithClassifier puts c before the default classifier table. Several calls
// add several classifiers, asked in the order given; the first answer that
// is not policy.Unknown wins, and the default table answers last. nil is
// an error.
func WithClassifier(c policy.Classifier) Option {
	return optionFunc(func(cfg *config) {
		if isNil(c) {
			cfg.errs = append(cfg.errs, errors.New("writeguard: WithClassifier(nil)"))
			return
		}
		cfg.classifiers = append(cfg.classifiers, c)
	})
}

// WithTable replaces the default classifier table (policy.Default()), for
// example with policy.CosmosDB(). Classifiers added with WithClassifier
// still run first.
func WithTable(t *policy.Table) Option {
	return optionFunc(func(cfg *config) {
		if t == nil {
			cfg.errs = append(cfg.errs, errors.New("writeguard: WithTable(nil)"))
			return
		}
		cfg.table = t
	})
}

// WithBackoff sets the retry schedule. Zero fields take their defaults
// (policy.DefaultBackoff: base 100 ms, cap 10 s, multiplier 2, 5 attempts,
// 30 s elapsed); out-of-range fields make Wrap fail.
func WithBackoff(b policy.Backoff) Option {
	return optionFunc(func(cfg *config) { cfg.backoff = b })
}

// WithBudget sets the retry budget shared by every call of this guarded
// collection; pass the same *policy.Budget to several guarded collections
// to share it further. nil disables the budget. Default:
// policy.DefaultBudget() (100 tokens, 0.1 refunded per success).
func WithBudget(b *policy.Budget) Option {
	return optionFunc(func(cfg *config) { cfg.budget = b })
}

// WithDeadLetter sets the sink that receives Invalid documents (121
// DocumentValidationFailure and the other codes of
// policy.DefaultInvalidCodes). Without a sink, Invalid documents end
// "failed". A failing Put is retried with the write backoff; if it still
// fails the documents end "dead_letter_failed" and stay in the Report.
func WithDeadLetter(s envelope.Sink) Option {
	return optionFunc(func(cfg *config) {
		if isNil(s) {
			cfg.errs = append(cfg.errs, errors.New("writeguard: WithDeadLetter(nil)"))
			return
		}
		cfg.sink = s
	})
}

// WithFallbackDeadLetter sets a second sink (a local file, say) that
// receives the envelopes the main sink could not store. Envelopes it
// stores end "dead_lettered".
func WithFallbackDeadLetter(s envelope.Sink) Option {
	return optionFunc(func(cfg *config) {
		if isNil(s) {
			cfg.errs = append(cfg.errs, errors.New("writeguard: WithFallbackDeadLetter(nil)"))
			return
		}
		cfg.fallback = s
	})
}

// WithConflictHandler sets what happens to a duplicate key (11000). The
// default is ConflictFail: the caller gets the duplicate-key error.
func WithConflictHandler(h ConflictHandler) Option {
	return optionFunc(func(cfg *config) {
		if isNil(h) {
			cfg.errs = append(cfg.errs, errors.New("writeguard: WithConflictHandler(nil)"))
			return
		}
		cfg.conflict = h
	})
}

// WithHooks adds lifecycle hooks. Several calls add several sets, called in
// order (see hooks.Compose). A hook that panics cannot break a call: the
// panic is recovered, and the call ends with its *Report carrying a
// *PanicError ("hook <Name>").
func WithHooks(h hooks.Hooks) Option {
	return optionFunc(func(cfg *config) { cfg.hooks = append(cfg.hooks, h) })
}

// WithLogger sets the logger for what must not pass silently: unknown
// error codes (Warn, at most once a minute per code), an exhausted
// retry budget (Warn, at most once a minute) and the dead-letter flood
// breaker opening (Warn) and closing (Info; WithDeadLetterBreaker).
// Default, and nil: no logging.
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(cfg *config) { cfg.logger = l })
}

// WithClock sets the time source of the call: backoff waits, attempt and
// call durations, the elapsed-time limit, envelope timestamps. Default:
// the wall clock. A nil c makes Wrap and New return an error.
//
// A test that makes no network I/O may instead run in a testing/synctest
// bubble, whose fake clock moves the wall clock, the backoff waits and
// the context's deadlines together. A test that talks to a server over the
// network (a real MongoDB, an embedded one, a fault proxy) cannot: a
// goroutine blocked reading a socket is never durably blocked, so the
// bubble's clock does not move while the driver waits on its connections.
// Such a test gives the loop a Clock (mocks.Clock, whose backoff waits
// pass at once and are recorded). A Clock does not move a context's
// deadline.
func WithClock(c policy.Clock) Option {
	return optionFunc(func(cfg *config) {
		if isNil(c) {
			cfg.errs = append(cfg.errs, errors.New("writeguard: WithClock(nil)"))
			return
		}
		cfg.clock = c
	})
}

// WithThrottledAttempts bounds writeguard's attempts for Throttled failures
// (n ≥ 1; default DefaultThrottledAttempts). The wait before each retry is
// the server's delay (RetryAfterMs, baseBackoffMS) or the backoff,
// whichever is longer.
func WithThrottledAttempts(n int) Option {
	return optionFunc(func(cfg *config) { cfg.throttledAttempts = n })
}

// WithUpsertConflictRetries sets how many times an upsert model that hit a
// duplicate key is run again before the conflict handler sees it (n ≥ 0;
// default DefaultUpsertConflictRetries). Two upserts with the same filter
// can both miss and both insert (SERVER-14322); run again, the loser
// matches and updates.
func WithUpsertConflictRetries(n int) Option {
	return optionFunc(func(cfg *config) { cfg.upsertRetries = n })
}

// WithUnacknowledged accepts a collection whose write concern is
// unacknowledged (w: 0). The server then reports nothing: every document
// sent ends "unacknowledged" (MaybeWritten: sent, outcome unknown),
// nothing is classified, dead-lettered or resolved. Without this option
// such a write (the collection's write concern, or a clone's) is sent all
// the same, and returns a *Report wrapping ErrUnacknowledged whose
// documents are "unacknowledged" with MaybeWritten: a handled error
// (Handled is true; Remaining re-sends nothing), since a re-send could
// store a copy. With a dead-letter sink (WithDeadLetter) the sink still
// receives what is refused before sending (a document that fails to
// encode, one over 16 MiB) and every failure of acknowledged writes: the
// two options combine.
func WithUnacknowledged() Option {
	return optionFunc(func(cfg *config) { cfg.allowUnacked = true })
}

// WithRegistry sets the BSON registry writeguard encodes inserted
// documents with: give the one the collection was configured with
// (options.Client().SetRegistry, options.Collection().SetRegistry, or the
// database's). writeguard encodes each inserted document itself, once,
// before its first attempt (it needs the document's bytes and _id to
// resolve an ambiguous attempt, compare a duplicate key with its own
// write and dead-letter it), and the driver sends those bytes as they are;
// *mongo.Collection does not expose its registry, so without this option
// a custom registry of the collection is not applied to inserted
// documents (updates, replaces and deletes are encoded by the driver, with
// the collection's registry). The dead-letter envelope of an update,
// replace or delete encodes its filter, update and replacement with it
// too, so that a replay sends what the first attempt sent. Default, and
// nil: bson's default registry, as bson.Marshal and an unconfigured
// collection use.
func WithRegistry(reg *bson.Registry) Option {
	return optionFunc(func(cfg *config) { cfg.registry = reg })
}

// WithBSONOptions sets the encoding options writeguard encodes inserted
// documents with (OmitEmpty, UseJSONStructTags, NilSliceAsEmpty, ...; the
// decoding options have no effect here): give the ones the collection was
// configured with (options.Client().SetBSONOptions, or the collection's),
// for the reason WithRegistry gives. The options are applied as the driver
// applies them to the encoder of a collection (mongo/mongo.go
// getEncoder). Default, and nil: none.
func WithBSONOptions(opts *options.BSONOptions) Option {
	return optionFunc(func(cfg *config) { cfg.bsonOpts = opts })
}

// WithUniqueID declares whether _id is unique where the documents land:
// false for a time-series collection (no unique indexes: MongoDB manual,
// time-series limitations; SERVER-99329). Where it is not, an insert that
// may have been applied (a lost reply, an interruption) is never re-sent,
// since a second copy would be stored rather than refused: it is read back
// from the primary, and ends already_written when found, unknown with
// MaybeWritten otherwise (the lost write may still land).
//
// Default: learned once per Guarded, when an insert first may have been
// applied: a *mongo.Collection asks the server (listCollections: type
// "timeseries" means not unique), a Target that implements UniqueIDTarget
// is asked, any other Target is taken as unique. A failed ask is not cached:
// it is asked again with the write backoff, as a read-back is (up to 3
// failures, a cleared connection pool not counted, within MaxElapsed);
// if the server still cannot be asked, _id counts as not unique for that
// call: no insert is re-sent on a guess.
//
// On a sharded collection whose shard key is not _id, _id is unique per
// shard only; a re-sent insert is the same document with the same shard
// key, so it goes to the shard that holds the first copy and is refused
// there: true (the default) holds, unless the shard key value itself
// changes between attempts, which writeguard never does.
func WithUniqueID(unique bool) Option {
	return optionFunc(func(cfg *config) { cfg.uniqueID = &unique })
}

// isNil reports whether v is nil or an interface holding a nil pointer,
// map, func or slice (a typed nil that would panic when called).
func isNil(v any) bool {
	if v == nil {
		return true
	}
	switch rv := reflect.ValueOf(v); rv.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Func, reflect.Slice, reflect.Interface, reflect.Chan:
		return rv.IsNil()
	}
	return false
}

type ctxKey int

const idempotentKey ctxKey = 1

// WithIdempotent returns a context that marks every update, replace and
// delete of the guarded calls made with it (the models of BulkWrite, and
// UpdateOne, UpdateByID, UpdateMany, ReplaceOne, DeleteOne, DeleteMany and
// the FindOneAnd* methods) as safe to re-send after an ambiguous failure
// (a lost reply, a timeout, a retryable write concern error): for example
// $set of fixed values, or a replace by _id (see "Which writes are
// idempotent" in the package documentation). Without it, such a write ends "unknown" (or
// "written_unconfirmed" after a write concern error) instead of being
// re-sent, because re-sending an $inc applies it twice. IdempotentModels
// marks some models of a call only. Insert models never need it:
// writeguard assigns each one its _id before its first attempt.
func WithIdempotent(ctx context.Context) context.Context {
	if ctx == nil {
		ctx = context.Background() // as the guarded methods take a nil ctx
	}
	return context.WithValue(ctx, idempotentKey, true)
}

func idempotent(ctx context.Context) bool {
	v, _ := ctx.Value(idempotentKey).(bool)
	return v
}

// DefaultDeadLetterGrace is WithDeadLetterGrace's default.
const DefaultDeadLetterGrace = 5 * time.Second

// WithDeadLetterGrace sets how long the dead-letter Puts of a call may go
// on after the call's context ended (its deadline passed or it was
// cancelled): d ≥ 0, default DefaultDeadLetterGrace (5 s). The gathered
// Puts (to the sink and the fallback sink, with their retries) run on a
// context that keeps ctx's values but not its cancellation, and that ends
// d after ctx ends, so a call whose writes were done in time also stores
// the envelopes of its invalid documents rather than ending them
// dead_letter_failed at once. A call can therefore return up to d (plus
// the Put's own latency to notice) after its deadline. 0 ends the Puts
// with the caller's context. A negative d makes New and Wrap fail with
// an error naming it.
func WithDeadLetterGrace(d time.Duration) Option {
	return optionFunc(func(cfg *config) {
		if d < 0 {
			cfg.errs = append(cfg.errs, fmt.Errorf("writeguard: WithDeadLetterGrace(%v): want ≥ 0", d))
			return
		}
		cfg.deadLetterGrace = d
	})
}

// WithDriverRetryWrites declares whether the client of the guarded
// collection retries writes itself (the driver's retryWrites, on by
// default; options.Client().SetRetryWrites, or retryWrites=false in the
// URI). writeguard cannot read the client's setting, so it assumes the
// driver's default: one driver call of a retryable write (InsertOne,
// InsertMany, UpdateOne, ReplaceOne, DeleteOne, FindOneAnd*, a BulkWrite
// command without multi statements) may be several attempts, and an
// error that says "not sent" or "nothing written" (a deadline or
// cancellation before the send, a cleared pool at checkout, an overload
// reply labelled NoWritesPerformed) describes only the last of them: an
// earlier one may have been applied (policy.ReplyShape.Hidden, with the
// driver lines). Declare false only when the client's retryable writes are
// off: then such an error proves the write not sent, and writeguard may
// send it again. A false declaration on a client that does retry makes a
// non-idempotent update that an earlier driver attempt applied be sent
// again. Install the command monitor (Monitor) to read each attempt from
// the wire instead.
func WithDriverRetryWrites(on bool) Option {
	return optionFunc(func(c *config) { c.noDriverRetries = !on })
}

// WithVerdictCodes declares write-error codes that prove their statement
// not applied on this Guarded's deployment, beside policy.VerdictCodes
// (which do everywhere): a code your server raises per statement before it
// writes anything (a proxy's or a compatible server's own refusal, say).
// On a mongod (standalone or replica set, learned from the hello reply)
// every write-error code but policy.NeverVerdictCodes is a verdict
// already; these matter through mongos, or where the deployment cannot be
// learned. A write error on a multi statement (UpdateMany, DeleteMany) is
// never a verdict, whatever its code (it may have changed documents before
// the one refused). New and Wrap return an error naming the first code of
// policy.NeverVerdictCodes (network, interruption, stepdown and shutdown
// codes, 217, 72), which cannot be proofs, and any code below 1 (not a server code). It replaces the package
// variable policy.WriteErrorVerdictCodes: a declaration per Guarded.
func WithVerdictCodes(codes ...int) Option {
	return optionFunc(func(c *config) {
		never := policy.NeverVerdictCodes()
		for _, code := range codes {
			if code < 1 || code > math.MaxInt32 {
				c.errs = append(c.errs, fmt.Errorf("writeguard: WithVerdictCodes(%d): not a server error code (want 1..%d)", code, math.MaxInt32))
				continue
			}
			if slices.Contains(never, int32(code)) {
				c.errs = append(c.errs, fmt.Errorf("writeguard: WithVerdictCodes(%d): that code cannot prove a statement not applied "+
					"(a network, interruption, stepdown or shutdown code, 217 or 72: policy.NeverVerdictCodes)", code))
				continue
			}
			c.verdictCodes = append(c.verdictCodes, int32(code))
		}
	})
}

// WithAdaptiveLimit sets the adaptive limit on the driver calls in flight
// to the collection, shared by the calls of the Guarded (see
// AdaptiveLimit; the default is DefaultAdaptiveLimit). Values below 1 take
// the default's; Initial is kept within [Min, Max].
func WithAdaptiveLimit(l AdaptiveLimit) Option {
	return optionFunc(func(c *config) {
		d := DefaultAdaptiveLimit()
		if l.Max < 1 {
			l.Max = d.Max
		}
		if l.Min < 1 {
			l.Min = d.Min
		}
		if l.Initial < 1 {
			l.Initial = l.Max
		}
		c.limit = &l
	})
}

// WithoutAdaptiveLimit turns the adaptive limit off: every call sends
// when it is ready, whatever the server's overload or failover replies,
// as before the limit existed.
func WithoutAdaptiveLimit() Option {
	return optionFunc(func(c *config) { c.limit = &AdaptiveLimit{} })
}
