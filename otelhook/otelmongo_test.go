package otelhook_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/writeguard/writeguard"
	"github.com/writeguard/writeguard/mocks/faultproxy"
	"github.com/writeguard/writeguard/otelhook"
	"github.com/writeguard/writeguard/policy"
)

// commandSpans is a command monitor shaped like otelmongo's (the
// OpenTelemetry instrumentation of the driver, whose v2 module is not
// served here): each command's span is started from the context the
// driver hands to Started — the context of the operation that sent it —
// named "<collection>.<command>", kind client, with db.system.name,
// db.operation.name (the command) and db.collection.name; it ends when the
// command succeeds or fails.
type commandSpans struct {
	tracer trace.Tracer
	mu     sync.Mutex
	open   map[int64]trace.Span
}

func (c *commandSpans) monitor() *event.CommandMonitor {
	c.open = map[int64]trace.Span{}
	return &event.CommandMonitor{
		Started: func(ctx context.Context, ev *event.CommandStartedEvent) {
			coll := ""
			if v, err := ev.Command.IndexErr(0); err == nil && v.Key() == ev.CommandName {
				coll, _ = v.Value().StringValueOK()
			}
			_, span := c.tracer.Start(ctx, coll+"."+ev.CommandName, trace.WithSpanKind(trace.SpanKindClient),
				trace.WithAttributes(attribute.String("db.system.name", "mongodb"),
					attribute.String("db.operation.name", ev.CommandName),
					attribute.String("db.collection.name", coll)))
			c.mu.Lock()
			c.open[ev.RequestID] = span
			c.mu.Unlock()
		},
		Succeeded: func(_ context.Context, ev *event.CommandSucceededEvent) { c.end(ev.RequestID, nil) },
		Failed:    func(_ context.Context, ev *event.CommandFailedEvent) { c.end(ev.RequestID, ev.Failure) },
	}
}

