package envelope_test

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"pgregory.net/rapid"

	"github.com/writeguard/writeguard/envelope"
	"github.com/writeguard/writeguard/mocks/faultproxy"
)

// sentCommands records the write commands the driver sends.
type sentCommands struct {
	mu   sync.Mutex
	cmds []bson.Raw
}

func (s *sentCommands) monitor() *event.CommandMonitor {
	return &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		switch e.CommandName {
		case "insert", "update", "delete":
			s.mu.Lock()
			s.cmds = append(s.cmds, append(bson.Raw(nil), e.Command...))
			s.mu.Unlock()
		}
	}}
}

func (s *sentCommands) last(t fataler) bson.Raw {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.cmds) == 0 {
		t.Fatal("no write command sent")
	}
	return s.cmds[len(s.cmds)-1]
}

// fataler is what the helpers need of a *testing.T or a *rapid.T.
type fataler interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
}

// driverBed is a driver client against the faultproxy null backend (no
// server: it answers writes with ok), reporting a server of wire version
// 25 (MongoDB 8.0, which takes sort on updateOne and replaceOne).
type driverBed struct {
	coll *mongo.Collection
	sent *sentCommands
}

func newDriverBed(t testing.TB) *driverBed {
	t.Helper()
	p, err := faultproxy.New(faultproxy.WithMaxWireVersion(25))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	sent := &sentCommands{}
	c, err := mongo.Connect(options.Client().ApplyURI(p.URI()).SetRetryWrites(false).
		SetMonitor(sent.monitor()).SetServerSelectionTimeout(10 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Disconnect(context.Background()) })
	return &driverBed{coll: c.Database("db").Collection("c"), sent: sent}
}

// send writes m with opts and returns the command the driver sent, less
// the fields that differ between any two sends (lsid, $db, txnNumber,
// $clusterTime).
func (b *driverBed) send(t fataler, m mongo.WriteModel, opts *options.BulkWriteOptionsBuilder) bson.Raw {
	t.Helper()
	if _, err := b.coll.BulkWrite(context.Background(), []mongo.WriteModel{m}, opts); err != nil {
		t.Fatalf("BulkWrite(%#v): %v", m, err)
	}
	cmd := b.sent.last(t)
	var d bson.D
	elems, err := cmd.Elements()
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range elems {
		switch e.Key() {
		case "lsid", "$db", "txnNumber", "$clusterTime":
			continue
		}
		d = append(d, bson.E{Key: e.Key(), Value: e.Value()})
	}
	out, err := bson.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// replayed is what a replay sends for m and call: the envelope built by
// envelope.New, stored as MongoSink stores it, decoded, and rebuilt.
func replayed(t fataler, m mongo.WriteModel, call envelope.CallOptions) (mongo.WriteModel, *options.BulkWriteOptionsBuilder, envelope.Envelope) {
	t.Helper()
	env := envelope.New(envelope.Capture{Model: m, Call: call, Namespace: "db.c", Operation: "bulkWrite",
		Now: time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)})
	stored, err := envelope.StoredDocument(env)
	if err != nil {
		t.Fatal(err)
	}
	back, err := envelope.Decode(stored)
	if err != nil {
		t.Fatal(err)
	}
	rm, err := envelope.ParseModel(back.Kind, back.Original)
	if err != nil {
		t.Fatalf("ParseModel(%s, %s): %v", back.Kind, back.Original, err)
	}
	opts, ordered, err := envelope.ParseCallOptions(back.CallOptions)
	if err != nil {
		t.Fatal(err)
	}
	if opts == nil {
		opts = options.BulkWrite()
	}
	if ordered != nil {
		opts.SetOrdered(*ordered)
	}
	return rm, opts, back
}

func bulkOptions(c envelope.CallOptions) *options.BulkWriteOptionsBuilder {
	o := options.BulkWrite()
	if c.Ordered != nil {
		o.SetOrdered(*c.Ordered)
	}
	if c.BypassDocumentValidation != nil {
		o.SetBypassDocumentValidation(*c.BypassDocumentValidation)
	}
	if c.Let != nil {
		o.SetLet(c.Let)
	}
	if c.Comment != nil {
		o.SetComment(c.Comment)
	}
	return o
}

func ptr[T any](v T) *T { return &v }

