package envelope_test

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/writeguard/writeguard/dlq"
	"github.com/writeguard/writeguard/envelope"
)

// The format as the sinks of package dlq store it: protection
// (withholding, redaction, the fingerprint schemes) and the exact bytes of
// the JSON-lines form. External tests, so that they may import dlq; the
// fixtures are this package's (export_test.go).

// TestRedact: the hook's output is stored and flagged; the fingerprint
// stays the unredacted payload's; a no-op hook flags nothing; a hook
// returning invalid BSON fails the Put rather than store the original; a
// hook that scribbles on its input does not reach the caller's envelope.
func TestRedact(t *testing.T) {
	env := envelope.SampleEnvelope(t)
	env.Original = envelope.MustMarshal(t, bson.D{{Key: "_id", Value: int32(1)}, {Key: "name", Value: "Ann"}, {Key: "ssn", Value: "123-45-6789"}})
	env.Fingerprint = envelope.Fingerprint(env.Original, false)
	wantFP := env.Fingerprint
	before := append(bson.Raw(nil), env.Original...)
	dropSSN := dlq.WithRedact(func(orig bson.Raw) bson.Raw {
		var d bson.D
		if err := bson.Unmarshal(orig, &d); err != nil {
			return nil
		}
		d = slices.DeleteFunc(d, func(e bson.E) bool { return e.Key == "ssn" })
		orig[len(orig)-2] = 'X' // scribble on the input: must not matter
		out, _ := bson.Marshal(d)
		return out
	})
	doc, err := dlq.StoredDocument(env, dropSSN)
	if err != nil {
		t.Fatal(err)
	}
	stored := envelope.Lookup(t, doc, "original").Document()
	if _, err := stored.LookupErr("ssn"); err == nil {
		t.Error("ssn stored")
	}
	if stored.Lookup("name").StringValue() != "Ann" {
		t.Error("name lost")
	}
	if !envelope.Lookup(t, doc, "original_redacted").Boolean() {
		t.Error("original_redacted not set")
	}
	// A redacted original gets the fingerprint of what is stored
	// (SchemeStored), never that of the unredacted payload.
	if fp := envelope.Lookup(t, doc, "fingerprint").StringValue(); fp == wantFP || fp != envelope.StoredFingerprint(stored) {
		t.Errorf("fingerprint %s: want StoredFingerprint of the stored original, not %s", fp, wantFP)
	}
	if envelope.Lookup(t, doc, "fingerprint_scheme").StringValue() != envelope.SchemeStored {
		t.Error("fingerprint_scheme not sha256-stored")
	}
	if !bytes.Equal(env.Original, before) {
		t.Error("the hook modified the caller's original")
	}

	doc, err = dlq.StoredDocument(env, dlq.WithRedact(func(orig bson.Raw) bson.Raw { return orig }))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := doc.LookupErr("original_redacted"); err == nil {
		t.Error("a no-op hook flagged the original redacted")
	}

	if _, err := dlq.StoredDocument(env, dlq.WithRedact(func(bson.Raw) bson.Raw { return bson.Raw{1, 2, 3} })); err == nil ||
		!strings.Contains(err.Error(), "invalid BSON") {
		t.Errorf("invalid hook output: err = %v", err)
	}

	env = envelope.SampleEnvelope(t)
	doc, err = dlq.StoredDocument(env, dlq.WithRedactErrInfo(func(ei bson.Raw) bson.Raw {
		return envelope.MustMarshal(t, bson.D{{Key: "redacted", Value: true}})
	}))
	if err != nil {
		t.Fatal(err)
	}
	if !envelope.Lookup(t, doc, "err_info").Document().Lookup("redacted").Boolean() {
		t.Error("err_info not redacted")
	}
	if got := envelope.StringsOf(t, envelope.Lookup(t, doc, "failing_keywords")); !slices.Equal(got, []string{"minimum"}) {
		t.Errorf("keywords lost with errInfo redaction: %v", got)
	}
}

