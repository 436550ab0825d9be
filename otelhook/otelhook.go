package otelhook

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"sort"
	"strconv"
	"strings"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/writeguard/writeguard/hooks"
	"github.com/writeguard/writeguard/internal/loglimit"
	"github.com/writeguard/writeguard/policy"
)

// ScopeName is the instrumentation scope name of the tracer and the meter
// otelhook uses.
const ScopeName = "github.com/writeguard/writeguard/otelhook"

// Version is the instrumentation scope version of the tracer and the
// meter otelhook uses.
const Version = "0.1.0"

// New returns hooks that record each guarded call as OpenTelemetry spans
// and metrics (see the package documentation for their names and
// attributes). Pass them to writeguard.WithHooks; one set of hooks may
// serve any number of guarded collections, concurrently.
//
// New fails only when the meter refuses to create an instrument; it then
// returns zero Hooks (which observe nothing) and the error.
func New(opts ...Option) (hooks.Hooks, error) {
	return newHooks(newConfig(opts...))
}

func newHooks(c *config) (hooks.Hooks, error) {
	h, err := newHandler(c)
	if err != nil {
		return hooks.Hooks{}, err
	}
	return hooks.Hooks{
		OperationStarted:   h.operationStarted,
		AttemptStarted:     h.attemptStarted,
		AttemptFinished:    h.attemptFinished,
		RetryScheduled:     h.retryScheduled,
		BudgetExhausted:    h.budgetExhausted,
		DeadLetterStarted:  h.deadLetterStarted,
		DeadLetterFinished: h.deadLetterFinished,
		Disposition:        h.disposition,
		OperationFinished:  h.operationFinished,
		LimitChanged:       h.limitChanged,
		TraceIDs:           traceIDs,
	}, nil
}

// handler holds the instruments; all per-call state travels in the
// contexts the hooks return.
type handler struct {
	tracer trace.Tracer
	kind   trace.SpanKind // of the operation span
	logger *slog.Logger
	server []attribute.KeyValue
	limit  *loglimit.Limiter
	replay bool // the hooks of a replay's writes (NewReplayHooks)

	// seen holds the calls (by seriesKey) whose zero series exist
	// (zeroSeries).
	seenMu sync.Mutex
	seen   map[seriesKey]struct{}

	duration     metric.Float64Histogram
	inputs       metric.Int64Counter
	attempts     metric.Int64Histogram
	inputTries   metric.Int64Histogram
	unclassified metric.Int64Counter
	budget       metric.Int64Counter
	retryDelay   metric.Float64Histogram
	flood        metric.Int64Counter
	wire         metric.Int64Counter // MetricWireCommands (instruments.go recordWire)
	limitGauge   metric.Int64Gauge
}

// Context keys of the per-call state. They hold the handler, so that two
// sets of otelhook hooks on one guarded collection (two tracer providers,
// say) keep their spans apart.
type (
	opKey         struct{ h *handler }
	attemptKey    struct{ h *handler }
	deadLetterKey struct{ h *handler }
)

// opState is the state of one guarded call, carried in the context
// OperationStarted returns. The write path runs a call's hooks one after
// another on one goroutine; mu only guards against hooks that do not.
type opState struct {
	span  trace.Span
	name  string               // the operation span's name (spanName)
	attrs []attribute.KeyValue // metric attributes of the call

	mu    sync.Mutex
	disp  map[dispKey]int64 // dispositions seen, recorded at the end
	tries map[int]int64     // inputs per number of attempts, recorded at the end
}

// step is an attempt or a dead-letter hand-off: its span and the call it
// belongs to.
type step struct {
	op   *opState
	span trace.Span
}

// dispKey is the attribute set of one writeguard.call.inputs point.
type dispKey struct {
	disp    policy.Disposition
	class   policy.Class
	code    int32
	failure bool // class and code are those of a failure
}

func (h *handler) opFrom(ctx context.Context) *opState {
	st, _ := ctx.Value(opKey{h}).(*opState)
	return st
}

// stepFrom returns the step stored under key when it belongs to the call
// of ctx (a guarded call made inside an attempt's or a sink's context has
// its own state, and must not end its caller's spans).
func (h *handler) stepFrom(ctx context.Context, key any) *step {
	s, _ := ctx.Value(key).(*step)
	if s == nil || s.op != h.opFrom(ctx) {
		return nil
	}
	return s
}