func (c *commandSpans) end(id int64, err error) {
	c.mu.Lock()
	span := c.open[id]
	delete(c.open, id)
	c.mu.Unlock()
	if span == nil {
		return
	}
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// TestDriverCommandSpansNestUnderAttempts runs a guarded InsertMany through
// the real driver against the fault proxy's null backend (a stepdown on
// the first insert, then success), with an otelmongo-shaped command
// monitor, and checks that each insert command's span is a child of the
// writeguard attempt span that sent it.
// stepdownThroughDriver runs a guarded InsertMany of two documents
// through the real driver and the proxy (a stepdown on the first insert,
// then success) with an otelmongo-shaped command monitor on the harness's
// tracer provider, and returns the harness.
func stepdownThroughDriver(t *testing.T, opts ...otelhook.Option) *harness {
	t.Helper()
	hx := newHarness(t, opts...)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	script := faultproxy.MustScript(faultproxy.On("insert").In("shop.orders").Nth(1).Do(faultproxy.ErrorReply(faultproxy.CommandError{
		Code: 189, CodeName: "PrimarySteppedDown", Labels: []string{"RetryableWriteError"},
	})))
	p, err := faultproxy.New(faultproxy.WithScript(script))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer p.Close()

	mon := &commandSpans{tracer: hx.tp.Tracer("otelmongo-shaped")}
	client, err := mongo.Connect(options.Client().ApplyURI(p.URI()).SetRetryWrites(false).SetMonitor(mon.monitor()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = client.Disconnect(context.Background()) }()

	g, err := writeguard.New(client.Database("shop").Collection("orders"),
		writeguard.WithHooks(hx.hooks),
		writeguard.WithBackoff(policy.Backoff{Base: time.Millisecond, Cap: time.Millisecond, Jitter: func() float64 { return 0.5 }}))
	if err != nil {
		t.Fatal(err)
	}
	docs := []bson.D{{{Key: "_id", Value: 1}}, {{Key: "_id", Value: 2}}}
	if _, err := g.InsertMany(ctx, docs); err != nil {
		t.Fatalf("InsertMany: %v", err)
	}

	return hx
}

func TestDriverCommandSpansNestUnderAttempts(t *testing.T) {
	hx := stepdownThroughDriver(t)
	op := hx.one(t, "insertMany shop.orders")
	attempts := hx.ended("insertMany shop.orders attempt")
	commands := hx.ended("orders.insert")
	if len(attempts) != 2 || len(commands) != 2 {
		t.Fatalf("%d attempt spans and %d insert command spans, want 2 and 2; spans: %v", len(attempts), len(commands), hx.names())
	}
	byID := map[trace.SpanID]sdktrace.ReadOnlySpan{}
	for _, a := range attempts {
		childOf(t, a, op)
		byID[a.SpanContext().SpanID()] = a
	}
	seen := map[trace.SpanID]bool{}
	for _, c := range commands {
		a, ok := byID[c.Parent().SpanID()]
		if !ok || c.SpanContext().TraceID() != op.SpanContext().TraceID() {
			t.Errorf("command span %q (parent %s) is not under a writeguard attempt span", c.Name(), c.Parent().SpanID())
			continue
		}
		seen[a.SpanContext().SpanID()] = true
		// The attempt and its command agree on the outcome: the stepdown
		// fails both.
		if (a.Status().Code == codes.Error) != (c.Status().Code == codes.Error) {
			t.Errorf("attempt status %v, its command's %v", a.Status().Code, c.Status().Code)
		}
		// writeguard's db.operation.name means what the driver span's does.
		if got, want := attrMap(op.Attributes())["db.operation.name"], attrMap(c.Attributes())["db.operation.name"]; got != want {
			t.Errorf("operation span db.operation.name %q, command span %q", got, want)
		}
	}
	if len(seen) != 2 {
		t.Errorf("the two insert commands nest under %d distinct attempts, want 2", len(seen))
	}
}

// TestBackendTree builds the tree a tracing backend shows for one guarded
// InsertMany whose first attempt met a stepdown, with the driver's command
// spans recorded (otelmongo-shaped): writeguard's operation span (client,
// as the MongoDB drivers' OpenTelemetry specification makes the operation
// span), an internal span per attempt, and under each the driver's client
// span for the insert command. A backend that derives database call
// metrics from client spans sees three client spans for one call: the
// documented double count, besides the commands by which the first call of
// a Guarded learns its target, once per Guarded: hello (the server's write
// limits) before the first attempt, and listCollections (whether _id is
// unique there) before the first re-send of an insert that may have been
// applied. With WithSpanKind(trace.SpanKindInternal) it sees the command
// spans only.
func TestBackendTree(t *testing.T) {
	for _, tc := range []struct {
		name    string
		opts    []otelhook.Option
		want    string
		clients int
	}{
		{"default", nil, `insertMany shop.orders [client] status=unset
  .hello [client] status=unset
  insertMany shop.orders attempt [internal] status=error
    orders.insert [client] status=error
  .listCollections [client] status=unset
  insertMany shop.orders attempt [internal] status=unset
    orders.insert [client] status=unset
`, 5},
		{"internal", []otelhook.Option{otelhook.WithSpanKind(trace.SpanKindInternal)}, `insertMany shop.orders [internal] status=unset
  .hello [client] status=unset
  insertMany shop.orders attempt [internal] status=error
    orders.insert [client] status=error
  .listCollections [client] status=unset
  insertMany shop.orders attempt [internal] status=unset
    orders.insert [client] status=unset
`, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hx := stepdownThroughDriver(t, tc.opts...)
			// The call's trace (the client's endSessions at Disconnect has
			// its own).
			op := hx.one(t, "insertMany shop.orders")
			var spans []sdktrace.ReadOnlySpan
			for _, s := range hx.sr.Ended() {
				if s.SpanContext().TraceID() == op.SpanContext().TraceID() {
					spans = append(spans, s)
				}
			}
			children := map[trace.SpanID][]sdktrace.ReadOnlySpan{}
			var roots []sdktrace.ReadOnlySpan
			clients := 0
			for _, s := range spans {
				if s.SpanKind() == trace.SpanKindClient {
					clients++
				}
				if s.Parent().IsValid() {
					children[s.Parent().SpanID()] = append(children[s.Parent().SpanID()], s)
				} else {
					roots = append(roots, s)
				}
			}
			var b strings.Builder
			var walk func(s sdktrace.ReadOnlySpan, depth int)
			walk = func(s sdktrace.ReadOnlySpan, depth int) {
				fmt.Fprintf(&b, "%s%s [%s] status=%s\n", strings.Repeat("  ", depth), s.Name(), s.SpanKind(), strings.ToLower(s.Status().Code.String()))
				kids := children[s.SpanContext().SpanID()]
				sort.Slice(kids, func(i, j int) bool { return kids[i].StartTime().Before(kids[j].StartTime()) })
				for _, k := range kids {
					walk(k, depth+1)
				}
			}
			for _, r := range roots {
				walk(r, 0)
			}
			if got := b.String(); got != tc.want {
				t.Errorf("tree:\n%s\nwant:\n%s", got, tc.want)
			}
			if clients != tc.clients {
				t.Errorf("%d client spans, want %d", clients, tc.clients)
			}
		})
	}
}
