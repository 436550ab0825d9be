package envelope

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.mongodb.org/mongo-driver/v2/bson"
)

const corpusPath = "../testdata/errinfo_corpus.json"

// corpusEntry is one entry of testdata/errinfo_corpus.json (see
// errinfo_corpus.README.md); only the fields the tests use.
type corpusEntry struct {
	ID                      string          `json:"id"`
	Kind                    string          `json:"kind"`
	ErrInfo                 json.RawMessage `json:"errInfo"`
	ExpectedOperatorNames   []string        `json:"expected_operator_names"`
	ExpectedFailingKeywords []string        `json:"expected_failing_keywords"`
	ExpectedFailingPaths    []string        `json:"expected_failing_paths"`
}

// loadCorpus reads the corpus and decodes every errInfo (Extended JSON v2,
// relaxed) into BSON. A null or absent errInfo gives a nil bson.Raw.
func loadCorpus(tb testing.TB) ([]corpusEntry, []bson.Raw) {
	tb.Helper()
	data, err := os.ReadFile(corpusPath)
	if err != nil {
		tb.Fatalf("read corpus: %v", err)
	}
	var entries []corpusEntry
	if err := json.Unmarshal(data, &entries); err != nil {
		tb.Fatalf("parse corpus: %v", err)
	}
	if len(entries) == 0 {
		tb.Fatal("empty corpus")
	}
	raws := make([]bson.Raw, len(entries))
	seen := make(map[string]bool, len(entries))
	for i, e := range entries {
		if e.ID == "" || seen[e.ID] {
			tb.Fatalf("entry %d: missing or duplicate id %q", i, e.ID)
		}
		seen[e.ID] = true
		if e.ExpectedOperatorNames == nil || e.ExpectedFailingKeywords == nil || e.ExpectedFailingPaths == nil {
			tb.Fatalf("entry %s: an expected_* field is missing", e.ID)
		}
		if len(e.ErrInfo) == 0 || bytes.Equal(bytes.TrimSpace(e.ErrInfo), []byte("null")) {
			continue
		}
		var raw bson.Raw
		if err := bson.UnmarshalExtJSON(e.ErrInfo, false, &raw); err != nil {
			tb.Fatalf("entry %s: decode errInfo: %v", e.ID, err)
		}
		if err := raw.Validate(); err != nil {
			tb.Fatalf("entry %s: decoded errInfo is invalid BSON: %v", e.ID, err)
		}
		raws[i] = raw
	}
	return entries, raws
}

