package envelope

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"slices"
	"strconv"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// maxFingerprintDepth bounds the nesting of documents and arrays Fingerprint
// canonicalises (the top-level document is depth 1). MongoDB stores no
// document nested more than 100 levels deep, so only input no server would
// accept reaches it; such input is hashed like invalid BSON.
const maxFingerprintDepth = 200

// Fingerprint returns the lowercase hex SHA-256 (64 characters) of the
// canonical form of original, the dead-letter collection's unique key
// (Envelope.Fingerprint): two captures of the same logical payload get the
// same fingerprint, so a recapture upserts the existing envelope.
//
// The canonical form is itself a BSON document, built from original by:
//
//   - leaving out every top-level element whose key is "_id" when
//     idAssigned is true (the _id was assigned by writeguard, so two
//     captures of one payload carry different ObjectIDs); when idAssigned
//     is false the caller's _id is part of the payload and is kept;
//   - sorting the elements of the top-level document and of every embedded
//     document at any depth (including documents inside arrays) by key,
//     comparing the keys' UTF-8 bytes, ascending; elements with equal keys
//     keep their relative order;
//   - keeping the order of array elements, renumbering array keys "0",
//     "1", ... as BSON requires;
//   - keeping every other value byte for byte, with its BSON type: int32 1,
//     int64 1, double 1.0 and decimal 1 are all different, as are strings
//     that differ only in Unicode normalisation; the scope document of a
//     code-with-scope value is not re-sorted;
//   - recomputing the document and array lengths.
//
// So {a: 1, b: {c: 1, d: 2}} and {b: {d: 2, c: 1}, a: 1} fingerprint the
// same, {a: [1, 2]} and {a: [2, 1]} do not.
//
// When original is not exactly one well-formed BSON document (nil, cut
// short, trailing bytes, bad lengths, unknown element types, strings without
// their terminating NUL, or nesting deeper than 200 levels), Fingerprint
// does not fail or panic: it returns the SHA-256 of original's bytes as
// given.
func Fingerprint(original bson.Raw, idAssigned bool) string {
	var sum [sha256.Size]byte
	canon, ok := appendCanonicalDoc(make([]byte, 0, len(original)), original, idAssigned, 1)
	if ok && len(canon) != 0 {
		sum = sha256.Sum256(canon)
	} else {
		sum = sha256.Sum256(original)
	}
	return hex.EncodeToString(sum[:])
}

type canonElem struct {
	key []byte
	t   bson.Type
	val []byte
}

// strictContainer reports whether b is exactly one well-framed document or
// array: its length prefix is len(b) and it ends with 0x00.
func strictContainer(b []byte) bool {
	if len(b) < 5 {
		return false
	}
	n := int64(int32(binary.LittleEndian.Uint32(b)))
	return n == int64(len(b)) && b[len(b)-1] == 0x00
}

// appendCanonicalDoc appends the canonical form of document doc to dst.
func appendCanonicalDoc(dst, doc []byte, dropID bool, depth int) ([]byte, bool) {
	if depth > maxFingerprintDepth || !strictContainer(doc) {
		return dst, false
	}
	var elems []canonElem
	it := newElemIter(doc)
	for {
		key, t, val, ok := it.next()
		if !ok {
			break
		}
		if dropID && string(key) == "_id" {
			continue
		}
		elems = append(elems, canonElem{key: key, t: t, val: val})
	}
	if it.bad {
		return dst, false
	}
	slices.SortStableFunc(elems, func(a, b canonElem) int { return bytes.Compare(a.key, b.key) })

	start := len(dst)
	dst = append(dst, 0, 0, 0, 0)
	var ok bool
	for _, e := range elems {
		dst = append(dst, byte(e.t))
		dst = append(dst, e.key...)
		dst = append(dst, 0x00)
		if dst, ok = appendCanonicalValue(dst, e.t, e.val, depth); !ok {
			return dst, false
		}
	}
	return finishContainer(dst, start), true
}

// appendCanonicalArray appends the canonical form of array arr to dst.
func appendCanonicalArray(dst, arr []byte, depth int) ([]byte, bool) {
	if depth > maxFingerprintDepth || !strictContainer(arr) {
		return dst, false
	}
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0)
	it := newElemIter(arr)
	var ok bool
	for i := 0; ; i++ {
		_, t, val, more := it.next()
		if !more {
			break
		}
		dst = append(dst, byte(t))
		dst = strconv.AppendInt(dst, int64(i), 10)
		dst = append(dst, 0x00)
		if dst, ok = appendCanonicalValue(dst, t, val, depth); !ok {
			return dst, false
		}
	}
	if it.bad {
		return dst, false
	}
	return finishContainer(dst, start), true
}

func appendCanonicalValue(dst []byte, t bson.Type, val []byte, depth int) ([]byte, bool) {
	switch t {
	case bson.TypeEmbeddedDocument:
		return appendCanonicalDoc(dst, val, false, depth+1)
	case bson.TypeArray:
		return appendCanonicalArray(dst, val, depth+1)
	case bson.TypeString, bson.TypeJavaScript, bson.TypeSymbol:
		if !wellFormedString(val) {
			return dst, false
		}
	case bson.TypeCodeWithScope:
		// int32 total length, string, scope document.
		if len(val) < 4+5+5 || !wellFormedStringPrefix(val[4:]) {
			return dst, false
		}
		sl := 4 + int(binary.LittleEndian.Uint32(val[4:]))
		if !strictContainer(val[4+sl:]) {
			return dst, false
		}
	case bson.TypeDBPointer:
		if len(val) < 12 || !wellFormedString(val[:len(val)-12]) {
			return dst, false
		}
	}
	return append(dst, val...), true
}

// wellFormedString reports whether b is exactly one BSON string: an int32
// length counting the terminating NUL, the bytes, the NUL.
func wellFormedString(b []byte) bool {
	if len(b) < 5 {
		return false
	}
	n := int64(int32(binary.LittleEndian.Uint32(b)))
	return n >= 1 && n == int64(len(b)-4) && b[len(b)-1] == 0x00
}

// wellFormedStringPrefix reports whether b starts with a BSON string.
func wellFormedStringPrefix(b []byte) bool {
	if len(b) < 5 {
		return false
	}
	n := int64(int32(binary.LittleEndian.Uint32(b)))
	return n >= 1 && 4+n <= int64(len(b)) && b[4+n-1] == 0x00
}

// finishContainer appends the terminating 0x00 of the document or array
// started at dst[start:] and writes its length prefix.
func finishContainer(dst []byte, start int) []byte {
	dst = append(dst, 0x00)
	binary.LittleEndian.PutUint32(dst[start:], uint32(len(dst)-start))
	return dst
}
