package e2e

// The fencing of replay (replay/fence.go): a runner sends an update,
// replace or delete only after taking its claim's send token and finding
// the envelope untouched since its claim. These tests pause a runner
// between its claim and its send by events (a withheld-values callback
// that waits, the proxy holding its commands), let another runner take the
// envelope over, then let the first go on: the $inc is applied once.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/writeguard/writeguard/envelope"
	"github.com/writeguard/writeguard/mocks/faultproxy"
	"github.com/writeguard/writeguard/replay"
)

// dlHold holds the commands a faultproxy rule selects until released;
// reached is closed when the first one arrives.
type dlHold struct {
	reached, release chan struct{}
	once, rel        sync.Once
	// drop: once released, close the connection instead of forwarding.
	drop bool
	// applied: forward the command first (the server applies it), then
	// hold its reply and, once released, close the connection.
	applied bool
}

func newDLHold(t *testing.T) *dlHold {
	h := &dlHold{reached: make(chan struct{}), release: make(chan struct{})}
	t.Cleanup(h.open)
	return h
}

// open releases the held commands (and every later one).
func (h *dlHold) open() { h.rel.Do(func() { close(h.release) }) }

// fault forwards each command once released (or drops it).
func (h *dlHold) fault() faultproxy.Fault {
	return faultproxy.Custom(func(cmd *faultproxy.Command, forward func(*faultproxy.Command) (bson.Raw, error)) (bson.Raw, error) {
		if h.applied {
			if _, err := forward(cmd); err != nil {
				return nil, err
			}
		}
		h.once.Do(func() { close(h.reached) })
		<-h.release
		if h.drop || h.applied {
			return nil, faultproxy.ErrCloseConnection
		}
		return forward(cmd)
	})
}

// wait waits for the first held command (or fails after a minute, a
// guard: the test decides by the event).
func (h *dlHold) wait(t *testing.T, what string) {
	t.Helper()
	select {
	case <-h.reached:
	case <-time.After(time.Minute):
		t.Fatalf("%s never happened", what)
	}
}

// dlGate is a withheld-values callback that signals each call and, while
// closed is not, waits: a runner paused between its claim and its send.
type dlGate struct {
	full    map[int]bson.Raw // complete originals by batch index
	reached chan struct{}
	release chan struct{}
	once    sync.Once
	rel     sync.Once
}

func newDLGate(t *testing.T, full map[int]bson.Raw) *dlGate {
	g := &dlGate{full: full, reached: make(chan struct{}), release: make(chan struct{})}
	t.Cleanup(g.open)
	return g
}

func (g *dlGate) open() { g.rel.Do(func() { close(g.release) }) }

func (g *dlGate) values(ctx context.Context, env envelope.Envelope) (bson.Raw, error) {
	g.once.Do(func() { close(g.reached) })
	select {
	case <-g.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return g.full[env.BatchIndex], nil
}

// always is a withheld-values callback that never waits.
func always(full map[int]bson.Raw) replay.WithheldFunc {
	return func(_ context.Context, env envelope.Envelope) (bson.Raw, error) { return full[env.BatchIndex], nil }
}

// dlCounters inserts n counters {_id: "c-<i>", n: 0} in the target and
// stores one pending updateOne envelope per counter, {$inc: {n: 1}}. With
// withheld, each stored model lacks its "model" field (withheld, as a
// field the server refused unencrypted), which replay.WithWithheldValues
// must supply: the complete originals are returned by batch index.
func dlCounters(t *testing.T, b *dlBed, n int, withheld bool) map[int]bson.Raw {
	t.Helper()
	full := map[int]bson.Raw{}
	var envs []envelope.Envelope
	for i := range n {
		id := fmt.Sprintf("c-%d", i)
		if _, err := b.ddb.Collection(dlTarget).InsertOne(b.ctx, dlDoc("_id", id, "n", int32(0))); err != nil {
			t.Fatal(err)
		}
		env := dlModelEnvelope(t, b.ns(), "updateOne", dlDoc("filter", dlDoc("_id", id), "update",
			dlDoc("$inc", dlDoc("n", int32(1))), "upsert", false), i)
		full[i] = env.Original
		if withheld {
			env.Original = mustRaw(t, dlDoc("op", "updateOne", "counter", id))
			env.Withheld = []envelope.WithheldField{{Path: "model", Reason: "encrypt"}}
		}
		envs = append(envs, env)
	}
	if err := b.sink.Put(b.ctx, envs); err != nil {
		t.Fatal(err)
	}
	return full
}

// counters returns the target's counters by _id.
func (b *dlBed) counters() map[string]int32 {
	b.t.Helper()
	cur, err := b.ddb.Collection(dlTarget).Find(b.ctx, bson.D{})
	if err != nil {
		b.t.Fatal(err)
	}
	var docs []struct {
		ID string `bson:"_id"`
		N  int32  `bson:"n"`
	}
	if err := cur.All(b.ctx, &docs); err != nil {
		b.t.Fatal(err)
	}
	out := map[string]int32{}
	for _, d := range docs {
		out[d.ID] = d.N
	}
	return out
}

// dlUntil reads the bed until cond holds (a state, not a duration),
// failing after limit (a guard).
func dlUntil(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(limit); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after %v", what, limit)
		}
	}
}