func TestCorpus(t *testing.T) {
	entries, raws := loadCorpus(t)
	t.Logf("%d corpus entries", len(entries))
	for i, e := range entries {
		raw := raws[i]
		t.Run(e.ID, func(t *testing.T) {
			if diff := cmp.Diff(e.ExpectedOperatorNames, OperatorNames(raw)); diff != "" {
				t.Errorf("OperatorNames mismatch (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(e.ExpectedFailingKeywords, FailingKeywords(raw)); diff != "" {
				t.Errorf("FailingKeywords mismatch (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(e.ExpectedFailingPaths, FailingPaths(raw)); diff != "" {
				t.Errorf("FailingPaths mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// mustExtJSON decodes relaxed Extended JSON into BSON.
func mustExtJSON(tb testing.TB, s string) bson.Raw {
	tb.Helper()
	var raw bson.Raw
	if err := bson.UnmarshalExtJSON([]byte(s), false, &raw); err != nil {
		tb.Fatalf("decode %s: %v", s, err)
	}
	return raw
}

func mustMarshal(tb testing.TB, v any) bson.Raw {
	tb.Helper()
	b, err := bson.Marshal(v)
	if err != nil {
		tb.Fatalf("marshal: %v", err)
	}
	return b
}

// nestedNot builds {failingDocumentId: 1, details: <n nested $not nodes
// around a $lt on a>}.
func nestedNot(tb testing.TB, n int) bson.Raw {
	tb.Helper()
	node := bson.D{
		{Key: "operatorName", Value: "$lt"},
		{Key: "specifiedAs", Value: bson.D{{Key: "a", Value: bson.D{{Key: "$lt", Value: 10}}}}},
		{Key: "reason", Value: "comparison failed"},
		{Key: "consideredValue", Value: 11},
	}
	for range n {
		node = bson.D{{Key: "operatorName", Value: "$not"}, {Key: "details", Value: node}}
	}
	return mustMarshal(tb, bson.D{{Key: "failingDocumentId", Value: 1}, {Key: "details", Value: node}})
}

func TestErrInfoEdgeShapes(t *testing.T) {
	valid := mustExtJSON(t, `{"failingDocumentId": 1, "details": {"operatorName": "$jsonSchema",
		"schemaRulesNotSatisfied": [{"operatorName": "properties", "propertiesNotSatisfied": [
		{"propertyName": "a", "details": [{"operatorName": "minimum", "specifiedAs": {"minimum": 2},
		"reason": "comparison failed", "consideredValue": 1}]}]}]}}`)

	// Cut inside details: the document header promises more than there is.
	cut := bson.Raw(bytes.Clone(valid[:len(valid)-20]))

	tests := []struct {
		name     string
		errInfo  bson.Raw
		ops      []string
		keywords []string
		paths    []string
	}{
		{name: "nil", errInfo: nil, ops: []string{}, keywords: []string{"unknown"}, paths: []string{}},
		{name: "zero length", errInfo: bson.Raw{}, ops: []string{}, keywords: []string{"unknown"}, paths: []string{}},
		{name: "empty document", errInfo: mustExtJSON(t, `{}`), ops: []string{}, keywords: []string{"unknown"}, paths: []string{}},
		{
			name:    "details is a string",
			errInfo: mustExtJSON(t, `{"failingDocumentId": 1, "details": "oops"}`),
			ops:     []string{}, keywords: []string{"unknown"}, paths: []string{},
		},
		{
			name:    "details is a number",
			errInfo: mustExtJSON(t, `{"details": 7}`),
			ops:     []string{}, keywords: []string{"unknown"}, paths: []string{},
		},
		{
			name:    "details is null",
			errInfo: mustExtJSON(t, `{"details": null}`),
			ops:     []string{}, keywords: []string{"unknown"}, paths: []string{},
		},
		{
			name:    "details is an empty array",
			errInfo: mustExtJSON(t, `{"details": []}`),
			ops:     []string{}, keywords: []string{"unknown"}, paths: []string{},
		},
		{
			name:    "details is an array of nodes",
			errInfo: mustExtJSON(t, `{"details": [{"operatorName": "$lt", "specifiedAs": {"a": {"$lt": 1}}}, 3, "x"]}`),
			ops:     []string{"$lt"}, keywords: []string{"$lt"}, paths: []string{"a"},
		},
		{
			name:    "operatorName of the wrong type",
			errInfo: mustExtJSON(t, `{"details": {"operatorName": 5, "details": {"operatorName": ""}}}`),
			ops:     []string{}, keywords: []string{"unknown"}, paths: []string{},
		},
		{
			name:    "operatorName only outside details",
			errInfo: mustExtJSON(t, `{"failingDocumentId": {"operatorName": "$eq"}, "operatorName": "$lt"}`),
			ops:     []string{}, keywords: []string{"unknown"}, paths: []string{},
		},
		{
			name: "operators inside user data are ignored",
			errInfo: mustExtJSON(t, `{"details": {"operatorName": "$eq", "specifiedAs": {"a": {"operatorName": "x"}},
				"consideredValue": {"operatorName": "y"}, "consideredValues": [{"operatorName": "z"}],
				"duplicatedValue": {"operatorName": "w"}, "expressionResult": {"operatorName": "v"}}}`),
			ops: []string{"$eq"}, keywords: []string{"$eq"}, paths: []string{"a"},
		},
		{
			name: "additionalItems false lists user data",
			errInfo: mustExtJSON(t, `{"details": {"operatorName": "$jsonSchema", "schemaRulesNotSatisfied": [
				{"operatorName": "properties", "propertiesNotSatisfied": [{"propertyName": "arr", "details": [
				{"operatorName": "additionalItems", "specifiedAs": {"additionalItems": false},
				"reason": "found additional items", "additionalItems": [{"operatorName": "boom"}, 3]}]}]}]}}`),
			ops:      []string{"$jsonSchema", "properties", "additionalItems"},
			keywords: []string{"additionalItems"}, paths: []string{"arr"},
		},
		{
			name: "oneOf matched more than one subschema",
			errInfo: mustExtJSON(t, `{"details": {"operatorName": "$jsonSchema", "schemaRulesNotSatisfied": [
				{"operatorName": "properties", "propertiesNotSatisfied": [{"propertyName": "a", "details": [
				{"operatorName": "oneOf", "reason": "more than one subschema matched", "matchingSchemaIndexes": [0, 1]}]}]}]}}`),
			ops:      []string{"$jsonSchema", "properties", "oneOf"},
			keywords: []string{"oneOf"}, paths: []string{"a"},
		},
		{
			name: "schema dependency keeps the path",
			errInfo: mustExtJSON(t, `{"details": {"operatorName": "$jsonSchema", "schemaRulesNotSatisfied": [
				{"operatorName": "properties", "propertiesNotSatisfied": [{"propertyName": "o", "details": [
				{"operatorName": "dependencies", "failingDependencies": [{"conditionalProperty": "a", "details": [
				{"operatorName": "properties", "propertiesNotSatisfied": [{"propertyName": "b", "details": [
				{"operatorName": "type", "specifiedAs": {"type": "string"}, "reason": "type did not match"}]}]},
				{"operatorName": "required", "specifiedAs": {"required": ["c"]}, "missingProperties": ["c"]}]}]}]}]}]}}`),
			ops:      []string{"$jsonSchema", "properties", "dependencies", "properties", "type", "required"},
			keywords: []string{"type", "required"}, paths: []string{"o.b", "o.c"},
		},
		{
			name: "always-false schema and $expr name no path",
			errInfo: mustExtJSON(t, `{"details": {"operatorName": "$or", "clausesNotSatisfied": [
				{"index": 0, "details": {"operatorName": "$jsonSchema", "specifiedAs": {"$jsonSchema": {"bsonType": "string"}},
				"reason": "expression always evaluates to false"}},
				{"index": 1, "details": {"operatorName": "$expr", "specifiedAs": {"$expr": {"$sampleRate": 0.5}},
				"reason": "expression did not match", "expressionResult": false}}]}}`),
			ops:      []string{"$or", "$jsonSchema", "$expr"},
			keywords: []string{"$jsonSchema", "$expr"}, paths: []string{},
		},
		{
			name: "query operator with several specifiedAs keys",
			errInfo: mustExtJSON(t, `{"details": {"operatorName": "$eq", "specifiedAs": {"x.y": 1, "$comment": "c", "z": 2},
				"reason": "comparison failed"}}`),
			ops: []string{"$eq"}, keywords: []string{"$eq"}, paths: []string{"x.y", "z"},
		},
		{
			name: "real truncated errInfo without specifiedAs",
			errInfo: mustExtJSON(t, `{"failingDocumentId": 1, "truncated": true, "details": {"operatorName": "$and",
				"clausesNotSatisfied": [{"index": 0, "details": {"operatorName": "$lt", "reason": "comparison failed"}}]}}`),
			ops: []string{"$and", "$lt"}, keywords: []string{"$lt"}, paths: []string{},
		},
		{
			name: "generator status nested in details",
			errInfo: mustExtJSON(t, `{"failingDocumentId": 1, "details": {"operatorName": "$expr",
				"specifiedAs": {"$expr": {"$divide": [1, 0]}}, "reason": "failed to evaluate aggregation expression",
				"details": {"code": 2, "codeName": "BadValue", "errmsg": "can't $divide by zero"}}}`),
			ops: []string{"$expr"}, keywords: []string{"$expr"}, paths: []string{},
		},
		{
			name:    "deep nesting within the bound",
			errInfo: nestedNot(t, 150),
			ops:     append(repeat("$not", 150), "$lt"), keywords: []string{"$lt"}, paths: []string{"a"},
		},
		{
			// Each $not is one document level (details is depth 1): the
			// walk reads the first 200 and stops, so the $lt leaf is never
			// reached and no $not is known to be a leaf.
			name:    "deep nesting beyond the bound",
			errInfo: nestedNot(t, 300),
			ops:     repeat("$not", 200), keywords: []string{"unknown"}, paths: []string{},
		},
		{
			name:    "cut short bytes",
			errInfo: cut,
			ops:     []string{"$jsonSchema", "properties", "minimum"},
			// minimum's own document is cut, so it is not known to be a leaf.
			keywords: []string{"unknown"}, paths: []string{},
		},
		{
			name:    "generated error was too deeply nested",
			errInfo: mustExtJSON(t, `{"reason": "generated error was too deeply nested", "truncated": true}`),
			ops:     []string{}, keywords: []string{"unknown"}, paths: []string{},
		},
		{
			name:    "detailed error was too large",
			errInfo: mustExtJSON(t, `{"failingDocumentId": {"$oid": "630d093a931191850b40d0a9"}, "note": "detailed error was too large"}`),
			ops:     []string{}, keywords: []string{"unknown"}, paths: []string{},
		},
		{
			name: "failed to generate",
			errInfo: mustExtJSON(t, `{"failingDocumentId": 1, "note": "failed to generate document validation error",
				"details": {"code": 4944300, "codeName": "Location4944300", "errmsg": "docValidationInternalErrorFailPoint is enabled"}}`),
			ops: []string{}, keywords: []string{"unknown"}, paths: []string{},
		},
		{
			name:    "failingDocumentId that looks like a node",
			errInfo: mustExtJSON(t, `{"failingDocumentId": {"operatorName": "$lt", "details": {"operatorName": "x"}}, "details": {"operatorName": "$exists", "specifiedAs": {"b": {"$exists": true}}, "reason": "path does not exist"}}`),
			ops:     []string{"$exists"}, keywords: []string{"$exists"}, paths: []string{"b"},
		},
		{name: "garbage", errInfo: bson.Raw("\xff\xff\xff\xff\x03details\x00"), ops: []string{}, keywords: []string{"unknown"}, paths: []string{}},
		{name: "negative length", errInfo: bson.Raw("\x00\x00\x00\x80\x00"), ops: []string{}, keywords: []string{"unknown"}, paths: []string{}},
		{name: "four bytes", errInfo: bson.Raw("\x05\x00\x00\x00"), ops: []string{}, keywords: []string{"unknown"}, paths: []string{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.ops, OperatorNames(tc.errInfo)); diff != "" {
				t.Errorf("OperatorNames mismatch (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.keywords, FailingKeywords(tc.errInfo)); diff != "" {
				t.Errorf("FailingKeywords mismatch (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.paths, FailingPaths(tc.errInfo)); diff != "" {
				t.Errorf("FailingPaths mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func repeat(s string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = s
	}
	return out
}

// TestErrInfoResultsNonNil checks the documented nil-ness of results.
func TestErrInfoResultsNonNil(t *testing.T) {
	for _, in := range []bson.Raw{nil, {}, mustExtJSON(t, `{"details": {}}`)} {
		if got := OperatorNames(in); got == nil {
			t.Errorf("OperatorNames(%v) = nil, want non-nil empty", in)
		}
		if got := FailingPaths(in); got == nil {
			t.Errorf("FailingPaths(%v) = nil, want non-nil empty", in)
		}
	}
}

// TestElemIterMatchesDriver checks the package's BSON element reader against
// the driver's on every document of the corpus.
func TestElemIterMatchesDriver(t *testing.T) {
	_, raws := loadCorpus(t)
	var check func(doc bson.Raw)
	check = func(doc bson.Raw) {
		want, err := doc.Elements()
		if err != nil {
			t.Fatalf("driver: %v", err)
		}
		it := newElemIter(doc)
		for i := 0; ; i++ {
			key, typ, val, ok := it.next()
			if !ok {
				if i != len(want) || it.bad {
					t.Fatalf("read %d elements (bad=%v), driver read %d", i, it.bad, len(want))
				}
				break
			}
			if i >= len(want) {
				t.Fatalf("read more elements than the driver")
			}
			wv := want[i].Value()
			if string(key) != want[i].Key() || typ != wv.Type || !bytes.Equal(val, wv.Value) {
				t.Fatalf("element %d: got %q %v, driver %q %v", i, key, typ, want[i].Key(), wv.Type)
			}
			switch typ {
			case bson.TypeEmbeddedDocument, bson.TypeArray:
				check(val)
			case bson.TypeString:
				s, ok := stringValue(typ, val)
				if !ok || s != wv.StringValue() {
					t.Fatalf("element %d: string %q, driver %q", i, s, wv.StringValue())
				}
			}
		}
	}
	for _, raw := range raws {
		if raw != nil {
			check(raw)
		}
	}
}

// FuzzErrInfo feeds arbitrary bytes, seeded with every corpus errInfo (and a
// few mutilated ones), to the three errInfo functions and Fingerprint.
func FuzzErrInfo(f *testing.F) {
	_, raws := loadCorpus(f)
	for _, raw := range raws {
		f.Add([]byte(raw))
		if len(raw) > 10 {
			f.Add([]byte(raw[:len(raw)/2]))
		}
	}
	f.Add([]byte(nestedNot(f, 250)))
	f.Add([]byte{})
	// Found by the fuzzer: the driver's Validate accepts a string element
	// running past the document's declared length.
	f.Add([]byte("7\x00\x00\x00\x02000\x007\x00\x00\x000000000000000000000000000000000000000000" +
		"0\x000000000000000\x000000000000000000000000000000000000000000000000000000000000"))
	f.Fuzz(func(t *testing.T, b []byte) {
		raw := bson.Raw(b)
		ops := OperatorNames(raw)
		kws := FailingKeywords(raw)
		paths := FailingPaths(raw)
		if ops == nil || paths == nil {
			t.Fatalf("nil result: ops=%v paths=%v", ops, paths)
		}
		if len(kws) == 0 {
			t.Fatalf("FailingKeywords is empty")
		}
		if len(ops) == 0 && !(len(kws) == 1 && kws[0] == unknownKeyword) {
			t.Fatalf("no operators but keywords %q", kws)
		}
		for _, p := range paths {
			if p == "" {
				t.Fatalf("empty path in %q", paths)
			}
		}
		for _, k := range kws {
			if k != unknownKeyword && !slices.Contains(ops, k) {
				t.Fatalf("keyword %q is not among the operators %q", k, ops)
			}
		}
		if want, ok := driverElements(raw); ok {
			// The reader agrees with the driver on well-formed documents.
			it := newElemIter(raw)
			n := 0
			for {
				if _, _, _, ok := it.next(); !ok {
					break
				}
				n++
			}
			if n != len(want) || it.bad {
				t.Fatalf("read %d elements (bad=%v), driver %d", n, it.bad, len(want))
			}
		}
		f1, f2 := Fingerprint(raw, false), Fingerprint(raw, true)
		if f1 != Fingerprint(raw, false) || f2 != Fingerprint(raw, true) {
			t.Fatal("Fingerprint is not deterministic")
		}
		if canon, ok := appendCanonicalDoc(nil, raw, false, 1); ok {
			// The canonical form is well-formed BSON and its own canonical
			// form.
			if err := bson.Raw(canon).Validate(); err != nil {
				t.Fatalf("canonical form invalid: %v", err)
			}
			if Fingerprint(canon, false) != f1 {
				t.Fatal("canonical form fingerprints differently from the original")
			}
		}
	})
}

// driverElements returns the top-level elements of raw as the driver reads
// them, when the driver validates raw and its elements exactly fill the
// document's declared length. (bson.Raw.Validate checks the top level only,
// and lets an element run past the declared end of the document.)
func driverElements(raw bson.Raw) ([]bson.RawElement, bool) {
	if raw.Validate() != nil {
		return nil, false
	}
	elems, err := raw.Elements()
	if err != nil {
		return nil, false
	}
	n := 5
	for _, e := range elems {
		n += len(e)
	}
	if n != int(int32(binary.LittleEndian.Uint32(raw))) {
		return nil, false
	}
	return elems, true
}

// TestCorpusReadable is a guard against a corpus edit that breaks the loader
// silently (e.g. an errInfo that decodes to nothing).
func TestCorpusReadable(t *testing.T) {
	entries, raws := loadCorpus(t)
	for i, e := range entries {
		hasErrInfo := len(e.ErrInfo) != 0 && strings.TrimSpace(string(e.ErrInfo)) != "null"
		if hasErrInfo != (raws[i] != nil) {
			t.Errorf("%s: errInfo present=%v, decoded=%v", e.ID, hasErrInfo, raws[i] != nil)
		}
	}
}
