package envelope

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// FuzzDecode feeds arbitrary bytes to Decode, the reader of stored
// envelopes. It must not panic; an envelope it rejects is a *DecodeError
// whose message holds no string value of the document; one it accepts
// has an original that is a valid document. Seeds: testdata/fuzz/FuzzDecode
// and the stored form of the sample envelope with fields of the wrong
// type.
func FuzzDecode(f *testing.F) {
	good, err := StoredDocument(sampleEnvelope(f))
	if err != nil {
		f.Fatal(err)
	}
	f.Add([]byte(good))
	for _, c := range []struct {
		field string
		v     any
	}{{"original", "str"}, {"attempts", "x"}, {"first_seen", int32(1)}, {"status", bson.A{}}} {
		var d bson.D
		_ = bson.Unmarshal(good, &d)
		for i := range d {
			if d[i].Key == c.field {
				d[i].Value = c.v
			}
		}
		b, _ := bson.Marshal(d)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		env, err := Decode(bson.Raw(b))
		if err != nil {
			var de *DecodeError
			if !errors.As(err, &de) {
				t.Fatalf("Decode error %v is not a DecodeError", err)
			}
			if de.Field != "" && de.Type != 0 {
				// The message names the field, never its value.
				if v, lerr := bson.Raw(b).LookupErr(de.Field); lerr == nil {
					if s, ok := v.StringValueOK(); ok && len(s) >= 8 && strings.Contains(err.Error(), s) {
						t.Fatalf("DecodeError message %q holds the value of %s", err, de.Field)
					}
				}
			}
			return
		}
		if err := env.Original.Validate(); err != nil {
			t.Fatalf("decoded an original that is not valid BSON: %v", err)
		}
	})
}

// FuzzReadLines feeds arbitrary bytes, as the content of a FileSink file,
// to ReadLines. It must not panic; every envelope it returns encodes back
// to a line that decodes to the same envelope; and it returns no more
// envelopes than the input has lines. Seeds: testdata/fuzz/FuzzReadLines
// and a file of two lines, whole and cut short.
func FuzzReadLines(f *testing.F) {
	line, err := MarshalLine(sampleEnvelope(f))
	if err != nil {
		f.Fatal(err)
	}
	two := append(append(append([]byte(nil), line...), '\n'), line...)
	f.Add(two)
	f.Add(two[:len(two)-20])
	f.Add(append(append([]byte(nil), line[:40]...), append([]byte{'\n'}, line...)...))
	f.Fuzz(func(t *testing.T, b []byte) {
		envs, _ := ReadLines(bytes.NewReader(b))
		if n := bytes.Count(b, []byte{'\n'}) + 1; len(envs) > n {
			t.Fatalf("%d envelopes from %d lines", len(envs), n)
		}
		for _, e := range envs {
			l, err := MarshalLine(e)
			if err != nil {
				t.Fatalf("an envelope read back does not encode: %v", err)
			}
			back, err := UnmarshalLine(l)
			if err != nil {
				t.Fatalf("an envelope read back does not decode once encoded: %v", err)
			}
			if !bytes.Equal(back.Original, e.Original) || back.Fingerprint != e.Fingerprint || back.DocumentID.Type != e.DocumentID.Type ||
				!bytes.Equal(back.DocumentID.Value, e.DocumentID.Value) {
				t.Fatalf("round trip changed the envelope")
			}
		}
	})
}
