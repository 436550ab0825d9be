package embedded_test

import (
	"context"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/writeconcern"
	"go.uber.org/goleak"

	"github.com/writeguard/writeguard/cmd/writeguard/embedded"
	"github.com/writeguard/writeguard/envelope"
)

// TestMain fails the package if any goroutine is left running after all
// tests: every server must be Closed and every client Disconnected.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// MongoDB server error codes checked below.
const (
	codeBadValue       = 2
	codeFailedToParse  = 9
	codeDuplicateKey   = 11000
	codeNotImplemented = 238
)

// startServer starts a server and closes it when the test ends (after the
// clients, which are registered later and so cleaned up first).
func startServer(t testing.TB, opts ...embedded.Option) *embedded.Server {
	t.Helper()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	s, err := embedded.Start(ctx, opts...)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}

	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()

		if err := s.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
	})

	return s
}

// connect returns a driver v2 client for uri, disconnected when the test
// ends.
func connect(t testing.TB, uri string) *mongo.Client {
	t.Helper()

	c, err := mongo.Connect(options.Client().ApplyURI(uri).SetTimeout(30 * time.Second))
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}

	t.Cleanup(func() {
		if err := c.Disconnect(context.Background()); err != nil {
			t.Errorf("Disconnect: %v", err)
		}
	})

	return c
}

// newCollection starts a server, connects, and returns a collection named
// after the test in database "test".
func newCollection(t *testing.T) *mongo.Collection {
	t.Helper()

	s := startServer(t)
	c := connect(t, s.URI())

	return c.Database("test").Collection(strings.ReplaceAll(t.Name(), "/", "_"))
}

// ids returns the sorted _id values (int32) of every document in coll.
func ids(t *testing.T, coll *mongo.Collection) []int32 {
	t.Helper()

	ctx := context.Background()

	cur, err := coll.Find(ctx, bson.D{}, options.Find().SetSort(bson.D{{Key: "_id", Value: 1}}))
	if err != nil {
		t.Fatalf("Find: %v", err)
	}

	var docs []struct {
		ID int32 `bson:"_id"`
	}
	if err := cur.All(ctx, &docs); err != nil {
		t.Fatalf("All: %v", err)
	}

	out := make([]int32, 0, len(docs))
	for _, d := range docs {
		out = append(out, d.ID)
	}

	return out
}

// serverCode returns the server error code carried by err (a command
// error, a write exception or a bulk write exception), or 0.
func serverCode(err error) int {
	var ce mongo.CommandError
	if errors.As(err, &ce) {
		return int(ce.Code)
	}

	var we mongo.WriteException
	if errors.As(err, &we) && len(we.WriteErrors) > 0 {
		return we.WriteErrors[0].Code
	}

	var bwe mongo.BulkWriteException
	if errors.As(err, &bwe) && len(bwe.WriteErrors) > 0 {
		return bwe.WriteErrors[0].Code
	}

	return 0
}

func TestStartURIAndAddr(t *testing.T) {
	s := startServer(t)

	if !strings.HasPrefix(s.Addr(), "127.0.0.1:") || strings.HasSuffix(s.Addr(), ":0") {
		t.Errorf("Addr() = %q, want 127.0.0.1:<non-zero port>", s.Addr())
	}

	want := "mongodb://" + s.Addr() + "/?directConnection=true&retryWrites=false"
	if s.URI() != want {
		t.Errorf("URI() = %q, want %q", s.URI(), want)
	}

	if fi, err := os.Stat(s.DataDir()); err != nil || !fi.IsDir() {
		t.Errorf("DataDir() %q: not a directory (%v)", s.DataDir(), err)
	}

	c := connect(t, s.URI())
	if err := c.Ping(context.Background(), nil); err != nil {
		t.Fatalf("Ping: %v", err)
	}
}

func TestStartCancelledContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()

	s, err := embedded.Start(ctx)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Start(cancelled ctx) = %v, %v; want context.Canceled", s, err)
	}
}

func TestInsertFind(t *testing.T) {
	ctx := context.Background()
	coll := newCollection(t)

	res, err := coll.InsertOne(ctx, bson.D{{Key: "name", Value: "a"}, {Key: "n", Value: 1}})
	if err != nil {
		t.Fatalf("InsertOne: %v", err)
	}

	if _, ok := res.InsertedID.(bson.ObjectID); !ok {
		t.Errorf("InsertedID = %T, want bson.ObjectID", res.InsertedID)
	}

	var got struct {
		ID   bson.ObjectID `bson:"_id"`
		Name string        `bson:"name"`
		N    int32         `bson:"n"`
	}
	if err := coll.FindOne(ctx, bson.D{{Key: "name", Value: "a"}}).Decode(&got); err != nil {
		t.Fatalf("FindOne: %v", err)
	}

	if got.ID != res.InsertedID || got.Name != "a" || got.N != 1 {
		t.Errorf("FindOne = %+v, want _id %v name a n 1", got, res.InsertedID)
	}

	err = coll.FindOne(ctx, bson.D{{Key: "name", Value: "missing"}}).Err()
	if !errors.Is(err, mongo.ErrNoDocuments) {
		t.Errorf("FindOne(missing) = %v, want mongo.ErrNoDocuments", err)
	}
}

