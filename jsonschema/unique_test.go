package jsonschema

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

func dec(t testing.TB, s string) bson.Decimal128 {
	t.Helper()
	d, err := bson.ParseDecimal128(s)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestEqualKeyAgreesWithValuesEqual: two values share an equalKey exactly
// when valuesEqual holds, across numeric types, field orders, nesting and
// the other BSON types.
func TestEqualKeyAgreesWithValuesEqual(t *testing.T) {
	oid := bson.NewObjectID()
	values := []any{
		int32(1), int64(1), 1.0, dec(t, "1.0"), dec(t, "1"), 1.5, dec(t, "1.5"), 0.1, dec(t, "0.1"),
		int32(0), 0.0, math.Copysign(0, -1), dec(t, "-0"), math.NaN(), dec(t, "NaN"),
		math.Inf(1), dec(t, "Infinity"), dec(t, "1E+6000"), math.Inf(-1), dec(t, "-Infinity"),
		int64(math.MaxInt64), int64(math.MaxInt64 - 1), float64(1 << 62),
		"a", bson.Symbol("a"), "b", "", nil, bson.Null{}, bson.Undefined{}, bson.MinKey{}, bson.MaxKey{},
		bson.D{{Key: "x", Value: int32(1)}, {Key: "y", Value: "z"}},
		bson.D{{Key: "y", Value: "z"}, {Key: "x", Value: 1.0}},
		bson.D{{Key: "x", Value: int32(1)}},
		bson.D{{Key: "x", Value: int32(1)}, {Key: "x", Value: int32(2)}},
		bson.D{{Key: "x", Value: int32(2)}, {Key: "x", Value: int32(1)}},
		bson.A{int32(1), "a"}, bson.A{1.0, bson.Symbol("a")}, bson.A{"a", int32(1)}, bson.A{},
		bson.A{bson.A{int32(1)}}, bson.A{int32(1)},
		oid, true, false, bson.NewDateTimeFromTime(time.Unix(1, 0)), bson.DateTime(1000),
		bson.Binary{Subtype: 0, Data: []byte("ab")}, bson.Binary{Subtype: 4, Data: []byte("ab")},
		bson.Regex{Pattern: "a", Options: "i"}, bson.Timestamp{T: 1, I: 2},
		// Key boundaries that a key without length prefixes would confuse.
		bson.D{{Key: "ab", Value: "c"}}, bson.D{{Key: "a", Value: "bc"}},
	}
	for i, a := range values {
		for j, b := range values {
			eq := valuesEqual(a, b)
			same := string(equalKey(nil, a)) == string(equalKey(nil, b))
			if eq != same {
				t.Errorf("values %d (%v) and %d (%v): valuesEqual %v, same key %v", i, a, j, b, eq, same)
			}
		}
	}
}

// TestUniqueItemsLinear: uniqueItems over 100,000 distinct elements (and
// over one duplicate at the end) is decided in well under the time the
// pairwise comparison took for 40,000 (19 s; 100,000 would take about
// 2 minutes), and the duplicate is found whatever its numeric type or
// field order. Validate (errInfo with duplicatedValue) runs at 20,000.
func TestUniqueItemsLinear(t *testing.T) {
	v, err := Compile(schema(bson.D{{Key: "properties", Value: bson.D{{Key: "a", Value: bson.D{{Key: "uniqueItems", Value: true}}}}}}))
	if err != nil {
		t.Fatal(err)
	}
	for _, kind := range []string{"ints", "strings", "documents"} {
		for _, n := range []int{100000, 20000} {
			a := make(bson.A, n)
			for i := range a {
				switch kind {
				case "ints":
					a[i] = int32(i)
				case "strings":
					a[i] = fmt.Sprintf("s%07d", i)
				default:
					a[i] = bson.D{{Key: "k", Value: int64(i)}, {Key: "j", Value: "x"}}
				}
			}
			start := time.Now()
			if _, dup := firstDuplicate(a); dup {
				t.Errorf("%s: %d distinct elements have a duplicate", kind, n)
			}
			// The last element repeats element 7 (as another numeric type,
			// or with its fields in another order).
			switch kind {
			case "ints":
				a[n-1] = 7.0
			case "strings":
				a[n-1] = bson.Symbol("s0000007")
			default:
				a[n-1] = bson.D{{Key: "j", Value: "x"}, {Key: "k", Value: int32(7)}}
			}
			if d, dup := firstDuplicate(a); !dup || !valuesEqual(d, a[7]) {
				t.Errorf("%s: duplicate %v %v, want element 7", kind, d, dup)
			}
			if el := time.Since(start); el > 30*time.Second {
				t.Errorf("%s: %d elements took %v", kind, n, el)
			} else {
				t.Logf("%s: %d elements twice in %v", kind, n, el)
			}
			if n > 20000 {
				continue
			}
			if errInfo := v.Validate(bson.D{{Key: "a", Value: a}}); errInfo == nil {
				t.Errorf("%s: a duplicate passes uniqueItems", kind)
			} else if s := fmt.Sprint(errInfo); !strings.Contains(s, "duplicatedValue") {
				t.Errorf("%s: errInfo without duplicatedValue", kind)
			}
			a[n-1] = "unique"
			if !v.Matches(bson.D{{Key: "a", Value: a}}) {
				t.Errorf("%s: distinct elements fail uniqueItems", kind)
			}
		}
	}
}
