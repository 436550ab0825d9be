package jsonschema

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/big"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// bsonType is a BSON element type, as the server's typeName() names it.
type bsonType byte

const (
	tMissing    bsonType = 0x00
	tDouble     bsonType = 0x01
	tString     bsonType = 0x02
	tObject     bsonType = 0x03
	tArray      bsonType = 0x04
	tBinData    bsonType = 0x05
	tUndefined  bsonType = 0x06
	tObjectID   bsonType = 0x07
	tBool       bsonType = 0x08
	tDate       bsonType = 0x09
	tNull       bsonType = 0x0A
	tRegex      bsonType = 0x0B
	tDBPointer  bsonType = 0x0C
	tJavascript bsonType = 0x0D
	tSymbol     bsonType = 0x0E
	tCodeWScope bsonType = 0x0F
	tInt        bsonType = 0x10
	tTimestamp  bsonType = 0x11
	tLong       bsonType = 0x12
	tDecimal    bsonType = 0x13
	tMinKey     bsonType = 0xFF
	tMaxKey     bsonType = 0x7F
)

// typeNames are the server's names for BSON types (typeName() in
// src/mongo/bson/bsontypes.cpp), also the bsonType aliases.
var typeNames = map[bsonType]string{
	tDouble:     "double",
	tString:     "string",
	tObject:     "object",
	tArray:      "array",
	tBinData:    "binData",
	tUndefined:  "undefined",
	tObjectID:   "objectId",
	tBool:       "bool",
	tDate:       "date",
	tNull:       "null",
	tRegex:      "regex",
	tDBPointer:  "dbPointer",
	tJavascript: "javascript",
	tSymbol:     "symbol",
	tCodeWScope: "javascriptWithScope",
	tInt:        "int",
	tTimestamp:  "timestamp",
	tLong:       "long",
	tDecimal:    "decimal",
	tMinKey:     "minKey",
	tMaxKey:     "maxKey",
}

// bsonTypeAliases maps a bsonType keyword alias to its type.
var bsonTypeAliases = func() map[string]bsonType {
	m := make(map[string]bsonType, len(typeNames))
	for t, n := range typeNames {
		m[n] = t
	}
	return m
}()

// jsonTypeAliases maps a JSON Schema "type" alias to its BSON type
// ("number" is handled separately, "integer" is rejected like the server).
var jsonTypeAliases = map[string]bsonType{
	"array":   tArray,
	"boolean": tBool,
	"null":    tNull,
	"object":  tObject,
	"string":  tString,
}

// String returns the server's name for the type.
func (t bsonType) String() string {
	if n, ok := typeNames[t]; ok {
		return n
	}
	return "missing"
}

func isNumeric(t bsonType) bool {
	return t == tDouble || t == tInt || t == tLong || t == tDecimal
}

// typeOf returns the BSON type of a decoded value (as produced by
// bson.Unmarshal into bson.D).
func typeOf(v any) bsonType {
	switch v.(type) {
	case float64:
		return tDouble
	case string:
		return tString
	case bson.D:
		return tObject
	case bson.A:
		return tArray
	case bson.Binary:
		return tBinData
	case bson.Undefined:
		return tUndefined
	case bson.ObjectID:
		return tObjectID
	case bool:
		return tBool
	case bson.DateTime:
		return tDate
	case nil, bson.Null:
		return tNull
	case bson.Regex:
		return tRegex
	case bson.DBPointer:
		return tDBPointer
	case bson.JavaScript:
		return tJavascript
	case bson.Symbol:
		return tSymbol
	case bson.CodeWithScope:
		return tCodeWScope
	case int32:
		return tInt
	case bson.Timestamp:
		return tTimestamp
	case int64:
		return tLong
	case bson.Decimal128:
		return tDecimal
	case bson.MinKey:
		return tMinKey
	case bson.MaxKey:
		return tMaxKey
	case int:
		return tLong
	}
	return tNull
}

