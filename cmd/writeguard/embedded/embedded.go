package embedded

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"sync"

	"github.com/FerretDB/FerretDB/ferretdb"
)

// listenAddr is the TCP address the server listens on. Port 0 lets the
// kernel pick a free port atomically (no probe-then-bind race).
const listenAddr = "127.0.0.1:0"

// newMu serialises ferretdb.New: it writes the package-level
// version.Get().Package without synchronisation, which the race detector
// reports when two servers start concurrently.
var newMu sync.Mutex

// Option configures [Start].
type Option func(*config)

type config struct {
	dataDir string
	logger  *slog.Logger
}

// WithDataDir makes the server keep its SQLite files in dir instead of a
// fresh temporary directory. dir is created (mode 0700, with parents) if it
// does not exist and is never removed by [Server.Close], so a later Start
// with the same dir sees the same databases. Only one server may use a
// given dir at a time.
//
// The files hold users' documents: Start makes dir itself 0700 (an
// existing dir open to its group or others is tightened) and its files
// 0600, and Close makes the files SQLite created meanwhile 0600 (SQLite
// creates them 0644 less the umask; the 0700 directory keeps others out
// until then).
func WithDataDir(dir string) Option {
	return func(c *config) { c.dataDir = dir }
}

// WithLogger sends FerretDB's log records to l. Without this option all of
// FerretDB's logging is discarded; pass e.g. a logger whose handler has
// Level slog.LevelError to see only errors. A nil l means discard.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) { c.logger = l }
}

// Server is a FerretDB instance running in this process. It is safe for
// concurrent use. Create it with [Start] and stop it with [Server.Close].
type Server struct {
	addr    string
	uri     string
	dataDir string

	cancel context.CancelFunc
	done   chan struct{} // closed when the run goroutine has returned
	err    error         // result of the run goroutine; read only after done
}

// Start starts FerretDB v1 with its SQLite backend in-process, listening on
// 127.0.0.1 on a port chosen by the kernel, and returns once the listener is
// bound and the backend is open, so the server accepts connections at once.
//
// State lives in a new temporary directory, removed by [Server.Close],
// unless [WithDataDir] is given. Logs are discarded unless [WithLogger] is
// given.
//
// Start checks ctx only on entry (start-up takes well under a millisecond
// and does not block); ctx does not bound the server's life, which lasts
// until [Server.Close]. Start returns ctx's error if ctx is already done, an
// error if the data directory cannot be created, or FerretDB's error if the
// backend cannot be opened or the port cannot be bound.
func Start(ctx context.Context, opts ...Option) (*Server, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("embedded: start: %w", err)
	}

	c := newConfig(opts)

	dir, removeDir, err := dataDir(c.dataDir)
	if err != nil {
		return nil, err
	}

	cleanup := func() {
		if removeDir {
			_ = os.RemoveAll(dir)
		}
	}

	abs, err := filepath.Abs(dir)
	if err != nil {
		cleanup()
		return nil, fmt.Errorf("embedded: data directory: %w", err)
	}

	f, err := newFerretDB(abs, c.logger)
	if err != nil {
		cleanup()
		return nil, fmt.Errorf("embedded: start FerretDB: %w", err)
	}

	// MongoDBURI blocks until the TCP listener is bound, which New has
	// already done; it is "mongodb://127.0.0.1:PORT/".
	base, err := url.Parse(f.MongoDBURI())
	if err != nil {
		stopFerretDB(f)

		cleanup()

		return nil, fmt.Errorf("embedded: parse FerretDB URI: %w", err)
	}

	runCtx, cancel := context.WithCancel(context.Background())
	s := &Server{
		addr:    base.Host,
		uri:     clientURI(base.Host),
		dataDir: abs,
		cancel:  cancel,
		done:    make(chan struct{}),
	}

	go s.run(runCtx, f, dir, removeDir)

	return s, nil
}

// newConfig applies opts over the defaults: a temporary data directory,
// FerretDB's logging discarded.
func newConfig(opts []Option) config {
	var c config
	for _, o := range opts {
		o(&c)
	}

	if c.logger == nil {
		c.logger = slog.New(slog.DiscardHandler)
	}

	return c
}

// stopFerretDB stops f before it ran: Run with a done context closes the
// listener, handler and backend.
func stopFerretDB(f *ferretdb.FerretDB) {
	stopped, stop := context.WithCancel(context.Background())
	stop()

	_ = f.Run(stopped)
}

// dataDir returns the directory the server keeps its files in: dir
// (created 0700 with its parents if it does not exist, made private:
// privateDir), or when dir is "" a new temporary directory, which
// removeDir says Close removes.
func dataDir(dir string) (_ string, removeDir bool, _ error) {
	if dir == "" {
		tmp, err := os.MkdirTemp("", "writeguard-ferretdb-")
		if err != nil {
			return "", false, fmt.Errorf("embedded: create temporary data directory: %w", err)
		}

		dir, removeDir = tmp, true
	} else if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", false, fmt.Errorf("embedded: create data directory: %w", err)
	} else if err := privateDir(dir); err != nil {
		return "", false, err
	}

	return dir, removeDir, nil
}