// TestModelRoundTripCommandBSON: every model type of the driver with each
// of its options, and the call options, sent once as the caller wrote it
// and once as a replay rebuilds it from the stored envelope: the driver
// sends the same command, byte for byte (C57).
func TestModelRoundTripCommandBSON(t *testing.T) {
	bed := newDriverBed(t)
	filter := bson.D{{Key: "customer", Value: "ann"}, {Key: "qty", Value: bson.D{{Key: "$gt", Value: int64(2)}}}}
	set := bson.D{{Key: "$set", Value: bson.D{{Key: "items.$[it].qty", Value: int32(-5)}}}}
	pipeline := mongo.Pipeline{{{Key: "$set", Value: bson.D{{Key: "total", Value: bson.D{{Key: "$sum", Value: "$items.qty"}}}}}}}
	coll := &options.Collation{Locale: "en", CaseLevel: true, CaseFirst: "upper", Strength: 2, NumericOrdering: true,
		Alternate: "shifted", MaxVariable: "punct", Normalization: true, Backwards: true}
	af := []any{bson.D{{Key: "it.sku", Value: "A-1"}}}
	sort := bson.D{{Key: "created", Value: int32(-1)}}
	cases := []struct {
		name string
		m    mongo.WriteModel
	}{
		{"insertOne", mongo.NewInsertOneModel().SetDocument(bson.D{{Key: "_id", Value: int32(1)}, {Key: "a.b", Value: "x"}})},
		{"updateOne plain", mongo.NewUpdateOneModel().SetFilter(filter).SetUpdate(set)},
		{"updateOne arrayFilters", mongo.NewUpdateOneModel().SetFilter(filter).SetUpdate(set).SetArrayFilters(af)},
		{"updateOne collation", mongo.NewUpdateOneModel().SetFilter(filter).SetUpdate(set).SetCollation(coll)},
		{"updateOne hint name", mongo.NewUpdateOneModel().SetFilter(filter).SetUpdate(set).SetHint("customer_1")},
		{"updateOne hint keys", mongo.NewUpdateOneModel().SetFilter(filter).SetUpdate(set).SetHint(bson.D{{Key: "customer", Value: int32(1)}})},
		{"updateOne upsert true", mongo.NewUpdateOneModel().SetFilter(filter).SetUpdate(set).SetUpsert(true)},
		{"updateOne upsert false", mongo.NewUpdateOneModel().SetFilter(filter).SetUpdate(set).SetUpsert(false)},
		{"updateOne sort", mongo.NewUpdateOneModel().SetFilter(filter).SetUpdate(set).SetSort(sort)},
		{"updateOne pipeline", mongo.NewUpdateOneModel().SetFilter(filter).SetUpdate(pipeline)},
		{"updateOne everything", mongo.NewUpdateOneModel().SetFilter(filter).SetUpdate(set).SetArrayFilters(af).
			SetCollation(coll).SetHint("customer_1").SetUpsert(true).SetSort(sort)},
		{"updateOne raw filter", mongo.NewUpdateOneModel().SetFilter(bson.Raw(mustMarshal(t, filter))).SetUpdate([]byte(mustMarshal(t, set)))},
		{"updateMany plain", mongo.NewUpdateManyModel().SetFilter(filter).SetUpdate(set)},
		{"updateMany everything", mongo.NewUpdateManyModel().SetFilter(filter).SetUpdate(set).SetArrayFilters(af).
			SetCollation(coll).SetHint("customer_1").SetUpsert(false)},
		{"updateMany pipeline", mongo.NewUpdateManyModel().SetFilter(filter).SetUpdate(pipeline).SetUpsert(true)},
		{"replaceOne plain", mongo.NewReplaceOneModel().SetFilter(filter).SetReplacement(bson.D{{Key: "customer", Value: "Ann"}})},
		{"replaceOne everything", mongo.NewReplaceOneModel().SetFilter(filter).SetReplacement(bson.D{{Key: "customer", Value: "Ann"}}).
			SetCollation(coll).SetHint(bson.D{{Key: "customer", Value: int32(1)}}).SetUpsert(true).SetSort(sort)},
		{"deleteOne plain", mongo.NewDeleteOneModel().SetFilter(filter)},
		{"deleteOne everything", mongo.NewDeleteOneModel().SetFilter(filter).SetCollation(coll).SetHint("customer_1")},
		{"deleteMany plain", mongo.NewDeleteManyModel().SetFilter(filter)},
		{"deleteMany everything", mongo.NewDeleteManyModel().SetFilter(filter).SetCollation(coll).SetHint("customer_1")},
	}
	calls := []struct {
		name string
		c    envelope.CallOptions
	}{
		{"no options", envelope.CallOptions{}},
		{"ordered false", envelope.CallOptions{Ordered: ptr(false)}},
		{"bypass", envelope.CallOptions{BypassDocumentValidation: ptr(true)}},
		{"let and comment", envelope.CallOptions{Let: bson.D{{Key: "limit", Value: int32(3)}, {Key: "$weird", Value: "x"}},
			Comment: bson.D{{Key: "job", Value: "nightly"}}}},
		{"all", envelope.CallOptions{Ordered: ptr(true), BypassDocumentValidation: ptr(false), Let: bson.D{{Key: "v", Value: 1.5}}, Comment: "c"}},
	}
	for _, tc := range cases {
		for _, call := range calls {
			t.Run(tc.name+"/"+call.name, func(t *testing.T) {
				want := bed.send(t, tc.m, bulkOptions(call.c))
				rm, opts, env := replayed(t, tc.m, call.c)
				got := bed.send(t, rm, opts)
				if !bytes.Equal(got, want) {
					t.Errorf("replayed command differs:\n got %s\nwant %s\nenvelope original %s", got, want, env.Original)
				}
			})
		}
	}
}

