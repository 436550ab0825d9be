package faultproxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/writeguard/writeguard/jsonschema"
)

// DefaultMaxWireVersion is the maxWireVersion the null backend reports
// (21, MongoDB 7.0). Driver v2.10 supports wire versions 9 (MongoDB 4.4)
// to 29.
const DefaultMaxWireVersion int32 = 21

// DefaultDialTimeout bounds how long the proxy waits to connect to its
// upstream server for a new client connection.
const DefaultDialTimeout = 10 * time.Second

type config struct {
	listenAddr     string
	upstream       string
	replicaSet     string
	script         *Script
	maxWireVersion int32
	dialTimeout    time.Duration
	sharding       *Sharding // WithSharded
	limits         Limits    // WithLimits
}

// Option configures a Proxy. Build one with the With* functions; New
// applies them in order and returns every bad one's error, joined.
type Option interface {
	apply(*config) error
}

// optionFunc is an Option made of a function.
type optionFunc func(*config) error

func (f optionFunc) apply(c *config) error { return f(c) }

// WithUpstream makes the proxy forward to a MongoDB-compatible server at
// hostport ("host:port"). Without it the proxy runs with the null backend:
// it answers every command itself and stores nothing.
func WithUpstream(hostport string) Option {
	return optionFunc(func(c *config) error {
		if _, _, err := net.SplitHostPort(hostport); err != nil {
			return fmt.Errorf("faultproxy: upstream %q: %w", hostport, err)
		}
		c.upstream = hostport
		return nil
	})
}

// WithReplicaSet presents the proxy as the primary of a one-member replica
// set named name, so that the driver uses sessions and retryable writes.
//
// With the null backend, hello reports setName, hosts and primary, and
// transactions can be started (the null backend answers every command).
//
// With an upstream server (WithUpstream; e.g. a standalone FerretDB or
// mongod), the upstream's hello and isMaster replies are rewritten
// (isWritablePrimary, topologyVersion, setName, setVersion, hosts,
// primary, me, secondary, electionId, and logicalSessionTimeoutMinutes 30
// when missing; awaitable hellos are streamed, each held for
// maxAwaitTimeMS but at most 500 ms), and the proxy does the server's
// retryable-write bookkeeping: an insert, update, delete or
// findAndModify carrying lsid and txnNumber is
// executed once per (lsid, txnNumber); a retry executes only the
// statements not yet executed and answers for the others from its record
// (a statement that failed runs again); an older txnNumber gets 225
// TransactionTooOld. txnNumber is not forwarded. The record keeps the last
// txnNumber of each of at most 10,000 sessions. Multi-document
// transactions (startTransaction, autocommit: false, commitTransaction,
// abortTransaction) get 20 IllegalOperation "transactions are not
// supported by the faultproxy bed".
func WithReplicaSet(name string) Option {
	return optionFunc(func(c *config) error {
		if name == "" {
			return errors.New("faultproxy: empty replica set name")
		}
		c.replicaSet = name
		return nil
	})
}

// WithScript sets the script of faults and emulated validators (see
// NewScript). Without it, or with a nil s, the proxy forwards everything
// unchanged (SetScript can install one later).
func WithScript(s *Script) Option {
	return optionFunc(func(c *config) error { c.script = s; return nil })
}

// WithListenAddr sets the address to listen on (default "127.0.0.1:0": a
// free loopback port).
func WithListenAddr(addr string) Option {
	return optionFunc(func(c *config) error {
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return fmt.Errorf("faultproxy: listen address %q: %w", addr, err)
		}
		c.listenAddr = addr
		return nil
	})
}

// WithMaxWireVersion sets the maxWireVersion the null backend reports
// (default DefaultMaxWireVersion); it must be within what the driver
// supports (9..29 for driver v2.10). Fail points add the
// RetryableWriteError label themselves only from wire version 9 (MongoDB
// 4.4), as the server does.
func WithMaxWireVersion(v int32) Option {
	return optionFunc(func(c *config) error {
		if v < 9 {
			return fmt.Errorf("faultproxy: maxWireVersion %d is below the driver's minimum (9)", v)
		}
		c.maxWireVersion = v
		return nil
	})
}