// leasesOf returns the leases on record (not the done records) of owner
// ("": anyone's).
func (b *dlBed) leasesOf(owner string) []replay.Lease {
	b.t.Helper()
	q := bson.D{{Key: "key", Value: bson.D{{Key: "$exists", Value: true}}}}
	if owner != "" {
		q = append(q, bson.E{Key: "owner", Value: owner})
	}
	cur, err := b.ddb.Collection(dlDLQ+replay.LeaseCollectionSuffix).Find(b.ctx, q)
	if err != nil {
		b.t.Fatal(err)
	}
	var ls []replay.Lease
	if err := cur.All(b.ctx, &ls); err != nil {
		b.t.Fatal(err)
	}
	return ls
}

// lapsed reports whether every lease of owner ("": anyone's) has expired (the server is
// the embedded one, on this host's clock).
func (b *dlBed) lapsed(owner string) bool {
	ls := b.leasesOf(owner)
	for _, l := range ls {
		if l.Until.After(time.Now()) {
			return false
		}
	}
	return len(ls) > 0
}

// proxiedDLQ returns the DLQ through the bed's proxy (so that its commands
// can be held), on a client of its own.
func (b *dlBed) proxiedDLQ() *mongo.Collection {
	b.t.Helper()
	c, err := mongo.Connect(options.Client().ApplyURI(b.proxy.URI()))
	if err != nil {
		b.t.Fatal(err)
	}
	b.t.Cleanup(func() { _ = c.Disconnect(context.Background()) })
	return c.Database(b.dbName).Collection(dlDLQ)
}

type dlRun struct {
	res replay.Result
	err error
}

// startRun runs replay.Run in the background; the channel gives its end.
func startRun(ctx context.Context, dlq *mongo.Collection, b *dlBed, opts ...replay.Option) chan dlRun {
	done := make(chan dlRun, 1)
	target := b.replayTarget()
	go func() {
		res, err := replay.Run(ctx, dlq, target, opts...)
		done <- dlRun{res, err}
	}()
	return done
}

var dlUpdates = replay.WithOperations(replay.Inserts | replay.Updates)