// c58Envelope is C58: InsertOne {_id: 7, ssn: "123-45-6789"} refused
// because the schema marks ssn encrypt (the corpus entry's errInfo, with
// the property named ssn as in C58).
func c58Envelope(t *testing.T, ssn string) envelope.Envelope {
	t.Helper()
	ei := envelope.CorpusErrInfo(t, "encrypt-bsontype-string-not-encrypted")
	ei = bytes.Clone(ei)
	// The corpus names the property "a"; C58 names it "ssn".
	js, err := bson.MarshalExtJSON(ei, true, false)
	if err != nil {
		t.Fatal(err)
	}
	js = bytes.Replace(js, []byte(`"propertyName":"a"`), []byte(`"propertyName":"ssn"`), 1)
	if err := bson.UnmarshalExtJSON(js, true, &ei); err != nil {
		t.Fatal(err)
	}
	orig := envelope.MustMarshal(t, bson.D{{Key: "_id", Value: int32(7)}, {Key: "name", Value: "Ann"}, {Key: "ssn", Value: ssn}})
	return envelope.New(envelope.Capture{Document: orig, DocumentID: orig.Lookup("_id"), Namespace: "hr.people", Operation: "insertOne",
		Failure: envelope.Failure121(ei), Now: envelope.T1})
}

