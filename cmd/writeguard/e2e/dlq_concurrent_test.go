package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
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
	"github.com/writeguard/writeguard/replay"
)

// dlInsertCounter adds up the documents the server acknowledged as
// inserted into one collection (the "n" of each insert reply).
type dlInsertCounter struct {
	coll string
	mu   sync.Mutex
	reqs map[int64]bool
	n    int64
}

func (c *dlInsertCounter) monitor() *event.CommandMonitor {
	return &event.CommandMonitor{
		Started: func(_ context.Context, e *event.CommandStartedEvent) {
			if e.CommandName != "insert" {
				return
			}
			if s, ok := e.Command.Lookup("insert").StringValueOK(); ok && s == c.coll {
				c.mu.Lock()
				c.reqs[e.RequestID] = true
				c.mu.Unlock()
			}
		},
		Succeeded: func(_ context.Context, e *event.CommandSucceededEvent) {
			c.mu.Lock()
			defer c.mu.Unlock()
			if !c.reqs[e.RequestID] {
				return
			}
			delete(c.reqs, e.RequestID)
			if n, ok := e.Reply.Lookup("n").AsInt64OK(); ok {
				c.n += n
			}
		},
	}
}

func (c *dlInsertCounter) total() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// dlCrashTarget writes through its target, and on its crashAt-th
// BulkWrite calls reached (the other runners start then), writes, waits
// until another runner has marked a batch (others), then cuts the runner
// off from the DLQ (its client disconnected) and cancels its context: a
// runner dying between the write and the marking of its envelopes,
// leases held.
type dlCrashTarget struct {
	*writeguard.Guarded
	crashAt   int
	calls     int
	reached   func()
	others    <-chan struct{}
	crash     func()
	wroteLast int
}

func (c *dlCrashTarget) BulkWrite(ctx context.Context, models []mongo.WriteModel, opts ...options.Lister[options.BulkWriteOptions]) (*mongo.BulkWriteResult, error) {
	c.calls++
	if c.calls == c.crashAt {
		c.reached()
	}
	res, err := c.Guarded.BulkWrite(ctx, models, opts...)
	if c.calls == c.crashAt {
		c.wroteLast = len(models)
		select {
		case <-c.others:
		case <-ctx.Done():
		}
		c.crash()
	}
	return res, err
}

// dlSQLiteBusy classifies FerretDB's "database is locked (SQLITE_BUSY)"
// InternalError as transient: the embedded server answers it when writers
// of one database collide (here four runners, their leases and the
// target share one SQLite file), and the write, not applied, succeeds
// when sent again.
var dlSQLiteBusy = policy.ClassifierFunc(func(f policy.Failure) policy.Class {
	if f.Code == 1 && strings.Contains(f.Message, "SQLITE_BUSY") {
		return policy.Transient
	}
	return policy.Unknown
})

// dlConcurrentSize returns the envelopes, batch size and lease of
// TestDLReplayConcurrentRunners. On this bed each envelope marked costs a
// scan of the whole DLQ (FerretDB v1 updates a document by an UPDATE ...
// WHERE _id that uses no index: ~24 µs per stored envelope), so marking N
// envelopes costs N² row reads: 1,000 take ~50 s with four runners; the
// issue's 5,000 would take over 10 minutes, and a race build is tens of
// times slower. WRITEGUARD_REPLAY_ENVELOPES sets another count (e.g. 5000
// for a long run, with go test -timeout 60m); limit bounds each runner.
func dlConcurrentSize() (total, batch int, lease, limit time.Duration) {
	total, batch, lease, limit = 1000, 100, 15*time.Second, 5*time.Minute
	if dlRace {
		total, batch, lease = 120, 15, 30*time.Second
	}
	if n, err := strconv.Atoi(os.Getenv("WRITEGUARD_REPLAY_ENVELOPES")); err == nil && n > 0 {
		// A batch's marks cost batch × n row reads: give it room.
		total, batch, lease, limit = n, max(n/20, 10), max(lease, time.Duration(n/20)*time.Duration(n)*50*time.Microsecond), 50*time.Minute
	}
	return total, batch, lease, limit
}

