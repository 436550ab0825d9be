package faultproxy_test

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/writeguard/writeguard/mocks/faultproxy"
)

// startSharded starts a sharded proxy (two shards, key _id) in front of a
// recording upstream: what the recorder received is what the shards
// applied.
func startSharded(t *testing.T, extra []faultproxy.Option, items ...faultproxy.ScriptItem) (*faultproxy.Proxy, *recorder) {
	t.Helper()
	rec := startRecorder(t)
	opts := append([]faultproxy.Option{faultproxy.WithUpstream(rec.p.Addr()), faultproxy.WithSharded(faultproxy.Sharding{}),
		faultproxy.WithScript(faultproxy.MustScript(items...))}, extra...)
	return startProxy(t, opts...), rec
}

// shardsOf returns, for ids inserted in this order, the shard of each and
// the child batches mongos makes of them (client indexes), as the proxy
// targets them.
func shardsOf(t *testing.T, p *faultproxy.Proxy, ordered bool, ids ...int) (shard []string, batches [][]int) {
	t.Helper()
	for _, id := range ids {
		shard = append(shard, p.ShardOf("insert", mustRaw(t, bson.D{{Key: "_id", Value: id}})))
	}
	if ordered {
		for i := range ids {
			if n := len(batches); n > 0 && shard[batches[n-1][0]] == shard[i] {
				batches[n-1] = append(batches[n-1], i)
				continue
			}
			batches = append(batches, []int{i})
		}
		return shard, batches
	}
	for _, name := range faultproxy.DefaultShards {
		var b []int
		for i := range ids {
			if shard[i] == name {
				b = append(b, i)
			}
		}
		if b != nil {
			batches = append(batches, b)
		}
	}
	return shard, batches
}

func seq(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i + 1
	}
	return out
}

