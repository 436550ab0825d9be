package envelope

import (
	"bytes"
	"slices"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

var (
	t0 = time.Date(2026, 3, 1, 12, 0, 0, 123_000_000, time.UTC)
	t1 = t0.Add(time.Minute)
)

// sampleEnvelope is a fully populated envelope as the guarded collection
// builds it for a rejected insert.
func sampleEnvelope(tb testing.TB) Envelope {
	tb.Helper()
	oid := bson.NewObjectID()
	orig := mustMarshal(tb, bson.D{{Key: "_id", Value: oid}, {Key: "sku", Value: "A-1"}, {Key: "qty", Value: int32(0)}})
	errInfo := mustExtJSON(tb, `{"failingDocumentId": {"$oid": "`+oid.Hex()+`"}, "details": {"operatorName": "$jsonSchema",
		"schemaRulesNotSatisfied": [{"operatorName": "properties", "propertiesNotSatisfied": [{"propertyName": "qty",
		"details": [{"operatorName": "minimum", "specifiedAs": {"minimum": 1}, "reason": "comparison failed", "consideredValue": 0}]}]}]}}`)
	return Envelope{
		SchemaVersion:   SchemaVersion,
		Fingerprint:     Fingerprint(orig, true),
		Original:        orig,
		DocumentID:      bson.RawValue{Type: bson.TypeObjectID, Value: oid[:]},
		IDAssigned:      true,
		ErrInfo:         errInfo,
		FailingKeywords: FailingKeywords(errInfo),
		FailingPaths:    FailingPaths(errInfo),
		Code:            121,
		CodeName:        "DocumentValidationFailure",
		ErrMsg:          "Document failed validation",
		Labels:          []string{"SomeLabel"},
		Namespace:       "shop.orders",
		Operation:       "insertMany",
		BatchIndex:      3,
		FirstSeen:       t0,
		LastSeen:        t0,
		Attempts:        1,
		Status:          StatusPending,
		TraceID:         "4bf92f3577b34da6a3ce929d0e0e4736",
		SpanID:          "00f067aa0ba902b7",
	}
}

func lookup(t *testing.T, doc bson.Raw, key string) bson.RawValue {
	t.Helper()
	v, err := doc.LookupErr(key)
	if err != nil {
		t.Fatalf("stored envelope has no %s: %v", key, err)
	}
	return v
}

func strings_(t *testing.T, v bson.RawValue) []string {
	t.Helper()
	vals, err := v.Array().Values()
	if err != nil {
		t.Fatal(err)
	}
	out := []string{}
	for _, x := range vals {
		out = append(out, x.StringValue())
	}
	return out
}

// TestStoredDocumentFieldMapping checks every stored field name, type and
// value (the stored format: the bson tags of Envelope, and the fields the
// collection's Validator requires) against the Envelope it came from.
func TestStoredDocumentFieldMapping(t *testing.T) {
	env := sampleEnvelope(t)
	doc, err := StoredDocument(env)
	if err != nil {
		t.Fatal(err)
	}
	if got := lookup(t, doc, "fingerprint").StringValue(); got != env.Fingerprint {
		t.Errorf("fingerprint = %q, want %q", got, env.Fingerprint)
	}
	if v := lookup(t, doc, "schema_version"); v.Type != bson.TypeInt32 || v.Int32() != SchemaVersion {
		t.Errorf("schema_version = %v", v)
	}
	if got := lookup(t, doc, "original").Document(); !bytes.Equal(got, env.Original) {
		t.Errorf("original changed: %v", got)
	}
	if got := lookup(t, doc, "document_id"); !got.Equal(env.DocumentID) {
		t.Errorf("document_id = %v, want %v", got, env.DocumentID)
	}
	if !lookup(t, doc, "id_assigned").Boolean() {
		t.Error("id_assigned false")
	}
	if got := lookup(t, doc, "err_info").Document(); !bytes.Equal(got, env.ErrInfo) {
		t.Error("err_info changed")
	}
	if got := strings_(t, lookup(t, doc, "failing_keywords")); !slices.Equal(got, []string{"minimum"}) {
		t.Errorf("failing_keywords = %v", got)
	}
	if got := strings_(t, lookup(t, doc, "failing_paths")); !slices.Equal(got, []string{"qty"}) {
		t.Errorf("failing_paths = %v", got)
	}
	if v := lookup(t, doc, "code"); v.Type != bson.TypeInt32 || v.Int32() != 121 {
		t.Errorf("code = %v", v)
	}
	for key, want := range map[string]string{
		"code_name": "DocumentValidationFailure", "errmsg": "Document failed validation", "namespace": "shop.orders",
		"operation": "insertMany", "status": StatusPending, "trace_id": env.TraceID, "span_id": env.SpanID,
	} {
		if got := lookup(t, doc, key).StringValue(); got != want {
			t.Errorf("%s = %q, want %q", key, got, want)
		}
	}
	if got := strings_(t, lookup(t, doc, "labels")); !slices.Equal(got, []string{"SomeLabel"}) {
		t.Errorf("labels = %v", got)
	}
	if v := lookup(t, doc, "batch_index"); v.Int32() != 3 {
		t.Errorf("batch_index = %v", v)
	}
	if v := lookup(t, doc, "attempts"); v.Type != bson.TypeInt32 || v.Int32() != 1 {
		t.Errorf("attempts = %v", v)
	}
	for _, key := range []string{"first_seen", "last_seen"} {
		if v := lookup(t, doc, key); v.Type != bson.TypeDateTime || !v.Time().Equal(t0) {
			t.Errorf("%s = %v, want %v", key, v, t0)
		}
	}
	for _, key := range []string{"original_truncated", "original_size", "original_dropped", "original_redacted", "replayed_at", "discarded_at", "_id"} {
		if _, err := doc.LookupErr(key); err == nil {
			t.Errorf("unexpected %s in a plain envelope", key)
		}
	}

	// Decoding the stored document gives the envelope back.
	var back Envelope
	if err := bson.Unmarshal(doc, &back); err != nil {
		t.Fatal(err)
	}
	if back.Fingerprint != env.Fingerprint || !bytes.Equal(back.Original, env.Original) || !back.DocumentID.Equal(env.DocumentID) ||
		!bytes.Equal(back.ErrInfo, env.ErrInfo) || back.BatchIndex != 3 || back.Attempts != 1 || !back.FirstSeen.Equal(t0) ||
		back.TraceID != env.TraceID || !back.ReplayedAt.IsZero() {
		t.Errorf("decoded envelope differs: %+v", back)
	}
}

// TestStoredDocumentOptionalFields: empty optional fields are left out;
// missing keywords/paths, status, attempts and schema version get their
// defaults.
func TestStoredDocumentOptionalFields(t *testing.T) {
	orig := mustMarshal(t, bson.D{{Key: "_id", Value: int32(7)}, {Key: "a", Value: "x"}})
	doc, err := StoredDocument(Envelope{Original: orig, Code: 121, Namespace: "db.c", Operation: "insertOne", FirstSeen: t0})
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"code_name", "labels", "err_info", "trace_id", "span_id", "document_id"} {
		if _, err := doc.LookupErr(key); err == nil {
			t.Errorf("empty %s stored", key)
		}
	}
	if got := lookup(t, doc, "fingerprint").StringValue(); got != Fingerprint(orig, false) {
		t.Errorf("missing fingerprint not computed: %q", got)
	}
	if got := strings_(t, lookup(t, doc, "failing_keywords")); !slices.Equal(got, []string{"unknown"}) {
		t.Errorf("failing_keywords = %v, want [unknown]", got)
	}
	if got := strings_(t, lookup(t, doc, "failing_paths")); len(got) != 0 {
		t.Errorf("failing_paths = %v, want []", got)
	}
	if v := lookup(t, doc, "attempts"); v.Int32() != 1 {
		t.Errorf("attempts = %v, want 1", v)
	}
	if v := lookup(t, doc, "schema_version"); v.Int32() != SchemaVersion {
		t.Errorf("schema_version = %v", v)
	}
	if v := lookup(t, doc, "last_seen"); !v.Time().Equal(t0) {
		t.Errorf("last_seen = %v, want first_seen", v)
	}
}