// spanName is "<method> <database>.<collection>" ("insertMany
// shop.orders"): the MongoDB drivers' OpenTelemetry specification's form
// ("Operation Span Name": the target as <db>.<collection>), with the
// guarded method the caller called in place of the driver operation's
// name, so that it never equals the name of a driver operation span
// nested under it (see the package documentation). Without a database it
// is "<method> <collection>", without either "<method>".
func spanName(op *hooks.Operation) string {
	target := op.Collection
	switch {
	case op.Database != "" && target != "":
		target = op.Database + "." + target
	case target == "":
		target = op.Database
	}
	if target == "" {
		return op.Name
	}
	return op.Name + " " + target
}

// operationName is db.operation.name: the server command the call sends
// (hooks.Operation.CommandName: insert, update, delete, findAndModify);
// for a batch (isBatch) of models that all send one command, that command
// prefixed by "BATCH " ("BATCH update"), and for a batch that mixes
// commands MongoDB's own term, "bulkWrite" (semantic conventions since
// 1.28, db.operation.name: "For batch operations, if the individual
// operations would all have the same db.operation.name when executed as
// non-batch operations, then that operation name SHOULD be used prepended
// by BATCH. Otherwise, db.operation.name SHOULD be BATCH or some other
// database system specific term").
func operationName(op *hooks.Operation) string {
	switch {
	case !isBatch(op):
		return op.CommandName()
	case op.Command != "":
		return "BATCH " + op.Command
	}
	return op.Name
}

// isBatch reports whether op is a batch in the database semantic
// conventions' sense (two or more operations in one call): a bulkWrite of
// two or more write models. An insertMany is one insert command with many
// documents, not a batch of operations.
func isBatch(op *hooks.Operation) bool {
	return op.Name == "bulkWrite" && op.BatchSize >= 2
}

// metricAttrs returns the attributes every metric of op carries.
func metricAttrs(op *hooks.Operation) []attribute.KeyValue {
	attrs := make([]attribute.KeyValue, 0, 5)
	attrs = append(attrs, keyDBSystemName.String(semconv.DBSystemNameMongoDB.Value.AsString()))
	if op.Database != "" {
		attrs = append(attrs, keyDBNamespace.String(op.Database))
	}
	if op.Collection != "" {
		attrs = append(attrs, keyDBCollectionName.String(op.Collection))
	}
	return append(attrs, keyDBOperationName.String(operationName(op)), keyMethod.String(op.Name))
}

// with returns a new slice holding base then extra (metric options may
// sort the slice they are given; base is never handed out).
func with(base []attribute.KeyValue, extra ...attribute.KeyValue) []attribute.KeyValue {
	out := make([]attribute.KeyValue, 0, len(base)+len(extra))
	return append(append(out, base...), extra...)
}

func (h *handler) callAttrs(ctx context.Context, op *hooks.Operation) []attribute.KeyValue {
	if st := h.opFrom(ctx); st != nil {
		return st.attrs
	}
	return metricAttrs(op)
}

// code returns db.response.status_code for a non-zero code.
func code(c int32) []attribute.KeyValue {
	if c == 0 {
		return nil
	}
	return []attribute.KeyValue{keyDBStatusCode.String(strconv.Itoa(int(c)))}
}

// errorType is the error.type of a failure: its code when it has one (as
// the semantic conventions ask), else its class when it has one, else
// _OTHER (hooks.ErrorType).
func errorType(c int32, class policy.Class) attribute.KeyValue {
	return keyErrorType.String(hooks.ErrorType(c, class))
}

// callErrorType is the error.type of a call that failed as a whole: what
// its error's ErrorType method says (a *writeguard.Report's: the code or
// class of its first unhandled input, or that input's disposition when it
// has no failure), else the code or class of OperationEnd.
func callErrorType(ev *hooks.OperationEnd) attribute.KeyValue {
	var r interface{ ErrorType() string }
	if errors.As(ev.Err, &r) {
		if et := r.ErrorType(); et != "" {
			return keyErrorType.String(et)
		}
	}
	return errorType(ev.Code, ev.Class)
}

