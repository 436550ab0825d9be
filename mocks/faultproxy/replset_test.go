package faultproxy_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/writeguard/writeguard/mocks/faultproxy"
)

// startReplicaSet starts a replica-set proxy in front of a recording
// upstream (a standalone).
func startReplicaSet(t *testing.T, items ...faultproxy.ScriptItem) (*faultproxy.Proxy, *recorder) {
	t.Helper()
	rec := startRecorder(t)
	p := startProxy(t, faultproxy.WithUpstream(rec.p.Addr()), faultproxy.WithReplicaSet("rs0"),
		faultproxy.WithScript(faultproxy.MustScript(items...)))
	return p, rec
}

func TestReplicaSetModeRewritesTheUpstreamHello(t *testing.T) {
	p, _ := startReplicaSet(t)
	c := connect(t, p.URI(), true)
	for _, name := range []string{"hello", "isMaster"} {
		var reply bson.M
		if err := c.Database("admin").RunCommand(opCtx(t), bson.D{{Key: name, Value: 1}}).Decode(&reply); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		primary := "isWritablePrimary"
		if name == "isMaster" {
			primary = "ismaster"
		}
		if reply[primary] != true || reply["setName"] != "rs0" || reply["primary"] != p.Addr() ||
			!cmp.Equal(reply["hosts"], bson.A{p.Addr()}) || reply["secondary"] != false {
			t.Errorf("%s reply is not a replica-set primary's: %v", name, reply)
		}
		if reply["logicalSessionTimeoutMinutes"] != int32(30) || reply["topologyVersion"] == nil || reply["maxWireVersion"] == nil {
			t.Errorf("%s reply lacks session timeout, topology version or the upstream's fields: %v", name, reply)
		}
	}
}

// TestRetryableWriteExecutesOnce: the write is applied, the reply is lost,
// the driver retries with the same txnNumber, and the proxy answers from
// its record without applying the write again.
func TestRetryableWriteExecutesOnce(t *testing.T) {
	var mu sync.Mutex
	var txnNumbers []int64
	p, rec := startReplicaSet(t, faultproxy.On("insert").Where(func(c *faultproxy.Command) bool {
		if v, err := c.Body.LookupErr("txnNumber"); err == nil {
			mu.Lock()
			txnNumbers = append(txnNumbers, v.Int64())
			mu.Unlock()
		}
		return true
	}).Do(faultproxy.CloseAfterForward()))
	coll := connect(t, p.URI(), true).Database("app").Collection("users")
	res, err := coll.InsertOne(opCtx(t), bson.D{{Key: "_id", Value: 1}})
	if err != nil || res.InsertedID != int32(1) {
		t.Fatalf("InsertOne = %v, %v; want the retry to succeed", res, err)
	}
	if got := rec.ids(); !cmp.Equal(got, idStrings(1)) {
		t.Errorf("upstream stored %v, want the document once", got)
	}
	mu.Lock()
	if len(txnNumbers) != 2 || txnNumbers[0] != txnNumbers[1] {
		t.Errorf("txnNumbers = %v, want the same one twice", txnNumbers)
	}
	mu.Unlock()
	st := p.Stats()
	if st.Count("insert") != 2 || st.Forwarded["insert"] != 1 {
		t.Errorf("inserts received %d, documents forwarded %d; want 2, 1", st.Count("insert"), st.Forwarded["insert"])
	}
	// The next write has a new txnNumber and is executed.
	if _, err := coll.InsertOne(opCtx(t), bson.D{{Key: "_id", Value: 2}}); err != nil {
		t.Fatal(err)
	}
	if got := rec.ids(); !cmp.Equal(got, idStrings(2)) {
		t.Errorf("upstream stored %v, want [2]", got)
	}
}

// TestRetryAfterPartialApplicationRunsOnlyTheRest: as with the server's
// stmtId bookkeeping, the retry of an interrupted batch applies only the
// statements the first attempt did not.
func TestRetryAfterPartialApplicationRunsOnlyTheRest(t *testing.T) {
	for _, ordered := range []bool{true, false} {
		p, rec := startReplicaSet(t, faultproxy.On("insert").Do(faultproxy.ApplyThenError(2, interrupted)))
		coll := connect(t, p.URI(), true).Database("app").Collection("users")
		res, err := coll.InsertMany(opCtx(t), idDocs(1, 2, 3, 4, 5), options.InsertMany().SetOrdered(ordered))
		if err != nil || len(res.InsertedIDs) != 5 {
			t.Fatalf("ordered=%v: InsertMany = %v, %v; want the retry to succeed", ordered, res, err)
		}
		rx := rec.take()
		if len(rx) != 2 || !cmp.Equal(rx[0].ids, idStrings(1, 2)) || !cmp.Equal(rx[1].ids, idStrings(3, 4, 5)) {
			t.Errorf("ordered=%v: upstream received %+v; want [1 2] then [3 4 5]", ordered, rx)
		}
		if rx[1].ordered != ordered {
			t.Errorf("the retried part lost the ordered flag")
		}
	}
}

