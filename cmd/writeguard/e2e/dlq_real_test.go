package e2e

// Dead-letter tests against a real MongoDB (MONGODB_URI; skipped without
// it): real $jsonSchema validators and 121 errors, TTL indexes and
// collMod, and the dry run's aggregation.

import (
	"context"
	"fmt"
	"os"
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
	"github.com/writeguard/writeguard/replay"
)

// dlRealDB connects to MONGODB_URI and returns a fresh database, dropped
// at the end of t; it skips t when MONGODB_URI is unset.
func dlRealDB(t *testing.T) (*mongo.Client, *mongo.Database) {
	t.Helper()
	uri := os.Getenv("MONGODB_URI")
	if uri == "" {
		t.Skip("needs a real MongoDB (validators, TTL indexes, collMod, $replaceRoot): set MONGODB_URI=mongodb://host:port/ to run it")
	}
	ctx := context.Background()
	client, err := mongo.Connect(options.Client().ApplyURI(uri).SetTimeout(30 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	name := fmt.Sprintf("wg_dl_%s_%d", dlNameRE.ReplaceAllString(t.Name(), "_"), time.Now().UnixNano()%1e6)
	if len(name) > 60 {
		name = name[len(name)-60:]
	}
	db := client.Database(name)
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = db.Drop(cctx)
		_ = client.Disconnect(cctx)
	})
	if err := client.Ping(ctx, nil); err != nil {
		t.Fatalf("MONGODB_URI: %v", err)
	}
	return client, db
}

func dlTTLOf(t *testing.T, coll *mongo.Collection, field string) (float64, bool) {
	t.Helper()
	cur, err := coll.Indexes().List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var idx []bson.Raw
	if err := cur.All(context.Background(), &idx); err != nil {
		t.Fatal(err)
	}
	for _, ix := range idx {
		key, _ := ix.Lookup("key").DocumentOK()
		elems, _ := key.Elements()
		if len(elems) != 1 || elems[0].Key() != field {
			continue
		}
		v, err := ix.LookupErr("expireAfterSeconds")
		if err != nil {
			return 0, false
		}
		f, ok := v.AsFloat64OK()
		return f, ok
	}
	return 0, false
}