// traceIDs returns the ids of the span in ctx (hooks.Hooks.TraceIDs), so
// that dead-letter envelopes name the trace of the write.
func traceIDs(ctx context.Context) (string, string) {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return "", ""
	}
	return sc.TraceID().String(), sc.SpanID().String()
}

func (h *handler) operationStarted(ctx context.Context, op *hooks.Operation) context.Context {
	name := spanName(op)
	attrs := make([]attribute.KeyValue, 0, 10)
	attrs = append(attrs, metricAttrs(op)...)
	attrs = append(attrs, keyDBOperationSummary.String(name))
	if isBatch(op) {
		attrs = append(attrs, keyDBBatchSize.Int(op.BatchSize))
	}
	attrs = append(attrs, h.server...)
	if op.InTransaction {
		attrs = append(attrs, keyInTransaction.Bool(true))
	}
	if h.replay {
		attrs = append(attrs, keyReplay.Bool(true))
	}
	ctx, span := h.tracer.Start(ctx, name, trace.WithSpanKind(h.kind), trace.WithAttributes(attrs...))
	st := &opState{span: span, name: name, attrs: metricAttrs(op)}
	h.zeroSeries(ctx, op, st.attrs)
	return context.WithValue(ctx, opKey{h}, st)
}

// seriesKey identifies the metric attributes of a call (metricAttrs).
type seriesKey struct {
	db, coll, method, command string
	batch                     bool
}

// zeroSeries creates, on the first call with attrs, the series of
// writeguard.dead_letter.flood at 0: its labels are known when a call
// starts, so a first flood after a scrape is an increase from 0 that
// Prometheus's increase() sees (deploy/prometheus/alerts.yml, "First
// occurrences"). The other counters carry a code or a disposition, known
// only when the event comes.
func (h *handler) zeroSeries(ctx context.Context, op *hooks.Operation, attrs []attribute.KeyValue) {
	if h.replay {
		return
	}
	k := seriesKey{op.Database, op.Collection, op.Name, op.Command, isBatch(op)}
	h.seenMu.Lock()
	_, ok := h.seen[k]
	if !ok {
		if h.seen == nil {
			h.seen = map[seriesKey]struct{}{}
		}
		h.seen[k] = struct{}{}
	}
	h.seenMu.Unlock()
	if !ok {
		h.flood.Add(context.WithoutCancel(ctx), 0, metric.WithAttributes(with(attrs)...))
	}
}

// stepName is the name of an attempt or dead-letter span: the operation
// span's name and suffix.
func stepName(st *opState, op *hooks.Operation, suffix string) string {
	if st != nil {
		return st.name + suffix
	}
	return spanName(op) + suffix
}

// startStep starts an attempt or dead-letter span as a child of the
// call's operation span, even when other hooks put a span of their own in
// ctx after it.
func (h *handler) startStep(ctx context.Context, st *opState, name string, attrs ...attribute.KeyValue) trace.Span {
	if st != nil {
		ctx = trace.ContextWithSpan(ctx, st.span)
	}
	_, span := h.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(attrs...))
	return span
}

func (h *handler) attemptStarted(ctx context.Context, ev *hooks.AttemptStart) context.Context {
	st := h.opFrom(ctx)
	span := h.startStep(ctx, st, stepName(st, ev.Op, suffixAttempt),
		keyAttempt.Int(ev.Attempt),
		keyDocuments.Int(ev.Documents),
		keyBackoff.Float64(ev.Delay.Seconds()),
	)
	return context.WithValue(trace.ContextWithSpan(ctx, span), attemptKey{h}, &step{op: st, span: span})
}

func (h *handler) attemptFinished(ctx context.Context, ev *hooks.AttemptEnd) {
	if ev.Op != nil && ev.Op.InTransaction && ev.Err != nil && ev.Class == policy.Unknown {
		// Inside a transaction nothing is routed, so no Disposition event
		// will tell: count the unclassified failure here.
		h.countUnclassified(ctx, ev.Op, ev.Code, "")
	}
	h.recordWire(ctx, ev)
	s := h.stepFrom(ctx, attemptKey{h})
	if s == nil {
		return // no matching AttemptStarted (another hook set's context)
	}
	if ev.Err != nil {
		s.span.SetAttributes(append(code(ev.Code),
			keyClass.String(ev.Class.String()),
			keyFailures.Int(ev.Failures))...)
		if verdict(ev.Class) {
			// A verdict on documents (121, 11000) comes in a reply the
			// server sent with ok: 1 (the driver's command span
			// succeeds), and writeguard routes those documents to the
			// dead-letter sink or the conflict handler: not an error of
			// the attempt. Whether they ended handled is the operation
			// span's status.
			s.span.End()
			return
		}
		s.span.SetAttributes(errorType(ev.Code, ev.Class))
		s.span.SetStatus(codes.Error, "attempt failed: "+failureText(ev.Code, ev.Class))
	}
	s.span.End()
}

