package e2e

// The third round's cases that need the sharded bed, a time-series target
// or calls the driver splits (C52, C55, C60 of CASES.md): the scenario as
// the bed reproduces it, and the correct behaviour the case states. On a
// writeguard that reads every write error as "not applied", or that
// attributes the driver's last error to every document of a call, they
// fail: that is what they are for.

import (
	"context"
	"fmt"
	"testing"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/writeguard/writeguard"
	"github.com/writeguard/writeguard/mocks"
	"github.com/writeguard/writeguard/mocks/faultproxy"
)

// cbOutcomes returns one Outcome per input of a guarded call: written for
// all when err is nil, else the Report's (failing t without one).
func cbOutcomes(t *testing.T, n int, err error) []writeguard.Outcome {
	t.Helper()
	if err == nil {
		out := make([]writeguard.Outcome, n)
		for i := range out {
			out[i] = writeguard.Outcome{Index: i, Disposition: writeguard.Written}
		}
		return out
	}
	r := cbReport(t, err)
	if len(r.Outcomes) != n {
		t.Fatalf("%d outcomes for %d inputs", len(r.Outcomes), n)
	}
	return r.Outcomes
}

// shardedBed is the case bed presented as a mongos with two shards.
func shardedBed(t *testing.T, limits faultproxy.Limits) *caseBed {
	return newCaseBed(t, cbProxyOptions(faultproxy.WithSharded(faultproxy.Sharding{}), faultproxy.WithLimits(limits)))
}

// C52: mongos reports a shard's lost reply as a write error on every
// statement it sent to that shard; the shard applied them (all, or the
// first ones). Inserts are re-sent and their own _ids read back: every
// document ends stored exactly once (written or already_written), none
// conflict; ordered, the documents after the failed child batch are
// written too. A non-idempotent $inc in such a batch is never re-sent: it
// is applied once, and reported written or unknown with MaybeWritten.
func TestC52MongosLostShardReply(t *testing.T) {
	for _, tc := range []struct {
		ordered bool
		applied int
		code    int32
		name    string
	}{
		{false, 100, 6, "HostUnreachable"},
		{false, 1, 11602, "InterruptedDueToReplStateChange"},
		{true, 100, 9001, "SocketException"},
		{true, 1, 189, "PrimarySteppedDown"},
	} {
		t.Run(fmt.Sprintf("ordered=%v/applied=%d/code=%d", tc.ordered, tc.applied, tc.code), func(t *testing.T) {
			b := shardedBed(t, faultproxy.Limits{})
			g := b.guard("c52", writeguard.WithConflictHandler(writeguard.ConflictSkip()))
			ns := b.ns("c52")
			b.script(faultproxy.On("insert").In(ns).Do(faultproxy.FailShard(0, tc.applied,
				faultproxy.CommandError{Code: tc.code, CodeName: tc.name, Message: "Connection reset by peer"})))
			var docs []any
			for i := range 6 {
				docs = append(docs, cbD("_id", fmt.Sprintf("d-%d", i), "n", int32(i)))
			}
			_, err := g.InsertMany(b.ctx, docs, options.InsertMany().SetOrdered(tc.ordered))
			if b.proxy.Stats().Faults[faultproxy.FaultShard] != 1 {
				t.Fatalf("the shard failure did not fire: %v", b.proxy.Stats().Faults)
			}
			outs := cbOutcomes(t, len(docs), err)
			stored := map[string]int{}
			for _, d := range b.docs("c52") {
				stored[d.Lookup("_id").StringValue()]++
			}
			for i, o := range outs {
				id := fmt.Sprintf("d-%d", i)
				if !o.Disposition.Stored() || stored[id] != 1 {
					t.Errorf("%s: %s (maybe=%v), stored %d; want written or already_written, stored once", id, o.Disposition, o.MaybeWritten, stored[id])
				}
			}

			// $inc updates in one unordered BulkWrite; the shard applies
			// its whole child batch and its reply is lost.
			var seed []any
			var models []mongo.WriteModel
			for i := range 6 {
				seed = append(seed, cbD("_id", fmt.Sprintf("ctr-%d", i), "v", int64(0)))
				models = append(models, mongo.NewUpdateOneModel().SetFilter(cbD("_id", fmt.Sprintf("ctr-%d", i))).SetUpdate(cbD("$inc", cbD("v", int64(1)))))
			}
			b.seed("c52", seed...)
			b.script(faultproxy.On("update").In(ns).Do(faultproxy.FailShard(0, 100,
				faultproxy.CommandError{Code: tc.code, CodeName: tc.name, Message: "Connection reset by peer"})))
			_, err = g.BulkWrite(b.ctx, models, options.BulkWrite().SetOrdered(tc.ordered))
			outs = cbOutcomes(t, len(models), err)
			v := map[string]int64{}
			for _, d := range b.docs("c52") {
				if x, ok := d.Lookup("v").AsInt64OK(); ok {
					v[d.Lookup("_id").StringValue()] = x
				}
			}
			for i, o := range outs {
				id := fmt.Sprintf("ctr-%d", i)
				switch {
				case v[id] > 1:
					t.Errorf("%s: $inc applied %d times (%s)", id, v[id], o.Disposition)
				case v[id] == 1 && !o.Disposition.Stored() && !o.MaybeWritten:
					t.Errorf("%s: applied, reported %s without MaybeWritten", id, o.Disposition)
				case v[id] == 0 && o.Disposition.Stored():
					t.Errorf("%s: not applied, reported %s", id, o.Disposition)
				}
			}
		})
	}
}