// WithDialTimeout bounds the connection to the upstream server (default
// DefaultDialTimeout).
func WithDialTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("faultproxy: dial timeout %v must be positive", d)
		}
		c.dialTimeout = d
		return nil
	})
}

// Proxy is a fault-injecting MongoDB wire-protocol proxy. Create it with
// New, start it with Start, point a driver at URI(), and Close it. All
// methods are safe for concurrent use.
type Proxy struct {
	cfg        config
	script     atomic.Pointer[Script]
	counters   *counters
	connIDs    atomic.Int64
	txns       *txnTable     // retryable-write records (replica-set mode)
	failPoints *failPoints   // configureFailPoint state
	vlog       validationLog // validation failures logged (warn, errorAndLog)
	procID     bson.ObjectID // topologyVersion.processId (replica-set mode)
	updates    sync.Mutex    // held while an update goes upstream (isolate)

	hidden atomic.Pointer[HiddenAttempts] // NewHiddenAttempts (hidden.go)

	parkMu sync.Mutex
	parked []net.Conn // upstream connections of closed sessions (park)

	topoMu      sync.Mutex
	topoCh      chan struct{} // closed to answer the awaitable hellos now
	topoCounter int64         // topologyVersion.counter

	mu       sync.Mutex
	ln       net.Listener
	addr     string
	sessions map[*session]struct{}
	started  bool
	closed   bool
	done     chan struct{}
	ctx      context.Context // cancelled by Close
	cancel   context.CancelFunc
	wg       sync.WaitGroup
}

// New returns an unstarted proxy. It applies opts in order and returns
// the errors of every bad option (a nil Option among them, named by its
// position), joined with errors.Join; it never panics.
func New(opts ...Option) (*Proxy, error) {
	cfg := config{
		listenAddr:     "127.0.0.1:0",
		maxWireVersion: DefaultMaxWireVersion,
		dialTimeout:    DefaultDialTimeout,
	}
	var errs []error
	for i, o := range opts {
		if o == nil {
			errs = append(errs, fmt.Errorf("faultproxy: option %d is nil", i))
			continue
		}
		if err := o.apply(&cfg); err != nil {
			errs = append(errs, err)
		}
	}
	if cfg.sharding != nil && cfg.replicaSet != "" {
		errs = append(errs, errShardingAndReplicaSet)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	p := &Proxy{
		cfg:        cfg,
		counters:   newCounters(),
		txns:       newTxnTable(),
		failPoints: &failPoints{},
		procID:     bson.NewObjectID(),
		topoCh:     make(chan struct{}),
		sessions:   map[*session]struct{}{},
		done:       make(chan struct{}),
	}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	p.script.Store(cfg.script)
	return p, nil
}

// Start listens (on 127.0.0.1 and a free port unless WithListenAddr says
// otherwise) and serves connections in the background until Close. ctx
// bounds the listen call only. It returns an error if the proxy was
// already started or closed, or if it cannot listen.
func (p *Proxy) Start(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.closed:
		return errors.New("faultproxy: Start after Close")
	case p.started:
		return errors.New("faultproxy: already started")
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", p.cfg.listenAddr)
	if err != nil {
		return fmt.Errorf("faultproxy: listen: %w", err)
	}
	p.ln, p.addr, p.started = ln, ln.Addr().String(), true
	p.wg.Add(1)
	go p.acceptLoop(ln)
	return nil
}

// Addr returns the "host:port" the proxy listens on ("" before Start).
func (p *Proxy) Addr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.addr
}

// URI returns a connection string for the proxy,
// "mongodb://<Addr>/?directConnection=true", so that the driver talks to
// the proxy only and never to hosts named in hello replies.
func (p *Proxy) URI() string {
	return "mongodb://" + p.Addr() + "/?directConnection=true"
}

