package engine

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/writeguard/writeguard/envelope"
	"github.com/writeguard/writeguard/hooks"
	"github.com/writeguard/writeguard/internal/loglimit"
	"github.com/writeguard/writeguard/internal/readback"
	"github.com/writeguard/writeguard/policy"
)

// Reader reads stored documents back (a *mongo.Collection, a test
// double): the read-back of a possibly applied insert.
type Reader interface {
	Find(ctx context.Context, filter any, opts ...options.Lister[options.FindOptions]) (*mongo.Cursor, error)
}

// Resolver hands one duplicate key to the caller's conflict handler:
// operation and index name the input, doc is the document as sent (nil for
// a model that has none), model the caller's write model (nil outside
// BulkWrite), f the duplicate-key failure. It returns the handler's
// disposition and error; the engine recovers a panic and checks the
// disposition.
type Resolver func(ctx context.Context, operation string, index int, doc bson.Raw, model mongo.WriteModel, f policy.Failure) (policy.Disposition, error)

// Config is what one guarded collection gives its engine: validated,
// defaults applied (the root's options). Every field is required except
// Sink, Fallback and Budget (nil: none), Logger (nil: no logging) and
// those whose nil meaning their doc states.
type Config struct {
	Namespace      string // "<database>.<collection>"
	Database       string
	Collection     string
	Classifier     policy.Classifier
	Backoff        policy.Backoff // with defaults applied
	Budget         *policy.Budget
	Sink, Fallback envelope.Sink
	// DeadLetterGrace is how long a gathered dead-letter Put may go on
	// after the call's context ended (graceContext, deadletter.go); 0:
	// the Put ends with the call's context.
	DeadLetterGrace   time.Duration
	Resolve           Resolver
	Hooks             hooks.Hooks // composed (hooks.Compose): every func set
	Observed          bool        // hooks were given: build per-document events
	Logger            *slog.Logger
	Clock             Clock // nil: the wall clock
	ThrottledAttempts int
	UpsertRetries     int
	AllowUnacked      bool
	Reader            Reader
	// Limits returns the server's limits on one write command (its hello
	// reply), asked once per call of more than one statement; nil:
	// DefaultLimits.
	Limits func(ctx context.Context) Limits
	// UniqueID says whether _id is unique where the documents land (false:
	// a time-series collection), asked when an insert may have been
	// applied; nil: unique. An error (the server could not be asked) is
	// asked again as a read-back is (retrySide); if it persists, _id
	// counts as not unique for the call.
	UniqueID func(ctx context.Context) (bool, error)
	// Deployment says what the collection's server is (DeploymentOf, its
	// hello reply); nil: DeploymentUnknown, read as carefully as can be
	// (the driver may retry, the server may be mongos).
	Deployment func(ctx context.Context) Deployment
	// NoDriverRetries: the caller declared its client's retryable writes
	// off (writeguard.WithDriverRetryWrites(false)): one driver call is
	// one attempt, and a driver error describes all of it (hidden.go).
	NoDriverRetries bool
	// VerdictCodes are the caller's own write-error codes that prove
	// their statement not applied through mongos too
	// (writeguard.WithVerdictCodes; never one of
	// policy.NeverVerdictCodes); nil: none.
	VerdictCodes []int32
	// Report turns a finished call that did not end all written into
	// the error the call returns (the root's *Report), reading what the
	// call proved through its Result.
	Report func(Result) error
	// Settled, when not nil, is told once per call (outside a
	// transaction), after every input has its disposition and before
	// Report, how many inputs the call settled and how many of them were
	// dead-lettered (the root's dead-letter flood breaker). A non-nil
	// error joins the call's Extra, and so its Report.
	Settled func(ctx context.Context, inputs, deadLettered int) error
	// Panicked builds the error of a recovered panic (panic.go): of user
	// code (what: "conflict handler", "dead-letter sink", "the document's
	// encoder") or raised while the Target ran ("target"), with the panic's
	// value and the stack of the goroutine that panicked
	// (runtime/debug.Stack). The root's builds a *writeguard.PanicError;
	// nil: an error naming what panicked and the value, without the stack.
	Panicked func(what string, value any, stack []byte) error
	// NewEncoder makes the encoder of inserted documents on w, configured
	// as the target collection's (driveropts.Encoder); nil: the default
	// registry and no options, as bson.Marshal encodes.
	NewEncoder func(w io.Writer) *bson.Encoder
	// Limit is the adaptive limit on the driver calls in flight to the
	// target, shared by the engine's calls (limit.go); nil: none.
	Limit *Limiter
}

