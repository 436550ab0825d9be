package otelhook

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"sort"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/writeguard/writeguard/dlq"
	"github.com/writeguard/writeguard/envelope"
	"github.com/writeguard/writeguard/policy"
)

// DLQObserver is the poller ObserveDLQ starts: one reader of a dead-letter
// collection whose last figures the backlog gauges report. Stop ends it.
// It is safe for concurrent use.
type DLQObserver struct {
	dlq    *mongo.Collection
	attrs  []attribute.KeyValue
	logger *slog.Logger
	now    func() time.Time
	reg    metric.Registration

	envs, keywordsG metric.Int64ObservableGauge
	age             metric.Float64ObservableGauge
	cancel          context.CancelFunc
	done            chan struct{}
	maxKeywords     int // keyword label values besides "other"

	mu       sync.Mutex
	byStatus map[string]int64 // envelopes per status: envelope.Statuses and "other"
	keywords map[string]int64 // failing keywords of the pending envelopes (boundKeywords)
	oldest   time.Time        // first_seen of the oldest pending envelope; zero when none
	polled   time.Time        // when the figures were read
	err      error            // the last poll's error
}

// ObserveDLQ reads the dead-letter collection dlq now and then every poll
// interval (WithPollInterval, default DefaultPollInterval) until ctx is
// done or Stop is called, and reports the backlog through observable
// gauges of the meter provider (WithMeterProvider):
//
//   - writeguard.dlq.envelopes (gauge, {envelope}): envelopes by
//     writeguard.envelope.status: each status of envelope.Statuses
//     (pending, replayed, discarded, quarantined) and StatusOther for any
//     other value stored, always, 0 when none.
//   - writeguard.dlq.failing_keywords (gauge, {keyword}): the failing
//     keywords of the pending envelopes, by writeguard.failing_keyword.
//     An envelope with two keywords counts once under each, so the sum
//     over keywords counts keywords, not envelopes (the pending envelopes
//     are writeguard.dlq.envelopes{writeguard.envelope.status="pending"}).
//     A keyword no pending envelope has any more reports 0 once, then
//     goes.
//   - writeguard.dlq.oldest_pending.age (gauge, s): the age of the oldest
//     pending envelope (now − its first_seen) at the time of the
//     observation, so it grows between polls; 0 when none is pending.
//
// The label values read from the collection are bounded, since any
// writer of the collection could store anything there: a status outside
// envelope.Statuses is StatusOther; a keyword is its own label value only
// when it looks like an operator or keyword name (a letter, or '$' and a
// letter, then up to 63 letters, digits or '_') and is among the
// WithMaxKeywords (default DefaultMaxKeywords) most frequent; the others
// add up under StatusOther ("other"). At most 2 × WithMaxKeywords + 1
// keyword series exist at a time.
//
// Each carries db.system.name, db.namespace and db.collection.name of the
// dead-letter collection. The figures come from dlq.Stats (two reads
// per poll: every envelope, and the pending ones). Run one observer per
// dead-letter collection — the writers need none: depth and age are
// properties of the collection, not of a writer.
//
// ObserveDLQ returns an error when the first read fails (the collection
// is unreachable, say) or the meter refuses an instrument; later failed
// reads keep the last figures and are logged (WithLogger, Warn, at most
// once a minute).
func ObserveDLQ(ctx context.Context, dlq *mongo.Collection, opts ...Option) (*DLQObserver, error) {
	if dlq == nil {
		return nil, errors.New("otelhook: ObserveDLQ: nil collection")
	}
	c := newConfig(opts...)
	o := &DLQObserver{
		dlq:    dlq,
		logger: c.logger,
		now:    c.now,
		done:   make(chan struct{}),
		attrs: []attribute.KeyValue{
			keyDBSystemName.String(semconv.DBSystemNameMongoDB.Value.AsString()),
			keyDBNamespace.String(dlq.Database().Name()),
			keyDBCollectionName.String(dlq.Name()),
		},
		byStatus:    map[string]int64{},
		keywords:    map[string]int64{},
		maxKeywords: c.maxKeywords,
	}
	if err := o.poll(ctx); err != nil {
		return nil, err
	}
	m := c.meterProvider.Meter(ScopeName, metric.WithInstrumentationVersion(Version), metric.WithSchemaURL(semconv.SchemaURL))
	var err, e error
	o.envs, e = m.Int64ObservableGauge(MetricDLQEnvelopes,
		metric.WithDescription("Envelopes in the dead-letter collection, by status."), metric.WithUnit("{envelope}"))
	err = errors.Join(err, e)
	o.keywordsG, e = m.Int64ObservableGauge(MetricDLQFailingKeywords,
		metric.WithDescription("Failing keywords of the pending envelopes in the dead-letter collection, by keyword (an envelope counts once under each of its keywords: do not sum as envelopes)."),
		metric.WithUnit("{keyword}"))
	err = errors.Join(err, e)
	o.age, e = m.Float64ObservableGauge(MetricDLQOldestPendingAge,
		metric.WithDescription("Age of the oldest pending envelope in the dead-letter collection (0 when none is pending)."), metric.WithUnit("s"))
	err = errors.Join(err, e)
	if err != nil {
		return nil, fmt.Errorf("otelhook: ObserveDLQ: creating instruments: %w", err)
	}
	o.reg, err = m.RegisterCallback(o.observe, o.envs, o.keywordsG, o.age)
	if err != nil {
		return nil, fmt.Errorf("otelhook: ObserveDLQ: registering the callback: %w", err)
	}
	ctx, o.cancel = context.WithCancel(ctx)
	go o.run(ctx, c.pollInterval)
	return o, nil
}

