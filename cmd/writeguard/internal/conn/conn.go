// Package conn opens the server the writeguard command talks to: a
// MongoDB named by a URI, or the embedded FerretDB (optionally keeping its
// data in a directory), optionally behind a faultproxy that emulates
// validators and injects faults.
package conn

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/writeguard/writeguard/cmd/writeguard/embedded"
	"github.com/writeguard/writeguard/cmd/writeguard/internal/redact"
	"github.com/writeguard/writeguard/mocks/faultproxy"
)

// Server kinds, as reported in the demo's output.
const (
	KindEmbedded = "embedded-ferretdb"
	KindMongoDB  = "mongodb"
)

// Options say what to open.
type Options struct {
	// URI of a MongoDB deployment; "" starts the embedded FerretDB.
	URI string
	// DataDir keeps the embedded server's files (embedded only); "" uses a
	// temporary directory removed by Close.
	DataDir string
	// Script, when non-nil, puts a faultproxy running it between the
	// client and the embedded server (embedded only).
	Script *faultproxy.Script
	// ProxyOptions are added to that faultproxy's options (e.g.
	// faultproxy.WithSharded, faultproxy.WithLimits: the sharded bed);
	// they need a Script.
	ProxyOptions []faultproxy.Option
}

// Conn is an open client and, for the embedded server, the server and the
// proxy.
type Conn struct {
	Client *mongo.Client
	Kind   string
	// Proxy is the faultproxy in front of the embedded server, or nil.
	Proxy *faultproxy.Proxy
	// Commands counts the commands the client started, by name, on
	// collection-level commands (the driver's command monitor).
	Commands *Counter

	srv *embedded.Server
}

// Open connects as opts says. The client never retries writes itself
// (retryWrites=false) unless the URI says otherwise, so that every retry
// is writeguard's and counted once.
func Open(ctx context.Context, opts Options) (*Conn, error) {
	c := &Conn{Commands: &Counter{m: map[string]int64{}}}
	uri := opts.URI
	if uri == "" {
		var eo []embedded.Option
		if opts.DataDir != "" {
			eo = append(eo, embedded.WithDataDir(opts.DataDir))
		}
		srv, err := embedded.Start(ctx, eo...)
		if err != nil {
			return nil, err
		}
		c.srv, c.Kind, uri = srv, KindEmbedded, srv.URI()
		if opts.Script != nil {
			popts := append([]faultproxy.Option{faultproxy.WithUpstream(srv.Addr()), faultproxy.WithScript(opts.Script)}, opts.ProxyOptions...)
			p, err := faultproxy.New(popts...)
			if err == nil {
				err = p.Start(ctx)
			}
			if err != nil {
				_ = srv.Close(context.Background())
				return nil, fmt.Errorf("start faultproxy: %w", err)
			}
			c.Proxy = p
			uri = p.URI() + "&retryWrites=false"
		}
	} else {
		if opts.DataDir != "" || opts.Script != nil || len(opts.ProxyOptions) > 0 {
			return nil, errors.New("conn: --data-dir and fault injection apply to the embedded server only")
		}
		c.Kind = KindMongoDB
	}
	co := options.Client().ApplyURI(uri).SetMonitor(c.Commands.monitor())
	if opts.URI != "" && !strings.Contains(strings.ToLower(opts.URI), "retrywrites=") {
		co.SetRetryWrites(false)
	}
	if opts.URI != "" && !strings.Contains(strings.ToLower(opts.URI), "serverselectiontimeoutms=") {
		co.SetServerSelectionTimeout(10 * time.Second)
	}
	client, err := mongo.Connect(co)
	if err == nil && opts.URI != "" {
		err = client.Ping(ctx, nil)
	}
	if err != nil {
		if client != nil {
			_ = client.Disconnect(context.Background())
		}
		c.closeServer()
		var sc redact.Scrubber
		sc.AddURI(uri)
		return nil, sc.Error(fmt.Errorf("connect to %s: %w", redact.URI(uri), err))
	}
	c.Client = client
	return c, nil
}

// Close disconnects the client, then stops the proxy and the server.
func (c *Conn) Close(ctx context.Context) error {
	var errs []error
	if c.Client != nil {
		errs = append(errs, c.Client.Disconnect(ctx))
	}
	errs = append(errs, c.closeServer())
	return errors.Join(errs...)
}

func (c *Conn) closeServer() error {
	var errs []error
	if c.Proxy != nil {
		errs = append(errs, c.Proxy.Close())
	}
	if c.srv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		errs = append(errs, c.srv.Close(ctx))
	}
	return errors.Join(errs...)
}

// Counter counts started commands by name. Safe for concurrent use.
type Counter struct {
	mu sync.Mutex
	m  map[string]int64
}

// ignored are the commands of the driver's own machinery (handshake,
// monitoring, sessions), not of the workload.
var ignored = map[string]bool{
	"hello": true, "isMaster": true, "ismaster": true, "ping": true, "buildInfo": true,
	"endSessions": true, "saslStart": true, "saslContinue": true, "getParameter": true,
}

func (c *Counter) monitor() *event.CommandMonitor {
	return &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		if ignored[e.CommandName] {
			return
		}
		c.mu.Lock()
		c.m[e.CommandName]++
		c.mu.Unlock()
	}}
}

// Snapshot returns a copy of the counts.
func (c *Counter) Snapshot() map[string]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int64, len(c.m))
	for k, v := range c.m {
		out[k] = v
	}
	return out
}

// Reset zeroes the counts.
func (c *Counter) Reset() {
	c.mu.Lock()
	c.m = map[string]int64{}
	c.mu.Unlock()
}
