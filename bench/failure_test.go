package bench

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/writeguard/writeguard"
	"github.com/writeguard/writeguard/envelope"
	"github.com/writeguard/writeguard/mocks/faultproxy"
	"github.com/writeguard/writeguard/policy"
)

// countingSink is an in-memory dead-letter sink that counts Puts and
// envelopes.
type countingSink struct {
	puts, envelopes atomic.Int64
}

func (s *countingSink) Put(_ context.Context, envs []envelope.Envelope) error {
	s.puts.Add(1)
	s.envelopes.Add(int64(len(envs)))
	return nil
}

// BenchmarkDeadLetter1000 dead-letters 1,000 invalid order lines sent in
// one InsertMany through faultproxy's null backend, whose emulated
// $jsonSchema validator rejects every one (code 121 with errInfo). Metrics:
// ns/op, B/op and allocs/op, insert commands and sink Puts per op, and
// envelopes per op (1,000).
//
// unordered: 1 command and 1 Put. ordered shows the cost of the server's
// ordered semantics: it stops at the first rejected document, so each
// document costs a round trip of its own; the goal for it is at most a
// tenth of the memory measured before the engine gathered its work (3.4
// GiB per op), sink Puts gathered (one per call, or a bounded number), and
// the time dominated by the 1,000 round trips. One ordered op takes
// seconds; it runs once per -count.
func BenchmarkDeadLetter1000(b *testing.B) {
	const ns = benchDB + ".dlq_source"
	p := newProxy(b, faultproxy.WithScript(faultproxy.MustScript(faultproxy.Validator(ns, orderSchema()))))
	client := connect(b, options.Client().ApplyURI(p.URI()))
	coll := client.Database(benchDB).Collection("dlq_source")
	docs := make([]any, 1000)
	for i := range docs {
		docs[i] = invalidOrderLine(i)
	}
	for _, mode := range []struct {
		name    string
		ordered bool
	}{{"unordered", false}, {"ordered", true}} {
		b.Run(mode.name, func(b *testing.B) {
			sink := &countingSink{}
			g, err := writeguard.Wrap(coll, writeguard.WithDeadLetter(sink))
			if err != nil {
				b.Fatal(err)
			}
			opts := options.InsertMany().SetOrdered(mode.ordered)
			p.Reset()
			b.ReportAllocs()
			for b.Loop() {
				_, err := g.InsertMany(context.Background(), docs, opts)
				var r *writeguard.Report
				if !errors.As(err, &r) || r.Count(writeguard.DeadLettered) != len(docs) {
					b.Fatalf("want a Report with %d dead_lettered, got %v", len(docs), err)
				}
			}
			st := p.Stats()
			n := float64(b.N)
			b.ReportMetric(float64(st.CountIn("insert", ns))/n, "insert-cmds/op")
			b.ReportMetric(float64(sink.puts.Load())/n, "puts/op")
			b.ReportMetric(float64(sink.envelopes.Load())/n, "envelopes/op")
		})
	}
}

// stepdownError is the reply of a primary that is stepping down.
var stepdownError = faultproxy.CommandError{Code: 10107, CodeName: "NotWritablePrimary", Message: "not primary", Labels: []string{"RetryableWriteError"}}

// replicaSetHello is a rule that makes an upstream server look like the
// primary of replica set "rs0": it forwards hello and adds setName,
// hosts, primary, me and electionId to the reply, so that the driver uses
// retryable writes (it then sends lsid and txnNumber, which FerretDB v1
// accepts and ignores). The driver must declare a server API
// (options.ServerAPI) so that even its first handshake is an OP_MSG hello:
// the proxy relays legacy OP_QUERY handshakes untouched.
func replicaSetHello(p **faultproxy.Proxy) *faultproxy.Rule {
	return faultproxy.On("hello").Always().Do(faultproxy.Custom(func(cmd *faultproxy.Command, forward func(*faultproxy.Command) (bson.Raw, error)) (bson.Raw, error) {
		reply, err := forward(cmd)
		if err != nil {
			return nil, err
		}
		var d bson.D
		if err := bson.Unmarshal(reply, &d); err != nil {
			return nil, err
		}
		addr := (*p).Addr()
		out := make(bson.D, 0, len(d)+7)
		for _, e := range d {
			if e.Key == "ok" {
				out = append(out,
					bson.E{Key: "setName", Value: "rs0"},
					bson.E{Key: "setVersion", Value: int32(1)},
					bson.E{Key: "hosts", Value: bson.A{addr}},
					bson.E{Key: "primary", Value: addr},
					bson.E{Key: "me", Value: addr},
					bson.E{Key: "secondary", Value: false},
					bson.E{Key: "electionId", Value: bson.ObjectID{0x7f, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 1}})
			}
			out = append(out, e)
		}
		return bson.Marshal(out)
	}))
}