// dlSeedBacklog stores n pending insert envelopes for the bed's target,
// originals {_id: "doc-00042", sku, qty}.
func dlSeedBacklog(t *testing.T, b *dlBed, n int) {
	t.Helper()
	sink := dlq.NewMongoSink(b.dlq, dlq.WithInsertFirst())
	for lo := 0; lo < n; lo += 1000 {
		var envs []envelope.Envelope
		for i := lo; i < min(lo+1000, n); i++ {
			orig, err := bson.Marshal(dlDoc("_id", fmt.Sprintf("doc-%05d", i), "sku", fmt.Sprintf("S%d", i), "qty", int32(i%7+1)))
			if err != nil {
				t.Fatal(err)
			}
			envs = append(envs, envelope.Envelope{Original: orig, Code: 121, Namespace: b.ns(), Operation: "insertMany",
				BatchIndex: i, FailingKeywords: []string{"minimum"}, FailingPaths: []string{"qty"}})
		}
		if err := sink.Put(b.ctx, envs); err != nil {
			t.Fatal(err)
		}
	}
}

// TestDLReplayConcurrentRunners: 4 runners (each with its own clients,
// as 4 processes would have) drain a backlog of pending envelopes at once
// (see dlConcurrentSize); one dies mid-batch, after writing its first
// batch to the target and before marking it (the other three start when
// it has claimed that batch, so it always has one, and it dies once one
// of them has marked a batch: events, not times). Its leases expire and the others take its envelopes over,
// meeting their documents by _id. In the end every envelope is replayed
// once: the runners' counts add up to 5,000, the server acknowledged
// 5,000 inserts into the target in all (no document written twice), and
// no lease is left (the dead runner's are deleted by those that took its
// envelopes over).
func TestDLReplayConcurrentRunners(t *testing.T) {
	const runners = 4
	total, batch, lease, limit := dlConcurrentSize()
	b := newDLBed(t, nil)
	t0 := time.Now()
	dlSeedBacklog(t, b, total)
	t.Logf("seeded %d envelopes in %v", total, time.Since(t0))
	inserts := &dlInsertCounter{coll: dlTarget, reqs: map[int64]bool{}}

	connect := func() *mongo.Client {
		c, err := mongo.Connect(options.Client().ApplyURI(dlServer.URI()).SetMonitor(inserts.monitor()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Disconnect(context.Background()) })
		return c
	}
	type outcome struct {
		res replay.Result
		err error
	}
	outs := make([]outcome, runners)
	var crash *dlCrashTarget
	var wg sync.WaitGroup
	started, othersMarked := make(chan struct{}), make(chan struct{})
	start := sync.OnceFunc(func() { close(started) })
	marked := sync.OnceFunc(func() { close(othersMarked) })
	t0 = time.Now()
	for i := range runners {
		dlqClient, targetClient := connect(), connect()
		g, err := writeguard.Wrap(targetClient.Database(b.dbName).Collection(dlTarget), writeguard.WithBackoff(dlFastBackoff),
			writeguard.WithClassifier(dlSQLiteBusy))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(b.ctx, limit)
		t.Cleanup(cancel)
		var target writeguard.Collection = g
		if i == runners-1 {
			crash = &dlCrashTarget{Guarded: g, crashAt: 1, reached: start, others: othersMarked, crash: func() {
				_ = dlqClient.Disconnect(context.Background())
				cancel()
			}}
			target = crash
		}
		opts := []replay.Option{replay.WithBatchSize(batch), replay.WithLease(lease), replay.WithRunID("drain-1"),
			replay.WithOwner(fmt.Sprintf("runner-%d", i)), replay.WithFilter(dlq.Filter{Namespaces: []string{b.ns()}})}
		dlq := dlqClient.Database(b.dbName).Collection(dlDLQ)
		dying := i == runners-1
		if !dying {
			opts = append(opts, replay.WithProgress(func(replay.Progress) { marked() }))
		}
		wg.Go(func() {
			if !dying {
				select {
				case <-started:
				case <-ctx.Done():
				}
			}
			res, err := replay.Run(ctx, dlq, target, opts...)
			outs[i] = outcome{res, err}
			if dying {
				start() // in case it died before its first write
			}
		})
	}
	wg.Wait()
	t.Logf("4 runners drained %d envelopes (batches of %d, lease %v) in %v", total, batch, lease, time.Since(t0))

	var sum replay.Result
	for i, o := range outs {
		t.Logf("runner-%d: %d batches, replayed %d (%d by duplicate), leases held by others met %d, err %v",
			i, o.res.Batches, o.res.Replayed, o.res.ReplayedByDuplicate, o.res.LeasesHeld, o.err)
		if i < runners-1 && o.err != nil {
			t.Errorf("runner-%d: %v", i, o.err)
		}
		sum.Replayed += o.res.Replayed
		sum.ReplayedByDuplicate += o.res.ReplayedByDuplicate
		sum.StillInvalid += o.res.StillInvalid
		sum.Conflicts += o.res.Conflicts
		sum.Failed += o.res.Failed
		sum.Skipped += o.res.Skipped
	}
	dead := outs[runners-1]
	if dead.err == nil || !errors.Is(dead.err, context.Canceled) && !errors.Is(dead.err, mongo.ErrClientDisconnected) {
		t.Errorf("the dying runner returned %v, want its cancellation or lost client", dead.err)
	}
	if crash.calls != crash.crashAt || crash.wroteLast == 0 {
		t.Fatalf("the dying runner made %d writes of %d documents, want it to die in its first", crash.calls, crash.wroteLast)
	}
	if dead.res.Batches != 0 || dead.res.Replayed != 0 {
		t.Errorf("the dying runner counted %d batches, %d replayed; want none (it marked nothing)", dead.res.Batches, dead.res.Replayed)
	}
	if sum.Replayed != int64(total) {
		t.Errorf("the runners counted %d envelopes replayed, want %d exactly", sum.Replayed, total)
	}
	// At least the dying runner's documents are met by _id (a live runner
	// that overran its lease would add its own).
	if sum.ReplayedByDuplicate < int64(crash.wroteLast) {
		t.Errorf("%d replayed by duplicate, want at least the %d documents the dying runner wrote and never marked", sum.ReplayedByDuplicate, crash.wroteLast)
	}
	if sum.StillInvalid+sum.Conflicts+sum.Failed+sum.Skipped != 0 {
		t.Errorf("outcomes other than replayed: %+v", sum.Counts)
	}
	if n := inserts.total(); n != int64(total) {
		t.Errorf("the server acknowledged %d inserts into the target, want %d (one per document)", n, total)
	}
	if n := b.count(dlTarget, bson.D{}); n != int64(total) {
		t.Errorf("target holds %d documents, want %d", n, total)
	}
	if n := b.count(dlDLQ, bson.D{{Key: "status", Value: envelope.StatusReplayed}, {Key: "replay_run", Value: "drain-1"}}); n != int64(total) {
		t.Errorf("%d envelopes replayed by the run, want %d", n, total)
	}
	if n := b.count(dlDLQ, bson.D{{Key: "attempts", Value: bson.D{{Key: "$ne", Value: 1}}}}); n != 0 {
		t.Errorf("%d envelopes with attempts ≠ 1", n)
	}
	st, err := dlq.Stats(b.ctx, b.dlq, dlq.Filter{})
	if err != nil || st.Envelopes != int64(total) || st.Attempts != int64(total) || st.Pending != 0 || len(st.ByStatus) != 1 || st.ByStatus[0].Envelopes != int64(total) {
		t.Errorf("stats %+v, %v", st, err)
	}
	leases := dlDLQ + replay.LeaseCollectionSuffix
	claims := bson.D{{Key: "key", Value: bson.D{{Key: "$exists", Value: true}}}}
	if n := b.count(leases, append(claims, bson.E{Key: "owner", Value: bson.D{{Key: "$ne", Value: fmt.Sprintf("runner-%d", runners-1)}}})); n != 0 {
		t.Errorf("%d leases of live runners left, want 0 (released)", n)
	}
	// The dying runner's leases are deleted by the runners that took its
	// envelopes over, once they marked them.
	if n := b.count(leases, claims); n != 0 {
		t.Errorf("%d leases left, want 0 (the dying runner's %d deleted once taken over)", n, crash.wroteLast)
	}
	if n := b.count(leases, bson.D{{Key: "run", Value: "drain-1"}, {Key: "outcome", Value: "replayed"}}); n+
		b.count(leases, bson.D{{Key: "run", Value: "drain-1"}, {Key: "outcome", Value: "replayed_by_duplicate"}}) != int64(total) {
		t.Errorf("done records: %d replayed (+ by duplicate), want %d in all", n, total)
	}
}

