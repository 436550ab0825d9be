package demo

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/writeguard/writeguard/jsonschema"
)

func TestEmbeddedDataIsTheCitedFile(t *testing.T) {
	sum := sha256.Sum256(CSV())
	if got := hex.EncodeToString(sum[:]); got != DataSHA256 {
		t.Fatalf("sha256 of the embedded CSV = %s, want %s (data/README.md)", got, DataSHA256)
	}
	readme, err := os.ReadFile("data/README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{DataSHA256, "CC BY 4.0", "Chen", "10.24432/C5BW33", "4ba5601eb9b9aed1d01ab79775e3af228216ff6f"} {
		if !bytes.Contains(readme, []byte(want)) {
			t.Errorf("data/README.md lacks %q", want)
		}
	}
}

func TestRows(t *testing.T) {
	rows, err := Rows(0)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != DataRows {
		t.Fatalf("%d rows, want %d", len(rows), DataRows)
	}
	ids := map[string]int{}
	dups, comma, pound := 0, 0, 0
	for _, r := range rows {
		ids[r.ID]++
		if ids[r.ID] > 1 {
			dups++
		}
		m := docMap(r.Doc)
		if d, ok := m["Description"].(string); ok {
			if strings.Contains(d, ",") {
				comma++
			}
			if strings.Contains(d, "£") {
				pound++
			}
		}
		if _, ok := m["CustomerID"]; ok {
			if _, isInt := m["CustomerID"].(int32); !isInt {
				t.Fatalf("line %d: CustomerID %T", r.Line, m["CustomerID"])
			}
		}
	}
	// Facts of shared/data/README.md.
	if dups != 500 {
		t.Errorf("%d duplicate rows, want 500", dups)
	}
	if comma != 418 {
		t.Errorf("%d descriptions with a comma, want 418", comma)
	}
	if pound != 2 {
		t.Errorf("%d descriptions with £, want 2", pound)
	}
	first := docMap(rows[0].Doc)
	if first["InvoiceNo"] != "536365" || first["Quantity"] != int32(6) || first["UnitPrice"] != 2.55 || first["CustomerID"] != int32(17850) {
		t.Errorf("first row %v", rows[0].Doc)
	}
	if rows[0].Line != 2 || rows[len(rows)-1].Line != DataRows+1 {
		t.Errorf("lines %d..%d", rows[0].Line, rows[len(rows)-1].Line)
	}
	lim, err := Rows(10)
	if err != nil || len(lim) != 10 || lim[9].ID != rows[9].ID {
		t.Errorf("Rows(10): %d rows, %v", len(lim), err)
	}
}

// TestValidatorRejections checks the validator's rejection counts with the
// emulation the proxy uses, against rules computed from the raw CSV.
func TestValidatorRejections(t *testing.T) {
	rows, err := Rows(0)
	if err != nil {
		t.Fatal(err)
	}
	v, err := jsonschema.Compile(Validator())
	if err != nil {
		t.Fatal(err)
	}
	w, err := jsonschema.Compile(Widened())
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(CSV()), "\n"), "\n")[1:]
	rejected, widenedRejected, kp := 0, 0, map[string]int{}
	for i, r := range rows {
		ei := v.Validate(r.Doc)
		if ei != nil {
			rejected++
			raw, _ := bson.Marshal(ei)
			for _, k := range KeywordPaths(raw) {
				kp[k]++
			}
		}
		if w.Validate(r.Doc) != nil {
			widenedRejected++
		}
		// Independent rule check on the raw text (no quoted field before
		// Quantity has a comma in the first two columns).
		if r.ID != LineID([]byte(lines[i])) {
			t.Fatalf("line %d: id mismatch", r.Line)
		}
	}
	if rejected != 1171 || widenedRejected != 1001 {
		t.Errorf("rejected %d (want 1171), widened rejects %d (want 1001)", rejected, widenedRejected)
	}
	want := map[string]int{"minimum Quantity": 798, "minimum UnitPrice": 273, "pattern StockCode": 200}
	for k, n := range want {
		if kp[k] != n {
			t.Errorf("%s: %d, want %d", k, kp[k], n)
		}
	}
}

func docMap(d bson.D) map[string]any {
	m := make(map[string]any, len(d))
	for _, e := range d {
		m[e.Key] = e.Value
	}
	return m
}

// The widened validator of the README and the tests is Widened().
func TestWidenedValidatorFile(t *testing.T) {
	path := filepath.Join("..", "..", "testdata", "widened_validator.json")
	js, err := bson.MarshalExtJSONIndent(Widened(), false, false, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	js = append(js, '\n')
	if os.Getenv("WRITEGUARD_UPDATE_TESTDATA") != "" {
		if err := os.WriteFile(path, js, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, js) {
		t.Errorf("%s differs from Widened(); run with WRITEGUARD_UPDATE_TESTDATA=1", path)
	}
}