// upstreamProxy starts a faultproxy in front of the embedded server with
// the rules of script (plus, when replicaSet is true, replicaSetHello) and
// returns it with a client. The caller closes both (closeUpstream).
func upstreamProxy(tb testing.TB, replicaSet bool, items ...faultproxy.ScriptItem) (*faultproxy.Proxy, *mongo.Client) {
	tb.Helper()
	s := embeddedServer(tb)
	var p *faultproxy.Proxy
	if replicaSet {
		items = append([]faultproxy.ScriptItem{replicaSetHello(&p)}, items...)
	}
	script, err := faultproxy.NewScript(items...)
	if err != nil {
		tb.Fatal(err)
	}
	p, err = faultproxy.New(faultproxy.WithUpstream(s.Addr()), faultproxy.WithScript(script))
	if err != nil {
		tb.Fatal(err)
	}
	if err := p.Start(context.Background()); err != nil {
		tb.Fatal(err)
	}
	opts := options.Client().ApplyURI(p.URI())
	if replicaSet {
		opts.SetServerAPIOptions(options.ServerAPI(options.ServerAPIVersion1)).SetRetryWrites(true)
	}
	c, err := mongo.Connect(opts)
	if err != nil {
		_ = p.Close()
		tb.Fatal(err)
	}
	if err := c.Ping(context.Background(), nil); err != nil {
		tb.Fatal(err)
	}
	return p, c
}

func closeUpstream(p *faultproxy.Proxy, c *mongo.Client) {
	_ = c.Disconnect(context.Background())
	_ = p.Close()
}

// directClient returns a client of the embedded server that bypasses the
// proxy (for set-up and counting).
func directClient(tb testing.TB) *mongo.Client {
	tb.Helper()
	shared.mu.Lock()
	c := shared.direct
	shared.mu.Unlock()
	if c != nil {
		return c
	}
	c = connect(tb, options.Client().ApplyURI(embeddedServer(tb).URI()))
	shared.mu.Lock()
	shared.direct = c
	shared.mu.Unlock()
	return c
}

// BenchmarkStepdown10000 writes 10,000 order lines in one InsertMany to
// the embedded server through a faultproxy that answers every insert with
// 10107 NotWritablePrimary (labelled RetryableWriteError) for the first 2
// seconds: a scripted stepdown and election. One iteration takes seconds;
// run it with -benchtime 1x.
//
// guarded: writeguard with policy.Backoff{MaxAttempts: 10, MaxElapsed:
// 30 s}, on the standalone FerretDB presents (the driver does not retry).
// raw-retrywrites: the driver alone, with retryable writes (the proxy
// presents a replica-set primary, see replicaSetHello); it retries once.
//
// Metrics: insert commands per op, documents stored per op (counted on the
// server afterwards), and faults fired.
func BenchmarkStepdown10000(b *testing.B) {
	stepdown10000(b, "stepdown", func(b *testing.B, variant string, rule *faultproxy.Rule) (*faultproxy.Proxy, *mongo.Client) {
		return upstreamProxy(b, variant == "raw-retrywrites", rule)
	})
}

// stepdown10000 runs the stepdown benchmark body: prefix names the
// collections, connect starts the proxy and the client of a variant.
func stepdown10000(b *testing.B, prefix string, connect func(b *testing.B, variant string, rule *faultproxy.Rule) (*faultproxy.Proxy, *mongo.Client)) {
	const n = 10000
	docs := orderLines(0, n)
	for _, variant := range []string{"guarded", "raw-retrywrites"} {
		b.Run(variant, func(b *testing.B) {
			var cmds, stored, faults float64
			iter := 0
			for b.Loop() {
				b.StopTimer()
				iter++
				name := fmt.Sprintf("%s_%s_%d", prefix, strings.ReplaceAll(variant, "-", "_"), iter)
				ns := benchDB + "." + name
				if err := directClient(b).Database(benchDB).Collection(name).Drop(context.Background()); err != nil {
					b.Fatal(err)
				}
				var start atomic.Pointer[time.Time]
				rule := faultproxy.On("insert").In(ns).Always().Where(func(*faultproxy.Command) bool {
					t := start.Load()
					return t != nil && time.Since(*t) < 2*time.Second
				}).Do(faultproxy.ErrorReply(stepdownError))
				p, c := connect(b, variant, rule)
				coll := c.Database(benchDB).Collection(name)
				var w writeguard.Collection = coll
				if variant == "guarded" {
					g, err := writeguard.Wrap(coll, writeguard.WithBackoff(policy.Backoff{MaxAttempts: 10, MaxElapsed: 30 * time.Second}))
					if err != nil {
						b.Fatal(err)
					}
					w = g
				}
				now := time.Now()
				start.Store(&now)
				b.StartTimer()
				_, err := w.InsertMany(context.Background(), docs)
				b.StopTimer()
				if err != nil {
					b.Logf("%s: InsertMany: %.300v", variant, err)
				}
				st := p.Stats()
				cmds += float64(st.CountIn("insert", ns))
				faults += float64(st.Faults[faultproxy.FaultErrorReply])
				closeUpstream(p, c)
				got, err := directClient(b).Database(benchDB).Collection(name).CountDocuments(context.Background(), bson.D{})
				if err != nil {
					b.Fatal(err)
				}
				stored += float64(got)
				if variant == "guarded" && got != n {
					b.Errorf("guarded: %d of %d documents stored", got, n)
				}
				_ = directClient(b).Database(benchDB).Collection(name).Drop(context.Background())
				b.StartTimer()
			}
			k := float64(iter)
			b.ReportMetric(cmds/k, "insert-cmds/op")
			b.ReportMetric(stored/k, "stored/op")
			b.ReportMetric(faults/k, "faults/op")
		})
	}
}