// verdict reports whether class is a verdict on documents that writeguard
// routes to a handler (invalid: the dead-letter sink; conflict: the
// conflict handler), rather than a failure of the attempt.
func verdict(class policy.Class) bool {
	return class == policy.Invalid || class == policy.Conflict
}

// failureText describes a failure by class and code: "transient failure,
// code 189".
func failureText(c int32, class policy.Class) string {
	if c == 0 {
		return class.String() + " failure"
	}
	return class.String() + " failure, code " + strconv.Itoa(int(c))
}

func (h *handler) retryScheduled(ctx context.Context, ev *hooks.Retry) {
	h.retryDelay.Record(context.WithoutCancel(ctx), ev.Delay.Seconds(),
		metric.WithAttributes(with(h.callAttrs(ctx, ev.Op), append(code(ev.Code), keyClass.String(ev.Class.String()))...)...))
	st := h.opFrom(ctx)
	if st == nil {
		return
	}
	st.span.AddEvent(eventRetry, trace.WithAttributes(append([]attribute.KeyValue{
		keyAttempt.Int(ev.Attempt),
		keyBackoff.Float64(ev.Delay.Seconds()),
		keyDocuments.Int(ev.Documents),
		keyClass.String(ev.Class.String()),
	}, code(ev.Code)...)...))
}

// budgetKey and floodKey are the rate-limit keys of the budget and flood
// log records (outside the int32 range of codes).
const (
	budgetKey = math.MaxInt32 + 1
	floodKey  = math.MaxInt32 + 2
)

// floodShare returns the dead-lettered share the call's error reports
// through a DeadLetterFlood() float64 method (writeguard.FloodError's),
// and whether it has one: the call dead-lettered while the dead-letter
// flood breaker was open.
func floodShare(err error) (float64, bool) {
	var f interface{ DeadLetterFlood() float64 }
	if err == nil || !errors.As(err, &f) {
		return 0, false
	}
	return f.DeadLetterFlood(), true
}

func (h *handler) budgetExhausted(ctx context.Context, ev *hooks.BudgetExhausted) {
	h.budget.Add(context.WithoutCancel(ctx), 1, metric.WithAttributes(with(h.callAttrs(ctx, ev.Op), code(ev.Code)...)...))
	if st := h.opFrom(ctx); st != nil {
		st.span.AddEvent(eventBudgetExhausted, trace.WithAttributes(append([]attribute.KeyValue{
			keyDocuments.Int(ev.Documents),
		}, code(ev.Code)...)...))
	}
	if h.limit.Allow(budgetKey) {
		h.logger.LogAttrs(ctx, slog.LevelWarn, "otelhook: retry budget exhausted; retries refused",
			slog.String("operation", ev.Op.Name), slog.String("collection", ev.Op.Collection),
			slog.String("database", ev.Op.Database), slog.Int("documents", ev.Documents), slog.Int("code", int(ev.Code)))
	}
}

func (h *handler) deadLetterStarted(ctx context.Context, ev *hooks.DeadLetterStart) context.Context {
	st := h.opFrom(ctx)
	span := h.startStep(ctx, st, stepName(st, ev.Op, suffixDeadLetter),
		keyEnvelopes.Int(ev.Envelopes),
		keyAttempt.Int(ev.Attempt),
		keyFallback.Bool(ev.Fallback),
	)
	return context.WithValue(trace.ContextWithSpan(ctx, span), deadLetterKey{h}, &step{op: st, span: span})
}

