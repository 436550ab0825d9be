package dlq

import (
	"bytes"
	"slices"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/writeguard/writeguard/envelope"
)

// TestUpsertModel checks the upsert MongoSink sends by default: filter by
// fingerprint, $setOnInsert of the capture's fields (not those the other
// operators own), then RecaptureUpdate's $inc, $max and $set.
func TestUpsertModel(t *testing.T) {
	env := sampleEnvelope(t)
	env.Attempts, env.LastSeen = 3, t1
	prepared, err := envelope.PrepareStored(env, envelope.Protection{})
	if err != nil {
		t.Fatal(err)
	}
	wm, err := upsertModel(prepared, "")
	if err != nil {
		t.Fatal(err)
	}
	m := wm.(*mongo.UpdateOneModel)
	if m.Upsert == nil || !*m.Upsert {
		t.Fatal("not an upsert")
	}
	if got, want := mustMarshal(t, m.Filter), mustMarshal(t, bson.D{{Key: "fingerprint", Value: env.Fingerprint}}); !bytes.Equal(got, want) {
		t.Errorf("filter = %v", got)
	}
	upd := mustMarshal(t, m.Update)
	var keys []string
	elems, _ := upd.Elements()
	for _, e := range elems {
		keys = append(keys, e.Key())
	}
	if !slices.Equal(keys, []string{"$setOnInsert", "$inc", "$max", "$set"}) {
		t.Errorf("operators = %v", keys)
	}
	soi := upd.Lookup("$setOnInsert").Document()
	for _, key := range []string{"attempts", "last_seen", "status", "fingerprint"} {
		if _, err := soi.LookupErr(key); err == nil {
			t.Errorf("$setOnInsert sets %s, which another operator (or the filter) owns", key)
		}
	}
	for _, key := range []string{"original", "document_id", "first_seen", "schema_version", "err_info", "failing_keywords",
		"failing_paths", "code", "code_name", "errmsg", "namespace", "operation", "batch_index", "id_assigned", "labels", "trace_id", "span_id"} {
		if _, err := soi.LookupErr(key); err != nil {
			t.Errorf("$setOnInsert lacks %s", key)
		}
	}
	if v := upd.Lookup("$inc", "attempts"); v.Int32() != 3 {
		t.Errorf("$inc attempts = %v, want 3", v)
	}
	if v := upd.Lookup("$max", "last_seen"); !v.Time().Equal(t1) {
		t.Errorf("$max last_seen = %v", v)
	}
}

func TestStripeOf(t *testing.T) {
	seen := map[int]bool{}
	for i := 0; i < 1000; i++ {
		s := stripeOf(envelope.Fingerprint(mustMarshal(t, bson.D{{Key: "i", Value: i}}), false))
		if s < 0 || s >= sinkStripes {
			t.Fatalf("stripe %d", s)
		}
		seen[s] = true
	}
	if len(seen) < sinkStripes/2 {
		t.Errorf("1000 fingerprints over only %d stripes", len(seen))
	}
}

func TestMergeByFingerprint(t *testing.T) {
	a := sampleEnvelope(t)
	b := a
	b.FirstSeen, b.LastSeen, b.Attempts = t0.Add(-time.Hour), t0.Add(-time.Hour), 2
	c := a
	c.FirstSeen, c.LastSeen, c.Attempts = t1, t1, 0 // 0 counts as 1
	other := sampleEnvelope(t)
	other.Original = mustMarshal(t, bson.D{{Key: "_id", Value: bson.NewObjectID()}, {Key: "sku", Value: "B-2"}})
	other.Fingerprint = ""
	got := mergeByFingerprint([]envelope.Envelope{a, other, b, c})
	if len(got) != 2 {
		t.Fatalf("merged into %d envelopes, want 2", len(got))
	}
	m := got[0]
	if m.Attempts != 4 || !m.FirstSeen.Equal(t0.Add(-time.Hour)) || !m.LastSeen.Equal(t1) {
		t.Errorf("merged: attempts %d first %v last %v; want 4, %v, %v", m.Attempts, m.FirstSeen, m.LastSeen, t0.Add(-time.Hour), t1)
	}
	if !bytes.Equal(m.Original, a.Original) {
		t.Error("merged envelope does not keep the first one's original")
	}
	if got[1].Fingerprint != envelope.Fingerprint(other.Original, true) {
		t.Error("missing fingerprint not computed")
	}
}
