package e2e

// Replay's guards, on the embedded FerretDB: runs that end whatever other
// runs do, writes held when nobody knows whether they were applied,
// quarantine, refusal of what the operator did not name, and discard
// agreeing with replay.

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/writeguard/writeguard"
	"github.com/writeguard/writeguard/dlq"
	"github.com/writeguard/writeguard/envelope"
	"github.com/writeguard/writeguard/mocks/faultproxy"
	"github.com/writeguard/writeguard/replay"
)

// dlStored is an envelope with the fields replay keeps besides
// envelope.Envelope's.
type dlStored struct {
	envelope.Envelope `bson:",inline"`
	ID                bson.RawValue `bson:"_id"`
	ReplayFailures    int           `bson:"replay_failures"`
	ReplayReason      string        `bson:"replay_reason"`
	ReplayHold        string        `bson:"replay_hold"`
}

func (b *dlBed) stored(filter bson.D) []dlStored {
	b.t.Helper()
	cur, err := b.dlq.Find(b.ctx, filter, options.Find().SetSort(bson.D{{Key: "batch_index", Value: 1}}))
	if err != nil {
		b.t.Fatal(err)
	}
	var out []dlStored
	if err := cur.All(b.ctx, &out); err != nil {
		b.t.Fatal(err)
	}
	return out
}

// dlModelEnvelope returns the envelope of a bulkWrite model as writeguard
// stores it: {op, model: <canonical Extended JSON of {filter, update |
// replacement, upsert}>}.
func dlModelEnvelope(t *testing.T, ns, op string, parts bson.D, index int) envelope.Envelope {
	t.Helper()
	js, err := bson.MarshalExtJSON(parts, true, false)
	if err != nil {
		t.Fatal(err)
	}
	orig, err := bson.Marshal(dlDoc("op", op, "model", string(js)))
	if err != nil {
		t.Fatal(err)
	}
	return envelope.Envelope{Original: orig, Code: 121, Namespace: ns, Operation: "bulkWrite", BatchIndex: index,
		FailingKeywords: []string{"minimum"}}
}

