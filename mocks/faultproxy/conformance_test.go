package faultproxy_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/big"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/writeguard/writeguard/jsonschema"
)

// corpusEntry is one entry of testdata/errinfo_corpus.json (see
// testdata/errinfo_corpus.README.md).
type corpusEntry struct {
	ID                       string          `json:"id"`
	Kind                     string          `json:"kind"`
	Validator                json.RawMessage `json:"validator"`
	Document                 json.RawMessage `json:"document"`
	ErrInfo                  json.RawMessage `json:"errInfo"`
	Partial                  bool            `json:"partial"`
	FailingDocumentIDDerived bool            `json:"failingDocumentId_derived"`
}

func isJSONNull(m json.RawMessage) bool {
	return len(bytes.TrimSpace(m)) == 0 || string(bytes.TrimSpace(m)) == "null"
}

// TestConformanceCorpus runs the $jsonSchema emulator on every corpus entry
// whose validator is a $jsonSchema validator inside the emulated subset and
// whose document is known, and compares the errInfo it builds with the one
// the server returned.
//
// Document numbers follow the client that built the document: Extended JSON
// v2 relaxed rules (a bare integer is an int32, or an int64 when it does not
// fit) except for server_jstest entries, whose documents were written in the
// legacy mongo shell where every bare number is a double. Explicit wrappers
// ($numberInt, $numberLong, $numberDouble, ...) always win. Numbers are
// compared by value (int 3 equals double 3.0), as relaxed Extended JSON
// prints them; the BSON type is checked through consideredType.
func TestConformanceCorpus(t *testing.T) {
	path := filepath.Join("..", "..", "testdata", "errinfo_corpus.json")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read corpus: %v", err)
	}
	var entries []corpusEntry
	if err := json.Unmarshal(data, &entries); err != nil {
		t.Fatalf("parse corpus: %v", err)
	}

	inSubset, matched := 0, 0
	var outside []string
	for _, e := range entries {
		switch {
		case e.Partial:
			outside = append(outside, e.ID+" (partial)")
			continue
		case isJSONNull(e.Validator):
			outside = append(outside, e.ID+" (no validator)")
			continue
		case isJSONNull(e.Document):
			outside = append(outside, e.ID+" (no document)")
			continue
		}
		shellNumbers := e.Kind == "server_jstest"
		validatorV, err := decodeExtJSON(e.Validator, shellNumbers)
		if err != nil {
			t.Errorf("%s: decode validator: %v", e.ID, err)
			continue
		}
		validator, ok := validatorV.(bson.D)
		if !ok || !hasJSONSchema(validator) {
			outside = append(outside, e.ID+" (not a $jsonSchema validator)")
			continue
		}
		unsupported, err := jsonschema.Unsupported(validator)
		if err != nil {
			t.Errorf("%s: the server accepted this validator but the emulator rejects it: %v", e.ID, err)
			continue
		}
		if len(unsupported) > 0 {
			outside = append(outside, fmt.Sprintf("%s (%s)", e.ID, strings.Join(unsupported, "; ")))
			continue
		}
		inSubset++

		docV, err := decodeExtJSON(e.Document, shellNumbers)
		if err != nil {
			t.Errorf("%s: decode document: %v", e.ID, err)
			continue
		}
		expectedV, err := decodeExtJSON(e.ErrInfo, false)
		if err != nil {
			t.Errorf("%s: decode errInfo: %v", e.ID, err)
			continue
		}
		expected, _ := expectedV.(bson.D)
		doc := documentAsValidated(e, docV.(bson.D), expected)

		v, err := jsonschema.Compile(validator)
		if err != nil {
			t.Errorf("%s: compile: %v", e.ID, err)
			continue
		}
		got := v.Validate(doc)
		if got == nil {
			t.Errorf("%s: the emulator accepted a document the server rejected", e.ID)
			continue
		}
		want, have := expected, got
		if e.FailingDocumentIDDerived {
			// The source asserted details only; failingDocumentId was filled
			// in by the corpus author.
			want, have = without(want, "failingDocumentId"), without(have, "failingDocumentId")
		}
		// go-cmp compares the flattened "path = value" lines: its slice
		// diff is quadratic per nesting level on the nested form.
		if diff := cmp.Diff(flatten(canonical(want)), flatten(canonical(have))); diff != "" {
			t.Errorf("%s: errInfo differs from the server's (-server +emulator):\n%s", e.ID, diff)
			continue
		}
		matched++
	}
	for _, o := range outside {
		t.Logf("outside the subset: %s", o)
	}
	line := fmt.Sprintf("faultproxy conformance: %d corpus entries inside the $jsonSchema subset, %d match the server's errInfo", inSubset, matched)
	t.Log(line)
	fmt.Println(line)
	if inSubset == 0 {
		t.Fatal("no corpus entry inside the subset: the corpus or the subset walk is broken")
	}
}