// TestModelRoundTripProperty: random models (every type, random filters,
// updates, pipelines and options, random BSON values) go model →
// envelope → stored document → Decode → ParseModel, and the driver sends
// the same command for both.
func TestModelRoundTripProperty(t *testing.T) {
	bed := newDriverBed(t)
	rapid.Check(t, func(rt *rapid.T) {
		m := genModel(rt)
		call := envelope.CallOptions{}
		if rapid.Bool().Draw(rt, "hasLet") {
			call.Let = genDoc(rt, "let", 2)
		}
		if rapid.Bool().Draw(rt, "hasComment") {
			call.Comment = genValue(rt, "comment", 1)
		}
		if rapid.Bool().Draw(rt, "hasBypass") {
			call.BypassDocumentValidation = ptr(rapid.Bool().Draw(rt, "bypass"))
		}
		want := bed.send(rt, m, bulkOptions(call))
		rm, opts, env := replayed(rt, m, call)
		got := bed.send(rt, rm, opts)
		if !bytes.Equal(got, want) {
			rt.Fatalf("replayed command differs:\n got %s\nwant %s\noriginal %s", got, want, env.Original)
		}
	})
}

func mustMarshal(t testing.TB, v any) bson.Raw {
	t.Helper()
	b, err := bson.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

var genKey = rapid.SampledFrom([]string{"a", "b", "qty", "items", "a.b", "$x", "_id", "é", "k1", "name"})

// genValue draws a BSON value of one of many types.
func genValue(t *rapid.T, label string, depth int) any {
	kinds := 12
	if depth <= 0 {
		kinds = 10
	}
	switch rapid.IntRange(0, kinds-1).Draw(t, label+"kind") {
	case 0:
		return rapid.Int32().Draw(t, label+"i32")
	case 1:
		return rapid.Int64().Draw(t, label+"i64")
	case 2:
		return rapid.Float64().Draw(t, label+"f64")
	case 3:
		return rapid.String().Draw(t, label+"str")
	case 4:
		return rapid.Bool().Draw(t, label+"bool")
	case 5:
		return nil
	case 6:
		return bson.NewDateTimeFromTime(time.UnixMilli(rapid.Int64Range(-1e12, 1e13).Draw(t, label+"date")))
	case 7:
		return bson.Binary{Subtype: byte(rapid.IntRange(0, 8).Draw(t, label+"sub")), Data: rapid.SliceOf(rapid.Byte()).Draw(t, label+"bin")}
	case 8:
		d, _ := bson.ParseDecimal128(fmt.Sprint(rapid.IntRange(-1000, 1000).Draw(t, label+"dec")) + ".5")
		return d
	case 9:
		return bson.ObjectID{byte(rapid.IntRange(0, 255).Draw(t, label+"oid"))}
	case 10:
		return genDoc(t, label+"doc", depth-1)
	default:
		n := rapid.IntRange(0, 3).Draw(t, label+"alen")
		a := bson.A{}
		for i := range n {
			a = append(a, genValue(t, fmt.Sprintf("%s[%d]", label, i), depth-1))
		}
		return a
	}
}

func genDoc(t *rapid.T, label string, depth int) bson.D {
	n := rapid.IntRange(0, 4).Draw(t, label+"len")
	d := bson.D{}
	for i := range n {
		d = append(d, bson.E{Key: genKey.Draw(t, fmt.Sprintf("%s.k%d", label, i)), Value: genValue(t, fmt.Sprintf("%s.v%d", label, i), depth)})
	}
	return d
}

func genUpdate(t *rapid.T) any {
	if rapid.Bool().Draw(t, "pipeline") {
		n := rapid.IntRange(1, 3).Draw(t, "stages")
		p := mongo.Pipeline{}
		for i := range n {
			p = append(p, bson.D{{Key: rapid.SampledFrom([]string{"$set", "$unset", "$project"}).Draw(t, "stage"), Value: genDoc(t, fmt.Sprintf("stage%d", i), 1)}})
		}
		return p
	}
	return bson.D{{Key: rapid.SampledFrom([]string{"$set", "$inc", "$unset", "$push"}).Draw(t, "op"), Value: genDoc(t, "upd", 2)}}
}

func genCollation(t *rapid.T) *options.Collation {
	if !rapid.Bool().Draw(t, "hasCollation") {
		return nil
	}
	return &options.Collation{
		Locale: rapid.SampledFrom([]string{"", "en", "fr", "simple"}).Draw(t, "locale"), CaseLevel: rapid.Bool().Draw(t, "caseLevel"),
		CaseFirst: rapid.SampledFrom([]string{"", "upper", "lower", "off"}).Draw(t, "caseFirst"), Strength: rapid.IntRange(0, 5).Draw(t, "strength"),
		NumericOrdering: rapid.Bool().Draw(t, "numeric"), Alternate: rapid.SampledFrom([]string{"", "shifted", "non-ignorable"}).Draw(t, "alternate"),
		MaxVariable: rapid.SampledFrom([]string{"", "punct", "space"}).Draw(t, "maxVariable"), Normalization: rapid.Bool().Draw(t, "norm"),
		Backwards: rapid.Bool().Draw(t, "backwards"),
	}
}

func genHint(t *rapid.T) any {
	switch rapid.IntRange(0, 2).Draw(t, "hint") {
	case 0:
		return nil
	case 1:
		return "idx_" + rapid.StringMatching(`[a-z]{1,5}`).Draw(t, "hintName")
	}
	return bson.D{{Key: genKey.Draw(t, "hintKey"), Value: int32(1)}}
}

func genUpsert(t *rapid.T) *bool {
	if rapid.Bool().Draw(t, "hasUpsert") {
		return ptr(rapid.Bool().Draw(t, "upsert"))
	}
	return nil
}

func genSort(t *rapid.T) any {
	if rapid.Bool().Draw(t, "hasSort") {
		return bson.D{{Key: genKey.Draw(t, "sortKey"), Value: int32(rapid.SampledFrom([]int{1, -1}).Draw(t, "dir"))}}
	}
	return nil
}

func genArrayFilters(t *rapid.T) []any {
	if !rapid.Bool().Draw(t, "hasAF") {
		return nil
	}
	n := rapid.IntRange(0, 3).Draw(t, "afLen")
	out := make([]any, n)
	for i := range out {
		out[i] = genDoc(t, fmt.Sprintf("af%d", i), 1)
	}
	return out
}

func genModel(t *rapid.T) mongo.WriteModel {
	filter := genDoc(t, "filter", 2)
	switch rapid.IntRange(0, 5).Draw(t, "kind") {
	case 0:
		return &mongo.InsertOneModel{Document: append(bson.D{{Key: "_id", Value: rapid.Int32().Draw(t, "id")}}, genDoc(t, "doc", 3)...)}
	case 1:
		return &mongo.UpdateOneModel{Filter: filter, Update: genUpdate(t), ArrayFilters: genArrayFilters(t), Collation: genCollation(t),
			Hint: genHint(t), Upsert: genUpsert(t), Sort: genSort(t)}
	case 2:
		return &mongo.UpdateManyModel{Filter: filter, Update: genUpdate(t), ArrayFilters: genArrayFilters(t), Collation: genCollation(t),
			Hint: genHint(t), Upsert: genUpsert(t)}
	case 3:
		rep := genDoc(t, "rep", 3)
		for i := range rep {
			if rep[i].Key[0] == '$' { // the driver refuses a replacement with $-keys
				rep[i].Key = "dollar"
			}
		}
		return &mongo.ReplaceOneModel{Filter: filter, Replacement: rep, Collation: genCollation(t),
			Hint: genHint(t), Upsert: genUpsert(t), Sort: genSort(t)}
	case 4:
		return &mongo.DeleteOneModel{Filter: filter, Collation: genCollation(t), Hint: genHint(t)}
	default:
		return &mongo.DeleteManyModel{Filter: filter, Collation: genCollation(t), Hint: genHint(t)}
	}
}
