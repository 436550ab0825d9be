package envelope

import (
	"bytes"
	"encoding/binary"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// The errInfo of a code 121 (DocumentValidationFailure) write error is
// produced, from MongoDB 5.0 on (SERVER-20547), by the server's document
// validation error generator (src/mongo/db/matcher/doc_validation/
// doc_validation_error.cpp). Its usual shape is
//
//	{failingDocumentId: <_id>, details: <node>}
//
// where a node is a document such as
//
//	{operatorName: "$jsonSchema", schemaRulesNotSatisfied: [<node>, ...]}
//	{operatorName: "properties", propertiesNotSatisfied: [{propertyName: "a", details: [<node>, ...]}]}
//	{operatorName: "$and", clausesNotSatisfied: [{index: 0, details: <node>}]}
//	{operatorName: "$lt", specifiedAs: {a: {$lt: 10}}, reason: "comparison failed", consideredValue: 11}
//
// The functions in this file walk errInfo.details generically (every
// document and array below it, in document order) rather than by a fixed
// list of keywords, so shapes the generator adds later are still searched.
// They skip the values of the keys isUserDataKey names, which hold the
// validator's text or the user's document and can contain anything,
// including documents with an operatorName field.

// maxErrInfoDepth bounds how many nested documents and arrays below
// errInfo.details are walked (details itself is depth 1). The server refuses
// to return an errInfo nested deeper than its BSON depth limit (it returns
// {reason: "generated error was too deeply nested", truncated: true}
// instead), so real replies never reach this bound; it only protects against
// malicious or corrupt input.
const maxErrInfoDepth = 200

// unknownKeyword is FailingKeywords' result when errInfo names no operator.
const unknownKeyword = "unknown"

// isUserDataKey reports whether a node field's value is user data or
// validator text, never searched for operators or paths.
func isUserDataKey(key []byte) bool {
	switch string(key) {
	case "specifiedAs", "consideredValue", "consideredValues", "duplicatedValue", "expressionResult":
		return true
	}
	return false
}

// OperatorNames returns every operatorName value found in errInfo.details,
// depth first in document order, duplicates kept: for
//
//	{details: {operatorName: "$and", clausesNotSatisfied: [
//	    {index: 0, details: {operatorName: "$lt", ...}},
//	    {index: 1, details: {operatorName: "$lt", ...}}]}}
//
// it returns ["$and", "$lt", "$lt"].
//
// Every document at any depth below details (through documents and arrays
// alike, whatever their field names) whose operatorName field is a non-empty
// string counts; documents without one (propertiesNotSatisfied entries,
// tuple-form items entries {itemIndex, details}, patternProperties entries
// {propertyName, regexMatched, details}, failingDependencies entries, nested
// {code, codeName, errmsg} statuses of a throwing $expr) are walked through.
// The values of specifiedAs, consideredValue, consideredValues,
// duplicatedValue and expressionResult are never searched (they hold the
// validator's text or the user's data), nor is the additionalItems list of
// an additionalItems node (the user's extra array elements), nor anything
// outside details (failingDocumentId is the user's _id).
//
// The result is a non-nil empty slice when errInfo names no operator: nil or
// empty errInfo (pre-5.0 servers send none), no details, details that is not
// a document or array, and the special errInfos the generator substitutes
// ({reason: "generated error was too deeply nested", truncated: true},
// {failingDocumentId, note: "detailed error was too large"},
// {failingDocumentId, note: "failed to generate document validation error",
// details: {code, codeName, errmsg}}).
//
// OperatorNames never panics. Malformed BSON is read up to the first
// malformed element (documents whose declared length runs past the end of
// the bytes are read as far as they go) and nesting deeper than 200
// documents/arrays below details is not descended into; what was gathered
// until then is returned.
func OperatorNames(errInfo bson.Raw) []string {
	w := errInfoWalker{wantOps: true}
	w.run(errInfo)
	if w.ops == nil {
		return []string{}
	}
	return w.ops
}

// FailingKeywords returns the leaf operatorNames of errInfo.details: the
// operators (as OperatorNames finds them) with no operator anywhere beneath
// them, de-duplicated, in order of first appearance. For a failed
// {$jsonSchema: {properties: {a: {minimum: 2}}, required: ["b"]}} it returns
// ["minimum", "required"]; for $and over two failing $lt clauses, ["$lt"].
// JSON Schema keywords appear without a "$" (minimum, required, enum,
// bsonType, additionalProperties, ...), query operators with one ($lt, $in,
// $expr, ...). Operators the generator treats as leaves are leaves here too:
// a $jsonSchema "not" ({operatorName: "not", reason: "child expression
// matched"}), "enum", $all, a oneOf that matched more than one subschema
// ({operatorName: "oneOf", matchingSchemaIndexes: [...]}), an inverted
// $jsonSchema ({operatorName: "$jsonSchema", reason: "schema matched"}) and a
// throwing $expr (its details is a {code, codeName, errmsg} status, not an
// operator).
//
// This is what an Envelope's failing_keywords holds, so a dead-letter backlog
// can be grouped by root cause.
//
// It returns []string{"unknown"} (never an empty slice) when errInfo names no
// operator: nil or empty errInfo (servers before 5.0 send no errInfo), the
// too-deeply-nested, too-large and failed-to-generate errInfos (see
// OperatorNames), details that is not a document or array. An operator whose
// subtree could not be read to the end (malformed BSON, or deeper than the
// 200-level bound) is not reported as a leaf, since what lies beneath it is
// not known; if that leaves nothing, the result is ["unknown"] too.
func FailingKeywords(errInfo bson.Raw) []string {
	w := errInfoWalker{wantLeaves: true}
	w.run(errInfo)
	if len(w.leaves.list) == 0 {
		return []string{unknownKeyword}
	}
	return w.leaves.list
}

// FailingPaths returns the dotted paths (relative to the validated
// document's root) that errInfo.details names, de-duplicated, in order of
// appearance. The rules, following the shapes of the server's generator:
//
//   - a propertyName (properties' propertiesNotSatisfied[] entries,
//     patternProperties' details[] entries) extends the path for the
//     entry's details: {propertyName: "a", details: [{propertyName: "b",
//     ...}]} is "a.b";
//   - required's missingProperties[], dependencies' failingDependencies[]
//     missingProperties[], the additionalProperties list of an
//     additionalProperties: false node, and the failingProperty of an
//     additionalProperties: <schema> node each add a child of the current
//     path (a required: ["x"] failure inside property "a" gives "a.x", not
//     "a");
//   - items, additionalItems (and tuple-form items entries), allOf, anyOf,
//     oneOf, not and schema-form dependencies keep the current path (no
//     array index is added);
//   - a query operator (an operatorName starting with "$") names the
//     key(s) of its specifiedAs, as written (dotted keys such as "a.b" are
//     kept whole; keys starting with "$", as in $expr, $sampleRate, or the
//     {$jsonSchema: ...} of an always-false schema, name no path);
//   - any other leaf operator names the current path, if any: minimum,
//     type, enum, ... inside property "a" give "a", while root-level
//     keywords (minProperties or enum on the whole document, a root "not",
//     an always-false schema) give nothing.
//
// The same keys as in OperatorNames are never searched. The result is a
// non-nil, possibly empty, slice ([]string{} when errInfo names no path,
// including every case where FailingKeywords is ["unknown"]). A path is never
// "". Like OperatorNames it never panics and returns what was gathered from
// malformed or too deeply nested input.
func FailingPaths(errInfo bson.Raw) []string {
	w := errInfoWalker{wantPaths: true}
	w.run(errInfo)
	if w.paths.list == nil {
		return []string{}
	}
	return w.paths.list
}

// errInfoWalker gathers what OperatorNames, FailingKeywords and FailingPaths
// need in one walk of errInfo.details; each only asks for its own part.
type errInfoWalker struct {
	wantOps, wantLeaves, wantPaths bool
	// wantOpPaths, when set, gathers in opPaths the paths of the nodes
	// whose operatorName it is (EncryptedPaths).
	wantOpPaths string

	ops     []string
	leaves  stringSet
	paths   stringSet
	opPaths stringSet
}

// walkResult is what a walked subtree reports to its parent.
type walkResult struct {
	// hasOp: an operator node is in the subtree (the node itself included).
	hasOp bool
	// added: a path was added by the subtree through missingProperties,
	// additionalProperties, failingProperty or specifiedAs keys (whether or
	// not it was already in the list).
	added bool
	// incomplete: part of the subtree could not be read (malformed BSON or
	// the depth bound), so leaf-ness below it is unknown.
	incomplete bool
}

func (r *walkResult) merge(c walkResult) {
	r.hasOp = r.hasOp || c.hasOp
	r.added = r.added || c.added
	r.incomplete = r.incomplete || c.incomplete
}

func (w *errInfoWalker) run(errInfo bson.Raw) {
	it := newElemIter(errInfo)
	for {
		key, t, val, ok := it.next()
		if !ok {
			return
		}
		if string(key) == "details" {
			// Only the first details counts, like bson.Raw.Lookup.
			w.walkValue(t, val, "", 1)
			return
		}
	}
}

func (w *errInfoWalker) walkValue(t bson.Type, val []byte, path string, depth int) walkResult {
	switch t {
	case bson.TypeEmbeddedDocument:
		return w.walkDoc(val, path, depth)
	case bson.TypeArray:
		return w.walkArray(val, path, depth)
	}
	return walkResult{}
}

func (w *errInfoWalker) walkArray(arr []byte, path string, depth int) walkResult {
	if depth > maxErrInfoDepth {
		return walkResult{incomplete: true}
	}
	var res walkResult
	it := newElemIter(arr)
	for {
		_, t, val, ok := it.next()
		if !ok {
			break
		}
		res.merge(w.walkValue(t, val, path, depth+1))
	}
	res.incomplete = res.incomplete || it.bad
	return res
}

// walkDoc walks one node of the details tree: it reads what the node is
// (nodeHeader), records its operator and the paths it names, walks its
// children, and records the operator as a leaf when no child has one.
func (w *errInfoWalker) walkDoc(doc []byte, path string, depth int) walkResult {
	if depth > maxErrInfoDepth {
		return walkResult{incomplete: true}
	}
	h := readNodeHeader(doc)
	var res walkResult
	if h.op != "" {
		res.hasOp = true
		if w.wantOps {
			w.ops = append(w.ops, h.op)
		}
		if w.wantOpPaths != "" && h.op == w.wantOpPaths && path != "" {
			w.opPaths.add(path)
		}
	}
	childPath := w.nodePaths(h, path, &res)
	below := w.walkChildren(doc, h.op, path, childPath, depth)
	res.added = res.added || below.added
	res.incomplete = below.incomplete
	if h.op != "" && !below.hasOp && !below.incomplete {
		// A leaf operator.
		if w.wantLeaves {
			w.leaves.add(h.op)
		}
		if w.wantPaths && !res.added && path != "" {
			w.paths.add(path)
		}
	}
	res.hasOp = res.hasOp || below.hasOp
	return res
}

// nodeHeader is what a details node says about itself: operatorName,
// propertyName, failingProperty and specifiedAs (the first occurrence of
// each key counts).
type nodeHeader struct {
	op, propName, failingProp string
	hasProp, hasFailing       bool
	spec                      []byte
	specIsDoc                 bool
}

func readNodeHeader(doc []byte) nodeHeader {
	var h nodeHeader
	var seenOp, seenProp, seenFail, seenSp bool
	it := newElemIter(doc)
	for {
		key, t, val, ok := it.next()
		if !ok {
			return h
		}
		switch string(key) {
		case "operatorName":
			if !seenOp {
				seenOp = true
				if s, ok := stringValue(t, val); ok && s != "" {
					h.op = s
				}
			}
		case "propertyName":
			if !seenProp {
				seenProp = true
				h.propName, h.hasProp = stringValue(t, val)
			}
		case "failingProperty":
			if !seenFail {
				seenFail = true
				h.failingProp, h.hasFailing = stringValue(t, val)
			}
		case "specifiedAs":
			if !seenSp {
				seenSp = true
				h.spec, h.specIsDoc = val, t == bson.TypeEmbeddedDocument
			}
		}
	}
}

// nodePaths records the paths a node names itself (failingProperty, and
// the fields of a query operator's specifiedAs) and returns the path of
// its children.
func (w *errInfoWalker) nodePaths(h nodeHeader, path string, res *walkResult) string {
	childPath := path
	tracking := w.wantPaths || w.wantOpPaths != ""
	if h.hasProp && tracking {
		childPath = joinPath(path, h.propName)
	}
	if h.hasFailing {
		res.added = true
		if tracking {
			childPath = joinPath(childPath, h.failingProp)
		}
		if w.wantPaths {
			w.paths.add(childPath)
		}
	}
	if h.op != "" && h.op[0] == '$' && h.specIsDoc {
		// A query operator: its specifiedAs is {<path>: <expression>}.
		sit := newElemIter(h.spec)
		for {
			key, _, _, ok := sit.next()
			if !ok {
				break
			}
			if len(key) == 0 || key[0] == '$' {
				continue
			}
			res.added = true
			if w.wantPaths {
				w.paths.add(validString(key))
			}
		}
	}
	return childPath
}

// walkChildren walks a node's children in document order, skipping the
// fields that hold the user's data.
func (w *errInfoWalker) walkChildren(doc []byte, op, path, childPath string, depth int) walkResult {
	var below walkResult
	it := newElemIter(doc)
	for {
		key, t, val, ok := it.next()
		if !ok {
			break
		}
		if isUserDataKey(key) {
			continue
		}
		switch string(key) {
		case "missingProperties", "additionalProperties":
			if t == bson.TypeArray {
				below.merge(w.childList(val, path, depth+1))
				continue
			}
		case "additionalItems":
			if op == "additionalItems" {
				// {operatorName: "additionalItems", additionalItems: [...]}
				// lists the user's extra array elements.
				continue
			}
		}
		below.merge(w.walkValue(t, val, childPath, depth+1))
	}
	below.incomplete = below.incomplete || it.bad
	return below
}

// childList handles a missingProperties or additionalProperties array: each
// string element names a child of path.
func (w *errInfoWalker) childList(arr []byte, path string, depth int) walkResult {
	if depth > maxErrInfoDepth {
		return walkResult{incomplete: true}
	}
	var res walkResult
	it := newElemIter(arr)
	for {
		_, t, val, ok := it.next()
		if !ok {
			break
		}
		if s, ok := stringValue(t, val); ok {
			res.added = true
			if w.wantPaths {
				w.paths.add(joinPath(path, s))
			}
			continue
		}
		res.merge(w.walkValue(t, val, path, depth+1))
	}
	res.incomplete = res.incomplete || it.bad
	return res
}

func joinPath(path, name string) string {
	if path == "" {
		return name
	}
	if name == "" {
		return path + "."
	}
	return path + "." + name
}

// stringSet is an insertion-ordered set of strings. Lists are short, so a
// map is only built once one grows past a few entries.
type stringSet struct {
	list []string
	m    map[string]struct{}
}

const stringSetMapThreshold = 16

func (s *stringSet) add(v string) {
	if v == "" {
		return
	}
	if s.m != nil {
		if _, ok := s.m[v]; ok {
			return
		}
		s.m[v] = struct{}{}
		s.list = append(s.list, v)
		return
	}
	for _, x := range s.list {
		if x == v {
			return
		}
	}
	s.list = append(s.list, v)
	if len(s.list) > stringSetMapThreshold {
		s.m = make(map[string]struct{}, 2*len(s.list))
		for _, x := range s.list {
			s.m[x] = struct{}{}
		}
	}
}

// stringValue returns the value of a BSON string element (type 0x02), or
// false when t is another type or the bytes are malformed. Invalid UTF-8 is
// replaced by U+FFFD so results can be stored again as BSON strings.
func stringValue(t bson.Type, val []byte) (string, bool) {
	if t != bson.TypeString || len(val) < 5 {
		return "", false
	}
	n := int64(int32(binary.LittleEndian.Uint32(val)))
	if n < 1 || n != int64(len(val)-4) || val[len(val)-1] != 0 {
		return "", false
	}
	return validString(val[4 : len(val)-1]), true
}

func validString(b []byte) string {
	return strings.ToValidUTF8(string(b), "\uFFFD")
}

// elemIter reads the elements of one BSON document or array (the driver's
// bson.Raw.Elements allocates, validates every subdocument again at every
// level, and returns nothing at all for a malformed document).
//
// It is lenient: a document whose declared length runs past the end of the
// bytes is read as far as the bytes go, and an embedded document or array
// element cut short the same way is returned with the bytes there are (its
// own reader then stops early). Reading stops at the first element that
// cannot be read; bad is then true.
type elemIter struct {
	rest []byte
	bad  bool
	done bool
}

func newElemIter(b []byte) elemIter {
	if len(b) < 5 {
		return elemIter{bad: len(b) != 0, done: true}
	}
	n := int64(int32(binary.LittleEndian.Uint32(b)))
	switch {
	case n < 5:
		return elemIter{bad: true, done: true}
	case n > int64(len(b)):
		return elemIter{rest: b[4:], bad: true}
	}
	return elemIter{rest: b[4:n]}
}

// next returns the next element's key, type and value bytes.
func (it *elemIter) next() (key []byte, t bson.Type, val []byte, ok bool) {
	if it.done {
		return nil, 0, nil, false
	}
	r := it.rest
	if len(r) == 0 {
		// No terminating 0x00: cut short.
		it.bad, it.done = true, true
		return nil, 0, nil, false
	}
	if r[0] == 0x00 {
		if len(r) != 1 {
			it.bad = true // bytes after the terminator, inside the length
		}
		it.done = true
		return nil, 0, nil, false
	}
	t = bson.Type(r[0])
	end := bytes.IndexByte(r[1:], 0x00)
	if end < 0 {
		it.bad, it.done = true, true
		return nil, 0, nil, false
	}
	key = r[1 : 1+end]
	body := r[2+end:]
	n, ok := valueLength(body, t)
	if !ok {
		it.bad, it.done = true, true
		return nil, 0, nil, false
	}
	if n > int64(len(body)) {
		if t != bson.TypeEmbeddedDocument && t != bson.TypeArray {
			it.bad, it.done = true, true
			return nil, 0, nil, false
		}
		// A container cut short: hand over what there is.
		it.bad, it.done = true, true
		return key, t, body, true
	}
	val = body[:n]
	it.rest = body[n:]
	return key, t, val, true
}

// valueLength returns the length in bytes of a value of type t at the start
// of src, as its type and length prefix say (it may exceed len(src)), or
// false for an unknown type, a missing length prefix or an impossible
// length.
func valueLength(src []byte, t bson.Type) (int64, bool) {
	if n, ok := fixedLength(t); ok {
		return n, true
	}
	if t == bson.TypeRegex {
		return regexLength(src)
	}
	return prefixedLength(src, t)
}

// fixedLength returns the length of a value of a type of fixed size.
func fixedLength(t bson.Type) (int64, bool) {
	switch t {
	case bson.TypeDouble, bson.TypeDateTime, bson.TypeInt64, bson.TypeTimestamp:
		return 8, true
	case bson.TypeInt32:
		return 4, true
	case bson.TypeDecimal128:
		return 16, true
	case bson.TypeObjectID:
		return 12, true
	case bson.TypeBoolean:
		return 1, true
	case bson.TypeUndefined, bson.TypeNull, bson.TypeMinKey, bson.TypeMaxKey:
		return 0, true
	}
	return 0, false
}

// prefixedLength returns the length of a value that starts with an int32
// length: a string (the length counts its NUL), a document or an array
// (the length counts itself), a code-with-scope value, binary data (the
// length of the data, after which the subtype byte), a DBPointer (a
// string, then 12 bytes).
func prefixedLength(src []byte, t bson.Type) (int64, bool) {
	if len(src) < 4 {
		return 0, false
	}
	n := int64(int32(binary.LittleEndian.Uint32(src)))
	var size, least int64 // the value's size, and the least n can be
	switch t {
	case bson.TypeString, bson.TypeJavaScript, bson.TypeSymbol:
		size, least = 4+n, 1
	case bson.TypeEmbeddedDocument, bson.TypeArray:
		size, least = n, 5
	case bson.TypeCodeWithScope:
		size, least = n, 14
	case bson.TypeBinary:
		size, least = 4+1+n, 0
	case bson.TypeDBPointer:
		size, least = 4+n+12, 1
	default:
		return 0, false
	}
	if n < least {
		return 0, false
	}
	return size, true
}

// regexLength returns the length of a regular expression: two cstrings,
// the pattern and the options.
func regexLength(src []byte) (int64, bool) {
	i := bytes.IndexByte(src, 0x00)
	if i < 0 {
		return 0, false
	}
	j := bytes.IndexByte(src[i+1:], 0x00)
	if j < 0 {
		return 0, false
	}
	return int64(i + 1 + j + 1), true
}
