package e2e

import (
	"bytes"
	"fmt"
	"reflect"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/writeguard/writeguard"
	"github.com/writeguard/writeguard/envelope"
	"github.com/writeguard/writeguard/mocks/faultproxy"
)

// celsius has a codec of its own in regTestRegistry: a string "21.5C".
type celsius float64

type regLine struct {
	ID    string   `bson:"_id" json:"id"`
	SKU   string   `json:"sku_code"`
	Temp  celsius  `json:"temp"`
	Notes string   `json:"notes,omitempty"`
	Tags  []string `json:"tags"`
}

func regTestRegistry() *bson.Registry {
	reg := bson.NewRegistry()
	reg.RegisterTypeEncoder(reflect.TypeOf(celsius(0)), bson.ValueEncoderFunc(
		func(_ bson.EncodeContext, vw bson.ValueWriter, v reflect.Value) error {
			return vw.WriteString(fmt.Sprintf("%.1fC", v.Float()))
		}))
	return reg
}

// TestRegistryStoresWhatTheDriverStores: a collection configured with a
// custom registry and BSON options stores, through writeguard given the
// same (WithRegistry, WithBSONOptions), the very bytes the raw driver
// stores through that collection; without them writeguard's own encoding
// (the default registry) would store another document. InsertOne,
// InsertMany and a BulkWrite insert alike.
func TestRegistryStoresWhatTheDriverStores(t *testing.T) {
	b := newCaseBed(t)
	reg := regTestRegistry()
	bo := &options.BSONOptions{UseJSONStructTags: true, NilSliceAsEmpty: true}
	collOpts := options.Collection().SetRegistry(reg).SetBSONOptions(bo)
	raw := b.db.Collection("reg_raw", collOpts)
	g := b.guardColl(b.db.Collection("reg_guarded", collOpts), writeguard.WithRegistry(reg), writeguard.WithBSONOptions(bo))
	plain := b.guardColl(b.db.Collection("reg_plain", collOpts))

	lines := func(prefix string) []regLine {
		return []regLine{
			{ID: prefix + "-1", SKU: "A-1", Temp: 21.5, Tags: []string{"x"}},
			{ID: prefix + "-2", SKU: "B-2", Temp: -3, Notes: "cold"},
			{ID: prefix + "-3", SKU: "C-3", Temp: 0},
		}
	}
	write := func(c writeguard.Collection, ls []regLine) {
		t.Helper()
		if _, err := c.InsertOne(b.ctx, ls[0]); err != nil {
			t.Fatalf("InsertOne: %v", err)
		}
		if _, err := c.InsertMany(b.ctx, []any{ls[1]}); err != nil {
			t.Fatalf("InsertMany: %v", err)
		}
		if _, err := c.BulkWrite(b.ctx, []mongo.WriteModel{mongo.NewInsertOneModel().SetDocument(ls[2])}); err != nil {
			t.Fatalf("BulkWrite: %v", err)
		}
	}
	write(raw, lines("d"))
	write(g, lines("d"))
	write(plain, lines("d"))

	rawDocs, gDocs, plainDocs := b.docs("reg_raw"), b.docs("reg_guarded"), b.docs("reg_plain")
	if len(rawDocs) != 3 || len(gDocs) != 3 || len(plainDocs) != 3 {
		t.Fatalf("stored raw %d, guarded %d, plain %d documents; want 3 each", len(rawDocs), len(gDocs), len(plainDocs))
	}
	byID := func(docs []bson.Raw) map[string]bson.Raw {
		m := map[string]bson.Raw{}
		for _, d := range docs {
			m[d.Lookup("_id").StringValue()] = d
		}
		return m
	}
	rm, gm, pm := byID(rawDocs), byID(gDocs), byID(plainDocs)
	differs := 0
	for id, want := range rm {
		if got := gm[id]; !bytes.Equal(got, want) {
			t.Errorf("%s: guarded with the registry stored %s, the raw driver %s", id, got, want)
		}
		if !bytes.Equal(pm[id], want) {
			differs++
		}
	}
	if v := rm["d-1"].Lookup("temp"); v.Type != bson.TypeString || v.StringValue() != "21.5C" {
		t.Errorf("the raw driver stored temp %v: the registry did not apply", v)
	}
	if _, err := rm["d-1"].LookupErr("sku_code"); err != nil {
		t.Errorf("the raw driver stored %s: UseJSONStructTags did not apply", rm["d-1"])
	}
	if v, err := rm["d-3"].LookupErr("tags"); err != nil || v.Type != bson.TypeArray {
		t.Errorf("the raw driver stored tags %v (%v): NilSliceAsEmpty did not apply", v, err)
	}
	// Without the options writeguard encodes with the default registry
	// (what WithRegistry's documentation warns of): every document differs.
	if differs != 3 {
		t.Errorf("without WithRegistry/WithBSONOptions %d of 3 documents differ from the raw driver's; want 3 (the check above would then prove nothing)", differs)
	}

	// A dead-lettered update keeps its values as the collection encodes
	// them: the envelope's update holds temp as the registry's string.
	var rules []faultproxy.ScriptItem
	for _, coll := range []string{"reg_guarded", "reg_plain"} {
		rules = append(rules, faultproxy.On("update").In(b.ns(coll)).Do(faultproxy.RejectDocuments(
			func(bson.Raw) bool { return true }, faultproxy.WriteError{Code: 121, Message: "Document failed validation"})))
	}
	b.script(rules...)
	set := bson.D{{Key: "$set", Value: bson.D{{Key: "temp", Value: celsius(5)}}}}
	for _, c := range []*cbGuard{g, plain} {
		_, err := c.UpdateOne(b.ctx, bson.D{{Key: "_id", Value: "d-1"}}, set)
		if !writeguard.Handled(err) {
			t.Fatalf("%s: UpdateOne rejected 121: %v, want it dead-lettered", c.coll, err)
		}
	}
	temp := func(coll string) bson.RawValue {
		docs := b.docs(coll + "_dlq")
		if len(docs) != 1 {
			t.Fatalf("%s: %d envelopes, want 1", coll, len(docs))
		}
		env, err := envelope.Decode(docs[0]) // the original is kept as bytes: $set is not a field name a sub-document may have
		if err != nil {
			t.Fatal(err)
		}
		return env.Original.Lookup("update", "$set", "temp")
	}
	if v := temp("reg_guarded"); v.Type != bson.TypeString || v.StringValue() != "5.0C" {
		t.Errorf("the envelope of the update through WithRegistry keeps temp %v, want \"5.0C\" as sent", v)
	}
	if v := temp("reg_plain"); v.Type != bson.TypeDouble {
		t.Errorf("without WithRegistry the envelope keeps temp %v, want the default registry's double", v)
	}
}