// SetScript replaces the script (nil: no faults, no validators). Commands
// already being handled finish with the old one.
func (p *Proxy) SetScript(s *Script) { p.script.Store(s) }

// Stats returns a snapshot of the counters.
func (p *Proxy) Stats() Stats { return p.counters.snapshot() }

// Reset zeroes the counters and the current script's occurrence counts,
// so that the next matching command is occurrence 1 again. Fail points
// (configureFailPoint) and the retryable-write records are kept.
func (p *Proxy) Reset() {
	p.counters.reset()
	p.script.Load().reset()
}

// Close stops the proxy: it closes the listener and every client and
// upstream connection, cuts Delay waits short, and waits for all its
// goroutines to return. It is idempotent and returns nil unless closing
// the listener failed.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	close(p.done)
	p.cancel()
	var err error
	if p.ln != nil {
		if cerr := p.ln.Close(); cerr != nil && !errors.Is(cerr, net.ErrClosed) {
			err = cerr
		}
	}
	for s := range p.sessions {
		s.closeConns()
	}
	p.mu.Unlock()
	p.wg.Wait()
	p.parkMu.Lock()
	for _, c := range p.parked {
		_ = c.Close()
	}
	p.parked = nil
	p.parkMu.Unlock()
	return err
}

// park keeps the upstream connection c of a closed session open until
// Close. MongoDB keeps a cursor when the connection that opened it closes
// (it times out idle, or dies with its session), and a driver sends the
// getMore on whichever pooled connection it checks out. FerretDB v1 closes
// the cursors of a connection when it closes, and a getMore that races the
// close finds the cursor with its iterator gone and answers an empty last
// batch, not CursorNotFound (internal/clientconn/cursor: Registry.NewCursor
// closes on the connection's context, Cursor.Close drops the iterator
// before the registry entry): a paged find (find and getMore batches are
// capped under Limits) silently loses documents when a fault closes the
// connection that opened it. Kept open, the upstream connection keeps its
// cursors; nothing is sent on it again.
func (p *Proxy) park(c net.Conn) {
	p.parkMu.Lock()
	defer p.parkMu.Unlock()
	if p.ctx.Err() != nil {
		_ = c.Close()
		return
	}
	p.parked = append(p.parked, c)
}

func (p *Proxy) acceptLoop(ln net.Listener) {
	defer p.wg.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return
		}
		s := &session{p: p, client: c, connID: p.connIDs.Add(1)}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			_ = c.Close()
			return
		}
		p.sessions[s] = struct{}{}
		p.wg.Add(1)
		p.mu.Unlock()
		p.counters.connection()
		go s.serve()
	}
}

// session is one client connection and its upstream connection.
type session struct {
	p      *Proxy
	client net.Conn
	connID int64

	mu      sync.Mutex
	backend net.Conn
	closed  bool

	txn     *txnCtx // the retryable write being executed (replica-set mode)
	appName string  // client.application.name of the handshake

	hiddenSeen bool // the session's first message went through hiddenGate
}

var errCloseClient = errors.New("faultproxy: closing the client connection")

func (s *session) closeConns() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	_ = s.client.Close()
	if s.backend != nil {
		s.p.park(s.backend)
		s.backend = nil
	}
}

func (s *session) serve() {
	defer func() {
		s.closeConns()
		s.p.mu.Lock()
		delete(s.p.sessions, s)
		s.p.mu.Unlock()
		s.p.wg.Done()
	}()
	for {
		m, err := readMessage(s.client)
		if err != nil {
			return
		}
		if err := s.handle(m); err != nil {
			return
		}
	}
}

// upstream returns the session's upstream connection, dialing it on first
// use.
func (s *session) upstream() (net.Conn, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, net.ErrClosed
	}
	if s.backend != nil {
		return s.backend, nil
	}
	ctx, cancel := context.WithTimeout(s.p.ctx, s.p.cfg.dialTimeout)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", s.p.cfg.upstream)
	if err != nil {
		return nil, fmt.Errorf("faultproxy: dial upstream: %w", err)
	}
	s.backend = c
	return c, nil
}