func (h *handler) deadLetterFinished(ctx context.Context, ev *hooks.DeadLetterEnd) {
	s := h.stepFrom(ctx, deadLetterKey{h})
	if s == nil {
		return
	}
	if ev.Err != nil {
		// The sink's error text may quote the envelope (a duplicate key
		// in a MongoDB sink does): only its code is recorded.
		var c int32
		if fs := policy.Extract(ev.Err); len(fs) > 0 {
			c = fs[0].Code
		}
		s.span.SetAttributes(append(code(c), errorType(c, policy.Unknown))...)
		s.span.SetStatus(codes.Error, "dead-letter sink failed")
	}
	s.span.End()
}

// hasFailure reports whether a Disposition event describes a failure.
func hasFailure(ev *hooks.Disposition) bool { return ev.Failed }

func (h *handler) disposition(ctx context.Context, ev *hooks.Disposition) {
	k := dispKey{disp: ev.Disposition}
	if hasFailure(ev) {
		k.class, k.code, k.failure = ev.Class, ev.Code, true
		if ev.Class == policy.Unknown {
			h.countUnclassified(ctx, ev.Op, ev.Code, ev.CodeName)
		}
	}
	if st := h.opFrom(ctx); st != nil {
		st.mu.Lock()
		if st.disp == nil {
			st.disp = map[dispKey]int64{}
		}
		st.disp[k]++
		if st.tries == nil {
			st.tries = map[int]int64{}
		}
		st.tries[ev.Attempts]++
		st.mu.Unlock()
		return
	}
	h.inputs.Add(context.WithoutCancel(ctx), 1, metric.WithAttributes(dispAttrs(metricAttrs(ev.Op), k)...))
	h.inputTries.Record(context.WithoutCancel(ctx), int64(ev.Attempts), metric.WithAttributes(metricAttrs(ev.Op)...))
}

func dispAttrs(base []attribute.KeyValue, k dispKey) []attribute.KeyValue {
	out := with(base, keyDisposition.String(string(k.disp)))
	if k.failure {
		out = append(out, keyClass.String(k.class.String()))
		out = append(out, code(k.code)...)
	}
	return out
}

func (h *handler) countUnclassified(ctx context.Context, op *hooks.Operation, c int32, codeName string) {
	h.unclassified.Add(context.WithoutCancel(ctx), 1, metric.WithAttributes(with(h.callAttrs(ctx, op), code(c)...)...))
	if h.limit.Allow(int64(c)) {
		h.logger.LogAttrs(ctx, slog.LevelWarn, "otelhook: unclassified write failure; not retried",
			slog.String("operation", op.Name), slog.String("collection", op.Collection),
			slog.String("database", op.Database), slog.Int("code", int(c)), slog.String("code_name", codeName))
	}
}

// callEnd is what operationFinished reads from an OperationEnd once, for
// the metrics and the operation span.
type callEnd struct {
	ev       *hooks.OperationEnd
	base     []attribute.KeyValue // the call's metric attributes
	disp     map[dispKey]int64    // dispositions seen (Disposition events)
	tries    map[int]int64        // inputs per number of attempts
	failed   bool                 // not handled: status Error
	errAttrs []attribute.KeyValue // db.response.status_code, error.type when failed
	share    float64              // the flood breaker window's share, when flooded
	flooded  bool                 // dead-lettered while the flood breaker was open
}

func (h *handler) operationFinished(ctx context.Context, ev *hooks.OperationEnd) {
	st := h.opFrom(ctx)
	e := newCallEnd(st, ev)
	if e.flooded {
		h.recordFlood(ctx, e)
	}
	// ctx may be cancelled (a deadline during a backoff): the metrics get
	// a context that is not, and span.End does not look at it.
	h.recordCall(context.WithoutCancel(ctx), e)
	if st != nil {
		endOperationSpan(st, e)
	}
}

// newCallEnd takes the call's gathered counts out of st (nil when the
// call had no OperationStarted of these hooks) and reads ev.
func newCallEnd(st *opState, ev *hooks.OperationEnd) *callEnd {
	e := &callEnd{ev: ev, failed: !hooks.Handled(ev.Err)}
	if st != nil {
		e.base = st.attrs
		st.mu.Lock()
		e.disp, st.disp = st.disp, nil
		e.tries, st.tries = st.tries, nil
		st.mu.Unlock()
	} else {
		e.base = metricAttrs(ev.Op)
	}
	if e.failed {
		e.errAttrs = append(code(ev.Code), callErrorType(ev))
	}
	e.share, e.flooded = floodShare(ev.Err)
	return e
}