// TestDLReplayFenceStolenDuringPause: runner A claims an $inc and is
// paused before its send (a slow withheld-values callback) while its
// renewals are held up (the proxy holds its lease updates: a stopped
// process); its lease lapses, runner B takes the envelope over and
// applies the $inc; A goes on and does not send: quantity 1, the
// envelope replayed by B, A's outcome "lost" (Result.LeasesLost). It
// used to send it again (quantity 2).
func TestDLReplayFenceStolenDuringPause(t *testing.T) {
	b := newDLBed(t, nil)
	full := dlCounters(t, b, 1, true)
	renewals := newDLHold(t)
	b.proxy.SetScript(faultproxy.MustScript(faultproxy.On("update").In(b.dbName + "." + dlDLQ + replay.LeaseCollectionSuffix).
		Always().Do(renewals.fault())))
	gate := newDLGate(t, full)
	a := startRun(b.ctx, b.proxiedDLQ(), b, dlUpdates, replay.WithOwner("A"), replay.WithLease(300*time.Millisecond),
		replay.WithWithheldValues(gate.values))
	<-gate.reached
	dlUntil(t, time.Minute, "A's lease lapses", func() bool { return b.lapsed("A") })

	resB, err := replayRun(b, b.replayTarget(), dlUpdates, replay.WithOwner("B"), replay.WithWithheldValues(always(full)))
	if err != nil || resB.Replayed != 1 {
		t.Fatalf("B: %+v, %v; want the $inc replayed", resB.Counts, err)
	}
	gate.open()
	renewals.open()
	ra := <-a
	t.Logf("A: %+v, lost %d, problems %+v, %v", ra.res.Counts, ra.res.LeasesLost, ra.res.Problems, ra.err)
	if ra.err != nil || ra.res.LeasesLost != 1 || ra.res.Replayed != 0 || ra.res.Scanned != 0 ||
		len(ra.res.Problems) != 1 || ra.res.Problems[0].Outcome != "lost" {
		t.Errorf("A: %+v, lost %d, %v; want its claim lost, nothing sent", ra.res.Counts, ra.res.LeasesLost, ra.err)
	}
	if c := b.counters(); c["c-0"] != 1 {
		t.Errorf("counter %d, want 1: the $inc ran once", c["c-0"])
	}
	if envs := b.stored(bson.D{}); len(envs) != 1 || envs[0].Status != envelope.StatusReplayed || envs[0].ReplayHold != "" {
		t.Errorf("envelope %+v, want replayed by B", envs)
	}
	if n := b.count(dlDLQ+replay.LeaseCollectionSuffix, bson.D{{Key: "key", Value: bson.D{{Key: "$exists", Value: true}}}}); n != 0 {
		t.Errorf("%d leases left", n)
	}
}

// TestDLReplayFenceTokenTaken: A is paused before its send with its
// lease lapsed (renewals held); B claims the envelope (the next slot) and
// is paused too. A goes on: its send token is the slot B's claim holds
// (a duplicate key), so A does not send; B goes on and sends. Quantity 1.
func TestDLReplayFenceTokenTaken(t *testing.T) {
	b := newDLBed(t, nil)
	full := dlCounters(t, b, 1, true)
	renewals := newDLHold(t)
	b.proxy.SetScript(faultproxy.MustScript(faultproxy.On("update").In(b.dbName + "." + dlDLQ + replay.LeaseCollectionSuffix).
		Always().Do(renewals.fault())))
	gateA, gateB := newDLGate(t, full), newDLGate(t, full)
	a := startRun(b.ctx, b.proxiedDLQ(), b, dlUpdates, replay.WithOwner("A"), replay.WithLease(300*time.Millisecond),
		replay.WithWithheldValues(gateA.values))
	<-gateA.reached
	dlUntil(t, time.Minute, "A's lease lapses", func() bool { return b.lapsed("A") })
	bRun := startRun(b.ctx, b.dlq, b, dlUpdates, replay.WithOwner("B"), replay.WithWithheldValues(gateB.values))
	<-gateB.reached
	if ls := b.leasesOf("B"); len(ls) != 1 || ls[0].N != 1 {
		t.Fatalf("B's claims %+v, want slot 1", ls)
	}
	gateA.open()
	renewals.open()
	ra := <-a
	if ra.err != nil || ra.res.LeasesLost != 1 || ra.res.Scanned != 0 {
		t.Errorf("A: %+v, lost %d, %v; want its claim lost, nothing sent", ra.res.Counts, ra.res.LeasesLost, ra.err)
	}
	if c := b.counters(); c["c-0"] != 0 {
		t.Errorf("counter %d before B's send, want 0: A sent", c["c-0"])
	}
	gateB.open()
	rb := <-bRun
	if rb.err != nil || rb.res.Replayed != 1 {
		t.Errorf("B: %+v, %v", rb.res.Counts, rb.err)
	}
	if c := b.counters(); c["c-0"] != 1 {
		t.Errorf("counter %d, want 1", c["c-0"])
	}
}

