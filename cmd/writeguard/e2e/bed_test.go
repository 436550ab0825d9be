package e2e

// The test bed of the end-to-end cases (cases_test.go) and the chaos
// accounting test (chaos_test.go): the real driver → faultproxy → a server.
//
// The server is the embedded FerretDB (a fresh one per test: it starts in
// about a millisecond and keeps the tests independent), or, when
// MONGODB_URI is set, that server (a fresh database per test, dropped at
// the end). The proxy forwards to it and injects the faults of the test's
// script. Two clients: the "app" client talks through the proxy and has a
// CommandMonitor counting CommandStartedEvents by command name and
// namespace; the "direct" client talks to the server itself, for seeding
// and for reading the final contents, so that neither shows up in the
// counts.
//
// Identifiers here are prefixed (caseBed, cb...) so that they do not clash
// with the helpers of the other test files of this package.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver/connstring"
	"go.uber.org/goleak"

	"github.com/writeguard/writeguard"
	"github.com/writeguard/writeguard/cmd/writeguard/embedded"
	"github.com/writeguard/writeguard/dlq"
	"github.com/writeguard/writeguard/envelope"
	"github.com/writeguard/writeguard/mocks"
	"github.com/writeguard/writeguard/mocks/faultproxy"
	"github.com/writeguard/writeguard/policy"
)

// cbRealURI is MONGODB_URI: a real MongoDB to run against instead of the
// embedded FerretDB ("" when unset).
func cbRealURI() string { return os.Getenv("MONGODB_URI") }

// cbRequireReal skips t unless MONGODB_URI is set.
func cbRequireReal(t testing.TB, why string) {
	t.Helper()
	if cbRealURI() == "" {
		t.Skipf("backend: bed (faultproxy over embedded FerretDB), which cannot run this: needs a real MongoDB (%s); set MONGODB_URI=mongodb://host:port/ to run it", why)
	}
}

// cbCommands counts the CommandStartedEvents of the app client, by command
// name and by "name namespace".
type cbCommands struct {
	mu     sync.Mutex
	byName map[string]int
	byNS   map[string]int
}

func newCBCommands() *cbCommands {
	c := &cbCommands{}
	c.Reset()
	return c
}

func (c *cbCommands) monitor() *event.CommandMonitor {
	return &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		ns := e.DatabaseName
		if len(e.Command) > 0 {
			if el, err := e.Command.IndexErr(0); err == nil {
				if s, ok := el.Value().StringValueOK(); ok {
					ns += "." + s
				}
			}
		}
		c.mu.Lock()
		c.byName[e.CommandName]++
		c.byNS[e.CommandName+" "+ns]++
		c.mu.Unlock()
	}}
}

// N returns the number of commands named name sent to namespace ns ("db.coll").
func (c *cbCommands) N(name, ns string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.byNS[name+" "+ns]
}

// Total returns the number of commands named name, all namespaces.
func (c *cbCommands) Total(name string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.byName[name]
}

// Writes returns the number of insert, update and delete commands sent to
// namespace ns (the dead-letter sink may insert or upsert).
func (c *cbCommands) Writes(ns string) int {
	return c.N("insert", ns) + c.N("update", ns) + c.N("delete", ns)
}

// Reset zeroes the counts.
func (c *cbCommands) Reset() {
	c.mu.Lock()
	c.byName, c.byNS = map[string]int{}, map[string]int{}
	c.mu.Unlock()
}

// String lists the counts, for failure messages.
func (c *cbCommands) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	keys := make([]string, 0, len(c.byNS))
	for k := range c.byNS {
		if strings.HasPrefix(k, "hello ") || strings.HasPrefix(k, "isMaster ") || strings.HasPrefix(k, "ping ") {
			continue
		}
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s=%d", k, c.byNS[k])
	}
	return "{" + b.String() + "}"
}

// caseBed is one test's server, proxy and clients.
type caseBed struct {
	t      testing.TB
	ctx    context.Context
	server *embedded.Server // nil under MONGODB_URI
	proxy  *faultproxy.Proxy
	app    *mongo.Client // through the proxy, monitored
	direct *mongo.Client // to the server itself
	cmds   *cbCommands
	dbName string
	// db is the test's database on the app client; ddb on the direct one.
	db, ddb *mongo.Database
	// replicaSet is true when the server is a replica-set member (only
	// under MONGODB_URI): then the driver may retry writes itself.
	replicaSet bool

	closeOnce sync.Once
}

type cbConfig struct {
	retryWrites bool
	replicaSet  bool
	clientOpts  []func(*options.ClientOptions)
	proxyOpts   []faultproxy.Option
}