func TestRetriedUpdatesReportTheRecordedCounts(t *testing.T) {
	p, rec := startReplicaSet(t, faultproxy.On("update").Do(faultproxy.ApplyThenClose(2)))
	coll := connect(t, p.URI(), true).Database("app").Collection("users")
	set := bson.D{{Key: "$set", Value: bson.D{{Key: "x", Value: 1}}}}
	models := []mongo.WriteModel{
		mongo.NewUpdateOneModel().SetFilter(bson.D{{Key: "_id", Value: 1}}).SetUpdate(set).SetUpsert(true),
		mongo.NewUpdateOneModel().SetFilter(bson.D{{Key: "_id", Value: 2}}).SetUpdate(set),
		mongo.NewUpdateOneModel().SetFilter(bson.D{{Key: "_id", Value: 3}}).SetUpdate(set),
	}
	res, err := coll.BulkWrite(opCtx(t), models)
	if err != nil {
		t.Fatalf("BulkWrite: %v", err)
	}
	// The null upstream upserts statement 0 and matches the others.
	if res.MatchedCount != 2 || res.ModifiedCount != 2 || res.UpsertedCount != 1 || res.UpsertedIDs[0] != int32(1) {
		t.Errorf("result %+v; want 2 matched, 2 modified, _id 1 upserted at index 0", res)
	}
	rx := rec.take()
	if len(rx) != 2 || !cmp.Equal(rx[0].ids, idStrings(1, 2)) || !cmp.Equal(rx[1].ids, idStrings(3)) {
		t.Errorf("upstream received %+v; want [1 2] then [3]", rx)
	}
}

func TestTransactionsAreRefusedClearly(t *testing.T) {
	p, _ := startReplicaSet(t)
	c := connect(t, p.URI(), true)
	sess, err := c.StartSession()
	if err != nil {
		t.Fatal(err)
	}
	defer sess.EndSession(context.Background())
	_, err = sess.WithTransaction(opCtx(t), func(ctx context.Context) (any, error) {
		return c.Database("app").Collection("users").InsertOne(ctx, bson.D{{Key: "_id", Value: 1}})
	})
	var ce mongo.CommandError
	if !errors.As(err, &ce) || ce.Code != 20 || !strings.Contains(ce.Message, "transactions are not supported by the faultproxy bed") {
		t.Fatalf("err = %v, want 20 IllegalOperation naming the bed", err)
	}
}

// TestTxnNumberBookkeeping: the same (lsid, txnNumber) sent twice, as a
// raw command, is executed once and answered from the record; an older
// txnNumber is refused with 225 TransactionTooOld; another session is
// independent.
func TestTxnNumberBookkeeping(t *testing.T) {
	p, rec := startReplicaSet(t)
	db := connect(t, p.URI(), false).Database("app")
	session := func(b byte) bson.D {
		id := make([]byte, 16)
		id[0] = b
		return bson.D{{Key: "id", Value: bson.Binary{Subtype: 4, Data: id}}}
	}
	insert := func(lsid bson.D, txn int64, ids ...int) (bson.M, error) {
		var reply bson.M
		err := db.RunCommand(opCtx(t), bson.D{
			{Key: "insert", Value: "users"}, {Key: "documents", Value: idDocs(ids...)},
			{Key: "lsid", Value: lsid}, {Key: "txnNumber", Value: txn},
		}).Decode(&reply)
		return reply, err
	}
	for i := 0; i < 2; i++ {
		reply, err := insert(session(1), 5, 1, 2)
		if err != nil || reply["n"] != int32(2) {
			t.Fatalf("attempt %d: %v, %v; want n = 2", i+1, reply, err)
		}
	}
	if got := rec.ids(); !cmp.Equal(got, idStrings(1, 2)) {
		t.Errorf("upstream stored %v, want [1 2] once", got)
	}
	_, err := insert(session(1), 4, 3)
	var ce mongo.CommandError
	if !errors.As(err, &ce) || ce.Code != 225 || ce.Name != "TransactionTooOld" {
		t.Errorf("older txnNumber: %v, want 225 TransactionTooOld", err)
	}
	if _, err := insert(session(2), 5, 4); err != nil {
		t.Errorf("another session with the same txnNumber: %v", err)
	}
	if got := rec.ids(); !cmp.Equal(got, idStrings(4)) {
		t.Errorf("upstream stored %v, want [4]", got)
	}
}