// lookup returns the value of field path in doc. A dotted path descends into
// embedded documents (never into arrays: every $jsonSchema expression uses
// the server's no-traversal path behaviour).
func lookup(doc bson.D, path string) (any, bool) {
	cur := doc
	for {
		head, rest, dotted := strings.Cut(path, ".")
		if !dotted {
			head = path
		}
		var (
			val   any
			found bool
		)
		for _, e := range cur {
			if e.Key == head {
				val, found = e.Value, true
				break
			}
		}
		if !found {
			// A field whose name contains dots is stored under its full name.
			if dotted {
				for _, e := range cur {
					if e.Key == path {
						return e.Value, true
					}
				}
			}
			return nil, false
		}
		if !dotted {
			return val, true
		}
		sub, ok := val.(bson.D)
		if !ok {
			return nil, false
		}
		cur, path = sub, rest
	}
}

// number is a numeric BSON value widened for comparisons.
type number struct {
	isInt bool
	i     int64
	f     float64
	dec   *big.Float // set for decimals that are not NaN/Inf
	nan   bool
}

func toNumber(v any) (number, bool) {
	switch x := v.(type) {
	case int32:
		return number{isInt: true, i: int64(x), f: float64(x)}, true
	case int64:
		return number{isInt: true, i: x, f: float64(x)}, true
	case int:
		return number{isInt: true, i: int64(x), f: float64(x)}, true
	case float64:
		return number{f: x, nan: math.IsNaN(x)}, true
	case bson.Decimal128:
		s := x.String()
		switch s {
		case "NaN", "-NaN":
			return number{nan: true, f: math.NaN()}, true
		case "Infinity":
			return number{f: math.Inf(1)}, true
		case "-Infinity":
			return number{f: math.Inf(-1)}, true
		}
		bf, _, err := big.ParseFloat(s, 10, 200, big.ToNearestEven)
		if err != nil {
			return number{nan: true}, true
		}
		f, _ := bf.Float64()
		return number{f: f, dec: bf}, true
	}
	return number{}, false
}

func (n number) big() *big.Float {
	if n.dec != nil {
		return n.dec
	}
	if n.isInt {
		return new(big.Float).SetPrec(200).SetInt64(n.i)
	}
	if math.IsInf(n.f, 0) || n.nan {
		return nil
	}
	return new(big.Float).SetPrec(200).SetFloat64(n.f)
}

// compareNumbers orders two numbers; NaN sorts below every other number
// and equals NaN, as in the server's BSON comparison.
func compareNumbers(a, b number) int {
	switch {
	case a.nan && b.nan:
		return 0
	case a.nan:
		return -1
	case b.nan:
		return 1
	}
	if a.isInt && b.isInt {
		switch {
		case a.i < b.i:
			return -1
		case a.i > b.i:
			return 1
		}
		return 0
	}
	ab, bb := a.big(), b.big()
	if ab == nil || bb == nil {
		// An infinity: above (below) every finite number, a Decimal128
		// beyond the double range included (the server compares a
		// double with a Decimal128 as Decimal128s).
		return cmpInt(infSign(a, ab), infSign(b, bb))
	}
	return ab.Cmp(bb)
}

// infSign is +1 for +Inf, -1 for -Inf, 0 for a finite number (bf, its
// big form, is nil only for infinities here).
func infSign(n number, bf *big.Float) int {
	switch {
	case bf != nil:
		return 0
	case n.f > 0:
		return 1
	}
	return -1
}

func cmpInt(a, b int) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// canonicalRank is the server's canonical type order (canonicalizeBSONType):
// values of different ranks are never equal and never compare in a query.
func canonicalRank(t bsonType) int {
	switch t {
	case tMinKey:
		return -1
	case tMissing, tUndefined:
		return 0
	case tNull:
		return 5
	case tDouble, tInt, tLong, tDecimal:
		return 10
	case tString, tSymbol:
		return 15
	case tObject:
		return 20
	case tArray:
		return 25
	case tBinData:
		return 30
	case tObjectID:
		return 35
	case tBool:
		return 40
	case tDate:
		return 45
	case tTimestamp:
		return 47
	case tRegex:
		return 50
	case tDBPointer:
		return 55
	case tJavascript:
		return 60
	case tCodeWScope:
		return 65
	case tMaxKey:
		return 127
	}
	return 0
}