// TestDLReplayFenceOperatorEdits: an operator edits the lease collection
// while runner A is paused before its send (its lease long, renewed
// rarely): deletes A's claim, or sets its until in the past. B then takes
// the envelope and replays it; A goes on and does not send. Quantity 1.
func TestDLReplayFenceOperatorEdits(t *testing.T) {
	for _, edit := range []string{"delete", "expire"} {
		t.Run(edit, func(t *testing.T) {
			b := newDLBed(t, nil)
			full := dlCounters(t, b, 1, true)
			gate := newDLGate(t, full)
			a := startRun(b.ctx, b.dlq, b, dlUpdates, replay.WithOwner("A"), replay.WithLease(time.Hour),
				replay.WithWithheldValues(gate.values))
			<-gate.reached
			leases := b.ddb.Collection(dlDLQ + replay.LeaseCollectionSuffix)
			var err error
			if edit == "delete" {
				_, err = leases.DeleteMany(b.ctx, bson.D{})
			} else {
				_, err = leases.UpdateMany(b.ctx, bson.D{{Key: "owner", Value: "A"}},
					bson.D{{Key: "$set", Value: bson.D{{Key: "until", Value: time.Now().Add(-time.Minute)}}}})
			}
			if err != nil {
				t.Fatal(err)
			}
			resB, err := replayRun(b, b.replayTarget(), dlUpdates, replay.WithOwner("B"), replay.WithWithheldValues(always(full)))
			if err != nil || resB.Replayed != 1 {
				t.Fatalf("B: %+v, %v", resB.Counts, err)
			}
			gate.open()
			ra := <-a
			if ra.err != nil || ra.res.LeasesLost != 1 || ra.res.Scanned != 0 {
				t.Errorf("A: %+v, lost %d, %v; want its claim lost, nothing sent", ra.res.Counts, ra.res.LeasesLost, ra.err)
			}
			if c := b.counters(); c["c-0"] != 1 {
				t.Errorf("counter %d, want 1", c["c-0"])
			}
		})
	}
}

// TestDLReplayRenewsWhilePaused: a runner paused before its send for
// longer than its lease keeps its claim: it renews it (until moves
// forward, seen twice), then sends once; nothing is lost.
func TestDLReplayRenewsWhilePaused(t *testing.T) {
	b := newDLBed(t, nil)
	full := dlCounters(t, b, 1, true)
	gate := newDLGate(t, full)
	a := startRun(b.ctx, b.dlq, b, dlUpdates, replay.WithOwner("A"), replay.WithLease(300*time.Millisecond),
		replay.WithWithheldValues(gate.values))
	<-gate.reached
	first := b.leasesOf("A")
	if len(first) != 1 {
		t.Fatalf("A's claims %+v", first)
	}
	for range 2 {
		seen := first[0].Until
		dlUntil(t, time.Minute, "A renews its lease", func() bool {
			ls := b.leasesOf("A")
			return len(ls) == 1 && ls[0].Until.After(seen)
		})
	}
	if ls := b.leasesOf("A"); ls[0].Until.Sub(first[0].ClaimedAt) <= 300*time.Millisecond {
		t.Errorf("lease until %v, claimed %v: not renewed past its first expiry", ls[0].Until, first[0].ClaimedAt)
	}
	gate.open()
	ra := <-a
	if ra.err != nil || ra.res.Replayed != 1 || ra.res.LeasesLost != 0 {
		t.Errorf("A: %+v, lost %d, %v", ra.res.Counts, ra.res.LeasesLost, ra.err)
	}
	if c := b.counters(); c["c-0"] != 1 {
		t.Errorf("counter %d, want 1", c["c-0"])
	}
}