// hasJSONSchema reports whether a validator is a $jsonSchema validator,
// possibly combined with $and/$or/$nor.
func hasJSONSchema(v bson.D) bool {
	for _, e := range v {
		switch e.Key {
		case "$jsonSchema":
			return true
		case "$and", "$or", "$nor":
			if arr, ok := e.Value.(bson.A); ok {
				for _, c := range arr {
					if d, ok := c.(bson.D); ok && hasJSONSchema(d) {
						return true
					}
				}
			}
		}
	}
	return false
}

// documentAsValidated returns the document as the server saw it. A
// document without _id got one: the C++ unit-test harness appends _id: 1 at
// the end (generateValidationError() in doc_validation_error_test.cpp);
// otherwise the driver or server put the generated _id, which errInfo
// reports as failingDocumentId, first.
func documentAsValidated(e corpusEntry, doc bson.D, errInfo bson.D) bson.D {
	for _, f := range doc {
		if f.Key == "_id" {
			return doc
		}
	}
	if e.Kind == "server_unit_test" {
		return append(append(bson.D(nil), doc...), bson.E{Key: "_id", Value: int32(1)})
	}
	for _, f := range errInfo {
		if f.Key == "failingDocumentId" {
			return append(bson.D{{Key: "_id", Value: f.Value}}, doc...)
		}
	}
	return jsonschema.WithID(doc)
}

func without(d bson.D, key string) bson.D {
	out := bson.D{}
	for _, e := range d {
		if e.Key != key {
			out = append(out, e)
		}
	}
	return out
}

// canonField and canonDoc are an ordered, comparable form of a document:
// field order matters (the server's output order is part of the format).
type canonField struct {
	Key   string
	Value any
}

type canonDoc []canonField

// canonical converts a decoded BSON value into a form go-cmp compares the
// way relaxed Extended JSON prints values: all numbers as their exact
// value, ObjectIDs as hex, documents as ordered field lists.
func canonical(v any) any {
	switch x := v.(type) {
	case bson.D:
		out := canonDoc{}
		for _, e := range x {
			out = append(out, canonField{Key: e.Key, Value: canonical(e.Value)})
		}
		return out
	case bson.A:
		out := []any{}
		for _, e := range x {
			out = append(out, canonical(e))
		}
		return out
	case int32:
		return "number " + strconv.FormatInt(int64(x), 10)
	case int64:
		return "number " + strconv.FormatInt(x, 10)
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return "number " + strconv.FormatFloat(x, 'g', -1, 64)
		}
		return "number " + new(big.Rat).SetFloat64(x).RatString()
	case bson.Decimal128:
		if r, ok := new(big.Rat).SetString(x.String()); ok {
			return "number " + r.RatString()
		}
		return "number " + x.String()
	case bson.ObjectID:
		return "ObjectId " + x.Hex()
	case nil:
		return nil
	case string, bool:
		return x
	}
	// Other BSON types: compare their canonical Extended JSON.
	b, err := bson.MarshalExtJSON(bson.D{{Key: "v", Value: v}}, true, false)
	if err != nil {
		return fmt.Sprintf("%T %v", v, v)
	}
	return string(b)
}

// flatten turns a canonical value into one "path = value" line per leaf,
// in document order, so that a diff names the exact field that differs.
func flatten(v any) []string {
	var out []string
	var walk func(prefix string, v any)
	walk = func(prefix string, v any) {
		switch x := v.(type) {
		case canonDoc:
			if len(x) == 0 {
				out = append(out, prefix+" = {}")
			}
			for _, f := range x {
				walk(prefix+"."+f.Key, f.Value)
			}
		case []any:
			if len(x) == 0 {
				out = append(out, prefix+" = []")
			}
			for i, e := range x {
				walk(fmt.Sprintf("%s[%d]", prefix, i), e)
			}
		default:
			out = append(out, fmt.Sprintf("%s = %#v", prefix, x))
		}
	}
	walk("errInfo", v)
	return out
}