// valuesEqual compares two values the way the server's
// UnorderedFieldsBSONElementComparator does for equality: numbers by value
// across types, embedded documents regardless of field order.
func valuesEqual(a, b any) bool {
	ta, tb := typeOf(a), typeOf(b)
	if canonicalRank(ta) != canonicalRank(tb) {
		return false
	}
	switch {
	case isNumeric(ta):
		na, _ := toNumber(a)
		nb, _ := toNumber(b)
		return compareNumbers(na, nb) == 0
	case ta == tString || ta == tSymbol:
		return stringOf(a) == stringOf(b)
	case ta == tObject:
		return docsEqualUnordered(a.(bson.D), b.(bson.D))
	case ta == tArray:
		xa, xb := a.(bson.A), b.(bson.A)
		if len(xa) != len(xb) {
			return false
		}
		for i := range xa {
			if !valuesEqual(xa[i], xb[i]) {
				return false
			}
		}
		return true
	case ta == tNull || ta == tUndefined || ta == tMinKey || ta == tMaxKey:
		return true
	}
	// Everything else: compare the encoded value bytes.
	return rawEqual(a, b)
}

// equalKey appends to b a key of v such that valuesEqual(x, y) holds
// exactly when equalKey(x) == equalKey(y): the canonical rank, then
// numbers by exact value (a whole number within int64 as its 8 bytes,
// others as the 'p' form of the big.Float compareNumbers compares, which
// does not depend on precision; NaNs one key, infinities one per sign),
// strings and symbols by content, embedded documents by their fields
// sorted by name (stable, as docsEqualUnordered), arrays element by
// element, other types by their BSON bytes. Variable-length parts are
// length-prefixed, so two different sequences never give one key. Cost:
// linear in v's size (n log n for the field names of each document).
func equalKey(b []byte, v any) []byte {
	t := typeOf(v)
	b = append(b, byte(canonicalRank(t)+1))
	switch {
	case isNumeric(t):
		return numberKey(b, v)
	case t == tString || t == tSymbol:
		return appendPart(b, stringOf(v))
	case t == tObject:
		d := v.(bson.D)
		if !sort.SliceIsSorted(d, func(i, j int) bool { return d[i].Key < d[j].Key }) {
			d = append(bson.D(nil), d...)
			sort.SliceStable(d, func(i, j int) bool { return d[i].Key < d[j].Key })
		}
		b = binary.AppendUvarint(b, uint64(len(d)))
		for _, e := range d {
			b = appendPart(b, e.Key)
			at := len(b)
			b = append(b, 0, 0, 0, 0)
			b = equalKey(b, e.Value)
			binary.BigEndian.PutUint32(b[at:], uint32(len(b)-at-4))
		}
		return b
	case t == tArray:
		a := v.(bson.A)
		b = binary.AppendUvarint(b, uint64(len(a)))
		for _, e := range a {
			at := len(b)
			b = append(b, 0, 0, 0, 0)
			b = equalKey(b, e)
			binary.BigEndian.PutUint32(b[at:], uint32(len(b)-at-4))
		}
		return b
	case t == tNull || t == tUndefined || t == tMinKey || t == tMaxKey:
		return b
	}
	raw, err := bson.Marshal(bson.D{{Key: "v", Value: v}})
	if err != nil {
		return append(b, '?')
	}
	return appendPart(b, string(raw))
}