// cbOption configures newCaseBed.
type cbOption func(*cbConfig)

// cbRetryWrites turns the driver's retryable writes on for the app client
// (default off: the cases test writeguard's own retries). Against a
// standalone (FerretDB) the driver still retries only overload errors
// (maxAdaptiveRetries), never plain retryable writes.
func cbRetryWrites() cbOption { return func(c *cbConfig) { c.retryWrites = true } }

// cbReplicaSet puts the proxy in replica-set mode in front of the
// embedded FerretDB (faultproxy.WithReplicaSet): the driver sees the
// primary of a one-member replica set, retries retryable writes, and the
// proxy executes each (lsid, txnNumber) once and answers
// configureFailPoint. Under MONGODB_URI the real server is used as it is.
func cbReplicaSet() cbOption { return func(c *cbConfig) { c.replicaSet = true } }

// cbProxyOptions adds options to the proxy (e.g. faultproxy.WithSharded,
// faultproxy.WithLimits: the sharded bed).
func cbProxyOptions(opts ...faultproxy.Option) cbOption {
	return func(c *cbConfig) { c.proxyOpts = append(c.proxyOpts, opts...) }
}

// cbClientOptions edits the app client's options.
func cbClientOptions(f func(*options.ClientOptions)) cbOption {
	return func(c *cbConfig) { c.clientOpts = append(c.clientOpts, f) }
}

var cbDBNameRE = regexp.MustCompile(`[^A-Za-z0-9_]+`)

// newCaseBed starts the bed for t; everything is closed at t's end (or by
// close).
func newCaseBed(t testing.TB, opts ...cbOption) *caseBed {
	t.Helper()
	var cfg cbConfig
	for _, o := range opts {
		o(&cfg)
	}
	ctx := context.Background()
	b := &caseBed{t: t, ctx: ctx, cmds: newCBCommands()}
	t.Cleanup(b.close)

	var upstream string
	var directOpts *options.ClientOptions
	if uri := cbRealURI(); uri != "" {
		directOpts = options.Client().ApplyURI(uri).SetTimeout(30 * time.Second)
		name := cbDBNameRE.ReplaceAllString(t.Name(), "_")
		if len(name) > 40 {
			name = name[:40]
		}
		b.dbName = fmt.Sprintf("wg_e2e_%s_%d", name, time.Now().UnixNano()%1e6)
	} else {
		s, err := embedded.Start(ctx)
		if err != nil {
			t.Fatalf("embedded.Start: %v", err)
		}
		b.server = s
		upstream = s.Addr()
		directOpts = options.Client().ApplyURI(s.URI())
		b.dbName = "app"
	}
	direct, err := mongo.Connect(directOpts)
	if err != nil {
		t.Fatalf("connect (direct): %v", err)
	}
	b.direct = direct
	b.ddb = direct.Database(b.dbName)

	if b.server == nil {
		upstream = b.realUpstream(directOpts)
	}
	popts := []faultproxy.Option{faultproxy.WithUpstream(upstream)}
	if cfg.replicaSet && b.server != nil {
		popts = append(popts, faultproxy.WithReplicaSet("rs0"))
		b.replicaSet = true
	}
	popts = append(popts, cfg.proxyOpts...)
	p, err := faultproxy.New(popts...)
	if err != nil {
		t.Fatalf("faultproxy.New: %v", err)
	}
	if err := p.Start(ctx); err != nil {
		t.Fatalf("faultproxy.Start: %v", err)
	}
	b.proxy = p

	var appOpts *options.ClientOptions
	if b.server == nil {
		// The real server's options (credentials, ...), pointed at the
		// proxy. The proxy does not speak TLS.
		appOpts = options.Client().ApplyURI(cbRealURI())
		appOpts.Hosts = []string{p.Addr()}
		appOpts.SetDirect(true).SetReplicaSet("")
	} else {
		appOpts = options.Client().ApplyURI(p.URI())
	}
	appOpts.SetRetryWrites(cfg.retryWrites).SetMonitor(b.cmds.monitor())
	for _, f := range cfg.clientOpts {
		f(appOpts)
	}
	app, err := mongo.Connect(appOpts)
	if err != nil {
		t.Fatalf("connect (app): %v", err)
	}
	b.app = app
	b.db = app.Database(b.dbName)
	if err := app.Ping(ctx, nil); err != nil {
		t.Fatalf("ping through the proxy: %v", err)
	}
	b.resetCounts()
	return b
}