// TestRecaptureUpdate checks the update MongoSink applies to a
// recaptured payload's envelope: $inc attempts by the envelope's count,
// $max last_seen, $set status pending, and nothing else (the first
// capture's fields stay).
func TestRecaptureUpdate(t *testing.T) {
	upd := mustMarshal(t, RecaptureUpdate(3, t1))
	want := mustMarshal(t, bson.D{
		{Key: "$inc", Value: bson.D{{Key: "attempts", Value: int32(3)}}},
		{Key: "$max", Value: bson.D{{Key: "last_seen", Value: t1}}},
		{Key: "$set", Value: bson.D{{Key: "status", Value: StatusPending}}},
	})
	if !bytes.Equal(upd, want) {
		t.Errorf("update %v, want %v", upd, want)
	}
}

// TestStoredFieldsOrder: the inserted document leads with fingerprint
// and ends with the fields a recapture changes.
func TestStoredFieldsOrder(t *testing.T) {
	env := sampleEnvelope(t)
	env.Attempts, env.LastSeen = 3, t1
	prepared, err := PrepareStored(env, Protection{})
	if err != nil {
		t.Fatal(err)
	}
	d := StoredFields(prepared, "")
	var keys []string
	for _, e := range d {
		keys = append(keys, e.Key)
	}
	want := []string{"fingerprint", "schema_version", "original", "document_id", "id_assigned", "err_info", "failing_keywords",
		"failing_paths", "code", "code_name", "errmsg", "labels", "namespace", "operation", "batch_index", "first_seen",
		"trace_id", "span_id", "attempts", "multiplicity", "last_seen", "status"}
	if !slices.Equal(keys, want) {
		t.Errorf("fields %v\nwant %v", keys, want)
	}
	doc := mustMarshal(t, d)
	if doc.Lookup("attempts").Int32() != 3 || !doc.Lookup("last_seen").Time().Equal(t1) {
		t.Errorf("attempts/last_seen not the envelope's: %v", doc)
	}
}