// TestDuplicateKey: a unique index is enforced; the error is a
// mongo.WriteException with code 11000, and FerretDB v1 sends neither
// keyPattern nor keyValue (MongoDB sends both).
func TestDuplicateKey(t *testing.T) {
	ctx := context.Background()
	coll := newCollection(t)

	name, err := coll.Indexes().CreateOne(ctx, mongo.IndexModel{
		Keys:    bson.D{{Key: "k", Value: 1}},
		Options: options.Index().SetUnique(true),
	})
	if err != nil {
		t.Fatalf("CreateOne(unique): %v", err)
	}

	if name != "k_1" {
		t.Errorf("index name = %q, want k_1", name)
	}

	if _, err = coll.InsertOne(ctx, bson.D{{Key: "_id", Value: 1}, {Key: "k", Value: "x"}}); err != nil {
		t.Fatalf("InsertOne: %v", err)
	}

	_, err = coll.InsertOne(ctx, bson.D{{Key: "_id", Value: 2}, {Key: "k", Value: "x"}})

	var we mongo.WriteException
	if !errors.As(err, &we) {
		t.Fatalf("InsertOne(dup) = %T %v, want mongo.WriteException", err, err)
	}

	if !mongo.IsDuplicateKeyError(err) {
		t.Errorf("IsDuplicateKeyError(%v) = false", err)
	}

	if len(we.WriteErrors) != 1 || we.WriteErrors[0].Code != codeDuplicateKey || we.WriteErrors[0].Index != 0 {
		t.Fatalf("WriteErrors = %+v, want one with code 11000 at index 0", we.WriteErrors)
	}

	raw := we.WriteErrors[0].Raw
	t.Logf("duplicate key write error as sent by FerretDB: %s", raw)

	_, errPattern := raw.LookupErr("keyPattern")
	_, errValue := raw.LookupErr("keyValue")

	// MongoDB sends keyPattern {k: 1} and keyValue {k: "x"}; FerretDB v1
	// sends only index, code and errmsg. doc.go documents this.
	if errPattern == nil || errValue == nil {
		t.Errorf("FerretDB now sends keyPattern/keyValue (%s); update doc.go", raw)
	}

	if msg := we.WriteErrors[0].Message; !strings.HasPrefix(msg, "E11000 duplicate key error") {
		t.Errorf("errmsg = %q, want E11000 prefix", msg)
	}

	// A duplicate _id is the same error.
	_, err = coll.InsertOne(ctx, bson.D{{Key: "_id", Value: 1}, {Key: "k", Value: "y"}})
	if serverCode(err) != codeDuplicateKey {
		t.Errorf("InsertOne(dup _id) = %v, want code 11000", err)
	}

	if got := ids(t, coll); !slices.Equal(got, []int32{1}) {
		t.Errorf("ids = %v, want [1]", got)
	}

	// A compound unique index rejects only the same pair.
	if _, err := coll.Indexes().CreateOne(ctx, mongo.IndexModel{
		Keys:    bson.D{{Key: "a", Value: 1}, {Key: "b", Value: -1}},
		Options: options.Index().SetUnique(true),
	}); err != nil {
		t.Fatalf("CreateOne(compound unique): %v", err)
	}

	_, err = coll.InsertMany(ctx, []any{
		bson.D{{Key: "_id", Value: 10}, {Key: "k", Value: 10}, {Key: "a", Value: 1}, {Key: "b", Value: 1}},
		bson.D{{Key: "_id", Value: 11}, {Key: "k", Value: 11}, {Key: "a", Value: 1}, {Key: "b", Value: 2}},
		bson.D{{Key: "_id", Value: 12}, {Key: "k", Value: 12}, {Key: "a", Value: 1}, {Key: "b", Value: 1}},
	})
	if serverCode(err) != codeDuplicateKey {
		t.Errorf("InsertMany(compound dup) = %v, want code 11000", err)
	}

	if got := ids(t, coll); !slices.Equal(got, []int32{1, 10, 11}) {
		t.Errorf("ids = %v, want [1 10 11]", got)
	}
}

// TestInsertManyDuplicateInMiddle: _id 3 exists; InsertMany [1..5] ordered
// writes 1, 2 and stops at index 2; unordered writes 1, 2, 4, 5. Both
// return a mongo.BulkWriteException with one write error at index 2.
func TestInsertManyDuplicateInMiddle(t *testing.T) {
	for _, tc := range []struct {
		name    string
		ordered bool
		want    []int32
	}{
		{name: "ordered", ordered: true, want: []int32{1, 2, 3}},
		{name: "unordered", ordered: false, want: []int32{1, 2, 3, 4, 5}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			coll := newCollection(t)

			if _, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: 3}, {Key: "pre", Value: true}}); err != nil {
				t.Fatalf("InsertOne: %v", err)
			}

			docs := make([]any, 0, 5)
			for i := 1; i <= 5; i++ {
				docs = append(docs, bson.D{{Key: "_id", Value: i}})
			}

			_, err := coll.InsertMany(ctx, docs, options.InsertMany().SetOrdered(tc.ordered))

			var bwe mongo.BulkWriteException
			if !errors.As(err, &bwe) {
				t.Fatalf("InsertMany = %T %v, want mongo.BulkWriteException", err, err)
			}

			if len(bwe.WriteErrors) != 1 || bwe.WriteErrors[0].Index != 2 || bwe.WriteErrors[0].Code != codeDuplicateKey {
				t.Errorf("WriteErrors = %+v, want one code 11000 at index 2", bwe.WriteErrors)
			}

			if got := ids(t, coll); !slices.Equal(got, tc.want) {
				t.Errorf("ids after InsertMany = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestCreateCollectionValidator: FerretDB v1 rejects a validator with
// NotImplemented (238) and does not create the collection.
func TestCreateCollectionValidator(t *testing.T) {
	ctx := context.Background()
	coll := newCollection(t)
	db := coll.Database()

	validator := bson.D{{Key: "$jsonSchema", Value: bson.D{
		{Key: "bsonType", Value: "object"},
		{Key: "required", Value: bson.A{"a"}},
	}}}

	err := db.CreateCollection(ctx, "validated", options.CreateCollection().SetValidator(validator))
	if serverCode(err) != codeNotImplemented {
		t.Fatalf("CreateCollection(validator) = %v, want code 238 NotImplemented", err)
	}

	t.Logf("createCollection with validator: %v", err)

	names, err := db.ListCollectionNames(ctx, bson.D{{Key: "name", Value: "validated"}})
	if err != nil {
		t.Fatalf("ListCollectionNames: %v", err)
	}

	if len(names) != 0 {
		t.Errorf("collection created despite the error: %v", names)
	}
}

// TestTTLIndex: FerretDB v1 rejects expireAfterSeconds with NotImplemented
// (238), both in createIndexes and in create.
func TestTTLIndex(t *testing.T) {
	ctx := context.Background()
	coll := newCollection(t)

	_, err := coll.Indexes().CreateOne(ctx, mongo.IndexModel{
		Keys:    bson.D{{Key: "at", Value: 1}},
		Options: options.Index().SetExpireAfterSeconds(60),
	})
	if serverCode(err) != codeNotImplemented {
		t.Fatalf("CreateOne(TTL) = %v, want code 238 NotImplemented", err)
	}

	t.Logf("TTL index: %v", err)
}

// TestCollMod: collMod is not implemented (238).
func TestCollMod(t *testing.T) {
	ctx := context.Background()
	coll := newCollection(t)

	if _, err := coll.InsertOne(ctx, bson.D{{Key: "a", Value: 1}}); err != nil {
		t.Fatalf("InsertOne: %v", err)
	}

	err := coll.Database().RunCommand(ctx, bson.D{
		{Key: "collMod", Value: coll.Name()},
		{Key: "validator", Value: bson.D{{Key: "a", Value: bson.D{{Key: "$exists", Value: true}}}}},
	}).Err()
	if serverCode(err) != codeNotImplemented {
		t.Fatalf("collMod = %v, want code 238 NotImplemented", err)
	}

	t.Logf("collMod: %v", err)
}

// TestTransaction: FerretDB v1 has no transactions. Sessions work (lsid is
// ignored), but the first write of a transaction fails with FailedToParse
// (9) "unknown field startTransaction" (a real standalone mongod answers
// IllegalOperation 20), so WithTransaction returns an error and nothing is
// written.
func TestTransaction(t *testing.T) {
	ctx := context.Background()
	coll := newCollection(t)

	sess, err := coll.Database().Client().StartSession()
	if err != nil {
		t.Fatalf("StartSession: %v", err)
	}
	defer sess.EndSession(ctx)

	_, err = sess.WithTransaction(ctx, func(ctx context.Context) (any, error) {
		return coll.InsertOne(ctx, bson.D{{Key: "_id", Value: 1}})
	})
	if err == nil {
		t.Fatalf("WithTransaction succeeded; FerretDB v1 has no transactions")
	}

	t.Logf("transaction: code %d: %v", serverCode(err), err)

	if serverCode(err) != codeFailedToParse {
		t.Errorf("WithTransaction = %v, want code 9 FailedToParse", err)
	}

	if got := ids(t, coll); len(got) != 0 {
		t.Errorf("ids after failed transaction = %v, want none", got)
	}

	// A session without a transaction (causal consistency, lsid) works.
	err = mongo.WithSession(ctx, sess, func(ctx context.Context) error {
		_, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: 2}})
		return err
	})
	if err != nil {
		t.Errorf("insert in a session without transaction: %v", err)
	}
}