// TestDLRealEnsureCollection: validator and TTL applied; a second run
// reports everything already there; a changed TTL period is fixed with
// collMod (never 85 IndexOptionsConflict); a plain index on last_seen is
// made TTL; another validator is replaced.
func TestDLRealEnsureCollection(t *testing.T) {
	_, db := dlRealDB(t)
	ctx := context.Background()
	rep, err := dlq.EnsureCollection(ctx, db, "dlq")
	if err != nil {
		t.Fatalf("%v\n%s", err, rep)
	}
	t.Logf("first run:\n%s", rep)
	for _, f := range []string{dlq.FeatureCollection, dlq.FeatureValidator, dlq.FeatureFingerprintIndex, dlq.FeatureTTLIndex, dlq.FeatureStatusIndex} {
		if rep.State(f) != dlq.FeatureApplied {
			t.Errorf("first run: %s = %q, want applied", f, rep.State(f))
		}
	}
	if ttl, ok := dlTTLOf(t, db.Collection("dlq"), "last_seen"); !ok || ttl != dlq.DefaultTTL.Seconds() {
		t.Errorf("TTL %v (%v), want %v", ttl, ok, dlq.DefaultTTL.Seconds())
	}
	// The pieces outlive their envelope by the orphan grace.
	if fr, _ := rep.Feature(dlq.FeaturePieces); fr.State != dlq.FeatureApplied {
		t.Errorf("pieces: %s", fr)
	}
	if ttl, ok := dlTTLOf(t, db.Collection("dlq"+dlq.PiecesCollectionSuffix), "at"); !ok || ttl != (dlq.DefaultTTL+dlq.OrphanGrace).Seconds() {
		t.Errorf("pieces TTL %v (%v), want %v", ttl, ok, (dlq.DefaultTTL + dlq.OrphanGrace).Seconds())
	}
	rep, err = dlq.EnsureCollection(ctx, db, "dlq")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{dlq.FeatureCollection, dlq.FeatureValidator, dlq.FeatureFingerprintIndex, dlq.FeatureTTLIndex, dlq.FeatureStatusIndex, dlq.FeaturePieces} {
		if rep.State(f) != dlq.FeatureAlready {
			t.Errorf("second run: %s = %q, want already", f, rep.State(f))
		}
	}
	rep, err = dlq.EnsureCollection(ctx, db, "dlq", dlq.WithTTL("", time.Hour))
	if err != nil {
		t.Fatalf("changed TTL: %v\n%s", err, rep)
	}
	if fr, _ := rep.Feature(dlq.FeatureTTLIndex); fr.State != dlq.FeatureApplied || !strings.Contains(fr.Detail, "changed from 1209600 to 3600") {
		t.Errorf("changed TTL: %s", fr)
	}
	if ttl, _ := dlTTLOf(t, db.Collection("dlq"), "last_seen"); ttl != 3600 {
		t.Errorf("TTL after collMod %v, want 3600", ttl)
	}

	// A collection made by hand: another validator, a plain last_seen index.
	if err := db.CreateCollection(ctx, "dlq2", options.CreateCollection().SetValidator(bson.D{{Key: "x", Value: bson.D{{Key: "$exists", Value: true}}}})); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Collection("dlq2").Indexes().CreateOne(ctx, mongo.IndexModel{Keys: bson.D{{Key: "last_seen", Value: 1}}}); err != nil {
		t.Fatal(err)
	}
	rep, err = dlq.EnsureCollection(ctx, db, "dlq2")
	t.Logf("hand-made collection:\n%s", rep)
	if err != nil {
		t.Fatal(err)
	}
	if fr, _ := rep.Feature(dlq.FeatureValidator); fr.State != dlq.FeatureApplied || !strings.Contains(fr.Detail, "replaced") {
		t.Errorf("validator: %s", fr)
	}
	if fr, _ := rep.Feature(dlq.FeatureTTLIndex); fr.State != dlq.FeatureApplied || !strings.Contains(fr.Detail, "made TTL") {
		t.Errorf("plain index made TTL: %s", fr)
	}
}

// TestDLRealPutRace: with atomic updates, concurrent captures through a
// sink each count exactly.
func TestDLRealPutRace(t *testing.T) {
	_, db := dlRealDB(t)
	ctx := context.Background()
	if _, err := dlq.EnsureCollection(ctx, db, "dlq"); err != nil {
		t.Fatal(err)
	}
	dlqColl := db.Collection("dlq")
	const n = 8
	for round := 0; round < 5; round++ {
		orig, _ := bson.Marshal(dlDoc("_id", fmt.Sprintf("race-%d", round)))
		env := envelope.Envelope{Original: orig, Code: 121, Namespace: "x.y", Operation: "insertOne", Attempts: 1}
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := 0; i < n; i++ {
			sink := dlq.NewMongoSink(dlqColl)
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				if err := sink.Put(ctx, []envelope.Envelope{env}); err != nil {
					t.Errorf("Put: %v", err)
				}
			}()
		}
		close(start)
		wg.Wait()
		st, err := dlq.Stats(ctx, dlqColl, dlq.Filter{Fingerprints: []string{envelope.Fingerprint(orig, false)}})
		if err != nil {
			t.Fatal(err)
		}
		if st.Envelopes != 1 || st.Attempts != n {
			t.Errorf("round %d: %d envelopes, %d attempts; want 1, %d", round, st.Envelopes, st.Attempts, n)
		}
	}
}