// TestOversizedOriginalSetApart stores a ~16 MiB document: the envelope
// fits with its original set apart, whole (original_pieces: size, count,
// SHA-256), its small errInfo verbatim and nothing cut; a document that
// fits is stored inline.
func TestOversizedOriginalSetApart(t *testing.T) {
	big := bytes.Repeat([]byte{'z'}, 16*1024*1024-200)
	orig := mustMarshal(t, bson.D{
		{Key: "_id", Value: "order-1"},
		{Key: "sku", Value: "A-1"},
		{Key: "blob", Value: bson.Binary{Data: big}},
		{Key: "qty", Value: int32(0)},
	})
	if len(orig) > MaxBSONSize {
		t.Fatalf("test document is %d bytes, over 16 MiB", len(orig))
	}
	env := sampleEnvelope(t)
	env.Original, env.IDAssigned = orig, false
	env.DocumentID = bson.RawValue{Type: bson.TypeString, Value: orig.Lookup("_id").Value}
	env.Fingerprint = Fingerprint(orig, false)
	doc, err := StoredDocument(env)
	if err != nil {
		t.Fatal(err)
	}
	if len(doc) > MaxEnvelopeSize {
		t.Fatalf("stored envelope is %d bytes, over %d", len(doc), MaxEnvelopeSize)
	}
	if _, err := doc.LookupErr("original_truncated"); err == nil {
		t.Error("original truncated")
	}
	if got := lookup(t, doc, "original").Document(); len(got) != 5 {
		t.Errorf("stored original %d bytes, want the empty document (set apart)", len(got))
	}
	back, err := Decode(doc)
	if err != nil {
		t.Fatal(err)
	}
	p := back.OriginalPieces
	if p == nil || p.Size != int64(len(orig)) || p.Count != 2 || p.Check(orig) != nil {
		t.Fatalf("original_pieces %+v", p)
	}
	if parts := p.Split(orig); len(parts) != 2 || len(parts[0]) != PieceSize || !bytes.Equal(append(parts[0][:len(parts[0]):len(parts[0])], parts[1]...), orig) {
		t.Errorf("split into %d pieces", len(parts))
	}
	if len(back.Cut) != 0 || !bytes.Equal(back.ErrInfo, env.ErrInfo) {
		t.Errorf("cut %+v; errInfo verbatim %v", back.Cut, bytes.Equal(back.ErrInfo, env.ErrInfo))
	}
	if lookup(t, doc, "fingerprint").StringValue() != env.Fingerprint {
		t.Error("fingerprint changed")
	}
	if err := p.Check(orig[:len(orig)-1]); err == nil {
		t.Error("Check accepted a shorter original")
	}

	// Just under the limit: stored whole.
	small := mustMarshal(t, bson.D{{Key: "_id", Value: "order-2"}, {Key: "blob", Value: bson.Binary{Data: big[:MaxEnvelopeSize-64*1024]}}})
	env.Original = small
	doc, err = StoredDocument(env)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := doc.LookupErr("original_pieces"); err == nil {
		t.Error("a document that fits was set apart")
	}
	if !bytes.Equal(lookup(t, doc, "original").Document(), small) {
		t.Error("original changed")
	}
}