// C55: a time-series target has no unique _id; attempt 1 is applied and
// its reply lost. Nothing may be stored twice: the maybe-applied
// measurements are read back (found: already_written), never re-sent
// blindly. The target says what it is (learned: mocks.Fake.UniqueID, as
// listCollections type "timeseries" does for a *mongo.Collection), or the
// caller declares it (writeguard.WithUniqueID(false), on a target that
// says nothing). A call whose inputs all end written or already_written
// returns a nil error, so each disposition is read from the hooks.
func TestC55TimeSeriesTargetNoDuplicates(t *testing.T) {
	ctx := context.Background()
	for _, how := range []string{"learned", "declared"} {
		for _, op := range []string{mocks.OpInsertMany, mocks.OpInsertOne} {
			t.Run(how+"/"+op, func(t *testing.T) {
				f := mocks.NewFake("db.measurements").TimeSeries().Script(mocks.LoseReply())
				rec := &mocks.Recorder{}
				var target writeguard.Target = f
				opts := []writeguard.Option{writeguard.WithHooks(rec.Hooks())}
				if how == "declared" {
					target = silentTarget{f}
					opts = append(opts, writeguard.WithUniqueID(false))
				}
				g, err := writeguard.New(target, opts...)
				if err != nil {
					t.Fatal(err)
				}
				docs := []any{cbD("_id", "m-1", "t", int32(1), "v", 1.5), cbD("_id", "m-2", "t", int32(2), "v", 2.5), cbD("_id", "m-3", "t", int32(3), "v", 3.5)}
				if op == mocks.OpInsertOne {
					docs = docs[:1]
					_, err = g.InsertOne(ctx, docs[0])
				} else {
					_, err = g.InsertMany(ctx, docs)
				}
				if n := len(f.Docs()); n != len(docs) || len(f.Calls()) != 1 {
					t.Errorf("%d measurements stored for %d sent, in %d calls: want each once, never re-sent", n, len(docs), len(f.Calls()))
				}
				outs := cbOutcomes(t, len(docs), err)
				disps := rec.Dispositions()
				if len(disps) != len(docs) {
					t.Fatalf("%d disposition events for %d measurements", len(disps), len(docs))
				}
				for _, d := range disps {
					o := outs[d.Index]
					if d.Disposition != writeguard.AlreadyWritten && !(d.Disposition == writeguard.OutcomeUnknown && o.MaybeWritten) {
						t.Errorf("measurement %d: %s (maybe=%v), want already_written (read back) or unknown with MaybeWritten", d.Index, d.Disposition, o.MaybeWritten)
					}
				}
			})
		}
	}
}