// TestRetryWritesDefault: FerretDB's hello describes a standalone server
// (no setName) with logicalSessionTimeoutMinutes, so the driver, even with
// its default retryWrites=true, neither retries writes nor sends txnNumber
// (retryable writes need a replica set or mongos): no code 20 error. It
// does send lsid, which FerretDB ignores.
func TestRetryWritesDefault(t *testing.T) {
	ctx := context.Background()
	s := startServer(t)

	var mu sync.Mutex

	sent := map[string]bson.Raw{}
	monitor := &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		mu.Lock()
		defer mu.Unlock()

		sent[e.CommandName] = slices.Clone(e.Command)
	}}

	c, err := mongo.Connect(options.Client().ApplyURI("mongodb://" + s.Addr() + "/?directConnection=true").SetMonitor(monitor))
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}

	t.Cleanup(func() {
		if err := c.Disconnect(context.Background()); err != nil {
			t.Errorf("Disconnect: %v", err)
		}
	})

	coll := c.Database("test").Collection("retry")

	if _, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: 1}}); err != nil {
		t.Fatalf("InsertOne with retryWrites=true: %v", err)
	}

	if _, err := coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: 1}}, bson.D{{Key: "$set", Value: bson.D{{Key: "a", Value: 1}}}}); err != nil {
		t.Fatalf("UpdateOne with retryWrites=true: %v", err)
	}

	if err := coll.FindOneAndDelete(ctx, bson.D{{Key: "_id", Value: 1}}).Err(); err != nil {
		t.Fatalf("FindOneAndDelete with retryWrites=true: %v", err)
	}

	mu.Lock()
	for _, name := range []string{"insert", "update", "findAndModify"} {
		cmd, ok := sent[name]
		if !ok {
			t.Errorf("no %s command seen", name)
			continue
		}

		if _, err := cmd.LookupErr("txnNumber"); err == nil {
			t.Errorf("%s sent txnNumber: %s", name, cmd)
		}

		if _, err := cmd.LookupErr("lsid"); err != nil {
			t.Errorf("%s sent no lsid: %s", name, cmd)
		}
	}
	mu.Unlock()

	var hello bson.M
	if err := c.Database("admin").RunCommand(ctx, bson.D{{Key: "hello", Value: 1}}).Decode(&hello); err != nil {
		t.Fatalf("hello: %v", err)
	}

	if _, ok := hello["setName"]; ok {
		t.Errorf("hello has setName %v: not a standalone", hello["setName"])
	}

	t.Logf("hello: logicalSessionTimeoutMinutes=%v maxWriteBatchSize=%v maxBsonObjectSize=%v maxWireVersion=%v",
		hello["logicalSessionTimeoutMinutes"], hello["maxWriteBatchSize"], hello["maxBsonObjectSize"], hello["maxWireVersion"])
}