func (s *session) null() bool { return s.p.cfg.upstream == "" }

func (s *session) writeClient(b []byte) error {
	_, err := s.client.Write(b)
	return err
}

// roundTrip sends raw to the upstream server and reads its reply (none
// when expectReply is false).
func (s *session) roundTrip(raw []byte, expectReply bool) (*message, error) {
	up, err := s.upstream()
	if err != nil {
		return nil, err
	}
	if _, err := up.Write(raw); err != nil {
		return nil, err
	}
	if !expectReply {
		return nil, nil
	}
	return readMessage(up)
}

// relayStream relays upstream replies to the client while they carry
// moreToCome (exhaust cursors, streaming hello).
func (s *session) relayStream(reply *message) error {
	for {
		if err := s.writeClient(reply.raw); err != nil {
			return err
		}
		if !moreToCome(reply) {
			return nil
		}
		up, err := s.upstream()
		if err != nil {
			return err
		}
		if reply, err = readMessage(up); err != nil {
			return err
		}
	}
}

func (s *session) handle(m *message) error {
	if err := s.hiddenGate(); err != nil {
		return err
	}
	switch m.opcode {
	case opMsgCode:
		return s.handleMsg(m)
	case opQueryCode:
		return s.handleQuery(m)
	}
	if s.null() {
		return fmt.Errorf("faultproxy: null backend cannot answer opcode %v", m.opcode)
	}
	reply, err := s.roundTrip(m.raw, true)
	if err != nil {
		return err
	}
	return s.relayStream(reply)
}

// handleQuery handles a legacy OP_QUERY: the driver's first handshake
// message is an OP_QUERY isMaster on admin.$cmd.
func (s *session) handleQuery(m *message) error {
	q, err := parseOpQuery(m.raw)
	if err != nil {
		return err
	}
	query := bson.Raw(q.query)
	if inner, err := query.LookupErr("$query"); err == nil {
		if d, ok := inner.DocumentOK(); ok {
			query = d
		}
	}
	cmd := &Command{Body: query, Legacy: true, RequestID: m.requestID}
	cmd.fillNames()
	if db, _, ok := cutLast(q.collection, "."); ok {
		cmd.Database = db
	}
	cmd.fillNamespace()
	s.p.counters.command(cmd, 0)
	if name, ok := clientAppName(cmd.Body); ok && isHello(cmd.Name) {
		s.appName = name
	}
	if !s.null() {
		reply, err := s.roundTrip(m.raw, true)
		if err != nil {
			return err
		}
		if s.rewritesHello() && isHello(cmd.Name) {
			body, err := replyBody(reply)
			if err != nil {
				return err
			}
			if body, err = s.p.rewriteHello(body, true); err != nil {
				return err
			}
			return s.writeClient(encodeOpReply(body, m.requestID))
		}
		return s.writeClient(reply.raw)
	}
	body, err := bson.Marshal(s.p.nullReply(cmd, s.connID))
	if err != nil {
		return err
	}
	return s.writeClient(encodeOpReply(body, m.requestID))
}

func cutLast(s, sep string) (before, after string, found bool) {
	for i := len(s) - len(sep); i >= 0; i-- {
		if s[i:i+len(sep)] == sep {
			return s[:i], s[i+len(sep):], true
		}
	}
	return s, "", false
}

// forward sends cmd (re-encoded) to the upstream server or the null
// backend and returns the reply document. A part of a retryable write in
// replica-set mode goes through the retryable-write record.
func (s *session) forward(cmd *Command) (bson.Raw, error) {
	if s.txn != nil && isRetryableWrite(cmd.Name) {
		return s.forwardRetryable(s.txn, cmd)
	}
	return s.forwardPlain(cmd)
}

// forwardPlain sends cmd (re-encoded) to the upstream server or the null
// backend and returns the reply document.
func (s *session) forwardPlain(cmd *Command) (bson.Raw, error) {
	s.p.counters.forward(cmd.Name, len(cmd.Statements()))
	if s.null() {
		return bson.Marshal(s.p.nullReply(cmd, s.connID))
	}
	release := s.isolate(cmd.Name)
	reply, err := s.roundTrip(cmd.encode(0), true)
	release()
	if err != nil {
		return nil, err
	}
	return replyBody(reply)
}