// realUpstream returns the host:port the proxy forwards to under
// MONGODB_URI: the primary of a replica set, else the URI's first host.
func (b *caseBed) realUpstream(opts *options.ClientOptions) string {
	b.t.Helper()
	var hello bson.M
	if err := b.direct.Database("admin").RunCommand(b.ctx, bson.D{{Key: "hello", Value: 1}}).Decode(&hello); err != nil {
		b.t.Fatalf("hello on MONGODB_URI: %v", err)
	}
	if _, ok := hello["setName"]; ok {
		b.replicaSet = true
	}
	if prim, ok := hello["primary"].(string); ok && prim != "" {
		return prim
	}
	if len(opts.Hosts) > 0 {
		return opts.Hosts[0]
	}
	cs, err := connstring.ParseAndValidate(cbRealURI())
	if err != nil || len(cs.Hosts) == 0 {
		b.t.Fatalf("MONGODB_URI: no host (%v)", err)
	}
	return cs.Hosts[0]
}

// close disconnects the clients and stops the proxy and the server; the
// test's database is dropped under MONGODB_URI. Idempotent.
func (b *caseBed) close() {
	b.closeOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if b.app != nil {
			_ = b.app.Disconnect(ctx)
		}
		if b.proxy != nil {
			_ = b.proxy.Close()
		}
		if b.direct != nil {
			if b.server == nil && b.dbName != "" {
				_ = b.ddb.Drop(ctx)
			}
			_ = b.direct.Disconnect(ctx)
		}
		if b.server != nil {
			if err := b.server.Close(ctx); err != nil {
				b.t.Errorf("embedded server Close: %v", err)
			}
		}
	})
}

// backend names the backend the test ran on, for its log and skip
// messages.
func (b *caseBed) backend() string {
	switch {
	case b.server != nil && b.replicaSet:
		return "bed: faultproxy replica set over embedded FerretDB"
	case b.server != nil:
		return "bed: faultproxy over embedded FerretDB (standalone)"
	case b.replicaSet:
		return "real MongoDB replica set (MONGODB_URI)"
	}
	return "real MongoDB standalone (MONGODB_URI)"
}

// failPoint runs configureFailPoint cmd where the backend keeps its fail
// points: on the real server (directly) under MONGODB_URI, else on the
// proxy. The fail point is turned off at the end of the test.
func (b *caseBed) failPoint(cmd bson.D) error {
	b.t.Helper()
	c := b.app
	if b.server == nil {
		c = b.direct
	}
	err := c.Database("admin").RunCommand(b.ctx, cmd).Err()
	if err != nil && b.server != nil {
		// The app client's pool may have been cleared by a dropped
		// connection; RunCommand is not retried by the driver.
		err = c.Database("admin").RunCommand(b.ctx, cmd).Err()
	}
	if err == nil && len(cmd) > 0 {
		name := cmd[0].Value
		b.t.Cleanup(func() {
			_ = c.Database("admin").RunCommand(context.Background(), cbD("configureFailPoint", name, "mode", "off")).Err()
		})
	}
	return err
}

// ns returns "<db>.<coll>".
func (b *caseBed) ns(coll string) string { return b.dbName + "." + coll }

// script installs the proxy's script (replacing any earlier one) and
// zeroes the proxy's and the monitor's counters.
func (b *caseBed) script(items ...faultproxy.ScriptItem) {
	b.t.Helper()
	s, err := faultproxy.NewScript(items...)
	if err != nil {
		b.t.Fatalf("faultproxy script: %v", err)
	}
	b.proxy.SetScript(s)
	b.resetCounts()
}

// resetCounts zeroes the proxy's and the monitor's counters.
func (b *caseBed) resetCounts() {
	b.proxy.Reset()
	b.cmds.Reset()
}

// seed inserts docs into coll directly (not through the proxy).
func (b *caseBed) seed(coll string, docs ...any) {
	b.t.Helper()
	if _, err := b.ddb.Collection(coll).InsertMany(b.ctx, docs); err != nil {
		b.t.Fatalf("seed %s: %v", coll, err)
	}
}

// unique creates a unique index on coll (directly, for real: FerretDB
// enforces unique indexes, though its 11000 carries no keyPattern).
func (b *caseBed) unique(coll string, keys ...string) {
	b.t.Helper()
	var k bson.D
	for _, f := range keys {
		k = append(k, bson.E{Key: f, Value: 1})
	}
	if _, err := b.ddb.Collection(coll).Indexes().CreateOne(b.ctx, mongo.IndexModel{Keys: k, Options: options.Index().SetUnique(true)}); err != nil {
		b.t.Fatalf("create unique index %v on %s: %v", keys, coll, err)
	}
}