func TestBulkWriteMixed(t *testing.T) {
	ctx := context.Background()
	coll := newCollection(t)

	docs := []any{
		bson.D{{Key: "_id", Value: 1}, {Key: "g", Value: "a"}, {Key: "n", Value: 1}},
		bson.D{{Key: "_id", Value: 2}, {Key: "g", Value: "a"}, {Key: "n", Value: 2}},
		bson.D{{Key: "_id", Value: 3}, {Key: "g", Value: "b"}, {Key: "n", Value: 3}},
	}
	if _, err := coll.InsertMany(ctx, docs); err != nil {
		t.Fatalf("InsertMany: %v", err)
	}

	models := []mongo.WriteModel{
		mongo.NewInsertOneModel().SetDocument(bson.D{{Key: "_id", Value: 4}, {Key: "g", Value: "b"}, {Key: "n", Value: 4}}),
		mongo.NewUpdateOneModel().SetFilter(bson.D{{Key: "_id", Value: 1}}).
			SetUpdate(bson.D{{Key: "$inc", Value: bson.D{{Key: "n", Value: 10}}}}),
		mongo.NewUpdateManyModel().SetFilter(bson.D{{Key: "g", Value: "b"}}).
			SetUpdate(bson.D{{Key: "$set", Value: bson.D{{Key: "seen", Value: true}}}}),
		mongo.NewReplaceOneModel().SetFilter(bson.D{{Key: "_id", Value: 2}}).
			SetReplacement(bson.D{{Key: "g", Value: "c"}, {Key: "n", Value: 20}}),
		mongo.NewUpdateOneModel().SetFilter(bson.D{{Key: "_id", Value: 5}}).
			SetUpdate(bson.D{{Key: "$set", Value: bson.D{{Key: "g", Value: "d"}}}}).SetUpsert(true),
		mongo.NewDeleteOneModel().SetFilter(bson.D{{Key: "_id", Value: 3}}),
		mongo.NewDeleteManyModel().SetFilter(bson.D{{Key: "g", Value: "nope"}}),
	}

	for _, ordered := range []bool{true, false} {
		if !ordered {
			// Second round on fresh data: the upsert now matches.
			if _, err := coll.DeleteMany(ctx, bson.D{}); err != nil {
				t.Fatalf("DeleteMany: %v", err)
			}

			if _, err := coll.InsertMany(ctx, docs); err != nil {
				t.Fatalf("InsertMany: %v", err)
			}
		}

		res, err := coll.BulkWrite(ctx, models, options.BulkWrite().SetOrdered(ordered))
		if err != nil {
			t.Fatalf("BulkWrite(ordered=%v): %v", ordered, err)
		}

		if res.InsertedCount != 1 || res.MatchedCount != 4 || res.ModifiedCount != 4 ||
			res.UpsertedCount != 1 || res.DeletedCount != 1 {
			t.Errorf("BulkWrite(ordered=%v) = %+v, want inserted 1 matched 4 modified 4 upserted 1 deleted 1", ordered, res)
		}

		// MongoDB gives {4: 5}. FerretDB numbers upserted[].index by the
		// count of upserts so far in the update command, not by the
		// position in its updates array, so the driver maps the upsert to
		// the wrong model index (see TestUpsertedIndex). Check only the
		// value.
		if len(res.UpsertedIDs) != 1 || !slices.Contains(slices.Collect(maps.Values(res.UpsertedIDs)), any(int32(5))) {
			t.Errorf("UpsertedIDs = %v, want one entry with _id 5", res.UpsertedIDs)
		}

		if got := ids(t, coll); !slices.Equal(got, []int32{1, 2, 4, 5}) {
			t.Errorf("ids = %v, want [1 2 4 5]", got)
		}
	}

	// A duplicate in an ordered bulk write stops it at that model.
	_, err := coll.BulkWrite(ctx, []mongo.WriteModel{
		mongo.NewInsertOneModel().SetDocument(bson.D{{Key: "_id", Value: 6}}),
		mongo.NewInsertOneModel().SetDocument(bson.D{{Key: "_id", Value: 1}}),
		mongo.NewDeleteOneModel().SetFilter(bson.D{{Key: "_id", Value: 2}}),
	})

	var bwe mongo.BulkWriteException
	if !errors.As(err, &bwe) || len(bwe.WriteErrors) != 1 || bwe.WriteErrors[0].Index != 1 ||
		bwe.WriteErrors[0].Code != codeDuplicateKey {
		t.Fatalf("BulkWrite(dup) = %v, want BulkWriteException code 11000 at index 1", err)
	}

	if got := ids(t, coll); !slices.Equal(got, []int32{1, 2, 4, 5, 6}) {
		t.Errorf("ids after ordered bulk with duplicate = %v, want [1 2 4 5 6]", got)
	}
}

func TestFindOneAndUpdateUpsert(t *testing.T) {
	ctx := context.Background()
	coll := newCollection(t)

	update := bson.D{
		{Key: "$setOnInsert", Value: bson.D{{Key: "first", Value: "x"}}},
		{Key: "$inc", Value: bson.D{{Key: "attempts", Value: 1}}},
		{Key: "$set", Value: bson.D{{Key: "last", Value: "y"}}},
	}
	opts := options.FindOneAndUpdate().SetUpsert(true).SetReturnDocument(options.After)

	for want := int32(1); want <= 2; want++ {
		var got struct {
			Key      string `bson:"key"`
			First    string `bson:"first"`
			Last     string `bson:"last"`
			Attempts int32  `bson:"attempts"`
		}

		err := coll.FindOneAndUpdate(ctx, bson.D{{Key: "key", Value: "f"}}, update, opts).Decode(&got)
		if err != nil {
			t.Fatalf("FindOneAndUpdate #%d: %v", want, err)
		}

		if got.Key != "f" || got.First != "x" || got.Last != "y" || got.Attempts != want {
			t.Errorf("FindOneAndUpdate #%d = %+v, want key f first x last y attempts %d", want, got, want)
		}
	}

	// ReturnDocument Before on an upsert that inserts returns no document.
	err := coll.FindOneAndUpdate(ctx, bson.D{{Key: "key", Value: "g"}}, update,
		options.FindOneAndUpdate().SetUpsert(true)).Err()
	if !errors.Is(err, mongo.ErrNoDocuments) {
		t.Errorf("FindOneAndUpdate(upsert, Before) = %v, want mongo.ErrNoDocuments", err)
	}

	if n, err := coll.CountDocuments(ctx, bson.D{}); err != nil || n != 2 {
		t.Errorf("CountDocuments = %d, %v; want 2", n, err)
	}
}

// aggDocs inserts the documents the aggregation tests group: three pending
// with keywords, one replayed.
func aggDocs(t *testing.T, coll *mongo.Collection) {
	t.Helper()

	docs := []any{
		bson.D{{Key: "status", Value: "pending"}, {Key: "kw", Value: bson.A{"required", "type"}}, {Key: "n", Value: 1}},
		bson.D{{Key: "status", Value: "pending"}, {Key: "kw", Value: bson.A{"type"}}, {Key: "n", Value: 2}},
		bson.D{{Key: "status", Value: "pending"}, {Key: "kw", Value: bson.A{"type", "minimum"}}, {Key: "n", Value: 3}},
		bson.D{{Key: "status", Value: "replayed"}, {Key: "kw", Value: bson.A{"required"}}, {Key: "n", Value: 4}},
	}
	if _, err := coll.InsertMany(context.Background(), docs); err != nil {
		t.Fatalf("InsertMany: %v", err)
	}
}

// aggregate runs pipeline on coll and returns all result documents.
func aggregate(coll *mongo.Collection, pipeline mongo.Pipeline) ([]bson.M, error) {
	ctx := context.Background()

	cur, err := coll.Aggregate(ctx, pipeline)
	if err != nil {
		return nil, err
	}

	var out []bson.M
	err = cur.All(ctx, &out)

	return out, err
}