// isolate holds the proxy's update lock while an update or findAndModify
// command goes upstream, and returns the function that releases it (a
// no-op for every other command). MongoDB applies each statement to its
// document atomically (WiredTiger's document-level concurrency control):
// two concurrent $inc of one document both count. FerretDB v1, the bed's
// store, does not: it reads the matching documents, applies the update in
// Go and writes the whole document back, with nothing between the read
// and the write (internal/handler/msg_update.go updateDocument: Query,
// common.UpdateDocument, UpdateAll), so one of two concurrent updates of
// a document is lost although both are acknowledged (measured: 16
// writers, 320 $inc acknowledged with nModified 1, 88 stored). Sent one
// at a time through the proxy, updates keep MongoDB's atomicity there
// too; against a MongoDB upstream the lock costs throughput only.
func (s *session) isolate(name string) (release func()) {
	if name != "update" && name != "findAndModify" && name != "findandmodify" {
		return func() {}
	}
	s.p.updates.Lock()
	return s.p.updates.Unlock
}

func (s *session) handleMsg(m *message) error {
	om, err := parseOpMsg(m.raw)
	if err != nil {
		if s.null() {
			return err
		}
		reply, err := s.roundTrip(m.raw, !moreToCome(m))
		if err != nil || reply == nil {
			return err
		}
		return s.relayStream(reply)
	}
	x := &exchange{m: m, om: om, cmd: newCommand(om, m.requestID), noReply: om.moreToCome()}
	x.stmts = x.cmd.Statements()
	s.p.counters.command(x.cmd, statementCount(x.cmd, x.stmts))
	if name, ok := clientAppName(x.cmd.Body); ok && isHello(x.cmd.Name) {
		s.appName = name
	}
	if x.cmd.Name == "configureFailPoint" {
		return s.sendBody(m.requestID, s.p.failPoints.configure(x.cmd))
	}
	if done, err := s.failPointFires(x); done {
		return err
	}
	if d := s.p.batchTooLarge(x.cmd, x.stmts); d != nil {
		return s.reply(x, d)
	}
	x.rsHello = s.rewritesHello() && isHello(x.cmd.Name)
	if s.emulated() {
		if inTransaction(x.cmd) {
			return s.reply(x, errTransactions())
		}
		if t := s.beginRetryable(x.cmd); t != nil {
			s.txn = t
			defer func() {
				s.txn = nil
				t.rec.mu.Unlock()
			}()
		}
	}
	if done, err := s.collMod(x); done {
		return err
	}
	s.fireScript(x)
	if x.rsHello && !x.fired && s.emulated() {
		return s.serveHello(x.cmd, m.requestID, om.exhaustAllowed())
	}
	if done, err := s.answerFault(x); done {
		return err
	}
	return s.forwardAndReply(x)
}

// exchange is one OP_MSG command on its way through the proxy.
type exchange struct {
	m         *message
	om        *opMsg
	cmd       *Command
	stmts     []bson.Raw
	noReply   bool // moreToCome: the client expects no reply
	rsHello   bool // a hello to rewrite as a replica-set primary's
	fpa       failAction
	fault     Fault
	fired     bool
	validator *jsonschema.Validator
	wceDone   bool // a WriteConcernErrorReply fault was applied per shard
}

// reply sends body to the client unless it expects no reply.
func (s *session) reply(x *exchange, body bson.D) error {
	if x.noReply {
		return nil
	}
	return s.sendBody(x.m.requestID, body)
}