// run polls every interval until ctx is done.
func (o *DLQObserver) run(ctx context.Context, interval time.Duration) {
	defer close(o.done)
	t := time.NewTicker(interval)
	defer t.Stop()
	var logged time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := o.poll(ctx); err != nil && ctx.Err() == nil && o.now().Sub(logged) >= time.Minute {
			logged = o.now()
			o.logger.LogAttrs(ctx, slog.LevelWarn, "otelhook: reading the dead-letter collection failed; the backlog gauges keep the last figures",
				slog.String("collection", o.dlq.Name()), slog.String("database", o.dlq.Database().Name()), slog.String("error", policy.ScrubError(err)))
		}
	}
}

// Poll reads the collection now (as the poller does every interval) and
// returns the read's error.
func (o *DLQObserver) Poll(ctx context.Context) error { return o.poll(ctx) }

func (o *DLQObserver) poll(ctx context.Context) error {
	all, err := dlq.Stats(ctx, o.dlq, dlq.Filter{})
	if err != nil {
		o.setErr(err)
		return fmt.Errorf("otelhook: ObserveDLQ: %w", err)
	}
	pend, err := dlq.Stats(ctx, o.dlq, dlq.Filter{Statuses: []string{envelope.StatusPending}})
	if err != nil {
		o.setErr(err)
		return fmt.Errorf("otelhook: ObserveDLQ: %w", err)
	}
	byStatus := boundStatuses(all.ByStatus)
	keywords := boundKeywords(pend.ByKeyword, o.maxKeywords)
	o.mu.Lock()
	defer o.mu.Unlock()
	for k, n := range o.keywords {
		if _, ok := keywords[k]; !ok && n > 0 {
			keywords[k] = 0 // reported once at 0, then gone
		}
	}
	o.byStatus, o.keywords = byStatus, keywords
	o.oldest = pend.OldestPending
	if pend.Pending == 0 {
		o.oldest = time.Time{}
	}
	o.polled, o.err = o.now(), nil
	return nil
}

func (o *DLQObserver) setErr(err error) {
	o.mu.Lock()
	o.err = err
	o.mu.Unlock()
}

// StatusOther is the label value under which ObserveDLQ counts a status
// outside envelope.Statuses, and the failing keywords it does not report
// by name.
const StatusOther = "other"

// DefaultMaxKeywords is how many failing keywords ObserveDLQ reports by
// name by default (WithMaxKeywords); the others add up under
// StatusOther.
const DefaultMaxKeywords = 20

// WithMaxKeywords sets how many failing keywords ObserveDLQ reports by
// name in writeguard.dlq.failing_keywords: the n most frequent among the
// pending envelopes (1 ≤ n ≤ 1000; other values are ignored); the others
// add up under StatusOther. Default DefaultMaxKeywords. New ignores it.
func WithMaxKeywords(n int) Option {
	return optionFunc(func(c *config) {
		if n >= 1 && n <= 1000 {
			c.maxKeywords = n
		}
	})
}