// TestDLReplayWorkersTryOncePerRun: with three workers and one envelope
// per batch, envelopes rejected again are tried once by the run (attempts
// + 1, not + 3): the workers skip what another of them tried. A second
// run tries them again.
func TestDLReplayWorkersTryOncePerRun(t *testing.T) {
	b := newDLBed(t, dlSchema)
	dlBacklog(t, b)
	for run := 1; run <= 2; run++ {
		res, err := replayRun(b, b.replayTarget(), replay.WithWorkers(3), replay.WithBatchSize(1), replay.WithLease(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if res.Scanned != 5 || res.StillInvalid != 5 || res.Batches != 5 {
			t.Errorf("run %d: %+v, want 5 envelopes tried once each, in 5 batches", run, res)
		}
		for _, e := range b.envelopes() {
			if e.Attempts != 1+run || e.Status != envelope.StatusPending || e.ReplayRun == "" {
				t.Errorf("run %d: envelope %v: attempts %d, status %s, replay_run %q", run, e.DocumentID, e.Attempts, e.Status, e.ReplayRun)
			}
		}
	}
	if n := b.count(dlDLQ+replay.LeaseCollectionSuffix, bson.D{{Key: "key", Value: bson.D{{Key: "$exists", Value: true}}}}); n != 0 {
		t.Errorf("%d leases left after two complete runs", n)
	}
}

// dlCommandBinary builds the writeguard command once per test binary and
// returns its path (removed by TestMain).
func dlCommandBinary(t *testing.T) string {
	t.Helper()
	dlBinOnce.Do(func() {
		dir, err := os.MkdirTemp("", "writeguard-e2e-bin-")
		if err != nil {
			dlBinErr = err
			return
		}
		dlBinDir = dir
		bin := filepath.Join(dir, "writeguard")
		out, err := exec.Command("go", "build", "-o", bin, "github.com/writeguard/writeguard/cmd/writeguard").CombinedOutput()
		if err != nil {
			dlBinErr = fmt.Errorf("go build: %v\n%s", err, out)
			return
		}
		dlBin = bin
	})
	if dlBinErr != nil {
		t.Fatal(dlBinErr)
	}
	return dlBin
}

var (
	dlBinOnce sync.Once
	dlBin     string
	dlBinDir  string
	dlBinErr  error
)

// dlProcess is one "writeguard dlq replay" process.
type dlProcess struct {
	name           string
	cmd            *exec.Cmd
	stdout, stderr strings.Builder
	done           chan struct{}
	err            error
}

// dlStartReplay starts "writeguard dlq replay" on the bed's DLQ through
// uri, with args after the connection flags. Each process picks its own
// run id, as processes started independently do.
func dlStartReplay(t *testing.T, b *dlBed, name, uri string, args ...string) *dlProcess {
	t.Helper()
	p := &dlProcess{name: name, done: make(chan struct{})}
	all := append([]string{"dlq", "replay", "--uri", uri, "--db", b.dbName, "--dlq", dlDLQ, "--json"}, args...)
	p.cmd = exec.Command(dlCommandBinary(t), all...)
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
	})
	return p
}