// TestC58SecretWithheld: by default the plaintext of a field refused for
// not being encrypted reaches neither the DLQ nor the fallback file; the
// envelope says which path and why.
func TestC58SecretWithheld(t *testing.T) {
	const ssn = "123-45-6789"
	env := c58Envelope(t, ssn)
	doc, err := dlq.StoredDocument(env)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(doc, []byte(ssn)) {
		t.Fatal("the DLQ document holds the plaintext")
	}
	back, err := envelope.Decode(doc)
	if err != nil {
		t.Fatal(err)
	}
	if len(back.Withheld) != 1 || back.Withheld[0] != (envelope.WithheldField{Path: "ssn", Reason: "encrypt"}) {
		t.Errorf("withheld %+v", back.Withheld)
	}
	if back.Original.Lookup("name").StringValue() != "Ann" || back.Original.Lookup("_id").Int32() != 7 {
		t.Errorf("the rest of the original is lost: %s", back.Original)
	}

	path := filepath.Join(t.TempDir(), "dlq.jsonl")
	fs, err := dlq.NewFileSink(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := fs.Put(context.Background(), []envelope.Envelope{env}); err != nil {
		t.Fatal(err)
	}
	_ = fs.Close()
	got, err := dlq.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || len(got[0].Withheld) != 1 {
		t.Fatalf("file: %+v", got)
	}
	if _, err := got[0].Original.LookupErr("ssn"); err == nil {
		t.Error("the fallback file holds ssn")
	}
	line, _ := envelope.MarshalLine(got[0])
	if strings.Contains(string(line), ssn) {
		t.Error("the fallback file holds the plaintext")
	}

	// Opted out: stored as is.
	doc, err = dlq.StoredDocument(env, dlq.WithPlaintextEncryptedFields())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(doc, []byte(ssn)) {
		t.Error("WithPlaintextEncryptedFields: plaintext not kept")
	}
}

// TestWithheldWithoutErrInfo: without errInfo, the paths configured for
// the namespace are withheld and the envelope says on what basis; with
// none configured it says that nothing was withheld, and why.
func TestWithheldWithoutErrInfo(t *testing.T) {
	orig := envelope.MustMarshal(t, bson.D{{Key: "_id", Value: int32(1)}, {Key: "ssn", Value: "123-45-6789"}, {Key: "address", Value: bson.D{{Key: "zip", Value: "12345"}}}})
	env := envelope.New(envelope.Capture{Document: orig, Failure: envelope.Failure121(nil), Namespace: "hr.people", Now: envelope.T1})
	back := mustStoreDecode(t, env)
	if len(back.Withheld) != 0 || !strings.Contains(back.WithheldNote, "nothing withheld") {
		t.Errorf("no config: withheld %+v note %q", back.Withheld, back.WithheldNote)
	}
	back = mustStoreDecode(t, env, dlq.WithEncryptedPaths("hr.people", "ssn", "address.zip"))
	if fmt.Sprint(back.Withheld) != "[{ssn schema encrypt} {address.zip schema encrypt}]" || !strings.Contains(back.WithheldNote, "configured") {
		t.Errorf("configured: withheld %+v note %q", back.Withheld, back.WithheldNote)
	}
	if _, err := back.Original.LookupErr("address", "zip"); err == nil {
		t.Error("address.zip stored")
	}
	back = mustStoreDecode(t, env, dlq.WithEncryptedPaths("other.ns", "ssn"))
	if len(back.Withheld) != 0 {
		t.Errorf("another namespace's paths applied: %+v", back.Withheld)
	}
}

// TestWithheldInModels: an update's $set of the field, a replacement's
// field and a filter on it are withheld.
func TestWithheldInModels(t *testing.T) {
	ei := envelope.CorpusErrInfo(t, "encrypt-bsontype-string-not-encrypted") // path "a"
	cases := []struct {
		name, kind string
		doc        bson.D
		want       string
	}{
		{"$set", envelope.KindUpdateOne, bson.D{{Key: "op", Value: envelope.KindUpdateOne}, {Key: "filter", Value: bson.D{{Key: "_id", Value: 1}}},
			{Key: "update", Value: bson.D{{Key: "$set", Value: bson.D{{Key: "a", Value: "secret"}, {Key: "b", Value: 1}}}}}}, "[update.$set.a]"},
		{"pipeline", envelope.KindUpdateMany, bson.D{{Key: "op", Value: envelope.KindUpdateMany}, {Key: "filter", Value: bson.D{}},
			{Key: "update", Value: bson.A{bson.D{{Key: "$set", Value: bson.D{{Key: "a", Value: "secret"}}}}}}}, "[update]"},
		{"replacement and filter", envelope.KindReplaceOne, bson.D{{Key: "op", Value: envelope.KindReplaceOne}, {Key: "filter", Value: bson.D{{Key: "a", Value: "secret"}}},
			{Key: "replacement", Value: bson.D{{Key: "a", Value: "secret"}, {Key: "b", Value: 1}}}}, "[filter.a replacement.a]"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env := envelope.Envelope{Kind: tc.kind, Original: envelope.MustMarshal(t, tc.doc), ErrInfo: ei, Code: 121, Namespace: "db.c"}
			back := mustStoreDecode(t, env)
			var paths []string
			for _, w := range back.Withheld {
				paths = append(paths, w.Path)
			}
			if fmt.Sprint(paths) != tc.want || bytes.Contains(back.Original, []byte("secret")) {
				t.Errorf("withheld %v, original %s", paths, back.Original)
			}
		})
	}
}

func mustStoreDecode(t *testing.T, env envelope.Envelope, opts ...dlq.SinkOption) envelope.Envelope {
	t.Helper()
	doc, err := dlq.StoredDocument(env, opts...)
	if err != nil {
		t.Fatal(err)
	}
	back, err := envelope.Decode(doc)
	if err != nil {
		t.Fatal(err)
	}
	return back
}

