package bench

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/writeguard/writeguard/cmd/writeguard/embedded"
	"github.com/writeguard/writeguard/mocks/faultproxy"
)

// backendEnv selects the backend of the overhead benchmarks: "null" (the
// default: faultproxy's null backend, which answers every command itself
// and stores nothing, so the figures are client CPU) or "embedded" (an
// in-process FerretDB v1 with SQLite, reached directly, not through the
// proxy). The failure-path and amplification benchmarks always use the
// embedded server behind a faultproxy, or the null backend where stated.
const backendEnv = "WRITEGUARD_BENCH_BACKEND"

const benchDB = "bench"

func backendName() string {
	switch v := os.Getenv(backendEnv); v {
	case "", "null":
		return "null"
	case "embedded":
		return "embedded"
	default:
		panic(fmt.Sprintf("%s=%q: want null or embedded", backendEnv, v))
	}
}

// shared holds the processes the benchmarks share: started lazily,
// stopped by TestMain.
var shared struct {
	mu       sync.Mutex
	server   *embedded.Server
	child    *childProxy // the null backend in a child process
	overhead *mongo.Client
	direct   *mongo.Client
	clients  []*mongo.Client
	proxies  []*faultproxy.Proxy
}

func TestMain(m *testing.M) {
	serveNullProxyChild()
	code := m.Run()
	shutdown()
	os.Exit(code)
}

func shutdown() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	shared.mu.Lock()
	defer shared.mu.Unlock()
	for _, c := range shared.clients {
		_ = c.Disconnect(ctx)
	}
	for _, p := range shared.proxies {
		_ = p.Close()
	}
	if shared.child != nil {
		shared.child.close()
	}
	if shared.server != nil {
		if err := shared.server.Close(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "bench: closing the embedded server:", err)
		}
	}
}

// embeddedServer returns the process-wide embedded FerretDB, starting it on
// first use.
func embeddedServer(tb testing.TB) *embedded.Server {
	tb.Helper()
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.server == nil {
		s, err := embedded.Start(context.Background())
		if err != nil {
			tb.Fatalf("start the embedded server: %v", err)
		}
		shared.server = s
	}
	return shared.server
}

// newProxy starts a faultproxy (closed by TestMain) with opts.
func newProxy(tb testing.TB, opts ...faultproxy.Option) *faultproxy.Proxy {
	tb.Helper()
	p, err := faultproxy.New(opts...)
	if err != nil {
		tb.Fatal(err)
	}
	if err := p.Start(context.Background()); err != nil {
		tb.Fatal(err)
	}
	shared.mu.Lock()
	shared.proxies = append(shared.proxies, p)
	shared.mu.Unlock()
	return p
}

// connect returns a client (disconnected by TestMain).
func connect(tb testing.TB, opts *options.ClientOptions) *mongo.Client {
	tb.Helper()
	c, err := mongo.Connect(opts)
	if err != nil {
		tb.Fatal(err)
	}
	if err := c.Ping(context.Background(), nil); err != nil {
		tb.Fatal(err)
	}
	shared.mu.Lock()
	shared.clients = append(shared.clients, c)
	shared.mu.Unlock()
	return c
}

// childNullURI returns the URI of the process-wide null-backend faultproxy
// that runs in a child process (startChildProxy), starting it on first
// use: the CPU it spends answering is not the benchmark's.
func childNullURI(tb testing.TB) string {
	tb.Helper()
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.child == nil {
		shared.child = startChildProxy(tb)
	}
	return shared.child.uri
}

// overheadClient returns the client of the overhead benchmarks, on the
// backend named by WRITEGUARD_BENCH_BACKEND: the null backend runs in a
// child process (childNullURI), so that a profile or a CPU reading of
// this process is the client's alone.
func overheadClient(tb testing.TB) *mongo.Client {
	tb.Helper()
	shared.mu.Lock()
	c := shared.overhead
	shared.mu.Unlock()
	if c != nil {
		return c
	}
	var uri string
	if backendName() == "embedded" {
		uri = embeddedServer(tb).URI()
	} else {
		uri = childNullURI(tb)
	}
	c = connect(tb, options.Client().ApplyURI(uri))
	shared.mu.Lock()
	shared.overhead = c
	shared.mu.Unlock()
	return c
}

// freshCollection drops and returns db.bench.<name>, so an embedded run
// starts each benchmark on an empty collection.
func freshCollection(tb testing.TB, c *mongo.Client, name string) *mongo.Collection {
	tb.Helper()
	coll := c.Database(benchDB).Collection(name)
	if err := coll.Drop(context.Background()); err != nil {
		tb.Fatalf("drop %s: %v", name, err)
	}
	return coll
}

// orderLine is the benchmarks' document: an order line of eleven fields,
// no _id (the driver, or writeguard, assigns one).
type orderLine struct {
	OrderID   string    `bson:"order_id"`
	Line      int32     `bson:"line"`
	Seq       int64     `bson:"seq"`
	SKU       string    `bson:"sku"`
	Name      string    `bson:"name"`
	Qty       int32     `bson:"qty"`
	UnitPrice float64   `bson:"unit_price"`
	Currency  string    `bson:"currency"`
	Warehouse string    `bson:"warehouse"`
	CreatedAt time.Time `bson:"created_at"`
	Tags      []string  `bson:"tags"`
}

var baseTime = time.Date(2026, 5, 1, 9, 30, 0, 0, time.UTC)

func newOrderLine(seq int) orderLine {
	return orderLine{
		OrderID:   "ORD-" + strconv.Itoa(100000+seq/8),
		Line:      int32(seq%8 + 1),
		Seq:       int64(seq),
		SKU:       "SKU-" + strconv.Itoa(40000+seq%977),
		Name:      "Stainless steel water bottle 750 ml",
		Qty:       int32(seq%5 + 1),
		UnitPrice: 12.5 + float64(seq%40),
		Currency:  "EUR",
		Warehouse: "DE-MUC-2",
		CreatedAt: baseTime.Add(time.Duration(seq) * time.Second),
		Tags:      []string{"retail", "summer"},
	}
}

// orderLines returns n order lines as []any, the usual argument of
// InsertMany, numbered from first.
func orderLines(first, n int) []any {
	out := make([]any, n)
	for i := range out {
		out[i] = newOrderLine(first + i)
	}
	return out
}