// wait waits for the process to end (at most d) and returns its exit code.
func (p *dlProcess) wait(t *testing.T, d time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(d):
		_ = p.cmd.Process.Kill()
		<-p.done
		t.Fatalf("%s still running after %v (killed)\nstderr: %s", p.name, d, p.stderr.String())
	}
	return p.cmd.ProcessState.ExitCode()
}

// dlReplayReport is the part of "dlq replay --json"'s report the tests read.
type dlReplayReport struct {
	Pending    int64 `json:"pending"`
	Namespaces []struct {
		Namespace string `json:"namespace"`
		replay.Result
	} `json:"namespaces"`
}

func (p *dlProcess) report(t *testing.T) replay.Result {
	t.Helper()
	var rep dlReplayReport
	if err := json.Unmarshal([]byte(p.stdout.String()), &rep); err != nil || len(rep.Namespaces) > 1 {
		t.Fatalf("%s: report %v\nstdout: %s\nstderr: %s", p.name, err, p.stdout.String(), p.stderr.String())
	}
	if len(rep.Namespaces) == 0 {
		return replay.Result{}
	}
	return rep.Namespaces[0].Result
}

// TestDLReplayTwoProcessesEnd: two "writeguard dlq replay" processes,
// started independently (each with its own run id), drain one DLQ of 60
// envelopes, 30 of which the target's validator rejects again. Both end
// (they used to livelock while any envelope stayed pending, inflating
// every envelope's attempts), every valid document is written once, and
// only real tries count: the attempts and replay_failures the DLQ records
// add up to the rejections the two processes report, at most one per
// process and envelope.
func TestDLReplayTwoProcessesEnd(t *testing.T) {
	b := newDLBed(t, dlSchema)
	sink := dlq.NewMongoSink(b.dlq, dlq.WithInsertFirst())
	var envs []envelope.Envelope
	for i := range 60 {
		orig, err := bson.Marshal(dlDoc("_id", fmt.Sprintf("p-%03d", i), "sku", "S", "qty", int32(i%2)))
		if err != nil {
			t.Fatal(err)
		}
		envs = append(envs, envelope.Envelope{Original: orig, Code: 121, Namespace: b.ns(), Operation: "insertMany", BatchIndex: i})
	}
	if err := sink.Put(b.ctx, envs); err != nil {
		t.Fatal(err)
	}
	args := []string{"--into", b.ns(), "--no-validator", "--batch", "3", "--lease", "2s"}
	t0 := time.Now()
	procs := []*dlProcess{dlStartReplay(t, b, "process-1", b.proxy.URI(), args...), dlStartReplay(t, b, "process-2", b.proxy.URI(), args...)}
	var replayed, invalid int64
	for _, p := range procs {
		code := p.wait(t, 90*time.Second)
		res := p.report(t)
		t.Logf("%s: exit %d after %v: %+v", p.name, code, time.Since(t0).Round(time.Millisecond), res.Counts)
		if code != 3 && !(code == 0 && res.StillInvalid == 0) {
			t.Errorf("%s: exit %d, want 3 (envelopes still invalid)\nstderr: %s", p.name, code, p.stderr.String())
		}
		if res.StillInvalid > 30 || res.Failed != 0 || res.Conflicts != 0 {
			t.Errorf("%s: %+v; want at most one try of each of the 30 invalid envelopes", p.name, res.Counts)
		}
		replayed += res.Replayed
		invalid += res.StillInvalid
	}
	if replayed != 30 {
		t.Errorf("the processes replayed %d envelopes, want 30 (each valid one once)", replayed)
	}
	if n := b.count(dlTarget, bson.D{}); n != 30 {
		t.Errorf("target holds %d documents, want 30", n)
	}
	var attempts, failures int64
	for _, e := range b.stored(bson.D{{Key: "status", Value: envelope.StatusPending}}) {
		attempts += int64(e.Attempts - 1)
		failures += int64(e.ReplayFailures)
		if e.Attempts > 3 || e.Attempts-1 != e.ReplayFailures || !strings.HasPrefix(e.ReplayReason, "still_invalid: 121") {
			t.Errorf("envelope %v: attempts %d, replay_failures %d, reason %q", e.DocumentID, e.Attempts, e.ReplayFailures, e.ReplayReason)
		}
	}
	if invalid < 30 || attempts != invalid || failures != invalid {
		t.Errorf("the processes report %d rejections; the DLQ records %d attempts and %d failed replays beyond the captures", invalid, attempts, failures)
	}
	if n := b.count(dlDLQ, bson.D{{Key: "status", Value: envelope.StatusReplayed}, {Key: "attempts", Value: 1}}); n != 30 {
		t.Errorf("%d envelopes replayed with attempts 1, want 30", n)
	}
}