// docs reads every document of coll directly, sorted by _id.
func (b *caseBed) docs(coll string) []bson.Raw {
	b.t.Helper()
	cur, err := b.ddb.Collection(coll).Find(b.ctx, bson.D{}, options.Find().SetSort(bson.D{{Key: "_id", Value: 1}}))
	if err != nil {
		b.t.Fatalf("read %s: %v", coll, err)
	}
	var out []bson.Raw
	for cur.Next(b.ctx) {
		out = append(out, append(bson.Raw(nil), cur.Current...))
	}
	if err := cur.Err(); err != nil {
		b.t.Fatalf("read %s: %v", coll, err)
	}
	_ = cur.Close(b.ctx)
	return out
}

// ids returns the _id of every document of coll, as Extended JSON
// (`"a"`, `{"$numberInt":"1"}`), sorted by _id.
func (b *caseBed) ids(coll string) []string {
	var out []string
	for _, d := range b.docs(coll) {
		out = append(out, d.Lookup("_id").String())
	}
	return out
}

// dlq reads the dead-letter collection coll as envelopes.
func (b *caseBed) dlq(coll string) []envelope.Envelope {
	b.t.Helper()
	var out []envelope.Envelope
	for _, d := range b.docs(coll) {
		var env envelope.Envelope
		if err := bson.Unmarshal(d, &env); err != nil {
			b.t.Fatalf("decode dead-letter entry %s: %v", d, err)
		}
		out = append(out, env)
	}
	return out
}

// cbRec records writeguard's hook events.
type cbRec struct{ mocks.Recorder }

func (r *cbRec) nRetries() int { return len(r.Retries()) }

func (r *cbRec) retryDelays() []time.Duration {
	var out []time.Duration
	for _, ev := range r.Retries() {
		out = append(out, ev.Delay)
	}
	return out
}

// cbGuard is a guarded collection of the bed with its dead-letter sink
// (a dlq.MongoSink on the DLQ collection, written through the
// proxy) and its hook recorder.
type cbGuard struct {
	*writeguard.Guarded
	coll, dlqColl string
	rec           *cbRec
}

// cbFastBackoff is the backoff of the cases that do not test the backoff:
// short waits, so that the suite stays fast.
var cbFastBackoff = policy.Backoff{Base: 5 * time.Millisecond, Cap: 50 * time.Millisecond}

// guard wraps the app client's coll. The defaults (a dead-letter sink
// writing to "<coll>_dlq" through the proxy, cbFastBackoff, a recorder)
// come before opts, so opts override them.
func (b *caseBed) guard(coll string, opts ...writeguard.Option) *cbGuard {
	b.t.Helper()
	return b.guardColl(b.db.Collection(coll), opts...)
}

func (b *caseBed) guardColl(c *mongo.Collection, opts ...writeguard.Option) *cbGuard {
	b.t.Helper()
	g := &cbGuard{coll: c.Name(), dlqColl: c.Name() + "_dlq", rec: &cbRec{}}
	// The DLQ collection's unique fingerprint index, as EnsureCollection
	// makes it (created directly: setup is not what these cases test).
	if _, err := b.ddb.Collection(g.dlqColl).Indexes().CreateOne(b.ctx, mongo.IndexModel{
		Keys:    bson.D{{Key: "fingerprint", Value: 1}},
		Options: options.Index().SetUnique(true).SetName(dlq.FingerprintIndexName),
	}); err != nil {
		b.t.Fatalf("DLQ index: %v", err)
	}
	base := []writeguard.Option{
		writeguard.WithDeadLetter(dlq.NewMongoSink(b.db.Collection(g.dlqColl))),
		writeguard.WithBackoff(cbFastBackoff),
		writeguard.WithHooks(g.rec.Hooks()),
	}
	wg, err := writeguard.Wrap(c, append(base, opts...)...)
	if err != nil {
		b.t.Fatalf("writeguard.Wrap: %v", err)
	}
	g.Guarded = wg
	b.resetCounts()
	return g
}

// cbWriteRule starts a faultproxy rule for the write commands (insert,
// update, delete) on namespace ns: the dead-letter sink's writes, whatever
// command it uses.
func cbWriteRule(ns string) *faultproxy.Rule {
	return faultproxy.OnAny().In(ns).Where(func(c *faultproxy.Command) bool {
		return c.Name == "insert" || c.Name == "update" || c.Name == "delete"
	})
}

// cbMemSink is an in-memory dead-letter sink (a fallback sink, say).
type cbMemSink struct {
	mu   sync.Mutex
	envs []envelope.Envelope
}

