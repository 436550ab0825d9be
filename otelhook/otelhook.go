package otelhook

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

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

// durationBuckets are the explicit bucket boundaries, in seconds, of
// writeguard.call.duration: those the database semantic conventions give
// for db.client.operation.duration, so the two compare bucket by bucket.
var durationBuckets = []float64{0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10}

// attemptBuckets are the bucket boundaries of writeguard.call.attempts: one
// bucket per attempt up to the default maximum of 5, then coarser.
var attemptBuckets = []float64{1, 2, 3, 4, 5, 7, 10, 20, 50}

// retryDelayBuckets are the bucket boundaries, in seconds, of
// writeguard.retry.delay: from the 5 ms of a first jittered backoff to
// the 30 s a throttled server may ask for.
var retryDelayBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}

// New returns hooks that record each guarded call as OpenTelemetry spans
// and metrics (see the package documentation for their names and
// attributes). Pass them to writeguard.WithHooks; one set of hooks may
// serve any number of guarded collections, concurrently.
//
// New fails only when the meter refuses to create an instrument; it then
// returns zero Hooks (which observe nothing) and the error.
func New(opts ...Option) (hooks.Hooks, error) {
	h, err := newHandler(newConfig(opts...))
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

	duration     metric.Float64Histogram
	inputs       metric.Int64Counter
	attempts     metric.Int64Histogram
	inputTries   metric.Int64Histogram
	unclassified metric.Int64Counter
	budget       metric.Int64Counter
	retryDelay   metric.Float64Histogram
	flood        metric.Int64Counter
}