// TestDLReplayProcessKilledMidBatch: two "writeguard dlq replay"
// processes with their own run ids; the first is killed (SIGKILL) in the
// middle of its first batch, once the server applied its updateOne
// ($inc) and before the reply reached it (the proxy reports the event and
// keeps the reply), so after its inserts and before it marked anything:
// the lease collection holds its send token, the DLQ no mark. The second
// takes its batch over once the dead process's leases expire: it meets
// the dead process's inserts by _id (each document written once) and
// holds the update, whose result nobody saw, for an operator instead of
// running it again (the counter is incremented once). It exits 3 and says
// so; the DLQ ends with every insert replayed once, the update pending
// with replay_hold and its reason, and no lease left; "dlq stats" counts
// it held. Every step waits for an event, not a time.
func TestDLReplayProcessKilledMidBatch(t *testing.T) {
	b := newDLBed(t, nil)
	if _, err := b.ddb.Collection(dlTarget).InsertOne(b.ctx, dlDoc("_id", "counter", "n", int32(0))); err != nil {
		t.Fatal(err)
	}
	const inserts = 120
	var envs []envelope.Envelope
	for i := range inserts {
		if i == 10 {
			envs = append(envs, dlModelEnvelope(t, b.ns(), "updateOne", dlDoc("filter", dlDoc("_id", "counter"),
				"update", dlDoc("$inc", dlDoc("n", int32(1))), "upsert", false), 1000))
		}
		orig, err := bson.Marshal(dlDoc("_id", fmt.Sprintf("k-%03d", i), "sku", "S", "qty", int32(1)))
		if err != nil {
			t.Fatal(err)
		}
		envs = append(envs, envelope.Envelope{Original: orig, Code: 121, Namespace: b.ns(), Operation: "insertMany", BatchIndex: i})
	}
	if err := dlq.NewMongoSink(b.dlq, dlq.WithInsertFirst()).Put(b.ctx, envs); err != nil {
		t.Fatal(err)
	}
	// The first process's update reaches the server, which applies it;
	// its reply never comes back: the process is killed waiting for it.
	applied := newDLHold(t)
	applied.applied = true
	b.proxy.SetScript(faultproxy.MustScript(faultproxy.On("update").In(b.ns()).Always().Do(applied.fault())))
	args := []string{"--into", b.ns(), "--allow", "update", "--no-validator", "--batch", "40", "--lease", "3s"}
	first := dlStartReplay(t, b, "first", b.proxy.URI(), args...)
	applied.wait(t, "the first process's update")
	written := b.count(dlTarget, bson.D{}) - 1
	if err := first.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-first.done
	counter := func() int32 { return b.counters()["counter"] }
	// Mid-batch: its update applied and its send token in flight, its
	// inserts written, nothing marked.
	tokens := b.count(dlDLQ+replay.LeaseCollectionSuffix, bson.D{{Key: "in_flight", Value: true}})
	marked := b.count(dlDLQ, bson.D{{Key: "replay_tried_at", Value: bson.D{{Key: "$exists", Value: true}}}})
	t.Logf("the first process was killed after writing %d documents and its update; send tokens %d, envelopes marked %d", written, tokens, marked)
	if counter() != 1 || tokens != 1 || marked != 0 || written == 0 {
		t.Fatalf("the kill was not mid-batch: counter %d, %d send tokens, %d envelopes marked, %d documents written", counter(), tokens, marked, written)
	}
	second := dlStartReplay(t, b, "second", dlServer.URI(), args...)
	code := second.wait(t, 90*time.Second)
	res := second.report(t)
	t.Logf("second: exit %d: %+v, %d by duplicate, leases held by others met %d\nstderr: %s", code, res.Counts, res.ReplayedByDuplicate, res.LeasesHeld, second.stderr.String())
	if code != 3 || !strings.Contains(second.stderr.String(), "1 envelope held") {
		t.Errorf("second: exit %d, want 3 with a word on the held envelope", code)
	}
	if res.Replayed != inserts || res.Held != 1 || res.ReplayedByDuplicate != written || res.Failed+res.Conflicts+res.StillInvalid != 0 {
		t.Errorf("second: %+v, %d by duplicate; want %d replayed (%d of them met by _id), 1 held", res.Counts, res.ReplayedByDuplicate, inserts, written)
	}
	if n := counter(); n != 1 {
		t.Errorf("counter n = %d, want 1: the update in flight when its process died ran again", n)
	}
	if n := b.count(dlTarget, bson.D{}); n != inserts+1 {
		t.Errorf("target holds %d documents, want %d", n, inserts+1)
	}
	if n := b.count(dlDLQ, bson.D{{Key: "status", Value: envelope.StatusReplayed}, {Key: "attempts", Value: 1}}); n != inserts {
		t.Errorf("%d insert envelopes replayed with attempts 1, want %d", n, inserts)
	}
	held := b.stored(bson.D{{Key: "status", Value: envelope.StatusPending}})
	if len(held) != 1 || held[0].ReplayHold != "in_flight_when_runner_died" || held[0].ReplayReason != "held: in_flight_when_runner_died" || held[0].ReplayFailures != 0 {
		t.Errorf("pending envelopes %+v, want the update held", held)
	}
	if n := b.count(dlDLQ+replay.LeaseCollectionSuffix, bson.D{{Key: "key", Value: bson.D{{Key: "$exists", Value: true}}}}); n != 0 {
		t.Errorf("%d leases left, want 0", n)
	}
	out, err := exec.Command(dlCommandBinary(t), "dlq", "stats", "--uri", dlServer.URI(), "--db", b.dbName, "--dlq", dlDLQ, "--json").Output()
	var st struct{ Pending, Held int64 }
	if err != nil || json.Unmarshal(out, &st) != nil || st.Pending != 1 || st.Held != 1 {
		t.Errorf("dlq stats: %v %s; want 1 pending, 1 held", err, out)
	}
}

