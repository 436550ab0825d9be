package driveropts_test

import (
	"bytes"
	"reflect"
	"strconv"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/writeguard/writeguard/internal/driveropts"
)

type probeInner struct{ A int }

// probe shows every encoder option: an empty string, nil slice, map and
// byte slice, a small int64, a json tag, a map with non-string keys, a zero
// struct.
type probe struct {
	Empty  string `bson:",omitempty"`
	Plain  string
	Slice  []int
	Map    map[string]int
	Bytes  []byte
	Small  int64
	Tagged int `json:"jtag"`
	Keys   map[int]int
	Zero   probeInner `bson:",omitempty"`
}

// TestEncoderAppliesEachOption: every BSONOptions field the driver applies
// to a collection's encoder (mongo/mongo.go getEncoder) gives the bytes of
// an encoder with that option set by hand, and differs from the default.
func TestEncoderAppliesEachOption(t *testing.T) {
	if driveropts.Encoder(nil, nil) != nil {
		t.Error("Encoder(nil, nil) is not nil: the default encoder should be used")
	}
	v := probe{Keys: map[int]int{1: 2}}
	encode := func(enc *bson.Encoder, buf *bytes.Buffer) []byte {
		t.Helper()
		if err := enc.Encode(v); err != nil {
			t.Fatal(err)
		}
		return buf.Bytes()
	}
	// Each encoder has a registry of its own: a registry's struct codec
	// caches a type's description (its keys) on first use, whatever the
	// UseJSONStructTags of that use (driver v2.10 bson/struct_codec.go
	// describeStruct), so a shared one would hide that option.
	var dbuf bytes.Buffer
	plain := bson.NewEncoder(bson.NewDocumentWriter(&dbuf))
	plain.SetRegistry(bson.NewRegistry())
	plain.StringifyMapKeysWithFmt() // the default cannot encode map[int]int
	def := encode(plain, &dbuf)
	for _, tc := range []struct {
		name string
		opts options.BSONOptions
		set  func(*bson.Encoder)
	}{
		{"IntMinSize", options.BSONOptions{IntMinSize: true}, (*bson.Encoder).IntMinSize},
		{"NilByteSliceAsEmpty", options.BSONOptions{NilByteSliceAsEmpty: true}, (*bson.Encoder).NilByteSliceAsEmpty},
		{"NilMapAsEmpty", options.BSONOptions{NilMapAsEmpty: true}, (*bson.Encoder).NilMapAsEmpty},
		{"NilSliceAsEmpty", options.BSONOptions{NilSliceAsEmpty: true}, (*bson.Encoder).NilSliceAsEmpty},
		{"OmitZeroStruct", options.BSONOptions{OmitZeroStruct: true}, (*bson.Encoder).OmitZeroStruct},
		{"OmitEmpty", options.BSONOptions{OmitEmpty: true}, (*bson.Encoder).OmitEmpty},
		{"UseJSONStructTags", options.BSONOptions{UseJSONStructTags: true}, (*bson.Encoder).UseJSONStructTags},
	} {
		opts := tc.opts
		opts.StringifyMapKeysWithFmt = true
		var gbuf, wbuf bytes.Buffer
		got := encode(driveropts.Encoder(bson.NewRegistry(), &opts)(&gbuf), &gbuf)
		want := bson.NewEncoder(bson.NewDocumentWriter(&wbuf))
		want.SetRegistry(bson.NewRegistry())
		want.StringifyMapKeysWithFmt()
		tc.set(want)
		if w := encode(want, &wbuf); !bytes.Equal(got, w) {
			t.Errorf("%s: %v, want %v", tc.name, bson.Raw(got), bson.Raw(w))
		}
		if bytes.Equal(got, def) {
			t.Errorf("%s: same bytes as without the option: the probe does not show it", tc.name)
		}
	}
	// ErrorOnInlineDuplicates: an inlined map with a key of the struct.
	type dup struct {
		A int
		M map[string]int `bson:",inline"`
	}
	var buf bytes.Buffer
	if err := driveropts.Encoder(nil, &options.BSONOptions{ErrorOnInlineDuplicates: true})(&buf).Encode(dup{M: map[string]int{"a": 1}}); err == nil {
		t.Error("ErrorOnInlineDuplicates: no error for a duplicated inline key")
	}
	// The registry (its use end to end: cmd/writeguard/e2e
	// TestRegistryStoresWhatTheDriverStores): ints as strings.
	reg := bson.NewRegistry()
	reg.RegisterTypeEncoder(reflect.TypeOf(0), bson.ValueEncoderFunc(func(_ bson.EncodeContext, vw bson.ValueWriter, v reflect.Value) error {
		return vw.WriteString(strconv.FormatInt(v.Int(), 10))
	}))
	type n struct{ N int }
	buf.Reset()
	if err := driveropts.Encoder(reg, nil)(&buf).Encode(n{N: 7}); err != nil || bson.Raw(buf.Bytes()).Lookup("n").StringValue() != "7" {
		t.Errorf("with the registry: %v, %v; want n as the string \"7\"", bson.Raw(buf.Bytes()), err)
	}
}
