package dlq

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/writeguard/writeguard/mocks/faultproxy"

	"github.com/writeguard/writeguard/envelope"
)

// TestShardingVerdict: the fingerprint index holds on an unsharded
// collection and on one sharded on fingerprint alone (ranged or hashed,
// as isUniqueIndexCompatible compares field names); any other shard key
// is reported failed with what to do; an unreadable config is unsupported.
func TestShardingVerdict(t *testing.T) {
	entry := func(key bson.D) bson.Raw {
		return mustMarshal(t, bson.D{{Key: "_id", Value: "db.dlq"}, {Key: "key", Value: key}, {Key: "unique", Value: false}})
	}
	for _, tc := range []struct {
		name   string
		mongos bool
		entry  bson.Raw
		err    error
		state  FeatureState
		detail string
	}{
		{"replica set", false, nil, nil, FeatureAlready, "not a mongos"},
		{"mongos, not sharded", true, nil, nil, FeatureAlready, "not sharded"},
		{"fingerprint ranged", true, entry(bson.D{{Key: "fingerprint", Value: int32(1)}}), nil, FeatureAlready, "holds"},
		{"fingerprint hashed", true, entry(bson.D{{Key: "fingerprint", Value: "hashed"}}), nil, FeatureAlready, "holds"},
		{"_id hashed", true, entry(bson.D{{Key: "_id", Value: "hashed"}}), nil, FeatureFailed, "reshardCollection"},
		{"compound", true, entry(bson.D{{Key: "fingerprint", Value: int32(1)}, {Key: "namespace", Value: int32(1)}}), nil, FeatureFailed, "unsharded"},
		{"unauthorized", true, nil, mongo.CommandError{Code: 13, Name: "Unauthorized", Message: "not authorized on config"}, FeatureUnsupported, "cannot tell"},
		{"hello failed", false, nil, errors.New("boom"), FeatureUnsupported, "cannot tell"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := shardingVerdict(tc.mongos, tc.entry, tc.err, "db.dlq")
			if r.Feature != FeatureSharding || r.State != tc.state || !strings.Contains(r.Detail, tc.detail) {
				t.Errorf("%+v, want %s with %q", r, tc.state, tc.detail)
			}
			if tc.name == "unauthorized" && r.Code != 13 {
				t.Errorf("code %d", r.Code)
			}
		})
	}
}

// TestEnsureCollectionReportsSharding: on a server that is not a mongos
// EnsureCollection has nothing to say about sharding and reports nothing.
func TestEnsureCollectionReportsSharding(t *testing.T) {
	p, err := faultproxy.New()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	c, err := mongo.Connect(options.Client().ApplyURI(p.URI()).SetServerSelectionTimeout(10 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Disconnect(context.Background()) })
	s := setup{db: c.Database("app"), name: "dlq", rep: &SetupReport{Namespace: "app.dlq"}}
	if r := s.sharding(context.Background()); r.State != FeatureAlready || r.Detail != notMongos {
		t.Errorf("sharding %+v", r)
	}
	rep, _ := EnsureCollection(context.Background(), c.Database("app"), "dlq")
	if r, ok := rep.Feature(FeatureSharding); ok {
		t.Errorf("sharding reported on a server that is not a mongos: %+v", r)
	}
}

// TestSinkStoresBytesWhenServerRefuses: a server that refuses an
// envelope's sub-document for a reason this package did not foresee (57
// DottedFieldName here) gets it again with its documents as bytes, in
// either mode of MongoSink.
func TestSinkStoresBytesWhenServerRefuses(t *testing.T) {
	for _, tc := range []struct {
		name, command string
		opts          []SinkOption
		doc           func(cmd bson.Raw) bson.Raw
	}{
		{"upsert", "update", nil, func(cmd bson.Raw) bson.Raw { return cmd.Lookup("updates", "0", "u", "$setOnInsert").Document() }},
		{"insert first", "insert", []SinkOption{WithInsertFirst()}, func(cmd bson.Raw) bson.Raw { return cmd.Lookup("documents", "0").Document() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reject := faultproxy.RejectDocuments(func(bson.Raw) bool { return true },
				faultproxy.WriteError{Code: 57, Message: "field names may not contain '.'"})
			p, err := faultproxy.New(faultproxy.WithScript(faultproxy.MustScript(faultproxy.On(tc.command).In("app.dlq").Do(reject))))
			if err != nil {
				t.Fatal(err)
			}
			if err := p.Start(context.Background()); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = p.Close() })
			var sent []bson.Raw
			mon := &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
				if e.CommandName == tc.command {
					sent = append(sent, append(bson.Raw(nil), e.Command...))
				}
			}}
			c, err := mongo.Connect(options.Client().ApplyURI(p.URI()).SetMonitor(mon).SetRetryWrites(false).SetServerSelectionTimeout(10 * time.Second))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.Disconnect(context.Background()) })
			env := sampleEnvelope(t)
			if err := NewMongoSink(c.Database("app").Collection("dlq"), tc.opts...).Put(context.Background(), []envelope.Envelope{env}); err != nil {
				t.Fatal(err)
			}
			if len(sent) != 2 {
				t.Fatalf("%d %s commands, want 2", len(sent), tc.command)
			}
			if _, err := tc.doc(sent[0]).LookupErr("original"); err != nil {
				t.Error("first try not as a sub-document")
			}
			second := tc.doc(sent[1])
			_, data, ok := second.Lookup("original_raw").BinaryOK()
			if !ok || !bytes.Equal(data, env.Original) {
				t.Fatalf("second try: %s", second)
			}
			if r := second.Lookup("binary", "0", "reason").StringValue(); !strings.Contains(r, "57") {
				t.Errorf("binary reason %q", r)
			}
		})
	}
}