// TestAggregate checks the stages the dlq stats can use on FerretDB v1:
// $match, $unwind (string form), $group with ONE accumulator ($sum or
// $count), $sort, $skip, $limit, $count, $project inclusion.
func TestAggregate(t *testing.T) {
	coll := newCollection(t)
	aggDocs(t, coll)

	got, err := aggregate(coll, mongo.Pipeline{
		{{Key: "$match", Value: bson.D{{Key: "status", Value: "pending"}}}},
		{{Key: "$unwind", Value: "$kw"}},
		{{Key: "$group", Value: bson.D{{Key: "_id", Value: "$kw"}, {Key: "count", Value: bson.D{{Key: "$sum", Value: 1}}}}}},
		{{Key: "$sort", Value: bson.D{{Key: "count", Value: -1}, {Key: "_id", Value: 1}}}},
		{{Key: "$skip", Value: 0}},
		{{Key: "$limit", Value: 10}},
	})
	if err != nil {
		t.Fatalf("Aggregate(keywords): %v", err)
	}

	want := []bson.M{{"_id": "type", "count": int32(3)}, {"_id": "minimum", "count": int32(1)}, {"_id": "required", "count": int32(1)}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("keywords = %v, want %v", got, want)
	}

	// $sum of a field, grouped by a compound key.
	got, err = aggregate(coll, mongo.Pipeline{
		{{Key: "$group", Value: bson.D{{Key: "_id", Value: bson.D{{Key: "s", Value: "$status"}}}, {Key: "total", Value: bson.D{{Key: "$sum", Value: "$n"}}}}}},
		{{Key: "$sort", Value: bson.D{{Key: "_id.s", Value: 1}}}},
	})
	if err != nil {
		t.Fatalf("Aggregate(sum field): %v", err)
	}

	want = []bson.M{{"_id": bson.D{{Key: "s", Value: "pending"}}, "total": int32(6)}, {"_id": bson.D{{Key: "s", Value: "replayed"}}, "total": int32(4)}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("sum by status = %v, want %v", got, want)
	}

	// $count stage and $count accumulator.
	got, err = aggregate(coll, mongo.Pipeline{{{Key: "$match", Value: bson.D{{Key: "status", Value: "pending"}}}}, {{Key: "$count", Value: "n"}}})
	if err != nil || !reflect.DeepEqual(got, []bson.M{{"n": int32(3)}}) {
		t.Errorf("$count stage = %v, %v; want [{n: 3}]", got, err)
	}

	got, err = aggregate(coll, mongo.Pipeline{{{Key: "$group", Value: bson.D{{Key: "_id", Value: nil}, {Key: "n", Value: bson.D{{Key: "$count", Value: bson.D{}}}}}}}})
	if err != nil || !reflect.DeepEqual(got, []bson.M{{"_id": nil, "n": int32(4)}}) {
		t.Errorf("$count accumulator = %v, %v; want [{_id: null, n: 4}]", got, err)
	}

	// $project inclusion.
	got, err = aggregate(coll, mongo.Pipeline{
		{{Key: "$sort", Value: bson.D{{Key: "n", Value: -1}}}},
		{{Key: "$limit", Value: 1}},
		{{Key: "$project", Value: bson.D{{Key: "status", Value: 1}, {Key: "_id", Value: 0}}}},
	})
	if err != nil || !reflect.DeepEqual(got, []bson.M{{"status": "replayed"}}) {
		t.Errorf("$project = %v, %v; want [{status: replayed}]", got, err)
	}
}

// TestAggregateGroupFirstAccumulatorOnly pins a FerretDB v1.24 bug: in a
// $group with several accumulators, only the first is computed; the others
// see an exhausted iterator and yield 0. Run one $group per accumulator.
func TestAggregateGroupFirstAccumulatorOnly(t *testing.T) {
	coll := newCollection(t)
	aggDocs(t, coll)

	got, err := aggregate(coll, mongo.Pipeline{
		{{Key: "$group", Value: bson.D{
			{Key: "_id", Value: "$status"},
			{Key: "count", Value: bson.D{{Key: "$sum", Value: 1}}},
			{Key: "total", Value: bson.D{{Key: "$sum", Value: "$n"}}},
		}}},
		{{Key: "$sort", Value: bson.D{{Key: "_id", Value: 1}}}},
	})
	if err != nil {
		t.Fatalf("Aggregate: %v", err)
	}

	// MongoDB: pending count 3 total 6, replayed count 1 total 4.
	want := []bson.M{{"_id": "pending", "count": int32(3), "total": int32(0)}, {"_id": "replayed", "count": int32(1), "total": int32(0)}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("two accumulators = %v, want FerretDB's buggy %v (fixed upstream? update doc.go)", got, want)
	}
}

// TestAggregateUnsupported: accumulators other than $sum/$count and the
// stages below fail with NotImplemented (238).
func TestAggregateUnsupported(t *testing.T) {
	coll := newCollection(t)
	aggDocs(t, coll)

	acc := func(op string) bson.D {
		return bson.D{{Key: "$group", Value: bson.D{{Key: "_id", Value: nil}, {Key: "x", Value: bson.D{{Key: op, Value: "$n"}}}}}}
	}

	for name, pipeline := range map[string]mongo.Pipeline{
		"$min":          {acc("$min")},
		"$max":          {acc("$max")},
		"$first":        {acc("$first")},
		"$last":         {acc("$last")},
		"$avg":          {acc("$avg")},
		"$push":         {acc("$push")},
		"$addToSet":     {acc("$addToSet")},
		"$facet":        {{{Key: "$facet", Value: bson.D{{Key: "a", Value: bson.A{bson.D{{Key: "$count", Value: "n"}}}}}}}},
		"$lookup":       {{{Key: "$lookup", Value: bson.D{{Key: "from", Value: "x"}, {Key: "localField", Value: "a"}, {Key: "foreignField", Value: "b"}, {Key: "as", Value: "c"}}}}},
		"$sortByCount":  {{{Key: "$sortByCount", Value: "$status"}}},
		"$replaceRoot":  {{{Key: "$replaceRoot", Value: bson.D{{Key: "newRoot", Value: "$kw"}}}}},
		"$unwind (doc)": {{{Key: "$unwind", Value: bson.D{{Key: "path", Value: "$kw"}, {Key: "preserveNullAndEmptyArrays", Value: true}}}}},
	} {
		_, err := aggregate(coll, pipeline)
		if serverCode(err) != codeNotImplemented {
			t.Errorf("%s: %v, want code 238 NotImplemented", name, err)
		}
	}
}

// TestAggregateFieldPathIsLiteral pins a FerretDB v1 gap: $project and
// $addFields do not evaluate "$field" paths; the string is stored as is.
func TestAggregateFieldPathIsLiteral(t *testing.T) {
	coll := newCollection(t)
	aggDocs(t, coll)

	for _, stage := range []string{"$project", "$addFields"} {
		got, err := aggregate(coll, mongo.Pipeline{
			{{Key: "$limit", Value: 1}},
			{{Key: stage, Value: bson.D{{Key: "s", Value: "$status"}}}},
		})
		if err != nil || len(got) != 1 || got[0]["s"] != "$status" {
			t.Errorf("%s {s: \"$status\"} = %v, %v; want FerretDB's literal \"$status\" (MongoDB: \"pending\")", stage, got, err)
		}
	}
}