// TestTruncateHugeErrInfo: errInfo's repeated values give way first (the
// keywords computed from it stay); the original is kept.
func TestTruncateHugeErrInfo(t *testing.T) {
	env := sampleEnvelope(t)
	huge := bytes.Repeat([]byte{'v'}, 9*1024*1024)
	env.ErrInfo = mustMarshal(t, bson.D{{Key: "failingDocumentId", Value: int32(5)}, {Key: "details", Value: bson.D{
		{Key: "operatorName", Value: "enum"}, {Key: "consideredValue", Value: string(huge)}}}})
	env.FailingKeywords = FailingKeywords(env.ErrInfo)
	env.Original = mustMarshal(t, bson.D{{Key: "_id", Value: int32(5)}, {Key: "v", Value: string(huge)}})
	doc, err := StoredDocument(env)
	if err != nil {
		t.Fatal(err)
	}
	if len(doc) > MaxEnvelopeSize {
		t.Fatalf("stored envelope is %d bytes", len(doc))
	}
	// The repeated value goes first; the rest of errInfo stays.
	ei := lookup(t, doc, "err_info").Document()
	if _, err := ei.LookupErr("details", "consideredValue"); err == nil || ei.Lookup("failingDocumentId").Int32() != 5 ||
		ei.Lookup("details", "operatorName").StringValue() != "enum" {
		t.Errorf("err_info = %v", ei)
	}
	back, err := Decode(doc)
	if err != nil {
		t.Fatal(err)
	}
	if len(back.Cut) != 1 || back.Cut[0].Field != "err_info.consideredValue" {
		t.Errorf("cut = %+v", back.Cut)
	}
	if _, err := doc.LookupErr("original_truncated"); err == nil {
		t.Error("original truncated although dropping errInfo was enough")
	}
	if got := strings_(t, lookup(t, doc, "failing_keywords")); !slices.Equal(got, []string{"enum"}) {
		t.Errorf("failing_keywords = %v", got)
	}
}

func TestEnvelopeOmitsZeroTimes(t *testing.T) {
	raw := mustMarshal(t, sampleEnvelope(t))
	for _, key := range []string{"replayed_at", "discarded_at", "original_truncated", "original_redacted"} {
		if _, err := raw.LookupErr(key); err == nil {
			t.Errorf("zero %s marshalled", key)
		}
	}
	env := sampleEnvelope(t)
	env.ReplayedAt = t1
	raw = mustMarshal(t, env)
	if v, err := raw.LookupErr("replayed_at"); err != nil || !v.Time().Equal(t1) {
		t.Errorf("replayed_at = %v, %v", v, err)
	}
}