// TestDLReplayTwoRunsEnd: two runs with their own run ids (as two
// "dlq replay" processes started independently) drain one DLQ whose
// envelopes are all rejected again. Both end (they used to livelock:
// each tried again what the other had just tried, while any envelope
// stayed pending), and only real tries count: each envelope is tried at
// most once per run, and the attempts and replay_failures the DLQ
// records add up to the tries the runs report.
func TestDLReplayTwoRunsEnd(t *testing.T) {
	b := newDLBed(t, dlSchema)
	dlBacklog(t, b)
	ctx, cancel := context.WithTimeout(b.ctx, 60*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	res := make([]replay.Result, 2)
	errs := make([]error, 2)
	for i := range 2 {
		wg.Go(func() {
			target, err := writeguard.Wrap(b.adb.Collection(dlTarget), writeguard.WithBackoff(dlFastBackoff),
				writeguard.WithClassifier(dlSQLiteBusy))
			if err != nil {
				errs[i] = err
				return
			}
			res[i], errs[i] = replay.Run(ctx, b.dlq, target, replay.WithBatchSize(1),
				replay.WithLease(time.Second), replay.WithRunID(fmt.Sprintf("process-%d", i)))
		})
	}
	wg.Wait()
	var tries int64
	for i := range 2 {
		t.Logf("run %d: %+v, err %v", i, res[i].Counts, errs[i])
		if errs[i] != nil {
			t.Errorf("run %d: %v (want it to end by itself)", i, errs[i])
		}
		if res[i].StillInvalid > 5 {
			t.Errorf("run %d tried %d envelopes of 5", i, res[i].StillInvalid)
		}
		tries += res[i].StillInvalid
	}
	var attempts, failures int64
	for _, e := range b.stored(bson.D{}) {
		attempts += int64(e.Attempts - 1)
		failures += int64(e.ReplayFailures)
		if e.Attempts-1 != e.ReplayFailures || e.Attempts > 3 || e.Status != envelope.StatusPending ||
			!strings.HasPrefix(e.ReplayReason, "still_invalid: 121") {
			t.Errorf("envelope %v: attempts %d, replay_failures %d, status %s, reason %q", e.DocumentID, e.Attempts,
				e.ReplayFailures, e.Status, e.ReplayReason)
		}
	}
	if tries < 5 || attempts != tries || failures != tries {
		t.Errorf("the runs report %d tries; the DLQ records %d attempts and %d failed replays beyond the captures", tries, attempts, failures)
	}
}

// dlDyingTarget writes through its target, then cuts its runner off from
// the DLQ and cancels it: a runner that died after sending its batch and
// before marking it.
type dlDyingTarget struct {
	writeguard.Collection
	die func()
}

func (d *dlDyingTarget) BulkWrite(ctx context.Context, models []mongo.WriteModel, opts ...options.Lister[options.BulkWriteOptions]) (*mongo.BulkWriteResult, error) {
	res, err := d.Collection.BulkWrite(ctx, models, opts...)
	d.die()
	return res, err
}

func (d *dlDyingTarget) Namespace() string { return replay.Namespace(d.Collection) }

// TestDLReplayHoldsInFlightUpdate: a runner dies after sending an
// updateOne ($inc) and an insert, before marking them. The next run (its
// own run id) meets the dead runner's expired leases: it replays the
// insert (met by _id: written once) but holds the update (pending,
// replay_hold in_flight_when_runner_died, reason recorded) instead of
// running it again: the target was incremented once. Stats count it
// held; a run with WithIncludeHeld runs it deliberately.
func TestDLReplayHoldsInFlightUpdate(t *testing.T) {
	b := newDLBed(t, nil)
	if _, err := b.ddb.Collection(dlTarget).InsertOne(b.ctx, dlDoc("_id", "counter", "n", int32(0))); err != nil {
		t.Fatal(err)
	}
	ins, _ := bson.Marshal(dlDoc("_id", "doc-1", "sku", "A", "qty", int32(1)))
	if err := b.sink.Put(b.ctx, []envelope.Envelope{
		dlModelEnvelope(t, b.ns(), "updateOne", dlDoc("filter", dlDoc("_id", "counter"), "update",
			dlDoc("$inc", dlDoc("n", int32(1))), "upsert", false), 0),
		{Original: ins, Code: 121, Namespace: b.ns(), Operation: "insertMany", BatchIndex: 1},
	}); err != nil {
		t.Fatal(err)
	}
	ops := replay.WithOperations(replay.Inserts | replay.Updates)

	dlqClient, err := mongo.Connect(options.Client().ApplyURI(dlServer.URI()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = dlqClient.Disconnect(context.Background()) })
	ctx, cancel := context.WithCancel(b.ctx)
	defer cancel()
	dying := &dlDyingTarget{Collection: b.replayTarget(), die: func() {
		_ = dlqClient.Disconnect(context.Background())
		cancel()
	}}
	_, err = replay.Run(ctx, dlqClient.Database(b.dbName).Collection(dlDLQ), dying, ops,
		replay.WithLease(replay.MinLease), replay.WithRunID("dies"))
	if err == nil {
		t.Fatal("the dying runner returned no error")
	}
	if n := b.count(dlDLQ+replay.LeaseCollectionSuffix, bson.D{{Key: "in_flight", Value: true}}); n != 1 {
		t.Fatalf("%d leases marked in flight left by the dead runner, want 1 (the update's)", n)
	}
	dlUntil(t, time.Minute, "the dead runner's leases expire", func() bool { return b.lapsed("") })

	res, err := replayRun(b, b.replayTarget(), ops, replay.WithRunID("next"))
	if err != nil || res.Replayed != 1 || res.ReplayedByDuplicate != 1 || res.Held != 1 || res.Failed != 0 {
		t.Fatalf("next run: %+v, %v; want the insert replayed (by _id) and the update held", res, err)
	}
	if len(res.Problems) != 1 || res.Problems[0].Outcome != "held" || res.Problems[0].Reason != "in_flight_when_runner_died" {
		t.Errorf("problems %+v", res.Problems)
	}
	var counter struct{ N int32 }
	if err := b.ddb.Collection(dlTarget).FindOne(b.ctx, bson.D{{Key: "_id", Value: "counter"}}).Decode(&counter); err != nil || counter.N != 1 {
		t.Errorf("counter n = %d (%v), want 1: the update ran once", counter.N, err)
	}
	envs := b.stored(bson.D{})
	if len(envs) != 2 || envs[0].Status != envelope.StatusPending || envs[0].ReplayHold != "in_flight_when_runner_died" ||
		envs[0].ReplayReason != "held: in_flight_when_runner_died" || envs[0].ReplayFailures != 0 || envs[1].Status != envelope.StatusReplayed {
		t.Errorf("envelopes after the next run: %+v", envs)
	}
	if n := b.count(dlDLQ+replay.LeaseCollectionSuffix, bson.D{{Key: "key", Value: bson.D{{Key: "$exists", Value: true}}}}); n != 0 {
		t.Errorf("%d leases left, want 0", n)
	}
	st, err := dlq.Stats(b.ctx, b.dlq, dlq.Filter{})
	if err != nil || st.Held != 1 || st.Pending != 1 {
		t.Errorf("stats: held %d, pending %d (%v); want 1, 1", st.Held, st.Pending, err)
	}
	// Held envelopes are left alone by later runs ...
	if res, err := replayRun(b, b.replayTarget(), ops); err != nil || res.Scanned != 0 {
		t.Errorf("a later run: %+v, %v; want nothing tried", res.Counts, err)
	}
	// ... until an operator includes them.
	res, err = replayRun(b, b.replayTarget(), ops, replay.WithIncludeHeld())
	if err != nil || res.Replayed != 1 {
		t.Errorf("WithIncludeHeld: %+v, %v", res.Counts, err)
	}
	if envs := b.stored(bson.D{}); envs[0].Status != envelope.StatusReplayed || envs[0].ReplayHold != "" || envs[0].ReplayReason != "" {
		t.Errorf("the held envelope after WithIncludeHeld: %+v", envs[0])
	}
}

// TestDLReplayHoldsAmbiguousUpdate: the connection closes after an
// updateOne ($inc) was forwarded and applied, before its reply: the
// replay cannot tell whether it was applied, so it holds the envelope
// (write_outcome_unknown) rather than leave it pending for the next run
// to apply again; a later run leaves it alone, and the counter stays
// incremented once.
func TestDLReplayHoldsAmbiguousUpdate(t *testing.T) {
	b := newDLBed(t, nil)
	if _, err := b.ddb.Collection(dlTarget).InsertOne(b.ctx, dlDoc("_id", "counter", "n", int32(0))); err != nil {
		t.Fatal(err)
	}
	if err := b.sink.Put(b.ctx, []envelope.Envelope{dlModelEnvelope(t, b.ns(), "updateOne",
		dlDoc("filter", dlDoc("_id", "counter"), "update", dlDoc("$inc", dlDoc("n", int32(1))), "upsert", false), 0)}); err != nil {
		t.Fatal(err)
	}
	b.proxy.SetScript(faultproxy.MustScript(faultproxy.On("update").In(b.ns()).Do(faultproxy.CloseAfterForward())))
	ops := replay.WithOperations(replay.Inserts | replay.Updates)
	res, err := replayRun(b, b.replayTarget(), ops)
	t.Logf("first run: %+v, %v; problems %+v", res.Counts, err, res.Problems)
	if res.Held != 1 || res.Failed != 0 || res.Replayed != 0 {
		t.Errorf("first run: %+v; want the update held", res.Counts)
	}
	envs := b.stored(bson.D{})
	if len(envs) != 1 || envs[0].Status != envelope.StatusPending || envs[0].ReplayHold != "write_outcome_unknown" ||
		!strings.HasPrefix(envs[0].ReplayReason, "held: write_outcome_unknown") || envs[0].ReplayFailures != 0 {
		t.Errorf("envelope %+v", envs)
	}
	b.proxy.SetScript(nil)
	if res, err := replayRun(b, b.replayTarget(), ops); err != nil || res.Scanned != 0 {
		t.Errorf("a later run: %+v, %v; want the held envelope left alone", res.Counts, err)
	}
	var counter struct{ N int32 }
	if err := b.ddb.Collection(dlTarget).FindOne(b.ctx, bson.D{{Key: "_id", Value: "counter"}}).Decode(&counter); err != nil || counter.N != 1 {
		t.Errorf("counter n = %d (%v), want 1", counter.N, err)
	}
}

// TestDLReplayMarkRetryCountsOnce: the connection to the DLQ closes
// after the replay's marks were applied, before their reply; the replay
// sends them again, and each envelope rejected again still counts one
// attempt and one failed replay, not two.
func TestDLReplayMarkRetryCountsOnce(t *testing.T) {
	b := newDLBed(t, dlSchema)
	dlBacklog(t, b)
	b.proxy.SetScript(faultproxy.MustScript(
		faultproxy.Validator(b.ns(), dlSchema),
		faultproxy.On("update").In(b.dbName+"."+dlDLQ).Do(faultproxy.CloseAfterForward())))
	dlq := b.adb.Collection(dlDLQ) // through the proxy
	res, err := replay.Run(b.ctx, dlq, b.replayTarget(), replay.WithLeaseCollection(b.ddb.Collection(dlDLQ+replay.LeaseCollectionSuffix)))
	if err != nil || res.StillInvalid != 5 {
		t.Fatalf("%+v, %v", res.Counts, err)
	}
	if st := b.proxy.Stats(); st.Faults[faultproxy.FaultCloseAfterForward] != 1 {
		t.Fatalf("faults %v: the marks' connection was not cut", st.Faults)
	}
	for _, e := range b.stored(bson.D{}) {
		if e.Attempts != 2 || e.ReplayFailures != 1 {
			t.Errorf("envelope %v: attempts %d, replay_failures %d; want 2 and 1 (one try)", e.DocumentID, e.Attempts, e.ReplayFailures)
		}
	}
}

// TestDLReplayQuarantine: an envelope whose replay keeps failing counts
// its failed replays (replay_failures); at the limit it becomes
// quarantined, is skipped by later runs, shows in Stats and the Result,
// and is tried again only with WithIncludeQuarantined, which replays it
// once the validator accepts it.
func TestDLReplayQuarantine(t *testing.T) {
	b := newDLBed(t, dlSchema)
	dlBacklog(t, b)
	for run := 1; run <= 2; run++ {
		res, err := replayRun(b, b.replayTarget(), replay.WithQuarantineAfter(2))
		if err != nil || res.StillInvalid != 5 {
			t.Fatalf("run %d: %+v, %v", run, res.Counts, err)
		}
		want := int64(0)
		if run == 2 {
			want = 5
		}
		if res.Quarantined != want {
			t.Errorf("run %d: %d quarantined, want %d", run, res.Quarantined, want)
		}
	}
	for _, e := range b.stored(bson.D{}) {
		if e.Status != envelope.StatusQuarantined || e.ReplayFailures != 2 || e.Attempts != 3 ||
			!strings.HasPrefix(e.ReplayReason, "quarantined after 2 failed replays (limit 2); last: still_invalid: 121") {
			t.Errorf("envelope %v: status %s, replay_failures %d, attempts %d, reason %q", e.DocumentID, e.Status, e.ReplayFailures, e.Attempts, e.ReplayReason)
		}
	}
	st, err := dlq.Stats(b.ctx, b.dlq, dlq.Filter{})
	if err != nil || st.Quarantined != 5 || st.Pending != 0 {
		t.Errorf("stats: quarantined %d, pending %d, %v", st.Quarantined, st.Pending, err)
	}
	if st, _ := dlq.Stats(b.ctx, b.dlq, dlq.Filter{Statuses: []string{envelope.StatusQuarantined}}); st.Envelopes != 5 {
		t.Errorf("Filter{Statuses: quarantined} selects %d, want 5", st.Envelopes)
	}
	if res, err := replayRun(b, b.replayTarget(), replay.WithQuarantineAfter(2)); err != nil || res.Scanned != 0 {
		t.Errorf("a run after quarantine: %+v, %v; want them skipped", res.Counts, err)
	}
	b.setValidator(nil)
	res, err := replayRun(b, b.replayTarget(), replay.WithIncludeQuarantined())
	if err != nil || res.Replayed != 5 {
		t.Errorf("WithIncludeQuarantined after widening: %+v, %v", res.Counts, err)
	}
	if n := b.count(dlDLQ, bson.D{{Key: "status", Value: envelope.StatusReplayed}, {Key: "replay_reason", Value: bson.D{{Key: "$exists", Value: false}}}}); n != 5 {
		t.Errorf("%d envelopes replayed with no reason left, want 5", n)
	}
}

// TestDLReplayRefusesForgedEnvelopes: envelopes anyone with write access
// to the DLQ could have forged are refused, counted, reported with their
// id and reason, and left pending with the reason recorded: one aimed at
// admin.system.users (even when the operator names it), one at the DLQ
// itself, an _id-less deleteMany {} and an updateOne without an _id
// condition (refused by default, and still without WithMultiDocument when
// updates and deletes are allowed), a replaceOne (not allowed by
// default), and one of a namespace the operator did not name. Nothing is
// written.
func TestDLReplayRefusesForgedEnvelopes(t *testing.T) {
	b := newDLBed(t, nil)
	if _, err := b.ddb.Collection(dlTarget).InsertOne(b.ctx, dlDoc("_id", "keep", "qty", int32(1))); err != nil {
		t.Fatal(err)
	}
	user, _ := bson.Marshal(dlDoc("_id", "admin.mallory", "user", "mallory", "db", "admin",
		"roles", bson.A{dlDoc("role", "root", "db", "admin")}))
	self, _ := bson.Marshal(dlDoc("_id", "x", "status", "replayed"))
	other, _ := bson.Marshal(dlDoc("_id", "o-1", "qty", int32(1)))
	envs := []envelope.Envelope{
		{Original: user, Code: 121, Namespace: "admin.system.users", Operation: "insertOne", BatchIndex: 0},
		{Original: self, Code: 121, Namespace: b.dbName + "." + dlDLQ, Operation: "insertOne", BatchIndex: 1},
		dlModelEnvelope(t, b.ns(), "deleteMany", dlDoc("filter", bson.D{}), 2),
		dlModelEnvelope(t, b.ns(), "updateOne", dlDoc("filter", dlDoc("qty", dlDoc("$gte", int32(0))),
			"update", dlDoc("$set", dlDoc("qty", int32(0))), "upsert", false), 3),
		dlModelEnvelope(t, b.ns(), "replaceOne", dlDoc("filter", dlDoc("_id", "keep"), "replacement", dlDoc("qty", int32(9)), "upsert", false), 4),
		{Original: other, Code: 121, Namespace: b.dbName + ".other", Operation: "insertOne", BatchIndex: 5},
	}
	if err := b.sink.Put(b.ctx, envs); err != nil {
		t.Fatal(err)
	}
	all := replay.WithFilter(dlq.Filter{Namespaces: []string{"admin.system.users", b.dbName + "." + dlDLQ, b.ns(), b.dbName + ".other"}})
	into := replay.WithInto(b.ns(), "admin.system.users", b.dbName+"."+dlDLQ)
	want := []string{
		`namespace "admin.system.users" is in the admin database, which replay never writes`,
		`namespace "` + b.dbName + `.dlq" is the dead-letter collection or one of its side collections`,
		"deleteMany not allowed (allowed: inserts; WithOperations, --allow)",
		"updateOne not allowed (allowed: inserts; WithOperations, --allow)",
		"replaceOne not allowed (allowed: inserts; WithOperations, --allow)",
		`namespace "` + b.dbName + `.other" not named for this replay (WithInto, --into)`,
	}
	check := func(step string, res replay.Result, err error, want []string) {
		t.Helper()
		if err != nil || res.Refused != int64(len(want)) || res.Replayed != 0 || res.Scanned != int64(len(want)) {
			t.Errorf("%s: %+v, %v; want %d refused, nothing else", step, res.Counts, err, len(want))
		}
		got := map[string]bool{}
		for _, p := range res.Problems {
			if p.Outcome != "refused" || p.EnvelopeID.Type == 0 {
				t.Errorf("%s: problem %+v", step, p)
			}
			got[p.Reason] = true
		}
		for _, w := range want {
			if !got[w] {
				t.Errorf("%s: no refusal %q among %+v", step, w, res.Problems)
			}
		}
		for _, e := range b.stored(bson.D{}) {
			if e.Status != envelope.StatusPending || !strings.HasPrefix(e.ReplayReason, "refused: ") || e.ReplayFailures != 0 || e.Attempts != 1 {
				t.Errorf("%s: envelope %d: status %s, reason %q, replay_failures %d", step, e.BatchIndex, e.Status, e.ReplayReason, e.ReplayFailures)
			}
		}
		if n := b.count(dlTarget, bson.D{}); n != 1 {
			t.Errorf("%s: target holds %d documents, want 1 (untouched)", step, n)
		}
	}
	res, err := replayRun(b, b.replayTarget(), all, into)
	check("defaults", res, err, want)

	// Updates, replaces and deletes allowed: the multi-document delete
	// and the _id-less update are still refused.
	want[2] = "deleteMany may change many documents: needs WithMultiDocument (--allow-multi)"
	want[3] = "updateOne filter has no _id condition: needs WithMultiDocument (--allow-multi)"
	want[4] = "replaceOne not allowed (allowed: inserts,updates,deletes; WithOperations, --allow)"
	res, err = replayRun(b, b.replayTarget(), all, into, replay.WithOperations(replay.Inserts|replay.Updates|replay.Deletes))
	check("updates and deletes allowed", res, err, want)

	// A target in a refused namespace refuses everything.
	g, err := writeguard.Wrap(b.direct.Database("admin").Collection("system.users"))
	if err != nil {
		t.Fatal(err)
	}
	res, err = replayRun(b, g, replay.WithFilter(dlq.Filter{Namespaces: []string{"admin.system.users"}}), replay.WithInto("admin.system.users"))
	if err != nil || res.Refused != 1 || len(res.Problems) != 1 ||
		res.Problems[0].Reason != `target namespace "admin.system.users" is in the admin database, which replay never writes` {
		t.Errorf("admin target: %+v, %v", res, err)
	}
}

// TestDLDiscardAgreesWithReplay: a discard racing a replay for one
// envelope: while the replay holds it (its write under way) the discard
// does not take it and says so (Busy, its id); the replay writes it and
// marks it replayed. An envelope discarded first is not written by a
// replay that starts after.
func TestDLDiscardAgreesWithReplay(t *testing.T) {
	b := newDLBed(t, nil)
	envs := putInsertEnvelopes(t, b, "d-1", "d-2")
	finish := replayHeldInWrite(b, replay.WithFilter(dlq.Filter{Fingerprints: []string{envelope.Fingerprint(envs[0].Original, false)}}))
	d, err := replay.Discard(b.ctx, b.dlq, dlq.Filter{Namespaces: []string{b.ns()}})
	res, rerr := finish()
	if err != nil || d.Discarded != 1 || d.Busy != 1 || len(d.BusyIDs) != 1 {
		t.Errorf("discard during the replay: %+v, %v; want d-2 discarded, d-1 busy", d, err)
	}
	if rerr != nil || res.Replayed != 1 {
		t.Errorf("replay: %+v, %v", res.Counts, rerr)
	}
	got := b.stored(bson.D{})
	if got[0].Status != envelope.StatusReplayed || got[1].Status != envelope.StatusDiscarded {
		t.Errorf("statuses %s, %s; want replayed (the replay won), discarded", got[0].Status, got[1].Status)
	}
	// d-2, discarded first, is not written by a later replay.
	res, err = replayRun(b, b.replayTarget(), replay.WithFilter(dlq.Filter{Namespaces: []string{b.ns()}}))
	if err != nil || res.Scanned != 0 {
		t.Errorf("replay after the discard: %+v, %v", res.Counts, err)
	}
	if n := b.count(dlTarget, bson.D{{Key: "_id", Value: "d-2"}}); n != 0 {
		t.Errorf("the discarded document was written")
	}
}

// putInsertEnvelopes stores one pending insert envelope per _id (a
// document {_id, qty: 1} rejected 121) and returns them.
func putInsertEnvelopes(t *testing.T, b *dlBed, ids ...string) []envelope.Envelope {
	t.Helper()
	var envs []envelope.Envelope
	for i, id := range ids {
		orig, _ := bson.Marshal(dlDoc("_id", id, "qty", int32(1)))
		envs = append(envs, envelope.Envelope{Original: orig, Code: 121, Namespace: b.ns(), Operation: "insertMany", BatchIndex: i})
	}
	if err := b.sink.Put(b.ctx, envs); err != nil {
		t.Fatal(err)
	}
	return envs
}

// replayHeldInWrite starts a replay whose first write waits (its envelope
// claimed, its write under way) and returns once it is there; finish lets
// the write go and returns the replay's result.
func replayHeldInWrite(b *dlBed, opts ...replay.Option) (finish func() (replay.Result, error)) {
	inWrite, release := make(chan struct{}), make(chan struct{})
	target := &dlBlockingTarget{Collection: b.replayTarget(), in: inWrite, release: release}
	var res replay.Result
	var err error
	done := make(chan struct{})
	go func() {
		defer close(done)
		res, err = replay.Run(b.ctx, b.dlq, target, opts...)
	}()
	<-inWrite
	return func() (replay.Result, error) {
		close(release)
		<-done
		return res, err
	}
}

// dlBlockingTarget signals in when its BulkWrite is called and waits for
// release before writing.
type dlBlockingTarget struct {
	writeguard.Collection
	in, release chan struct{}
}

func (d *dlBlockingTarget) BulkWrite(ctx context.Context, models []mongo.WriteModel, opts ...options.Lister[options.BulkWriteOptions]) (*mongo.BulkWriteResult, error) {
	close(d.in)
	<-d.release
	return d.Collection.BulkWrite(ctx, models, opts...)
}

func (d *dlBlockingTarget) Namespace() string { return replay.Namespace(d.Collection) }