// TestDLReplayRatePacingApplyOnce: a runner paced by WithRate (one
// envelope a second, a lease of a fifth of that) and a free runner that
// starts once the paced one has done its first batch drain 6 $inc
// envelopes together: each counter ends at 1. (Paced after its claim, the
// first runner's lease lapsed during its wait; the other took the
// envelope over and both sent it.)
func TestDLReplayRatePacingApplyOnce(t *testing.T) {
	b := newDLBed(t, nil)
	dlCounters(t, b, 6, false)
	lease := 200 * time.Millisecond
	firstBatch := make(chan struct{})
	var once sync.Once
	paced := startRun(b.ctx, b.dlq, b, dlUpdates, replay.WithOwner("paced"), replay.WithRate(1), replay.WithLease(lease),
		replay.WithProgress(func(replay.Progress) { once.Do(func() { close(firstBatch) }) }))
	select {
	case <-firstBatch:
	case <-time.After(time.Minute):
		t.Fatal("the paced runner did no batch")
	}
	free := startRun(b.ctx, b.dlq, b, dlUpdates, replay.WithOwner("free"), replay.WithBatchSize(1), replay.WithLease(lease))
	rp, rf := <-paced, <-free
	t.Logf("paced: %+v lost %d; free: %+v lost %d", rp.res.Counts, rp.res.LeasesLost, rf.res.Counts, rf.res.LeasesLost)
	if rp.err != nil || rf.err != nil || rp.res.Replayed+rf.res.Replayed != 6 {
		t.Errorf("paced %+v %v, free %+v %v; want 6 replayed in all", rp.res.Counts, rp.err, rf.res.Counts, rf.err)
	}
	for id, n := range b.counters() {
		if n != 1 {
			t.Errorf("counter %s = %d, want 1", id, n)
		}
	}
}

// TestDLReplayClockSkew: the server's clock (hello's localTime, shifted
// by the proxy) against the runner's: a skew beyond the lease is refused
// before anything is claimed (ErrClockSkew, naming the skew); a skew
// within it is corrected: the times the runner records are the server's.
func TestDLReplayClockSkew(t *testing.T) {
	b := newDLBed(t, nil)
	dlCounters(t, b, 1, false)
	shift := func(d time.Duration) {
		b.proxy.SetScript(faultproxy.MustScript(faultproxy.On("hello").Always().Do(faultproxy.Custom(
			func(cmd *faultproxy.Command, forward func(*faultproxy.Command) (bson.Raw, error)) (bson.Raw, error) {
				reply, err := forward(cmd)
				if err != nil {
					return nil, err
				}
				var d0 bson.D
				if err := bson.Unmarshal(reply, &d0); err != nil {
					return nil, err
				}
				for i := range d0 {
					if d0[i].Key == "localTime" {
						if dt, ok := d0[i].Value.(bson.DateTime); ok {
							d0[i].Value = bson.NewDateTimeFromTime(dt.Time().Add(d))
						}
					}
				}
				return bson.Marshal(d0)
			}))))
	}
	shift(2 * time.Minute)
	_, err := replay.Run(b.ctx, b.proxiedDLQ(), b.replayTarget(), dlUpdates, replay.WithLease(time.Minute))
	t.Logf("skew 2m, lease 1m: %v", err)
	if !errors.Is(err, replay.ErrClockSkew) {
		t.Fatalf("Run: %v, want ErrClockSkew", err)
	}
	if n := b.count(dlDLQ+replay.LeaseCollectionSuffix, bson.D{}); n != 0 {
		t.Errorf("%d leases written by a refused run", n)
	}
	if c := b.counters(); c["c-0"] != 0 {
		t.Errorf("counter %d, want 0", c["c-0"])
	}

	shift(20 * time.Second)
	before := time.Now()
	res, err := replay.Run(b.ctx, b.proxiedDLQ(), b.replayTarget(), dlUpdates, replay.WithLease(time.Minute))
	if err != nil || res.Replayed != 1 {
		t.Fatalf("skew 20s, lease 1m: %+v, %v", res.Counts, err)
	}
	envs := b.stored(bson.D{})
	if len(envs) != 1 || envs[0].ReplayedAt.Sub(before) < 10*time.Second {
		t.Errorf("replayed_at %v, this host's time before the run %v: want the server's (20 s ahead)", envs[0].ReplayedAt, before)
	}
}