func newHandler(c *config) (*handler, error) {
	h := &handler{
		tracer: c.tracerProvider.Tracer(ScopeName,
			trace.WithInstrumentationVersion(Version), trace.WithSchemaURL(semconv.SchemaURL)),
		kind:   c.spanKind,
		logger: c.logger,
		server: c.server,
		limit:  loglimit.New(time.Minute, c.now),
	}
	m := c.meterProvider.Meter(ScopeName,
		metric.WithInstrumentationVersion(Version), metric.WithSchemaURL(semconv.SchemaURL))
	var err, e error
	h.duration, e = m.Float64Histogram(MetricCallDuration,
		metric.WithDescription("Duration of guarded write calls, from the call to its return, retries and backoff waits included."),
		metric.WithUnit("s"), metric.WithExplicitBucketBoundaries(durationBuckets...))
	err = errors.Join(err, e)
	h.inputs, e = m.Int64Counter(MetricCallInputs,
		metric.WithDescription("Input documents or write models by terminal disposition."),
		metric.WithUnit("{input}"))
	err = errors.Join(err, e)
	h.attempts, e = m.Int64Histogram(MetricCallAttempts,
		metric.WithDescription("Driver calls made per guarded write call."),
		metric.WithUnit("{attempt}"), metric.WithExplicitBucketBoundaries(attemptBuckets...))
	err = errors.Join(err, e)
	h.inputTries, e = m.Int64Histogram(MetricInputAttempts,
		metric.WithDescription("Times each input document or write model was sent (0 for one never sent)."),
		metric.WithUnit("{attempt}"), metric.WithExplicitBucketBoundaries(attemptBuckets...))
	err = errors.Join(err, e)
	h.unclassified, e = m.Int64Counter(MetricUnclassified,
		metric.WithDescription("Failures no classifier rule matched (never retried): documents, or calls inside a transaction."),
		metric.WithUnit("{failure}"))
	err = errors.Join(err, e)
	h.budget, e = m.Int64Counter(MetricBudgetExhausted,
		metric.WithDescription("Retries the retry budget refused."),
		metric.WithUnit("{refusal}"))
	err = errors.Join(err, e)
	h.retryDelay, e = m.Float64Histogram(MetricRetryDelay,
		metric.WithDescription("Backoff waits before retries, as scheduled (the server's delay for a throttled failure)."),
		metric.WithUnit("s"), metric.WithExplicitBucketBoundaries(retryDelayBuckets...))
	err = errors.Join(err, e)
	h.flood, e = m.Int64Counter(MetricDeadLetterFlood,
		metric.WithDescription("Calls reported not handled because they dead-lettered while the dead-letter flood breaker was open."),
		metric.WithUnit("{call}"))
	err = errors.Join(err, e)
	if err != nil {
		return nil, fmt.Errorf("otelhook: creating instruments: %w", err)
	}
	return h, nil
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

// spanName is "<db.operation.name> <db.collection.name>" ("insert
// orders"), the database semantic conventions' span name for a call whose
// target is a collection; "<db.operation.name>" without one.
func spanName(op *hooks.Operation) string {
	if op.Collection == "" {
		return op.CommandName()
	}
	return op.CommandName() + " " + op.Collection
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
	return append(attrs, keyDBOperationName.String(op.CommandName()), keyMethod.String(op.Name))
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
	attrs := make([]attribute.KeyValue, 0, 8)
	attrs = append(attrs, metricAttrs(op)...)
	if isBatch(op) {
		attrs = append(attrs, keyDBBatchSize.Int(op.BatchSize))
	}
	attrs = append(attrs, h.server...)
	if op.InTransaction {
		attrs = append(attrs, keyInTransaction.Bool(true))
	}
	ctx, span := h.tracer.Start(ctx, spanName(op), trace.WithSpanKind(h.kind), trace.WithAttributes(attrs...))
	return context.WithValue(ctx, opKey{h}, &opState{span: span, attrs: metricAttrs(op)})
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
	span := h.startStep(ctx, st, spanName(ev.Op)+suffixAttempt,
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
	span := h.startStep(ctx, st, spanName(ev.Op)+suffixDeadLetter,
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

// operationFinished ends a call: its metrics (callMetrics), then its
// span's figures and status (endCallSpan).
func (h *handler) operationFinished(ctx context.Context, ev *hooks.OperationEnd) {
	// ctx may be cancelled (a deadline during a backoff): the metrics get
	// a context that is not, and span.End does not look at it.
	mctx := context.WithoutCancel(ctx)
	st := h.opFrom(ctx)
	var base []attribute.KeyValue
	var disp map[dispKey]int64
	var tries map[int]int64
	if st != nil {
		base = st.attrs
		st.mu.Lock()
		disp, st.disp = st.disp, nil
		tries, st.tries = st.tries, nil
		st.mu.Unlock()
	} else {
		base = metricAttrs(ev.Op)
	}
	failed := !hooks.Handled(ev.Err)
	var errAttrs []attribute.KeyValue
	if failed {
		errAttrs = append(code(ev.Code), callErrorType(ev))
	}
	share, flooded := floodShare(ev.Err)
	if flooded {
		h.flood.Add(mctx, 1, metric.WithAttributes(with(base)...))
		if h.limit.Allow(floodKey) {
			h.logger.LogAttrs(ctx, slog.LevelWarn, "otelhook: dead-letter flood breaker open; a call that dead-lettered is not handled",
				slog.String("operation", ev.Op.Name), slog.String("collection", ev.Op.Collection),
				slog.String("database", ev.Op.Database), slog.Float64("share", share))
		}
	}
	h.callMetrics(mctx, ev, base, errAttrs, disp, tries)
	if st != nil {
		endCallSpan(st, ev, errAttrs, failed, flooded, share)
	}
}

// callMetrics records a finished call's duration and attempts, and its
// inputs per disposition and per number of tries (disp and tries, taken
// from the call's state).
func (h *handler) callMetrics(mctx context.Context, ev *hooks.OperationEnd, base, errAttrs []attribute.KeyValue,
	disp map[dispKey]int64, tries map[int]int64) {
	h.duration.Record(mctx, ev.Duration.Seconds(), metric.WithAttributes(with(with(base, h.server...), errAttrs...)...))
	h.attempts.Record(mctx, int64(ev.Attempts), metric.WithAttributes(with(base)...))
	for k, n := range disp {
		h.inputs.Add(mctx, n, metric.WithAttributes(dispAttrs(base, k)...))
	}
	if len(tries) > 0 {
		opt := metric.WithAttributes(with(base)...)
		for a, n := range tries {
			for range n {
				h.inputTries.Record(mctx, int64(a), opt)
			}
		}
	}
}

// endCallSpan sets a finished call's figures on its span (attempts,
// retries, dead-lettered and conflicts, the disposition or the count of
// each, the error attributes, the flood), its status when the call is
// not handled, and ends it.
func endCallSpan(st *opState, ev *hooks.OperationEnd, errAttrs []attribute.KeyValue, failed, flooded bool, share float64) {
	names := make([]string, 0, len(ev.Counts))
	conflicts := 0
	for d, n := range ev.Counts {
		names = append(names, string(d))
		if d.IsConflict() {
			conflicts += n
		}
	}
	sort.Strings(names)
	attrs := make([]attribute.KeyValue, 0, 6+len(names)+len(errAttrs))
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
	attrs = append(attrs, errAttrs...)
	if flooded {
		attrs = append(attrs, keyFlood.Bool(true), keyFloodShare.Float64(share))
	}
	st.span.SetAttributes(attrs...)
	if failed {
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