// Engine runs the guarded calls of one collection. It is safe for
// concurrent use; its retry budget and log limiter are shared by its calls.
type Engine struct {
	cfg      Config
	observed bool
	hooks    hooks.Hooks
	logLimit *loglimit.Limiter
	health   atomic.Int64       // attempts of any call that the server executed (bisect.go)
	encoders *sync.Pool         // of *docEncoder (prepare.go)
	reads    readback.Coalescer // the calls' read-backs, gathered while one runs (readback.go)
	// wire: whether the command monitor was seen on this collection's
	// client (seen), or found absent (absent: attempts are no longer
	// tagged); monitor_reply.go noteWire.
	wire struct{ seen, absent atomic.Bool }
}

// New returns the engine of cfg.
func New(cfg Config) *Engine {
	if cfg.Clock == nil {
		cfg.Clock = realClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Panicked == nil {
		cfg.Panicked = panicMessage
	}
	e := &Engine{cfg: cfg, observed: cfg.Observed, logLimit: loglimit.New(time.Minute, cfg.Clock.Now), encoders: defaultEncoders}
	e.hooks = cfg.Hooks
	if cfg.Observed {
		e.hooks = e.guardHooks(cfg.Hooks) // a hook's panic cannot break a call (panic.go)
	}
	if cfg.NewEncoder != nil {
		e.encoders = encoderPool(cfg.NewEncoder)
	}
	return e
}

// Namespace returns "<database>.<collection>".
func (e *Engine) Namespace() string { return e.cfg.Namespace }

// ErrUnacknowledged is in the Result of a call whose write concern is
// unacknowledged (w: 0) when Config.AllowUnacked is false.
var ErrUnacknowledged = errors.New("writeguard: unacknowledged write concern (w: 0): nothing can be verified")

// ErrUnacked is what a Send returns, with the driver's result, when the
// driver reports the write unacknowledged (w: 0).
var ErrUnacked = errors.New("writeguard: unacknowledged write")

// InTransaction runs one attempt inside the caller's transaction: no
// routing, no retry, no dead-lettering; the driver's error goes back to
// the caller unchanged so that the transaction (the unit of retry) can be
// retried as a whole. Hooks see the operation and its single attempt.
func (e *Engine) InTransaction(ctx context.Context, opName string, n int, send func(context.Context) error) error {
	cfg := &e.cfg
	op := &hooks.Operation{Name: opName, Database: cfg.Database, Collection: cfg.Collection, BatchSize: n, Ordered: true, InTransaction: true}
	t0 := cfg.Clock.Now()
	var panics hookPanics
	ctx = e.hooks.OperationStarted(withPanics(ctx, &panics), op)
	actx := e.hooks.AttemptStarted(ctx, &hooks.AttemptStart{Op: op, Attempt: 1, Documents: n})
	a0 := cfg.Clock.Now()
	err := send(actx)
	end := &hooks.AttemptEnd{Op: op, Attempt: 1, Documents: n, Duration: cfg.Clock.Now().Sub(a0), Err: err}
	fails := policy.Extract(err)
	if len(fails) > 0 {
		end.Code, end.Class, end.Failures = fails[0].Code, cfg.Classifier.Classify(fails[0]), len(fails)
	}
	e.hooks.AttemptFinished(actx, end)
	e.hooks.OperationFinished(ctx, &hooks.OperationEnd{Op: op, Attempts: 1, Err: err, Code: end.Code, Class: end.Class,
		Duration: cfg.Clock.Now().Sub(t0)})
	if hp := panics.take(); len(hp) > 0 {
		// A hook panicked: its *PanicError joins the driver's error
		// (which errors.As still reaches); an error aborts the
		// transaction, which committed nothing.
		return errors.Join(append([]error{err}, hp...)...)
	}
	return err
}

// logUnknown logs an unclassified code at most once a minute per code.
func (e *Engine) logUnknown(ctx context.Context, f *policy.Failure, op string) {
	if !e.logLimit.Allow(int64(f.Code)) {
		return
	}
	e.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "writeguard: unclassified write error; not retried",
		slog.String("operation", op), slog.String("namespace", e.cfg.Namespace),
		slog.Int("code", int(f.Code)), slog.String("code_name", f.CodeName),
		slog.String("origin", f.Origin.String()))
}

// logBudget logs an exhausted retry budget at most once a minute.
func (e *Engine) logBudget(ctx context.Context, op string, docs int) {
	const budgetKey = 1 << 32 // outside the int32 range of codes
	if !e.logLimit.Allow(budgetKey) {
		return
	}
	e.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "writeguard: retry budget exhausted; retries refused",
		slog.String("operation", op), slog.String("namespace", e.cfg.Namespace), slog.Int("documents", docs))
}