func TestShardedHelloIsAMongos(t *testing.T) {
	p, _ := startSharded(t, []faultproxy.Option{faultproxy.WithLimits(faultproxy.Limits{MaxWriteBatchSize: 5, MaxMessageSizeBytes: 4096, MaxBsonObjectSize: 1024})})
	var mu sync.Mutex
	var kinds []string
	opts := options.Client().ApplyURI(p.URI()).SetServerMonitor(&event.ServerMonitor{
		ServerDescriptionChanged: func(e *event.ServerDescriptionChangedEvent) {
			mu.Lock()
			kinds = append(kinds, e.NewDescription.Kind)
			mu.Unlock()
		},
	})
	c, err := mongo.Connect(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Disconnect(opCtx(t)) }()
	for _, name := range []string{"hello", "isMaster"} {
		var reply bson.M
		if err := c.Database("admin").RunCommand(opCtx(t), bson.D{{Key: name, Value: 1}}).Decode(&reply); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if reply["msg"] != "isdbgrid" || reply["setName"] != nil || reply["hosts"] != nil || reply["topologyVersion"] == nil ||
			reply["logicalSessionTimeoutMinutes"] != int32(30) {
			t.Errorf("%s reply is not a mongos's: %v", name, reply)
		}
		if reply["maxWriteBatchSize"] != int32(5) || reply["maxMessageSizeBytes"] != int32(4096) || reply["maxBsonObjectSize"] != int32(1024) {
			t.Errorf("%s reply does not announce the limits: %v", name, reply)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(fmt.Sprint(kinds), "Mongos") {
		t.Errorf("the driver saw server kinds %v, want Mongos", kinds)
	}
}

// TestShardedSplitsAndMergesAsMongos: an unordered insert is sent as one
// child batch per shard, the shards' write errors come back in the
// client's numbering, sorted, with n summed; upserted indexes too.
func TestShardedSplitsAndMergesAsMongos(t *testing.T) {
	ids := seq(12)
	rejected := map[int]bool{3: true, 8: true, 11: true}
	p, rec := startSharded(t, nil, faultproxy.On("insert").Always().Do(faultproxy.RejectDocuments(func(d bson.Raw) bool {
		id, _ := d.Lookup("_id").AsInt64OK()
		return rejected[int(id)]
	}, faultproxy.WriteError{Code: 112, Message: "WriteConflict"})))
	shard, batches := shardsOf(t, p, false, ids...)
	if len(batches) < 2 {
		t.Fatalf("ids 1..12 all on one shard (%v): the test needs both", shard)
	}
	coll := connect(t, p.URI(), false).Database("app").Collection("c")
	docs := idDocs(ids...)
	res, err := coll.InsertMany(opCtx(t), docs, options.InsertMany().SetOrdered(false))
	var bwe mongo.BulkWriteException
	if !errors.As(err, &bwe) {
		t.Fatalf("err = %v, want a BulkWriteException", err)
	}
	var got []int
	for _, we := range bwe.WriteErrors {
		got = append(got, we.Index)
		if we.Code != 112 {
			t.Errorf("write error %+v, want code 112", we)
		}
	}
	if want := []int{2, 7, 10}; !cmp.Equal(got, want) {
		t.Errorf("write error indexes %v, want %v (client numbering, sorted)", got, want)
	}
	if len(res.InsertedIDs) != 9 {
		t.Errorf("InsertedIDs %v, want 9", res.InsertedIDs)
	}
	rx := rec.take()
	if len(rx) != len(batches) {
		t.Fatalf("upstream received %d commands, want %d child batches: %+v", len(rx), len(batches), rx)
	}
	for j, b := range batches {
		var want []int
		for _, i := range b {
			if !rejected[ids[i]] {
				want = append(want, ids[i])
			}
		}
		if !cmp.Equal(rx[j].ids, idStrings(want...)) || rx[j].ordered {
			t.Errorf("child batch %d (%s): upstream received %+v, want ids %v unordered", j, shard[b[0]], rx[j], want)
		}
	}
	st := p.Stats()
	if st.Count("insert") != 1 || len(st.ChildBatches) != 2 || st.Shards[faultproxy.DefaultShards[0]]+st.Shards[faultproxy.DefaultShards[1]] != 12 {
		t.Errorf("stats: %d client inserts, child batches %v, statements by shard %v; want 1, both shards, 12", st.Count("insert"), st.ChildBatches, st.Shards)
	}

	// Upserts: the upserted indexes are the client's.
	var models []mongo.WriteModel
	for _, id := range ids {
		models = append(models, mongo.NewUpdateOneModel().SetFilter(bson.D{{Key: "_id", Value: id}}).
			SetUpdate(bson.D{{Key: "$inc", Value: bson.D{{Key: "v", Value: 1}}}}).SetUpsert(true))
	}
	bres, err := coll.BulkWrite(opCtx(t), models, options.BulkWrite().SetOrdered(false))
	if err != nil {
		t.Fatal(err)
	}
	var keys []int
	for k, id := range bres.UpsertedIDs {
		keys = append(keys, int(k))
		if want := int32(ids[k]); id != want {
			t.Errorf("UpsertedIDs[%d] = %v, want %d", k, id, want)
		}
	}
	sort.Ints(keys)
	if bres.UpsertedCount != 12 || len(keys) != 12 || keys[0] != 0 || keys[11] != 11 {
		t.Errorf("upserted %d, indexes %v; want all 12", bres.UpsertedCount, keys)
	}
}

// TestFailShardUnordered: the failing shard applied the first statements
// of its child batch; the client gets one write error per statement of
// that batch, "Write results unavailable from <shard>", and the other
// shard's batch is applied and counted.
func TestFailShardUnordered(t *testing.T) {
	for _, code := range []int32{6, 9001, 11602, 91, 189} {
		t.Run(fmt.Sprint(code), func(t *testing.T) {
			ids := seq(10)
			p, rec := startSharded(t, nil, faultproxy.On("insert").Do(faultproxy.FailShard(1, 2,
				faultproxy.CommandError{Code: code, CodeName: "X", Message: "Connection reset by peer"})))
			shard, batches := shardsOf(t, p, false, ids...)
			coll := connect(t, p.URI(), false).Database("app").Collection("c")
			res, err := coll.InsertMany(opCtx(t), idDocs(ids...), options.InsertMany().SetOrdered(false))
			var bwe mongo.BulkWriteException
			if !errors.As(err, &bwe) {
				t.Fatalf("err = %v, want a BulkWriteException", err)
			}
			failed := batches[1]
			var got []int
			for _, we := range bwe.WriteErrors {
				got = append(got, we.Index)
				want := "Write results unavailable from " + shard[failed[0]] + " :: caused by :: Connection reset by peer"
				if int32(we.Code) != code || we.Message != want {
					t.Errorf("write error %+v, want code %d and %q", we, code, want)
				}
			}
			if !cmp.Equal(got, failed) {
				t.Errorf("write errors on %v, want one per statement of the failed child batch %v", got, failed)
			}
			if len(res.InsertedIDs) != len(batches[0]) {
				t.Errorf("InsertedIDs %v, want the other shard's %d (n summed)", res.InsertedIDs, len(batches[0]))
			}
			rx := rec.take()
			var stored []int
			for _, r := range rx {
				for _, s := range r.ids {
					var v int
					_, _ = fmt.Sscanf(s, `{"$numberInt":"%d"}`, &v)
					stored = append(stored, v)
				}
			}
			want := []int{}
			for _, i := range batches[0] {
				want = append(want, ids[i])
			}
			want = append(want, ids[failed[0]], ids[failed[1]])
			sort.Ints(stored)
			sort.Ints(want)
			if !cmp.Equal(stored, want) {
				t.Errorf("stored %v, want the other shard's batch and the first 2 of the failed one: %v", stored, want)
			}
			if p.Stats().Faults[faultproxy.FaultShard] != 1 {
				t.Errorf("faults %v, want one shard_failure", p.Stats().Faults)
			}
		})
	}
}

// TestFailShardOrdered: an ordered write goes shard by shard in statement
// order; the failing child batch applied its first statement, the client
// gets one write error on that batch's first statement, and nothing after
// it is sent.
func TestFailShardOrdered(t *testing.T) {
	ids := seq(16)
	p, rec := startSharded(t, nil, faultproxy.On("insert").Do(faultproxy.FailShard(2, 1,
		faultproxy.CommandError{Code: 11602, CodeName: "InterruptedDueToReplStateChange", Message: "interrupted"})))
	_, batches := shardsOf(t, p, true, ids...)
	if len(batches) < 4 {
		t.Fatalf("ordered ids 1..16 make %d child batches, the test needs 4", len(batches))
	}
	coll := connect(t, p.URI(), false).Database("app").Collection("c")
	res, err := coll.InsertMany(opCtx(t), idDocs(ids...))
	var bwe mongo.BulkWriteException
	if !errors.As(err, &bwe) || len(bwe.WriteErrors) != 1 {
		t.Fatalf("err = %v, want one write error", err)
	}
	if we := bwe.WriteErrors[0]; we.Index != batches[2][0] || we.Code != 11602 || !strings.HasPrefix(we.Message, "Write results unavailable from ") {
		t.Errorf("write error %+v, want 11602 at %d (first statement of child batch 2)", we, batches[2][0])
	}
	if n := len(batches[0]) + len(batches[1]); len(res.InsertedIDs) != n {
		t.Errorf("InsertedIDs %v, want the first two child batches' %d", res.InsertedIDs, n)
	}
	rx := rec.take()
	if len(rx) != 3 {
		t.Fatalf("upstream received %d commands, want 3 (two child batches and the failed one's first statement): %+v", len(rx), rx)
	}
	for j, r := range rx {
		var want []int
		for _, i := range batches[j] {
			want = append(want, ids[i])
		}
		if j == 2 {
			want = want[:1]
		}
		if !cmp.Equal(r.ids, idStrings(want...)) || !r.ordered {
			t.Errorf("child batch %d: upstream received %+v, want %v ordered", j, r, want)
		}
	}
}

// TestShardedOrderedStopsAtAShardsWriteError: a write error inside a child
// batch stops an ordered write there, as mongos does.
func TestShardedOrderedStopsAtAShardsWriteError(t *testing.T) {
	ids := seq(16)
	p, rec := startSharded(t, nil)
	_, batches := shardsOf(t, p, true, ids...)
	bad := ids[batches[1][0]]
	p.SetScript(faultproxy.MustScript(faultproxy.On("insert").Do(faultproxy.RejectDocuments(faultproxy.DocumentID(bad),
		faultproxy.WriteError{Code: 121, Message: "Document failed validation"}))))
	coll := connect(t, p.URI(), false).Database("app").Collection("c")
	_, err := coll.InsertMany(opCtx(t), idDocs(ids...))
	var bwe mongo.BulkWriteException
	if !errors.As(err, &bwe) || len(bwe.WriteErrors) != 1 || bwe.WriteErrors[0].Index != batches[1][0] || bwe.WriteErrors[0].Code != 121 {
		t.Fatalf("err = %v, want one 121 at %d", err, batches[1][0])
	}
	if rx := rec.take(); len(rx) != 1 {
		t.Errorf("upstream received %+v, want only the first child batch (the rejected one is first in the second)", rx)
	}
}

// TestSmallLimitsMakeTheDriverSplit: maxWriteBatchSize and
// maxMessageSizeBytes announced small make the driver send several
// commands for one InsertMany, in sharded and in replica-set mode; a
// command over maxWriteBatchSize is refused as the server does.
func TestSmallLimitsMakeTheDriverSplit(t *testing.T) {
	for _, mode := range []faultproxy.Option{faultproxy.WithSharded(faultproxy.Sharding{}), faultproxy.WithReplicaSet("rs0")} {
		rec := startRecorder(t)
		p := startProxy(t, faultproxy.WithUpstream(rec.p.Addr()), mode,
			faultproxy.WithLimits(faultproxy.Limits{MaxWriteBatchSize: 4, MaxMessageSizeBytes: 4096, MaxBsonObjectSize: 2048}))
		coll := connect(t, p.URI(), true).Database("app").Collection("c")
		if _, err := coll.InsertMany(opCtx(t), idDocs(seq(10)...)); err != nil {
			t.Fatal(err)
		}
		if n := p.Stats().Count("insert"); n != 3 {
			t.Errorf("%d insert commands for 10 documents under maxWriteBatchSize 4, want 3", n)
		}
		p.Reset()
		var big []any
		for i := range 6 {
			big = append(big, bson.D{{Key: "_id", Value: 100 + i}, {Key: "pad", Value: strings.Repeat("x", 1500)}})
		}
		if _, err := coll.InsertMany(opCtx(t), big); err != nil {
			t.Fatal(err)
		}
		if n := p.Stats().Count("insert"); n != 3 {
			t.Errorf("%d insert commands for 6 documents of 1.5 KB under maxMessageSizeBytes 4096, want 3", n)
		}
		err := coll.Database().RunCommand(opCtx(t), bson.D{{Key: "insert", Value: "c"}, {Key: "documents", Value: idDocs(seq(5)...)}}).Err()
		var ce mongo.CommandError
		if !errors.As(err, &ce) || ce.Code != 16 || !strings.Contains(ce.Message, "between 1 and 4. Got 5") {
			t.Errorf("a 5-statement insert: %v, want 16 InvalidLength", err)
		}
		rec.take()
	}
}

// TestSmallLimitsCapReadBatches: under a small maxMessageSizeBytes the
// proxy caps find's and getMore's batchSize, so that replies fit.
func TestSmallLimitsCapReadBatches(t *testing.T) {
	var mu sync.Mutex
	var sizes []any
	upstream := startProxy(t, faultproxy.WithScript(faultproxy.MustScript(faultproxy.On("find").Always().Do(
		faultproxy.Custom(func(c *faultproxy.Command, forward func(*faultproxy.Command) (bson.Raw, error)) (bson.Raw, error) {
			v, err := c.Body.LookupErr("batchSize")
			mu.Lock()
			if err == nil {
				sizes = append(sizes, v.Int32())
			} else {
				sizes = append(sizes, nil)
			}
			mu.Unlock()
			return forward(c)
		})))))
	p := startProxy(t, faultproxy.WithUpstream(upstream.Addr()),
		faultproxy.WithLimits(faultproxy.Limits{MaxMessageSizeBytes: 8192 + 1024, MaxBsonObjectSize: 1024 - 16}))
	coll := connect(t, p.URI(), false).Database("app").Collection("c")
	var hello bson.M
	if err := coll.Database().RunCommand(opCtx(t), bson.D{{Key: "hello", Value: 1}}).Decode(&hello); err != nil {
		t.Fatal(err)
	}
	if hello["maxMessageSizeBytes"] != int32(9216) || hello["maxBsonObjectSize"] != int32(1008) || hello["setName"] != nil || hello["msg"] != nil {
		t.Errorf("standalone hello with limits: %v", hello)
	}
	for _, o := range []*options.FindOptionsBuilder{options.Find(), options.Find().SetBatchSize(100), options.Find().SetBatchSize(3)} {
		cur, err := coll.Find(opCtx(t), bson.D{}, o)
		if err != nil {
			t.Fatal(err)
		}
		_ = cur.Close(opCtx(t))
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []any{int32(8), int32(8), int32(3)}; !cmp.Equal(sizes, want) {
		t.Errorf("batchSizes forwarded %v, want %v", sizes, want)
	}
}

// TestShardedRetryableWriteExecutesEachStatementOnce: a retried ordered
// BulkWrite whose equal $inc statements land in different child batches
// runs each statement exactly once.
func TestShardedRetryableWriteExecutesEachStatementOnce(t *testing.T) {
	p, rec := startSharded(t, nil, faultproxy.On("update").Do(faultproxy.CloseAfterForward()))
	// Two ids on different shards.
	a, b := 1, 2
	for p.ShardOf("insert", mustRaw(t, bson.D{{Key: "_id", Value: b}})) == p.ShardOf("insert", mustRaw(t, bson.D{{Key: "_id", Value: a}})) {
		b++
	}
	inc := bson.D{{Key: "$inc", Value: bson.D{{Key: "v", Value: 1}}}}
	models := []mongo.WriteModel{
		mongo.NewUpdateOneModel().SetFilter(bson.D{{Key: "_id", Value: a}}).SetUpdate(inc),
		mongo.NewUpdateOneModel().SetFilter(bson.D{{Key: "_id", Value: b}}).SetUpdate(inc),
		mongo.NewUpdateOneModel().SetFilter(bson.D{{Key: "_id", Value: a}}).SetUpdate(inc),
	}
	coll := connect(t, p.URI(), true).Database("app").Collection("c")
	res, err := coll.BulkWrite(opCtx(t), models)
	if err != nil || res.MatchedCount != 3 {
		t.Fatalf("BulkWrite = %+v, %v; want the retry to report 3 matched", res, err)
	}
	var got []string
	for _, r := range rec.take() {
		got = append(got, r.ids...)
	}
	if want := idStrings(a, b, a); !cmp.Equal(got, want) {
		t.Errorf("statements applied %v, want %v (each once, the retry answered from the record)", got, want)
	}
	// The retry is split again (the shards answer it from their records).
	sa := p.ShardOf("insert", mustRaw(t, bson.D{{Key: "_id", Value: a}}))
	sb := p.ShardOf("insert", mustRaw(t, bson.D{{Key: "_id", Value: b}}))
	if st := p.Stats(); st.Count("update") != 2 || st.ChildBatches[sa] != 4 || st.ChildBatches[sb] != 2 {
		t.Errorf("stats: %d updates, child batches %v; want 2 (one retry), 2×2 child batches on a's shard, 2×1 on b's", st.Count("update"), st.ChildBatches)
	}
}

func TestShardedOptionErrors(t *testing.T) {
	for _, tc := range []struct {
		opts []faultproxy.Option
		want string
	}{
		{[]faultproxy.Option{faultproxy.WithSharded(faultproxy.Sharding{Shards: []string{"a"}})}, "at least two shards"},
		{[]faultproxy.Option{faultproxy.WithSharded(faultproxy.Sharding{Shards: []string{"a", "a"}})}, `"a" twice`},
		{[]faultproxy.Option{faultproxy.WithSharded(faultproxy.Sharding{Key: "a.b"})}, "top-level"},
		{[]faultproxy.Option{faultproxy.WithSharded(faultproxy.Sharding{}), faultproxy.WithReplicaSet("rs0")}, "exclude each other"},
		{[]faultproxy.Option{faultproxy.WithLimits(faultproxy.Limits{MaxWriteBatchSize: -1})}, "negative"},
		{[]faultproxy.Option{faultproxy.WithLimits(faultproxy.Limits{MaxMessageSizeBytes: 100})}, "below 2048"},
	} {
		if _, err := faultproxy.New(tc.opts...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New: %v, want an error mentioning %q", err, tc.want)
		}
	}
	for _, tc := range []struct {
		rule *faultproxy.Rule
		want string
	}{
		{faultproxy.On("insert").Do(faultproxy.FailShard(-1, 0, interrupted)), "batch = -1"},
		{faultproxy.On("insert").Do(faultproxy.FailShard(0, -1, interrupted)), "applied = -1"},
		{faultproxy.On("insert").Do(faultproxy.FailShard(0, 0, faultproxy.CommandError{})), "code must not be 0"},
		{faultproxy.On("find").Do(faultproxy.FailShard(0, 0, interrupted)), "not \"find\""},
	} {
		if _, err := faultproxy.NewScript(tc.rule); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewScript: %v, want an error mentioning %q", err, tc.want)
		}
	}
}

// TestShardedMergesWriteConcernErrors: one shard's writeConcernError comes
// back with " at <shard>"; several as 64 WriteConcernFailed "multiple
// errors reported" (buildClientResponse).
func TestShardedMergesWriteConcernErrors(t *testing.T) {
	upstream := startProxy(t, faultproxy.WithScript(faultproxy.MustScript(faultproxy.On("insert").Always().Do(
		faultproxy.WriteConcernErrorReply(faultproxy.WriteConcernError{Code: 64, CodeName: "WriteConcernTimeout", Message: "waiting for replication timed out"})))))
	p := startProxy(t, faultproxy.WithUpstream(upstream.Addr()), faultproxy.WithSharded(faultproxy.Sharding{}))
	coll := connect(t, p.URI(), false).Database("app").Collection("c")
	ids := seq(8)
	_, batches := shardsOf(t, p, false, ids...)
	if len(batches) != 2 {
		t.Fatalf("ids 1..8 on one shard")
	}
	_, err := coll.InsertMany(opCtx(t), idDocs(ids...), options.InsertMany().SetOrdered(false))
	var bwe mongo.BulkWriteException
	if !errors.As(err, &bwe) || bwe.WriteConcernError == nil || bwe.WriteConcernError.Code != 64 ||
		!strings.HasPrefix(bwe.WriteConcernError.Message, "multiple errors reported : WriteConcernTimeout: waiting for replication timed out at shard0") {
		t.Errorf("two shards: %v, want 64 multiple errors reported", err)
	}
	one := ids[batches[0][0]]
	_, err = coll.InsertOne(opCtx(t), bson.D{{Key: "_id", Value: one + 100}})
	var wex mongo.WriteException
	if !errors.As(err, &wex) || wex.WriteConcernError == nil || !strings.HasPrefix(wex.WriteConcernError.Message, "waiting for replication timed out at shard0") {
		t.Errorf("one shard: %v, want the shard's error with \" at <shard>\"", err)
	}
}

// TestShardedWriteConcernFaultFollowsMongosRules: a WriteConcernErrorReply
// fault fails every shard's write concern; mongos reports it unless the
// write is ordered and stopped at a write error.
func TestShardedWriteConcernFaultFollowsMongosRules(t *testing.T) {
	ids := seq(8)
	for _, ordered := range []bool{true, false} {
		p, _ := startSharded(t, nil)
		_, batches := shardsOf(t, p, ordered, ids...)
		bad := ids[batches[len(batches)-1][0]]
		p.SetScript(faultproxy.MustScript(
			faultproxy.Validator("app.c", bson.D{{Key: "$jsonSchema", Value: bson.D{{Key: "required", Value: bson.A{"_id"}},
				{Key: "properties", Value: bson.D{{Key: "_id", Value: bson.D{{Key: "not", Value: bson.D{{Key: "enum", Value: bson.A{bad}}}}}}}}}}}),
			faultproxy.On("insert").Do(faultproxy.WriteConcernErrorReply(faultproxy.WriteConcernError{Code: 6, CodeName: "HostUnreachable", Message: "no secondary", Labels: []string{"RetryableWriteError"}}))))
		coll := connect(t, p.URI(), false).Database("app").Collection("c")
		_, err := coll.InsertMany(opCtx(t), idDocs(ids...), options.InsertMany().SetOrdered(ordered))
		var bwe mongo.BulkWriteException
		if !errors.As(err, &bwe) || len(bwe.WriteErrors) != 1 || bwe.WriteErrors[0].Code != 121 {
			t.Fatalf("ordered=%v: %v, want one 121", ordered, err)
		}
		if ordered && bwe.WriteConcernError != nil {
			t.Errorf("ordered write stopped at a write error: writeConcernError %v reported, mongos drops it", bwe.WriteConcernError)
		}
		if !ordered && (bwe.WriteConcernError == nil || !bwe.HasErrorLabel("RetryableWriteError")) {
			t.Errorf("unordered write with some statements applied: %v, want the writeConcernError and its label", err)
		}
	}
}