// failPointFires applies a configured fail point: done is true when it
// answered the command (an error reply, a closed connection).
func (s *session) failPointFires(x *exchange) (done bool, err error) {
	x.fpa = s.p.failPointAction(x.cmd, s.appName)
	fpa := x.fpa
	if !fpa.fired {
		return false, nil
	}
	s.p.counters.fault(FaultFailPoint, 1)
	if fpa.block > 0 && !s.sleep(fpa.block) {
		return true, errCloseClient
	}
	if fpa.errReply != nil && stateChangeCodes[fpa.code] {
		s.p.topologyEvent()
	}
	switch {
	case fpa.closeConn:
		return true, errCloseClient
	case fpa.errReply != nil:
		return true, s.reply(x, fpa.errReply)
	}
	return false, nil
}

// fireScript asks the script for a fault, counts it, and reports a
// topology change for the error codes that make the driver look again.
func (s *session) fireScript(x *exchange) {
	script := s.p.script.Load()
	x.fault, x.fired = script.fire(x.cmd)
	f := x.fault
	if x.fired && f.kind != FaultDocument {
		s.p.counters.fault(f.kind, 1)
	}
	if x.fired && (f.kind == FaultErrorReply || f.kind == FaultApplyThenError) && stateChangeCodes[f.cmdErr.Code] ||
		x.fired && f.kind == FaultWriteConcernError && stateChangeCodes[f.wce.Code] {
		s.p.topologyEvent()
	}
	if x.cmd.Name == "insert" {
		x.validator = s.insertValidation(x, script)
	}
}

// answerFault carries out the faults that answer without the normal
// forwarding: done is true when the command is answered.
func (s *session) answerFault(x *exchange) (done bool, err error) {
	if !x.fired {
		return false, nil
	}
	switch f := x.fault; f.kind {
	case FaultApplyThenError, FaultApplyThenClose:
		if err := s.applyFirst(x.cmd, f.k, x.validator); err != nil {
			return true, err
		}
		if f.kind == FaultApplyThenClose {
			return true, errCloseClient
		}
		return true, s.reply(x, s.p.errorReply(f.cmdErr))
	case FaultErrorReply, FaultRateLimited:
		return true, s.reply(x, s.p.errorReply(f.cmdErr))
	case FaultCloseBeforeForward:
		return true, errCloseClient
	case FaultCustom, FaultReplyLost, FaultHiddenRetry, FaultMultiRefused:
		reply, err := f.handler(x.cmd, s.forward)
		if err != nil || x.noReply || reply == nil {
			return true, err
		}
		return true, s.writeClient(encodeReplyMsg(reply, x.m.requestID))
	}
	return false, nil
}

// forwardAndReply forwards the command (relaying the server's bytes
// unchanged when nothing needs changing) and replies with what the faults
// and fail points add.
func (s *session) forwardAndReply(x *exchange) error {
	var docFault *Fault
	if x.fired && x.fault.kind == FaultDocument {
		docFault = &x.fault
	}
	sharded := s.shardedWrite(x)
	perDoc := len(x.stmts) > 0 && (x.validator != nil || docFault != nil)
	modify := sharded || perDoc || (x.fired && x.fault.kind == FaultWriteConcernError) || x.fpa.wce != nil
	// A moreToCome request (an unacknowledged write) goes upstream
	// re-encoded without the flag, and the reply is read and dropped
	// (x.noReply): an upstream that answers it anyway (FerretDB) would
	// otherwise leave that reply to the next command of the connection.
	modify = modify || x.noReply
	capped, err := s.p.cappedRead(x.cmd)
	if err != nil {
		return err
	}
	if capped != nil {
		x.cmd, modify = capped, true
	}
	if !modify && !s.null() && s.txn == nil && !x.rsHello {
		// Plain forwarding: relay the server's bytes unchanged.
		s.p.counters.forward(x.cmd.Name, len(x.stmts))
		release := s.isolate(x.cmd.Name)
		reply, err := s.roundTrip(x.m.raw, !x.noReply)
		release()
		if err != nil || reply == nil {
			return err
		}
		if x.fired {
			if err := s.postForward(x.fault); err != nil {
				return err
			}
		}
		return s.relayStream(reply)
	}
	var body bson.Raw
	switch {
	case sharded:
		body, err = s.execSharded(x, docFault)
	case perDoc:
		body, err = s.execStatements(x.cmd, x.stmts, x.validator, docFault)
	default:
		body, err = s.forward(x.cmd)
	}
	if err == nil && x.rsHello {
		body, err = s.p.rewriteHello(body, x.cmd.Name != "hello")
	}
	if err != nil || x.noReply {
		return err
	}
	if body, err = s.addErrors(x, body); err != nil {
		return err
	}
	return s.writeClient(encodeReplyMsg(body, x.m.requestID))
}