// TestUpsertedIndex pins a FerretDB v1 bug: upserted[].index in an update
// command's reply counts upserts (0, 1, …) instead of giving the position
// in the updates array.
func TestUpsertedIndex(t *testing.T) {
	ctx := context.Background()
	coll := newCollection(t)

	if _, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: 1}}); err != nil {
		t.Fatalf("InsertOne: %v", err)
	}

	set := bson.D{{Key: "$set", Value: bson.D{{Key: "a", Value: 1}}}}

	var res struct {
		N        int32 `bson:"n"`
		Upserted []struct {
			Index int32 `bson:"index"`
			ID    int32 `bson:"_id"`
		} `bson:"upserted"`
	}

	err := coll.Database().RunCommand(ctx, bson.D{
		{Key: "update", Value: coll.Name()},
		{Key: "updates", Value: bson.A{
			bson.D{{Key: "q", Value: bson.D{{Key: "_id", Value: 1}}}, {Key: "u", Value: set}},
			bson.D{{Key: "q", Value: bson.D{{Key: "_id", Value: 8}}}, {Key: "u", Value: set}, {Key: "upsert", Value: true}},
			bson.D{{Key: "q", Value: bson.D{{Key: "_id", Value: 9}}}, {Key: "u", Value: set}, {Key: "upsert", Value: true}},
		}},
	}).Decode(&res)
	if err != nil {
		t.Fatalf("update: %v", err)
	}

	// MongoDB: [{index: 1, _id: 8}, {index: 2, _id: 9}].
	if res.N != 3 || len(res.Upserted) != 2 || res.Upserted[0].Index != 0 || res.Upserted[0].ID != 8 ||
		res.Upserted[1].Index != 1 || res.Upserted[1].ID != 9 {
		t.Errorf("update reply = %+v, want FerretDB's n 3 upserted [{0 8} {1 9}] (fixed upstream? update doc.go)", res)
	}
}

// TestUniqueIndexMissingField pins a FerretDB v1 difference: a unique
// index lets any number of documents lack the field (or hold null), where
// MongoDB rejects the second with E11000 (null is a key value). The
// "sparse" option is accepted and ignored.
func TestUniqueIndexMissingField(t *testing.T) {
	ctx := context.Background()
	coll := newCollection(t)

	if _, err := coll.Indexes().CreateOne(ctx, mongo.IndexModel{
		Keys:    bson.D{{Key: "k", Value: 1}},
		Options: options.Index().SetUnique(true),
	}); err != nil {
		t.Fatalf("CreateOne: %v", err)
	}

	_, err := coll.InsertMany(ctx, []any{
		bson.D{{Key: "_id", Value: 1}},
		bson.D{{Key: "_id", Value: 2}},
		bson.D{{Key: "_id", Value: 3}, {Key: "k", Value: nil}},
	})
	if err != nil {
		t.Errorf("InsertMany without k = %v; FerretDB accepted these before (fixed upstream? update doc.go)", err)
	}
}

// TestDecimal128DropsConnection pins a FerretDB v1 gap: a Decimal128 value
// makes the server panic in that connection's goroutine (recovered) and
// drop the connection; the driver reports a network error. The server
// keeps serving other requests.
func TestDecimal128DropsConnection(t *testing.T) {
	ctx := context.Background()
	coll := newCollection(t)

	_, err := coll.InsertOne(ctx, bson.D{{Key: "d", Value: bson.NewDecimal128(1, 1)}})
	if !mongo.IsNetworkError(err) {
		t.Errorf("InsertOne(Decimal128) = %v, want a network error", err)
	}

	if err := coll.Database().Client().Ping(ctx, nil); err != nil {
		t.Errorf("Ping after: %v", err)
	}
}

// TestLimitsDiffer pins two more differences from MongoDB: a document over
// 16 MiB is stored (MongoDB: BSONObjectTooLarge), and a dotted field name is
// rejected with BadValue (2) (MongoDB 5.0+ stores it).
func TestLimitsDiffer(t *testing.T) {
	ctx := context.Background()
	coll := newCollection(t)

	big := make([]byte, 16<<20)
	if _, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: "big"}, {Key: "b", Value: big}}); err != nil {
		t.Errorf("InsertOne(16 MiB + header) = %v; FerretDB accepted it before", err)
	}

	_, err := coll.InsertOne(ctx, bson.D{{Key: "a.b", Value: 1}})

	var we mongo.WriteException
	if !errors.As(err, &we) || len(we.WriteErrors) != 1 || we.WriteErrors[0].Code != codeBadValue {
		t.Errorf("InsertOne({a.b: 1}) = %v, want a write error with code 2", err)
	}
}

// TestEnvelopeRoundTrip stores writeguard's dead-letter Envelope the way a
// sink would (unique index on fingerprint, upsert with $setOnInsert, $inc,
// $max) and reads it back unchanged.
func TestEnvelopeRoundTrip(t *testing.T) {
	ctx := context.Background()
	coll := newCollection(t)

	if _, err := coll.Indexes().CreateOne(ctx, mongo.IndexModel{
		Keys:    bson.D{{Key: "fingerprint", Value: 1}},
		Options: options.Index().SetUnique(true),
	}); err != nil {
		t.Fatalf("CreateOne: %v", err)
	}

	original, err := bson.Marshal(bson.D{{Key: "_id", Value: bson.NewObjectID()}, {Key: "email", Value: 42}})
	if err != nil {
		t.Fatal(err)
	}

	idValue := bson.Raw(original).Lookup("_id")
	errInfo, err := bson.Marshal(bson.D{{Key: "failingDocumentId", Value: idValue}})
	if err != nil {
		t.Fatal(err)
	}

	seen := time.Date(2025, 3, 4, 5, 6, 7, 8_000_000, time.UTC)
	env := envelope.Envelope{
		SchemaVersion:   envelope.SchemaVersion,
		Fingerprint:     "abc123",
		Original:        original,
		DocumentID:      idValue,
		ErrInfo:         errInfo,
		FailingKeywords: []string{"bsonType"},
		FailingPaths:    []string{"email"},
		Code:            121,
		CodeName:        "DocumentValidationFailure",
		ErrMsg:          "Document failed validation",
		Namespace:       "app.users",
		Operation:       "insertMany",
		BatchIndex:      3,
		FirstSeen:       seen,
		LastSeen:        seen,
		Attempts:        1,
		Status:          envelope.StatusPending,
	}

	for i := range 2 {
		later := seen.Add(time.Duration(i) * time.Minute)

		onInsert, err := bson.Marshal(env)
		if err != nil {
			t.Fatal(err)
		}

		var ins bson.D
		if err := bson.Unmarshal(onInsert, &ins); err != nil {
			t.Fatal(err)
		}

		ins = slices.DeleteFunc(ins, func(e bson.E) bool { return e.Key == "attempts" || e.Key == "last_seen" })

		_, err = coll.UpdateOne(ctx,
			bson.D{{Key: "fingerprint", Value: env.Fingerprint}},
			bson.D{
				{Key: "$setOnInsert", Value: ins},
				{Key: "$inc", Value: bson.D{{Key: "attempts", Value: 1}}},
				{Key: "$max", Value: bson.D{{Key: "last_seen", Value: later}}},
			},
			options.UpdateOne().SetUpsert(true))
		if err != nil {
			t.Fatalf("upsert #%d: %v", i, err)
		}
	}

	var got envelope.Envelope
	if err := coll.FindOne(ctx, bson.D{{Key: "fingerprint", Value: "abc123"}}).Decode(&got); err != nil {
		t.Fatalf("FindOne: %v", err)
	}

	want := env
	want.Attempts = 2
	want.LastSeen = seen.Add(time.Minute)

	if !bytesEqual(got.Original, want.Original) || !bytesEqual(got.ErrInfo, want.ErrInfo) ||
		!got.DocumentID.Equal(want.DocumentID) {
		t.Errorf("raw fields differ:\n got %s %s %s\nwant %s %s %s",
			got.Original, got.ErrInfo, got.DocumentID, want.Original, want.ErrInfo, want.DocumentID)
	}

	got.Original, got.ErrInfo, got.DocumentID = want.Original, want.ErrInfo, want.DocumentID
	if !got.FirstSeen.Equal(want.FirstSeen) || !got.LastSeen.Equal(want.LastSeen) {
		t.Errorf("times = %v %v, want %v %v", got.FirstSeen, got.LastSeen, want.FirstSeen, want.LastSeen)
	}

	got.FirstSeen, got.LastSeen = want.FirstSeen, want.LastSeen
	if !envelopeEqual(got, want) {
		t.Errorf("envelope = %+v\nwant %+v", got, want)
	}
}