// newFerretDB creates FerretDB with its SQLite backend keeping its files
// in the directory abs (an absolute path), listening on listenAddr.
func newFerretDB(abs string, logger *slog.Logger) (*ferretdb.FerretDB, error) {
	// The SQLite backend wants a "file:" URI naming an existing directory,
	// with a trailing slash; it keeps one .sqlite file per database there.
	// FerretDB adds busy_timeout, journal_mode(wal) and auto_vacuum.
	// synchronous(normal) drops the fsync at every commit (in WAL mode a
	// crash of this process loses nothing; an OS crash or power cut may
	// lose the last commits, never corrupt the files): a single-document
	// write then costs ~0.15 ms instead of ~1.8 ms.
	sqliteURL := (&url.URL{
		Scheme:   "file",
		Path:     filepath.ToSlash(abs) + "/",
		RawQuery: url.Values{"_pragma": {"synchronous(normal)"}}.Encode(),
	}).String()

	newMu.Lock()
	f, err := ferretdb.New(&ferretdb.Config{
		Listener:  ferretdb.ListenerConfig{TCP: listenAddr},
		Logger:    logger,
		Handler:   "sqlite",
		SQLiteURL: sqliteURL,
	})
	newMu.Unlock()

	return f, err
}

// run runs f until runCtx is cancelled (Close), then makes the files of a
// kept data directory private again or removes a temporary one, and
// records the error Close returns.
func (s *Server) run(runCtx context.Context, f *ferretdb.FerretDB, dir string, removeDir bool) {
	defer close(s.done)

	// Run closes the listener when runCtx is cancelled, waits for
	// every connection goroutine, then closes the handler and the
	// SQLite backend. It always returns nil in v1.24.
	err := f.Run(runCtx)

	if !removeDir {
		err = errors.Join(err, privateDir(dir))
	}

	if removeDir {
		if rmErr := os.RemoveAll(dir); rmErr != nil {
			err = errors.Join(err, fmt.Errorf("embedded: remove temporary data directory: %w", rmErr))
		}
	}

	s.err = err
}

// privateDir makes dir mode 0700 (if it is open to its group or others)
// and the regular files in it 0600 (see WithDataDir).
func privateDir(dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("embedded: data directory: %w", err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		if err := os.Chmod(dir, fi.Mode().Perm()&0o700); err != nil {
			return fmt.Errorf("embedded: data directory: %w", err)
		}
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("embedded: data directory: %w", err)
	}
	for _, e := range ents {
		if !e.Type().IsRegular() {
			continue
		}
		info, err := e.Info()
		if err != nil || info.Mode().Perm()&0o077 == 0 {
			continue
		}
		if err := os.Chmod(filepath.Join(dir, e.Name()), info.Mode().Perm()&0o600); err != nil {
			return fmt.Errorf("embedded: data directory: %w", err)
		}
	}
	return nil
}

// clientURI returns the URI clients should use for a server at hostPort.
//
//   - directConnection=true: talk to this one host, with no topology
//     discovery.
//   - retryWrites=false: FerretDB v1 is a standalone server without
//     sessions' transaction numbers; see doc.go for what the default
//     retryWrites=true does against it.
func clientURI(hostPort string) string {
	q := url.Values{}
	q.Set("directConnection", "true")
	q.Set("retryWrites", "false")

	return (&url.URL{Scheme: "mongodb", Host: hostPort, Path: "/", RawQuery: q.Encode()}).String()
}

// URI returns a mongodb:// connection string for the server, e.g.
// "mongodb://127.0.0.1:40123/?directConnection=true&retryWrites=false",
// ready for options.Client().ApplyURI.
func (s *Server) URI() string { return s.uri }

// Addr returns the host:port the server listens on, e.g. "127.0.0.1:40123".
func (s *Server) Addr() string { return s.addr }

// DataDir returns the absolute path of the directory holding the server's
// SQLite files (the temporary directory when [WithDataDir] was not given).
func (s *Server) DataDir() string { return s.dataDir }

// Close stops the server: it closes the listener, waits for the open
// connections to finish (FerretDB gives connected clients up to 3 s to
// disconnect before it cuts them off, so disconnect clients first for a fast
// Close), closes the SQLite databases, and removes the temporary data
// directory if Start created one. After Close returns nil no goroutine of
// the server remains.
//
// If ctx is done before all that has finished, Close returns ctx's error
// and the shutdown goes on in the background; calling Close again waits for
// it. Close is idempotent: later calls return the first completed result.
// It returns an error if the temporary directory could not be removed.
func (s *Server) Close(ctx context.Context) error {
	s.cancel()

	select {
	case <-s.done:
		return s.err
	case <-ctx.Done():
		return fmt.Errorf("embedded: close: %w", ctx.Err())
	}
}