// TestDLRealCaptureAndReplay: real 121s from a real validator are
// captured (inserts and an updateOne model); the dry run says none would
// pass, then, after collMod widens the validator, that all would; the
// replay writes them all.
func TestDLRealCaptureAndReplay(t *testing.T) {
	_, db := dlRealDB(t)
	ctx := context.Background()
	if _, err := dlq.EnsureCollection(ctx, db, "dlq"); err != nil {
		t.Fatal(err)
	}
	if err := db.CreateCollection(ctx, "orders", options.CreateCollection().SetValidator(dlSchema)); err != nil {
		t.Fatal(err)
	}
	orders, dlqColl := db.Collection("orders"), db.Collection("dlq")
	if _, err := orders.InsertOne(ctx, dlDoc("_id", int32(100), "sku", "U", "qty", int32(1))); err != nil {
		t.Fatal(err)
	}
	g, err := writeguard.Wrap(orders, writeguard.WithDeadLetter(dlq.NewMongoSink(dlqColl)), writeguard.WithBackoff(dlFastBackoff))
	if err != nil {
		t.Fatal(err)
	}
	_, err = g.BulkWrite(ctx, []mongo.WriteModel{
		mongo.NewInsertOneModel().SetDocument(dlDoc("sku", "A")),
		mongo.NewInsertOneModel().SetDocument(dlDoc("sku", "B", "qty", int32(0))),
		mongo.NewInsertOneModel().SetDocument(dlDoc("sku", "C", "qty", int32(3))),
		mongo.NewUpdateOneModel().SetFilter(dlDoc("_id", int32(100))).SetUpdate(dlDoc("$set", dlDoc("qty", int32(-1)))),
	}, options.BulkWrite().SetOrdered(false))
	rep, ok := err.(*writeguard.Report)
	if !ok || rep.Count(writeguard.DeadLettered) != 3 {
		t.Fatalf("BulkWrite: %v", err)
	}
	st, err := dlq.Stats(ctx, dlqColl, dlq.Filter{})
	if err != nil || st.Envelopes != 3 {
		t.Fatalf("stats %+v, %v", st, err)
	}
	t.Logf("keywords %v, paths %v", st.ByKeyword, st.ByPath)

	res, err := replay.Run(ctx, dlqColl, orders, replay.WithDryRun())
	if err != nil {
		t.Fatalf("dry run: %v", err)
	}
	if res.Matched != 3 || res.WouldPass != 0 || res.WouldFail != 2 || res.Undetermined != 1 || res.Validator == nil {
		t.Errorf("dry run before the fix: %+v", res)
	}
	// Widen: qty optional, any number.
	wide := bson.D{{Key: "$jsonSchema", Value: bson.D{{Key: "properties", Value: bson.D{{Key: "qty", Value: bson.D{{Key: "bsonType", Value: "number"}}}}}}}}
	res, err = replay.Run(ctx, dlqColl, orders, replay.WithDryRun(), replay.WithValidator(wide))
	if err != nil || res.WouldPass != 2 {
		t.Errorf("dry run of a proposed validator: %+v, %v", res, err)
	}
	if err := db.RunCommand(ctx, bson.D{{Key: "collMod", Value: "orders"}, {Key: "validator", Value: wide}}).Err(); err != nil {
		t.Fatal(err)
	}
	res, err = replay.Run(ctx, dlqColl, orders, replay.WithDryRun())
	if err != nil || res.WouldPass != 2 || res.WouldFail != 0 {
		t.Errorf("dry run after the fix: %+v, %v", res, err)
	}
	target, err := writeguard.Wrap(orders, writeguard.WithBackoff(dlFastBackoff))
	if err != nil {
		t.Fatal(err)
	}
	res, err = replay.Run(ctx, dlqColl, target, replay.WithOperations(replay.Inserts|replay.Updates))
	if err != nil || res.Replayed != 3 {
		t.Fatalf("replay: %+v, %v", res, err)
	}
	var u bson.Raw
	if err := orders.FindOne(ctx, dlDoc("_id", int32(100))).Decode(&u); err != nil || u.Lookup("qty").Int32() != -1 {
		t.Errorf("update model not replayed: %v, %v", u, err)
	}
	if n, _ := orders.CountDocuments(ctx, bson.D{}); n != 4 {
		t.Errorf("orders holds %d documents, want 4", n)
	}
}