// silentTarget is a Target that says nothing about itself (no UniqueID,
// no Hello, no ReadPrimary): only the caller's WithUniqueID tells
// writeguard that _id is not unique.
type silentTarget struct{ writeguard.Target }

// C60: one driver call, several server commands. BulkWrite [insert o-1,
// insert o-2, update u-1]: the insert command commits, the update command
// is refused (13 Unauthorized): o-1 and o-2 are written (or at worst
// unknown with MaybeWritten), u-1 failed. The same when the driver splits
// a large InsertMany by maxWriteBatchSize: the third command's refusal
// says nothing against the documents of the first two.
func TestC60DriverSplitsACall(t *testing.T) {
	unauthorized := faultproxy.ErrorReply(faultproxy.CommandError{Code: 13, CodeName: "Unauthorized", Message: "not authorized on app to execute command"})
	for _, ordered := range []bool{true, false} {
		t.Run(fmt.Sprintf("ordered=%v", ordered), func(t *testing.T) {
			b := newCaseBed(t, cbProxyOptions(faultproxy.WithLimits(faultproxy.Limits{MaxWriteBatchSize: 4})))
			g := b.guard("c60")
			ns := b.ns("c60")
			b.seed("c60", cbD("_id", "u-1", "v", int64(0)))
			b.script(faultproxy.On("update").In(ns).Do(unauthorized))
			models := []mongo.WriteModel{
				mongo.NewInsertOneModel().SetDocument(cbD("_id", "o-1")),
				mongo.NewInsertOneModel().SetDocument(cbD("_id", "o-2")),
				mongo.NewUpdateOneModel().SetFilter(cbD("_id", "u-1")).SetUpdate(cbD("$inc", cbD("v", int64(1)))),
			}
			_, err := g.BulkWrite(b.ctx, models, options.BulkWrite().SetOrdered(ordered))
			outs := cbOutcomes(t, len(models), err)
			for i := range 2 {
				if o := outs[i]; !o.Disposition.Stored() && !(o.Disposition == writeguard.OutcomeUnknown && o.MaybeWritten) {
					t.Errorf("o-%d (its command committed): %s (maybe=%v), want written or unknown with MaybeWritten", i+1, o.Disposition, o.MaybeWritten)
				}
			}
			if o := outs[2]; o.Disposition != writeguard.Failed || o.MaybeWritten {
				t.Errorf("u-1 (its command refused): %s (maybe=%v), want failed", o.Disposition, o.MaybeWritten)
			}
			if n := len(b.docs("c60")); n != 3 {
				t.Errorf("%d documents stored, want 3 (o-1, o-2, u-1 seeded)", n)
			}

			// A large InsertMany: 10 documents, maxWriteBatchSize 4, the
			// third insert command refused.
			b.script(faultproxy.On("insert").In(ns).Nth(3).Do(unauthorized))
			var docs []any
			for i := range 10 {
				docs = append(docs, cbD("_id", fmt.Sprintf("big-%d", i)))
			}
			_, err = g.InsertMany(b.ctx, docs, options.InsertMany().SetOrdered(ordered))
			if n := b.proxy.Stats().Count("insert"); n < 3 {
				t.Fatalf("%d insert commands: the call was not split", n)
			}
			outs = cbOutcomes(t, len(docs), err)
			stored := map[string]bool{}
			for _, d := range b.docs("c60") {
				stored[d.Lookup("_id").StringValue()] = true
			}
			for i, o := range outs {
				id := fmt.Sprintf("big-%d", i)
				switch {
				case stored[id] && !o.Disposition.Stored() && !(o.Disposition == writeguard.OutcomeUnknown && o.MaybeWritten):
					t.Errorf("%s: stored by an earlier command, reported %s (maybe=%v)", id, o.Disposition, o.MaybeWritten)
				case !stored[id] && o.Disposition.Stored():
					t.Errorf("%s: not stored, reported %s", id, o.Disposition)
				}
			}
		})
	}
}