func bytesEqual(a, b []byte) bool { return string(a) == string(b) }

func envelopeEqual(a, b envelope.Envelope) bool {
	return a.SchemaVersion == b.SchemaVersion && a.Fingerprint == b.Fingerprint &&
		a.OriginalTruncated == b.OriginalTruncated && a.IDAssigned == b.IDAssigned &&
		slices.Equal(a.FailingKeywords, b.FailingKeywords) && slices.Equal(a.FailingPaths, b.FailingPaths) &&
		a.Code == b.Code && a.CodeName == b.CodeName && a.ErrMsg == b.ErrMsg &&
		slices.Equal(a.Labels, b.Labels) && a.Namespace == b.Namespace && a.Operation == b.Operation &&
		a.BatchIndex == b.BatchIndex && a.Attempts == b.Attempts && a.Status == b.Status &&
		a.TraceID == b.TraceID && a.SpanID == b.SpanID
}

// TestDataDirPersists: with WithDataDir the data survives a restart and the
// directory is kept; without it the temporary directory is removed.
func TestDataDirPersists(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "nested", "data")

	for round := range 2 {
		s, err := embedded.Start(ctx, embedded.WithDataDir(dir))
		if err != nil {
			t.Fatalf("Start #%d: %v", round, err)
		}

		c, err := mongo.Connect(options.Client().ApplyURI(s.URI()))
		if err != nil {
			t.Fatalf("Connect: %v", err)
		}

		coll := c.Database("dlq").Collection("envelopes")
		if round == 0 {
			_, err = coll.InsertOne(ctx, bson.D{{Key: "_id", Value: "kept"}})
		} else {
			err = coll.FindOne(ctx, bson.D{{Key: "_id", Value: "kept"}}).Err()
		}

		if err != nil {
			t.Errorf("round %d: %v", round, err)
		}

		if err := c.Disconnect(ctx); err != nil {
			t.Errorf("Disconnect: %v", err)
		}

		if err := s.Close(ctx); err != nil {
			t.Fatalf("Close #%d: %v", round, err)
		}

		if _, err := os.Stat(filepath.Join(dir, "dlq.sqlite")); err != nil {
			t.Errorf("after Close #%d: %v", round, err)
		}
		checkPrivate(t, dir)
	}

	s := startServer(t)
	tmp := s.DataDir()

	if err := s.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}

	if _, err := os.Stat(tmp); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("temporary data dir %q still there after Close (%v)", tmp, err)
	}
}

// TestStartCloseCycles starts and stops the server several times, with a
// client doing a little work each time, and checks after each Close that
// no goroutine is left (the client is disconnected first).
func TestStartCloseCycles(t *testing.T) {
	ctx := context.Background()

	for i := range 4 {
		s, err := embedded.Start(ctx)
		if err != nil {
			t.Fatalf("Start #%d: %v", i, err)
		}

		c, err := mongo.Connect(options.Client().ApplyURI(s.URI()))
		if err != nil {
			t.Fatalf("Connect: %v", err)
		}

		coll := c.Database("test").Collection("cycle")
		if _, err := coll.InsertMany(ctx, []any{bson.D{{Key: "i", Value: i}}, bson.D{{Key: "i", Value: i}}}); err != nil {
			t.Errorf("InsertMany: %v", err)
		}

		// Leave a cursor open on the server: Close must still finish.
		cur, err := coll.Find(ctx, bson.D{}, options.Find().SetBatchSize(1))
		if err != nil {
			t.Fatalf("Find: %v", err)
		}

		_ = cur

		if err := c.Disconnect(ctx); err != nil {
			t.Errorf("Disconnect: %v", err)
		}

		start := time.Now()
		if err := s.Close(ctx); err != nil {
			t.Fatalf("Close #%d: %v", i, err)
		}

		t.Logf("cycle %d: Close took %v", i, time.Since(start))

		// A second Close is a no-op.
		if err := s.Close(ctx); err != nil {
			t.Errorf("second Close #%d: %v", i, err)
		}

		goleak.VerifyNone(t)
	}
}

// TestCloseWithConnectedClient: a client still connected holds Close up
// to FerretDB's 3 s grace period; a short ctx makes Close return early
// with the ctx error, and a second Close waits for the end.
func TestCloseWithConnectedClient(t *testing.T) {
	ctx := context.Background()

	s, err := embedded.Start(ctx)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}

	c, err := mongo.Connect(options.Client().ApplyURI(s.URI()))
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}

	if err := c.Ping(ctx, nil); err != nil {
		t.Fatalf("Ping: %v", err)
	}

	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()

	if err := s.Close(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Close(50ms) = %v, want context.DeadlineExceeded", err)
	}

	start := time.Now()
	if err := s.Close(ctx); err != nil {
		t.Errorf("Close: %v", err)
	}

	t.Logf("Close with a connected client took %v more", time.Since(start))

	if err := c.Disconnect(ctx); err != nil {
		t.Errorf("Disconnect: %v", err)
	}

	goleak.VerifyNone(t)
}