func (s *cbMemSink) Put(_ context.Context, envs []envelope.Envelope) error {
	s.mu.Lock()
	s.envs = append(s.envs, envs...)
	s.mu.Unlock()
	return nil
}

func (s *cbMemSink) all() []envelope.Envelope {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]envelope.Envelope(nil), s.envs...)
}

// cbReport returns err's *writeguard.Report, failing t when there is none.
func cbReport(t testing.TB, err error) *writeguard.Report {
	t.Helper()
	var r *writeguard.Report
	if !errors.As(err, &r) {
		t.Fatalf("err = %v (%T), want a *writeguard.Report", err, err)
	}
	return r
}

// cbDisps returns the dispositions of r, in input order.
func cbDisps(r *writeguard.Report) []writeguard.Disposition {
	out := make([]writeguard.Disposition, len(r.Outcomes))
	for i, o := range r.Outcomes {
		out[i] = o.Disposition
	}
	return out
}

// cbIDStrings renders ids (bson.RawValue or Go values) as Extended JSON.
func cbIDStrings(ids []any) []string {
	out := make([]string, 0, len(ids))
	for _, id := range ids {
		switch v := id.(type) {
		case bson.RawValue:
			out = append(out, v.String())
		default:
			t, data, err := bson.MarshalValue(v)
			if err != nil {
				out = append(out, fmt.Sprint(v))
				continue
			}
			out = append(out, bson.RawValue{Type: t, Value: data}.String())
		}
	}
	return out
}

// cbQuote renders string ids as Extended JSON strings.
func cbQuote(ids ...string) []string {
	out := make([]string, len(ids))
	for i, s := range ids {
		out[i] = `"` + s + `"`
	}
	return out
}

// cbDiff returns "" when want and got are deeply equal, else both, for a
// failure message.
func cbDiff[T any](want, got T) string {
	if reflect.DeepEqual(want, got) {
		return ""
	}
	return fmt.Sprintf("-want %v\n+got  %v", want, got)
}

// cbD builds a bson.D from key, value pairs.
func cbD(kv ...any) bson.D {
	if len(kv)%2 != 0 {
		panic("cbD: odd number of arguments")
	}
	d := make(bson.D, 0, len(kv)/2)
	for i := 0; i < len(kv); i += 2 {
		d = append(d, bson.E{Key: kv[i].(string), Value: kv[i+1]})
	}
	return d
}

// cbIDs returns a DocMatcher selecting the documents whose _id is one of
// ids.
func cbIDs(ids ...any) faultproxy.DocMatcher {
	ms := make([]faultproxy.DocMatcher, len(ids))
	for i, id := range ids {
		ms[i] = faultproxy.DocumentID(id)
	}
	return func(doc bson.Raw) bool {
		for _, m := range ms {
			if m(doc) {
				return true
			}
		}
		return false
	}
}

// cbLeakBaseline waits until the number of goroutines is steady (a server
// started by TestMain may still be spawning its listener's) and returns the
// goleak option that ignores the goroutines running now: take it at the
// start of a test, pass it to goleak.VerifyNone at the end.
func cbLeakBaseline() goleak.Option {
	prev := -1
	for i := 0; i < 50; i++ {
		n := runtime.NumGoroutine()
		if n == prev {
			break
		}
		prev = n
		time.Sleep(20 * time.Millisecond)
	}
	return goleak.IgnoreCurrent()
}

// cbRequireQty is the $jsonSchema validator {required: ["qty"]}.
var cbRequireQty = cbD("$jsonSchema", cbD("required", bson.A{"qty"}))

// coverFaults returns one rule per fault, each firing once, on the 3rd,
// 6th, 9th … command that a fresh rule() matches. Placed before a
// RandomSchedule on the same commands, it makes every kind the oracle
// asserts on fire in every run whatever the number of commands (which
// varies with the interleaving of many writers), while the random
// schedule's draws for the other occurrences stay as they were (every
// rule counts every command it matches; the first that fires wins).
func coverFaults(rule func() *faultproxy.Rule, faults ...faultproxy.Fault) []faultproxy.ScriptItem {
	items := make([]faultproxy.ScriptItem, len(faults))
	for i, f := range faults {
		items[i] = rule().Nth(3 * (i + 1)).Do(f)
	}
	return items
}

// notPoison is the complement of carriesPoison, for rules that must not
// spend their occurrence on a command the poison rule answers.
func notPoison(cmd *faultproxy.Command) bool { return !carriesPoison(cmd) }