// addErrors adds to a forwarded reply what the fired fault and fail point
// add after the write ran: a write concern error, the topology version.
func (s *session) addErrors(x *exchange, body bson.Raw) (bson.Raw, error) {
	var err error
	if x.fired {
		if err := s.postForward(x.fault); err != nil {
			return nil, err
		}
		if x.fault.kind == FaultWriteConcernError && !x.wceDone {
			if body, err = addWriteConcernError(body, x.fault.wce); err != nil {
				return nil, err
			}
			if body, err = s.p.withTopologyVersion(body, x.fault.wce.Code); err != nil {
				return nil, err
			}
		}
	}
	if x.fpa.wce != nil {
		if body, err = addFailPointWCE(body, x.fpa.wce, x.fpa.labels); err != nil {
			return nil, err
		}
		code, _ := x.fpa.wce.Lookup("code").AsInt64OK()
		if stateChangeCodes[int32(code)] {
			s.p.topologyEvent()
		}
		if body, err = s.p.withTopologyVersion(body, int32(code)); err != nil {
			return nil, err
		}
	}
	return body, nil
}

// applyFirst forwards the first k statements of cmd (the whole command
// when it has no statements and k > 0) and discards the reply: the
// execution half of ApplyThenError and ApplyThenClose. An emulated
// validator still checks the forwarded statements.
func (s *session) applyFirst(cmd *Command, k int, v *jsonschema.Validator) error {
	if !hasStatements(cmd.Name) {
		if k == 0 {
			return nil
		}
		_, err := s.forward(cmd)
		return err
	}
	sub := cmd.firstStatements(k)
	stmts := sub.Statements()
	if len(stmts) == 0 {
		return nil
	}
	var err error
	if v != nil {
		_, err = s.execStatements(sub, stmts, v, nil)
	} else {
		_, err = s.forward(sub)
	}
	return err
}

// postForward applies the part of a fault that acts after the command was
// forwarded and before the reply is relayed.
func (s *session) postForward(f Fault) error {
	switch f.kind {
	case FaultCloseAfterForward:
		return errCloseClient
	case FaultDelay:
		if !s.sleep(f.delay) {
			return errCloseClient
		}
	}
	return nil
}

// sleep waits for d; it returns false if the proxy closed meanwhile.
func (s *session) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-s.p.done:
		return false
	}
}

func (s *session) sendBody(responseTo int32, d bson.D) error {
	b, err := bson.Marshal(d)
	if err != nil {
		return err
	}
	return s.writeClient(encodeReplyMsg(b, responseTo))
}

func statementCount(cmd *Command, stmts []bson.Raw) int {
	if cmd.Name == "bulkWrite" {
		for _, sq := range cmd.Sequences {
			if sq.Identifier == "ops" {
				return len(sq.Documents)
			}
		}
	}
	return len(stmts)
}

func errorReplyDoc(e CommandError) bson.D {
	msg := e.Message
	if msg == "" {
		msg = fmt.Sprintf("faultproxy: injected error %d", e.Code)
	}
	d := bson.D{
		{Key: "ok", Value: 0.0},
		{Key: "errmsg", Value: msg},
		{Key: "code", Value: e.Code},
	}
	if e.CodeName != "" {
		d = append(d, bson.E{Key: "codeName", Value: e.CodeName})
	}
	if len(e.Labels) > 0 {
		d = append(d, bson.E{Key: "errorLabels", Value: e.Labels})
	}
	return append(d, e.Extra...)
}