// TestConcurrentServers runs two servers at once: distinct ports and data
// directories, no interference (and no data race in start-up).
func TestConcurrentServers(t *testing.T) {
	ctx := context.Background()
	servers := make([]*embedded.Server, 2)
	errs := make(chan error, len(servers))

	for i := range servers {
		go func() {
			var err error
			servers[i], err = embedded.Start(ctx)
			errs <- err
		}()
	}

	for range servers {
		if err := <-errs; err != nil {
			t.Fatalf("Start: %v", err)
		}
	}

	for _, s := range servers {
		t.Cleanup(func() {
			if err := s.Close(ctx); err != nil {
				t.Errorf("Close: %v", err)
			}
		})
	}

	if servers[0].Addr() == servers[1].Addr() || servers[0].DataDir() == servers[1].DataDir() {
		t.Fatalf("servers share %s / %s", servers[0].Addr(), servers[0].DataDir())
	}

	for i, s := range servers {
		c := connect(t, s.URI())
		if _, err := c.Database("test").Collection("c").InsertOne(ctx, bson.D{{Key: "i", Value: i}}); err != nil {
			t.Fatalf("InsertOne: %v", err)
		}
	}

	for i, s := range servers {
		c := connect(t, s.URI())

		n, err := c.Database("test").Collection("c").CountDocuments(ctx, bson.D{{Key: "i", Value: i}})
		if err != nil || n != 1 {
			t.Errorf("server %d: count = %d, %v; want 1", i, n, err)
		}
	}
}

// TestThroughput inserts 10,000 small documents in batches of 500 and logs
// the rate (run with -v to see it). It checks only that all arrive.
func TestThroughput(t *testing.T) {
	ctx := context.Background()

	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)

	start := time.Now()
	s := startServer(t)
	startDur := time.Since(start)

	var after runtime.MemStats
	runtime.ReadMemStats(&after)

	c := connect(t, s.URI())
	coll := c.Database("test").Collection("throughput")

	const total, batch = 10_000, 500

	start = time.Now()

	for i := 0; i < total; i += batch {
		docs := make([]any, 0, batch)
		for j := i; j < i+batch; j++ {
			docs = append(docs, bson.D{
				{Key: "n", Value: j},
				{Key: "email", Value: "user@example.com"},
				{Key: "status", Value: "pending"},
				{Key: "at", Value: time.Now()},
			})
		}

		if _, err := coll.InsertMany(ctx, docs); err != nil {
			t.Fatalf("InsertMany at %d: %v", i, err)
		}
	}

	insertDur := time.Since(start)

	n, err := coll.CountDocuments(ctx, bson.D{})
	if err != nil || n != total {
		t.Fatalf("CountDocuments = %d, %v; want %d", n, err, total)
	}

	var end runtime.MemStats
	runtime.ReadMemStats(&end)

	t.Logf("Start: %v; heap after Start +%d KiB; %d inserts in batches of %d: %v (%.0f docs/s); heap in use after: %d MiB; total alloc during test: %d MiB",
		startDur, (int64(after.HeapAlloc)-int64(before.HeapAlloc))/1024, total, batch, insertDur,
		float64(total)/insertDur.Seconds(), end.HeapInuse>>20, (end.TotalAlloc-before.TotalAlloc)>>20)
}

// BenchmarkStartClose measures a full Start + Close with no client.
func BenchmarkStartClose(b *testing.B) {
	ctx := context.Background()

	for b.Loop() {
		s, err := embedded.Start(ctx)
		if err != nil {
			b.Fatal(err)
		}

		if err := s.Close(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkInsertMany500 measures one InsertMany of 500 small documents.
func BenchmarkInsertMany500(b *testing.B) {
	ctx := context.Background()
	s := startServer(b)
	coll := connect(b, s.URI()).Database("test").Collection("bench")

	docs := make([]any, 500)
	for i := range docs {
		docs[i] = bson.D{{Key: "n", Value: i}, {Key: "email", Value: "user@example.com"}}
	}

	for b.Loop() {
		if _, err := coll.InsertMany(ctx, docs); err != nil {
			b.Fatal(err)
		}
	}

	b.ReportMetric(float64(b.N*len(docs))/b.Elapsed().Seconds(), "docs/s")
}

// checkPrivate: the data directory is 0700 and every file in it 0600 (they
// hold users' documents). Before the change the directory was 0750 and
// the SQLite files 0644.
func checkPrivate(t *testing.T, dir string) {
	t.Helper()
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o700 {
		t.Errorf("data directory mode %v, want 0700", fi.Mode().Perm())
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		info, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		if info.Mode().IsRegular() && info.Mode().Perm()&0o077 != 0 {
			t.Errorf("%s: mode %v, want no access for group and others", e.Name(), info.Mode().Perm())
		}
	}
}

// TestDataDirTightened: an existing data directory open to others is
// made 0700, and its files 0600, at Start.
func TestDataDirTightened(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "data")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "notes.txt"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(dir, "notes.txt"), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := embedded.Start(ctx, embedded.WithDataDir(dir))
	if err != nil {
		t.Fatal(err)
	}
	checkPrivate(t, dir)
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestUnacknowledgedWriteReply pins what a direct client meets after a
// w:0 write (OP_MSG flag moreToCome): FerretDB answers it all the same,
// the driver does not read that answer (nor check a reply's responseTo),
// so the next command on the connection reads the w:0 command's reply
// instead of its own: a duplicate insert reads as success, and every
// later reply on that connection is one command late.
func TestUnacknowledgedWriteReply(t *testing.T) {
	ctx := context.Background()
	s := startServer(t)
	c, err := mongo.Connect(options.Client().ApplyURI(s.URI()).SetMaxPoolSize(1).SetTimeout(30 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Disconnect(context.Background()) })
	coll := c.Database("test").Collection("w0")
	if _, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: 0}}); err != nil {
		t.Fatal(err)
	}
	w0 := coll.Database().Collection("w0", options.Collection().SetWriteConcern(writeconcern.Unacknowledged()))
	res, err := w0.InsertOne(ctx, bson.D{{Key: "_id", Value: 1}})
	if err != nil || res.Acknowledged {
		t.Fatalf("w:0 InsertOne = %+v, %v; want unacknowledged, no error", res, err)
	}
	// _id 0 is stored (acknowledged above): in sync, this is 11000.
	_, err = coll.InsertOne(ctx, bson.D{{Key: "_id", Value: 0}})
	if err != nil {
		t.Logf("the duplicate insert after a w:0 write failed as it should: %v", err)
		t.Fatal("FerretDB no longer answers a moreToCome request (or the driver checks responseTo): update the package doc")
	}
}