// recordFlood counts a call that dead-lettered while the flood breaker
// was open, and logs it at most once a minute.
func (h *handler) recordFlood(ctx context.Context, e *callEnd) {
	h.flood.Add(context.WithoutCancel(ctx), 1, metric.WithAttributes(with(e.base)...))
	if h.limit.Allow(floodKey) {
		op := e.ev.Op
		h.logger.LogAttrs(ctx, slog.LevelWarn, "otelhook: dead-letter flood breaker open; a call that dead-lettered is not handled",
			slog.String("operation", op.Name), slog.String("collection", op.Collection),
			slog.String("database", op.Database), slog.Float64("share", e.share))
	}
}

// recordCall records the call's metrics: its duration and attempts, its
// inputs by disposition (writeguard.no_match on those of a write that
// matched nothing) and the attempts of each input.
func (h *handler) recordCall(mctx context.Context, e *callEnd) {
	h.duration.Record(mctx, e.ev.Duration.Seconds(), metric.WithAttributes(with(with(e.base, h.server...), e.errAttrs...)...))
	h.attempts.Record(mctx, int64(e.ev.Attempts), metric.WithAttributes(with(e.base)...))
	for k, n := range e.disp {
		attrs := dispAttrs(e.base, k)
		if e.ev.MatchedNothing {
			attrs = append(attrs, keyNoMatch.Bool(true))
		}
		h.inputs.Add(mctx, n, metric.WithAttributes(attrs...))
	}
	if len(e.tries) > 0 {
		opt := metric.WithAttributes(with(e.base)...)
		for a, n := range e.tries {
			for range n {
				h.inputTries.Record(mctx, int64(a), opt)
			}
		}
	}
}

// endOperationSpan sets the operation span's closing attributes and
// status, and ends it.
func endOperationSpan(st *opState, e *callEnd) {
	ev := e.ev
	names := make([]string, 0, len(ev.Counts))
	conflicts := 0
	for d, n := range ev.Counts {
		names = append(names, string(d))
		if d.IsConflict() {
			conflicts += n
		}
	}
	sort.Strings(names)
	attrs := make([]attribute.KeyValue, 0, 8+len(names)+len(e.errAttrs))
	attrs = append(attrs, keyAttempts.Int(ev.Attempts), keyRetries.Int(ev.Retries))
	if !ev.Op.InTransaction {
		attrs = append(attrs, keyDeadLettered.Int(ev.Counts[policy.DeadLettered]), keyConflicts.Int(conflicts))
	}
	if ev.Op.BatchSize == 1 && len(names) == 1 {
		attrs = append(attrs, keyDisposition.String(names[0]))
	} else {
		for _, d := range names {
			attrs = append(attrs, attribute.Int(prefixDispositions+d, ev.Counts[policy.Disposition(d)]))
		}
	}
	attrs = append(attrs, e.errAttrs...)
	if ev.MatchedNothing {
		attrs = append(attrs, keyNoMatch.Bool(true))
	}
	if e.flooded {
		attrs = append(attrs, keyFlood.Bool(true), keyFloodShare.Float64(e.share))
	}
	st.span.SetAttributes(attrs...)
	if e.failed {
		st.span.SetStatus(codes.Error, unhandledText(ev, names))
	}
	st.span.End()
}

// unhandledText describes an unhandled call by its unhandled dispositions
// ("unhandled: 1 conflict, 2 exhausted") or, without any, by its failure.
// It never quotes the error, whose text may hold document values (a
// duplicate key's errmsg does).
func unhandledText(ev *hooks.OperationEnd, sortedNames []string) string {
	var parts []string
	for _, d := range sortedNames {
		if !policy.Disposition(d).Handled() {
			parts = append(parts, strconv.Itoa(ev.Counts[policy.Disposition(d)])+" "+d)
		}
	}
	if len(parts) == 0 {
		if _, ok := floodShare(ev.Err); ok {
			return "unhandled: dead-letter flood breaker open"
		}
		return failureText(ev.Code, ev.Class)
	}
	return "unhandled: " + strings.Join(parts, ", ")
}
