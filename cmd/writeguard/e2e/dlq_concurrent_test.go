package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/writeguard/writeguard"
	"github.com/writeguard/writeguard/envelope"
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
// BulkWrite calls reached (the other runners start then), writes, lets the
// others run for a moment, then cuts the runner off from the DLQ (its
// client disconnected) and cancels its context: a runner dying between
// the write and the marking of its envelopes, leases held.
type dlCrashTarget struct {
	*writeguard.Guarded
	crashAt   int
	calls     int
	reached   func()
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
		time.Sleep(200 * time.Millisecond)
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
	sink := envelope.NewMongoSink(b.dlq, envelope.WithInsertFirst())
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
// it has claimed that batch, so it always has one). Its leases expire and the others take its envelopes over,
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
	started := make(chan struct{})
	start := sync.OnceFunc(func() { close(started) })
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
			crash = &dlCrashTarget{Guarded: g, crashAt: 1, reached: start, crash: func() {
				_ = dlqClient.Disconnect(context.Background())
				cancel()
			}}
			target = crash
		}
		opts := []replay.Option{replay.WithBatchSize(batch), replay.WithLease(lease), replay.WithRunID("drain-1"),
			replay.WithOwner(fmt.Sprintf("runner-%d", i)), replay.WithFilter(envelope.Filter{Namespaces: []string{b.ns()}})}
		dlq := dlqClient.Database(b.dbName).Collection(dlDLQ)
		dying := i == runners-1
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
	st, err := envelope.Stats(b.ctx, b.dlq, envelope.Filter{})
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