// TestDLReplayCommandRefusesForgedEnvelopes: "writeguard dlq replay" on a
// DLQ holding envelopes anyone who can write it could have forged: one
// aimed at admin.system.users (a root user), an _id-less deleteMany {} in
// the named namespace, and an insert into a namespace not named with
// --into. It writes the one legitimate envelope, refuses the others
// (counted, each with its id and reason, left pending with the reason
// recorded), says so and exits 3; admin.system.users and the target's
// documents are untouched. (It used to write the user into
// admin.system.users, and run the deleteMany.)
func TestDLReplayCommandRefusesForgedEnvelopes(t *testing.T) {
	b := newDLBed(t, nil)
	if _, err := b.ddb.Collection(dlTarget).InsertOne(b.ctx, dlDoc("_id", "keep", "qty", int32(1))); err != nil {
		t.Fatal(err)
	}
	users := b.direct.Database("admin").Collection("system.users")
	mallory := "mallory-" + b.dbName
	user, _ := bson.Marshal(dlDoc("_id", "admin."+mallory, "user", mallory, "db", "admin",
		"roles", bson.A{dlDoc("role", "root", "db", "admin")}))
	good, _ := bson.Marshal(dlDoc("_id", "good", "qty", int32(2)))
	other, _ := bson.Marshal(dlDoc("_id", "elsewhere", "qty", int32(2)))
	if err := b.sink.Put(b.ctx, []envelope.Envelope{
		{Original: user, Code: 121, Namespace: "admin.system.users", Operation: "insertOne", BatchIndex: 0},
		dlModelEnvelope(t, b.ns(), "deleteMany", dlDoc("filter", bson.D{}), 1),
		{Original: good, Code: 121, Namespace: b.ns(), Operation: "insertOne", BatchIndex: 2},
		{Original: other, Code: 121, Namespace: b.dbName + ".other", Operation: "insertOne", BatchIndex: 3},
	}); err != nil {
		t.Fatal(err)
	}
	p := dlStartReplay(t, b, "replay", dlServer.URI(), "--into", b.ns(), "--no-validator")
	code := p.wait(t, 60*time.Second)
	var rep dlReplayReport
	if err := json.Unmarshal([]byte(p.stdout.String()), &rep); err != nil {
		t.Fatalf("%v\n%s", err, p.stdout.String())
	}
	var sum replay.Result
	reasons := map[string]bool{}
	for _, ns := range rep.Namespaces {
		sum.Replayed += ns.Replayed
		sum.Refused += ns.Refused
		for _, pr := range ns.Problems {
			if pr.Outcome == "refused" && pr.EnvelopeID.Type != 0 {
				reasons[pr.Reason] = true
			}
		}
	}
	t.Logf("exit %d, %d replayed, %d refused, reasons %v\nstderr: %s", code, sum.Replayed, sum.Refused, reasons, p.stderr.String())
	if code != 3 || sum.Replayed != 1 || sum.Refused != 3 || !strings.Contains(p.stderr.String(), "3 envelopes refused") {
		t.Errorf("exit %d, %d replayed, %d refused; want 3, 1, 3 and a word on stderr", code, sum.Replayed, sum.Refused)
	}
	for _, want := range []string{
		`target namespace "admin.system.users" is in the admin database, which replay never writes`,
		"deleteMany not allowed (allowed: inserts; WithOperations, --allow)",
		`target namespace "` + b.dbName + `.other" not named for this replay (WithInto, --into)`,
	} {
		if !reasons[want] {
			t.Errorf("no refusal %q", want)
		}
	}
	if n, err := users.CountDocuments(b.ctx, bson.D{{Key: "user", Value: mallory}}); err != nil || n != 0 {
		t.Errorf("admin.system.users holds %d forged users (%v)", n, err)
	}
	if n := b.count(dlTarget, bson.D{}); n != 2 {
		t.Errorf("target holds %d documents, want 2 (keep and good)", n)
	}
	if n := b.count("other", bson.D{}); n != 0 {
		t.Errorf("%s.other holds %d documents, want 0", b.dbName, n)
	}
	for _, e := range b.stored(bson.D{{Key: "status", Value: envelope.StatusPending}}) {
		if !strings.HasPrefix(e.ReplayReason, "refused: ") {
			t.Errorf("pending envelope %d: reason %q", e.BatchIndex, e.ReplayReason)
		}
	}
	if n := b.count(dlDLQ, bson.D{{Key: "status", Value: envelope.StatusPending}}); n != 3 {
		t.Errorf("%d envelopes pending, want the 3 refused", n)
	}
}