// numberKey appends the key of a number (see equalKey).
func numberKey(b []byte, v any) []byte {
	whole := func(i int64) []byte { return binary.BigEndian.AppendUint64(append(b, 'Z'), uint64(i)) }
	switch x := v.(type) {
	case int32:
		return whole(int64(x))
	case int64:
		return whole(x)
	case int:
		return whole(int64(x))
	case float64:
		if x == math.Trunc(x) && x >= -(1<<63) && x < 1<<63 {
			return whole(int64(x)) // -0 too
		}
	}
	n, _ := toNumber(v)
	bf := n.big()
	switch {
	case n.nan:
		return append(b, 'N')
	case bf == nil: // an infinity
		return strconv.AppendBool(append(b, 'I'), n.f > 0)
	case bf.IsInt():
		if i, acc := bf.Int64(); acc == big.Exact {
			return whole(i)
		}
	}
	return appendPart(append(b, 'V'), bf.Text('p', 0))
}

// appendPart appends p with its length before it.
func appendPart(b []byte, p string) []byte {
	b = binary.AppendUvarint(b, uint64(len(p)))
	return append(b, p...)
}

func stringOf(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case bson.Symbol:
		return string(x)
	}
	return ""
}

func docsEqualUnordered(a, b bson.D) bool {
	if len(a) != len(b) {
		return false
	}
	sa := append(bson.D(nil), a...)
	sb := append(bson.D(nil), b...)
	sort.SliceStable(sa, func(i, j int) bool { return sa[i].Key < sa[j].Key })
	sort.SliceStable(sb, func(i, j int) bool { return sb[i].Key < sb[j].Key })
	for i := range sa {
		if sa[i].Key != sb[i].Key || !valuesEqual(sa[i].Value, sb[i].Value) {
			return false
		}
	}
	return true
}

func rawEqual(a, b any) bool {
	ra, err1 := bson.Marshal(bson.D{{Key: "v", Value: a}})
	rb, err2 := bson.Marshal(bson.D{{Key: "v", Value: b}})
	return err1 == nil && err2 == nil && bytes.Equal(ra, rb)
}

// integerArg parses a keyword argument that must be a non-negative integer
// (parseIntegerElementToNonNegativeLong): any numeric type holding a whole
// number.
func integerArg(v any) (int64, bool) {
	n, ok := toNumber(v)
	if !ok || n.nan {
		return 0, false
	}
	if n.isInt {
		return n.i, n.i >= 0
	}
	if n.dec != nil {
		if !n.dec.IsInt() {
			return 0, false
		}
		i, acc := n.dec.Int64()
		return i, acc == big.Exact && i >= 0
	}
	if n.f != math.Trunc(n.f) || n.f < 0 || n.f > math.MaxInt64 {
		return 0, false
	}
	return int64(n.f), true
}

// utf8Len counts code points as the server's str::lengthInUTF8CodePoints.
func utf8Len(s string) int { return utf8.RuneCountInString(s) }

// isMultipleOf reports whether v is a multiple of divisor, computed the way
// the server does it (Decimal128 arithmetic on values converted from
// doubles with 15 significant digits).
func isMultipleOf(v any, divisor any) bool {
	a, ok1 := toDecimalRat(v)
	b, ok2 := toDecimalRat(divisor)
	if !ok1 || !ok2 || b.Sign() == 0 {
		return false
	}
	q := new(big.Rat).Quo(a, b)
	// Truncate q toward zero and check a - trunc(q)*b == 0.
	num, den := q.Num(), q.Denom()
	tq := new(big.Int).Quo(num, den)
	prod := new(big.Rat).Mul(new(big.Rat).SetInt(tq), b)
	return new(big.Rat).Sub(a, prod).Sign() == 0
}

func toDecimalRat(v any) (*big.Rat, bool) {
	var s string
	switch x := v.(type) {
	case int32:
		s = strconv.FormatInt(int64(x), 10)
	case int64:
		s = strconv.FormatInt(x, 10)
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return nil, false
		}
		s = strconv.FormatFloat(x, 'e', 14, 64)
	case bson.Decimal128:
		s = x.String()
	default:
		return nil, false
	}
	r, ok := new(big.Rat).SetString(s)
	return r, ok
}