// TestFingerprintHidesWithheldValue: a reader of the stored envelope who
// guesses the withheld value cannot confirm the guess with the
// fingerprint, under either scheme (the 24-guess recovery of C58 done
// with every SSN of a 10,000 range that includes the right one).
func TestFingerprintHidesWithheldValue(t *testing.T) {
	const ssn = "123-45-6789"
	key := bytes.Repeat([]byte{0x42}, 32)
	for _, tc := range []struct {
		name   string
		opts   []dlq.SinkOption
		scheme string
	}{
		{"unkeyed", nil, envelope.SchemeStored},
		{"keyed", []dlq.SinkOption{dlq.WithFingerprintKey(key)}, envelope.SchemeKeyed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := c58Envelope(t, ssn)
			back := mustStoreDecode(t, env, tc.opts...)
			if back.FingerprintScheme != tc.scheme {
				t.Fatalf("scheme %q, want %q", back.FingerprintScheme, tc.scheme)
			}
			// The reader rebuilds candidate originals from what is stored.
			var stored bson.D
			if err := bson.Unmarshal(back.Original, &stored); err != nil {
				t.Fatal(err)
			}
			confirmed := 0
			for i := range 10000 {
				guess := fmt.Sprintf("123-45-%04d", i)
				cand := envelope.MustMarshal(t, append(append(bson.D{}, stored...), bson.E{Key: "ssn", Value: guess}))
				for _, fp := range []string{envelope.Fingerprint(cand, false), envelope.StoredFingerprint(cand)} {
					if fp == back.Fingerprint {
						confirmed++
					}
				}
			}
			if confirmed != 0 {
				t.Errorf("%d guesses confirmed by the fingerprint", confirmed)
			}
			// The envelope's fingerprint depends on the secret only
			// through the key: unkeyed, two SSNs give the same one (the
			// cost: they are one envelope); keyed, different ones.
			other := mustStoreDecode(t, c58Envelope(t, "987-65-4321"), tc.opts...)
			if same := other.Fingerprint == back.Fingerprint; same != (tc.scheme == envelope.SchemeStored) {
				t.Errorf("fingerprints equal across secrets: %v", same)
			}
			if tc.scheme == envelope.SchemeKeyed {
				if envelope.KeyedFingerprint(key, env.Original, false) != back.Fingerprint {
					t.Error("keyed fingerprint is not the HMAC of the original")
				}
				if envelope.KeyedFingerprint(bytes.Repeat([]byte{1}, 32), env.Original, false) == back.Fingerprint {
					t.Error("another key gives the same fingerprint")
				}
			}
		})
	}
	if _, err := dlq.NewCheckedMongoSink(nil, dlq.WithFingerprintKey([]byte("short"))); err == nil || !strings.Contains(err.Error(), "at least 32") {
		t.Errorf("short key: %v", err)
	}
}

// TestBinaryErrInfo: an errInfo that repeats a dotted key of the document
// (in consideredValue) is stored as exact bytes too.
func TestBinaryErrInfo(t *testing.T) {
	ei := envelope.MustMarshal(t, bson.D{{Key: "failingDocumentId", Value: 1}, {Key: "details", Value: bson.D{
		{Key: "operatorName", Value: "$jsonSchema"}, {Key: "consideredValue", Value: bson.D{{Key: "a.b", Value: 1}}}}}})
	orig := envelope.MustMarshal(t, bson.D{{Key: "_id", Value: 1}})
	back := mustStoreDecode(t, envelope.New(envelope.Capture{Document: orig, Failure: envelope.Failure121(ei), Namespace: "db.c", Now: envelope.T1}))
	if !bytes.Equal(back.ErrInfo, ei) || len(back.Binary) != 1 || back.Binary[0].Field != "err_info" {
		t.Errorf("err_info %s, binary %+v", back.ErrInfo, back.Binary)
	}
}

// TestFileSinkExactBytes: through a FileSink and ReadFile, as a fallback
// sink is used, the original comes back byte for byte.
func TestFileSinkExactBytes(t *testing.T) {
	orig := envelope.ExactOriginal(t)
	path := t.TempDir() + "/fallback.jsonl"
	s, err := dlq.NewFileSink(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Put(t.Context(), []envelope.Envelope{{Original: orig, DocumentID: orig.Lookup("_id"), Code: 121, Namespace: "db.c", Operation: "insertOne"}}); err != nil {
		t.Fatal(err)
	}
	envs, err := dlq.ReadFile(path)
	if err != nil || len(envs) != 1 {
		t.Fatalf("ReadFile: %d envelopes, %v", len(envs), err)
	}
	if !bytes.Equal(envs[0].Original, orig) || envs[0].Fingerprint != envelope.Fingerprint(orig, false) {
		t.Errorf("the fallback file changed the original")
	}
}