// TestDLDiscardCommandAgreesWithReplay: "writeguard dlq discard --all"
// while a replay holds one of two envelopes (its write under way):
// the command discards the other, says it left one a running replay
// holds, and exits 1; the replay then writes its envelope, which ends
// replayed, not "discarded" with its document written anyway.
func TestDLDiscardCommandAgreesWithReplay(t *testing.T) {
	b := newDLBed(t, nil)
	putInsertEnvelopes(t, b, "w-1", "w-2")
	finish := replayHeldInWrite(b, replay.WithBatchSize(1))
	cmd := exec.Command(dlCommandBinary(t), "dlq", "discard", "--all", "--uri", dlServer.URI(), "--db", b.dbName, "--dlq", dlDLQ)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	res, rerr := finish()
	t.Logf("dlq discard: %v\nstdout: %sstderr: %s", err, stdout.String(), stderr.String())
	if cmd.ProcessState.ExitCode() != 1 || !strings.Contains(stdout.String(), "discarded 1 envelope;") ||
		!strings.Contains(stderr.String(), "1 envelope not discarded: a running replay holds them") {
		t.Errorf("dlq discard during a replay: exit %d; want 1, one discarded, one left to the replay", cmd.ProcessState.ExitCode())
	}
	if rerr != nil || res.Replayed != 1 {
		t.Errorf("replay: %+v, %v; want the envelope it held replayed", res.Counts, rerr)
	}
	got := b.stored(bson.D{})
	if len(got) != 2 || got[0].Status != envelope.StatusReplayed || got[1].Status != envelope.StatusDiscarded {
		t.Errorf("envelopes %+v; want w-1 replayed (the replay held it), w-2 discarded", got)
	}
	if n := b.count(dlTarget, bson.D{}); n != 1 {
		t.Errorf("target holds %d documents, want 1 (w-1)", n)
	}
}
