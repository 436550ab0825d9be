package e2e

// The bed of the dead-letter tests (dlq_*_test.go): the shared embedded
// FerretDB (dlServer), one database per test, and a faultproxy in front of
// it that emulates the target collection's $jsonSchema validator (FerretDB
// has none), so that guarded writes get real-format 121 errors. The "app"
// client writes through the proxy; the "direct" client talks to FerretDB,
// and the dead-letter collection is always written directly.
//
// Identifiers are prefixed dl so as not to clash with the case bed.

import (
	"context"
	"fmt"
	"regexp"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/writeguard/writeguard"
	"github.com/writeguard/writeguard/dlq"
	"github.com/writeguard/writeguard/envelope"
	"github.com/writeguard/writeguard/mocks/faultproxy"
	"github.com/writeguard/writeguard/policy"
)

// dlSchema is the target's validator: qty required, an int ≥ 1.
var dlSchema = bson.D{{Key: "$jsonSchema", Value: bson.D{
	{Key: "required", Value: bson.A{"qty"}},
	{Key: "properties", Value: bson.D{{Key: "qty", Value: bson.D{{Key: "bsonType", Value: "int"}, {Key: "minimum", Value: 1}}}}},
}}}

const (
	dlTarget = "orders"
	dlDLQ    = "dlq"
)

var (
	dlDBSeq  atomic.Int64
	dlNameRE = regexp.MustCompile(`[^A-Za-z0-9]+`)
)

// dlCounter counts the direct client's commands by "name namespace".
type dlCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *dlCounter) monitor() *event.CommandMonitor {
	return &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		ns := e.DatabaseName
		if el, err := e.Command.IndexErr(0); err == nil {
			if s, ok := el.Value().StringValueOK(); ok {
				ns += "." + s
			}
		}
		c.mu.Lock()
		c.n[e.CommandName+" "+ns]++
		c.mu.Unlock()
	}}
}

func (c *dlCounter) get(name, ns string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[name+" "+ns]
}

func (c *dlCounter) reset() {
	c.mu.Lock()
	c.n = map[string]int{}
	c.mu.Unlock()
}

type dlBed struct {
	t      *testing.T
	ctx    context.Context
	dbName string
	proxy  *faultproxy.Proxy
	app    *mongo.Client
	direct *mongo.Client
	cmds   *dlCounter
	// adb is the database through the proxy, ddb directly.
	adb, ddb *mongo.Database
	dlq      *mongo.Collection
	sink     *dlq.MongoSink
}

// newDLBed gives t its own database on the shared server, a proxy
// emulating validator on <db>.orders (none when nil), and a dead-letter
// collection set up by EnsureCollection.
func newDLBed(t *testing.T, validator bson.D) *dlBed {
	t.Helper()
	ctx := context.Background()
	name := dlNameRE.ReplaceAllString(t.Name(), "_")
	if len(name) > 30 {
		name = name[len(name)-30:]
	}
	b := &dlBed{t: t, ctx: ctx, dbName: fmt.Sprintf("dl%d_%s", dlDBSeq.Add(1), name), cmds: &dlCounter{n: map[string]int{}}}
	direct, err := mongo.Connect(options.Client().ApplyURI(dlServer.URI()).SetMonitor(b.cmds.monitor()))
	if err != nil {
		t.Fatal(err)
	}
	b.direct = direct
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = b.ddb.Drop(cctx)
		_ = direct.Disconnect(cctx)
	})
	b.ddb = direct.Database(b.dbName)
	p, err := faultproxy.New(faultproxy.WithUpstream(dlServer.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	b.proxy = p
	t.Cleanup(func() { _ = p.Close() })
	b.setValidator(validator)
	app, err := mongo.Connect(options.Client().ApplyURI(p.URI()))
	if err != nil {
		t.Fatal(err)
	}
	b.app = app
	// Cleanups run last-in first-out: the app client goes before the proxy.
	t.Cleanup(func() { _ = app.Disconnect(context.Background()) })
	b.adb = app.Database(b.dbName)
	rep, err := dlq.EnsureCollection(ctx, b.ddb, dlDLQ)
	if err != nil {
		t.Fatalf("EnsureCollection: %v\n%s", err, rep)
	}
	b.dlq = b.ddb.Collection(dlDLQ)
	b.sink = dlq.NewMongoSink(b.dlq)
	return b
}

// setValidator replaces the emulated validator of the target (nil: none,
// the "widened" schema).
func (b *dlBed) setValidator(v bson.D) {
	if v == nil {
		b.proxy.SetScript(nil)
		return
	}
	b.proxy.SetScript(faultproxy.MustScript(faultproxy.Validator(b.dbName+"."+dlTarget, v)))
}

func (b *dlBed) ns() string { return b.dbName + "." + dlTarget }

var dlFastBackoff = policy.Backoff{Base: 5 * time.Millisecond, Cap: 20 * time.Millisecond, MaxAttempts: 3}

// guard returns the target (through the proxy) guarded with the bed's
// MongoSink as dead-letter sink, plus opts.
func (b *dlBed) guard(opts ...writeguard.Option) *writeguard.Guarded {
	b.t.Helper()
	g, err := writeguard.Wrap(b.adb.Collection(dlTarget),
		append([]writeguard.Option{writeguard.WithDeadLetter(b.sink), writeguard.WithBackoff(dlFastBackoff)}, opts...)...)
	if err != nil {
		b.t.Fatal(err)
	}
	return g
}

// replayTarget returns the target (through the proxy) guarded WITHOUT a
// dead-letter sink, as replay expects.
func (b *dlBed) replayTarget() *writeguard.Guarded {
	b.t.Helper()
	g, err := writeguard.Wrap(b.adb.Collection(dlTarget), writeguard.WithBackoff(dlFastBackoff))
	if err != nil {
		b.t.Fatal(err)
	}
	return g
}

// envelopes returns the DLQ's envelopes by fingerprint.
func (b *dlBed) envelopes() map[string]envelope.Envelope {
	b.t.Helper()
	cur, err := b.dlq.Find(b.ctx, bson.D{})
	if err != nil {
		b.t.Fatal(err)
	}
	var envs []envelope.Envelope
	if err := cur.All(b.ctx, &envs); err != nil {
		b.t.Fatal(err)
	}
	out := map[string]envelope.Envelope{}
	for _, e := range envs {
		if _, dup := out[e.Fingerprint]; dup {
			b.t.Errorf("two envelopes with fingerprint %s", e.Fingerprint)
		}
		out[e.Fingerprint] = e
	}
	return out
}

func (b *dlBed) count(coll string, filter bson.D) int64 {
	b.t.Helper()
	n, err := b.ddb.Collection(coll).CountDocuments(b.ctx, filter)
	if err != nil {
		b.t.Fatal(err)
	}
	return n
}

// capture inserts docs through a guarded target with the validator on and
// returns the report (every invalid document dead-lettered).
func (b *dlBed) capture(g *writeguard.Guarded, docs ...any) *writeguard.Report {
	b.t.Helper()
	_, err := g.InsertMany(b.ctx, docs, options.InsertMany().SetOrdered(false))
	if err == nil {
		return nil
	}
	rep, ok := err.(*writeguard.Report)
	if !ok {
		b.t.Fatalf("InsertMany: %v", err)
	}
	if !writeguard.Handled(err) {
		b.t.Fatalf("InsertMany not handled: %v", err)
	}
	return rep
}

func dlDoc(kv ...any) bson.D {
	d := make(bson.D, 0, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		d = append(d, bson.E{Key: kv[i].(string), Value: kv[i+1]})
	}
	return d
}