// keywordRE is what a failing keyword reported by name looks like: a
// JSON Schema keyword or a query operator (minimum, bsonType, $lt), or
// "unknown" (envelope.FailingKeywords).
var keywordRE = regexp.MustCompile(`^\$?[A-Za-z][A-Za-z0-9_]{0,63}$`)

// boundStatuses returns envelopes per status: every status of
// envelope.Statuses and StatusOther, each 0 when none, any other status
// stored added to StatusOther.
func boundStatuses(groups []dlq.Group) map[string]int64 {
	out := map[string]int64{StatusOther: 0}
	for _, st := range envelope.Statuses {
		out[st] = 0
	}
	for _, g := range groups {
		if _, known := out[g.Key]; known && g.Key != StatusOther {
			out[g.Key] += g.Envelopes
		} else {
			out[StatusOther] += g.Envelopes
		}
	}
	return out
}

// boundKeywords returns the failing keywords of groups (sorted by
// envelopes, largest first, as dlq.Stats sorts them) under their
// names for the first max that look like keywords (keywordRE), the rest
// added up under StatusOther (present only when some are).
func boundKeywords(groups []dlq.Group, max int) map[string]int64 {
	out := map[string]int64{}
	named := 0
	for _, g := range groups {
		if named < max && keywordRE.MatchString(g.Key) && g.Key != StatusOther {
			out[g.Key] += g.Envelopes
			named++
			continue
		}
		out[StatusOther] += g.Envelopes
	}
	return out
}

// DLQFigures is what the backlog gauges report, as of Polled.
type DLQFigures struct {
	// ByStatus is the number of envelopes per status (envelope.Statuses
	// and StatusOther).
	ByStatus map[string]int64
	// PendingByKeyword is writeguard.dlq.failing_keywords: per failing
	// keyword, the pending envelopes that have it (an envelope counts
	// under each of its keywords; the bounded label values of
	// ObserveDLQ).
	PendingByKeyword map[string]int64
	// OldestPending is the first_seen of the oldest pending envelope,
	// zero when none is pending.
	OldestPending time.Time
	// Polled is when the figures were read; Err the last read's error
	// (nil when it succeeded).
	Polled time.Time
	Err    error
}

// Figures returns the figures of the last successful read, and the last
// read's error.
func (o *DLQObserver) Figures() DLQFigures {
	o.mu.Lock()
	defer o.mu.Unlock()
	f := DLQFigures{ByStatus: map[string]int64{}, PendingByKeyword: map[string]int64{}, OldestPending: o.oldest, Polled: o.polled, Err: o.err}
	for k, v := range o.byStatus {
		f.ByStatus[k] = v
	}
	for k, v := range o.keywords {
		f.PendingByKeyword[k] = v
	}
	return f
}

// observe reports the last figures (the metric callback).
func (o *DLQObserver) observe(_ context.Context, obs metric.Observer) error {
	f := o.Figures()
	for _, k := range sortedKeys(f.ByStatus) {
		obs.ObserveInt64(o.envs, f.ByStatus[k], metric.WithAttributes(with(o.attrs, keyEnvelopeStatus.String(k))...))
	}
	for _, k := range sortedKeys(f.PendingByKeyword) {
		obs.ObserveInt64(o.keywordsG, f.PendingByKeyword[k], metric.WithAttributes(with(o.attrs, keyFailingKeyword.String(k))...))
	}
	age := 0.0
	if !f.OldestPending.IsZero() {
		age = max(o.now().Sub(f.OldestPending).Seconds(), 0)
	}
	obs.ObserveFloat64(o.age, age, metric.WithAttributes(with(o.attrs)...))
	return nil
}

// Stop ends the poller and unregisters the gauges. It returns the
// unregistration's error; calling it again does nothing.
func (o *DLQObserver) Stop() error {
	o.cancel()
	<-o.done
	o.mu.Lock()
	reg := o.reg
	o.reg = nil
	o.mu.Unlock()
	if reg == nil {
		return nil
	}
	return reg.Unregister()
}

// sortedKeys returns m's keys in order.
func sortedKeys(m map[string]int64) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