// decodeExtJSON decodes Extended JSON (v2, relaxed or canonical) keeping
// field order. Bare integer literals become int32 (int64 when too large),
// or float64 when shellNumbers is set; wrapper objects ($oid,
// $numberLong, ...) are decoded by the driver.
func decodeExtJSON(raw json.RawMessage, shellNumbers bool) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	v, err := readJSON(dec)
	if err != nil {
		return nil, err
	}
	return toBSONValue(v, shellNumbers)
}

// jobj is a JSON object with its field order kept.
type jobj []jfield

type jfield struct {
	key string
	val any
}

func readJSON(dec *json.Decoder) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch x := tok.(type) {
	case json.Delim:
		switch x {
		case '{':
			obj := jobj{}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				k, _ := kt.(string)
				v, err := readJSON(dec)
				if err != nil {
					return nil, err
				}
				obj = append(obj, jfield{key: k, val: v})
			}
			if _, err := dec.Token(); err != nil {
				return nil, err
			}
			return obj, nil
		case '[':
			arr := []any{}
			for dec.More() {
				v, err := readJSON(dec)
				if err != nil {
					return nil, err
				}
				arr = append(arr, v)
			}
			if _, err := dec.Token(); err != nil {
				return nil, err
			}
			return arr, nil
		}
		return nil, fmt.Errorf("unexpected delimiter %v", x)
	default:
		return x, nil
	}
}

var extJSONWrappers = map[string]bool{
	"$oid": true, "$numberLong": true, "$numberInt": true, "$numberDouble": true, "$numberDecimal": true,
	"$date": true, "$binary": true, "$regularExpression": true, "$timestamp": true, "$minKey": true,
	"$maxKey": true, "$undefined": true, "$symbol": true, "$code": true, "$dbPointer": true, "$uuid": true,
}

func toBSONValue(v any, shellNumbers bool) (any, error) {
	switch x := v.(type) {
	case jobj:
		if len(x) > 0 && extJSONWrappers[x[0].key] {
			var buf bytes.Buffer
			buf.WriteString(`{"v":`)
			writeJSON(&buf, x)
			buf.WriteString(`}`)
			var d bson.D
			if err := bson.UnmarshalExtJSON(buf.Bytes(), false, &d); err != nil {
				return nil, err
			}
			return d[0].Value, nil
		}
		d := bson.D{}
		for _, f := range x {
			bv, err := toBSONValue(f.val, shellNumbers)
			if err != nil {
				return nil, err
			}
			d = append(d, bson.E{Key: f.key, Value: bv})
		}
		return d, nil
	case []any:
		a := bson.A{}
		for _, e := range x {
			bv, err := toBSONValue(e, shellNumbers)
			if err != nil {
				return nil, err
			}
			a = append(a, bv)
		}
		return a, nil
	case json.Number:
		s := x.String()
		if !strings.ContainsAny(s, ".eE") && !shellNumbers {
			i, err := strconv.ParseInt(s, 10, 64)
			if err == nil {
				if i >= math.MinInt32 && i <= math.MaxInt32 {
					return int32(i), nil
				}
				return i, nil
			}
		}
		return strconv.ParseFloat(s, 64)
	case string, bool, nil:
		return x, nil
	}
	return nil, fmt.Errorf("unexpected JSON value %T", v)
}

func writeJSON(w io.Writer, v any) {
	switch x := v.(type) {
	case jobj:
		io.WriteString(w, "{")
		for i, f := range x {
			if i > 0 {
				io.WriteString(w, ",")
			}
			k, _ := json.Marshal(f.key)
			w.Write(k)
			io.WriteString(w, ":")
			writeJSON(w, f.val)
		}
		io.WriteString(w, "}")
	case []any:
		io.WriteString(w, "[")
		for i, e := range x {
			if i > 0 {
				io.WriteString(w, ",")
			}
			writeJSON(w, e)
		}
		io.WriteString(w, "]")
	case json.Number:
		io.WriteString(w, x.String())
	default:
		b, _ := json.Marshal(x)
		w.Write(b)
	}
}
