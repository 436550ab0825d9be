package jsonschema

import (
	"errors"
	"fmt"
	"regexp"
	"sort"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// The tree built here mirrors, node for node and annotation for annotation,
// the MatchExpression tree the server builds from a $jsonSchema validator
// (src/mongo/db/query/compiler/parsers/matcher/schema/json_schema_parser.cpp),
// because the server's error generator (doc_validation_error.cpp) walks that
// tree and its output depends on the tree's exact shape.

// mode is the server's ErrorAnnotation::Mode.
type mode uint8

const (
	modeGenerate mode = iota
	modeIgnore
	modeIgnoreButDescend
)

// annot is the server's ErrorAnnotation: a tag (operator name or internal
// "_..." name), an annotation object (specifiedAs and friends), the
// title/description of the schema the node came from, and a mode.
type annot struct {
	tag        string
	annotation bson.D
	schemaAnn  bson.D
	mode       mode
}

func genAnn(tag string, annotation bson.D, schema bson.D) *annot {
	a := &annot{tag: tag, annotation: annotation, mode: modeGenerate}
	// Only title and description are kept, title first.
	for _, k := range []string{"title", "description"} {
		for _, e := range schema {
			if e.Key == k {
				a.schemaAnn = append(a.schemaAnn, e)
				break
			}
		}
	}
	return a
}

func ignoreAnn() *annot  { return &annot{mode: modeIgnore} }
func descendAnn() *annot { return &annot{mode: modeIgnoreButDescend} }

type kind uint8

const (
	kAnd kind = iota
	kOr
	kNor
	kNot
	kXor
	kAlwaysTrue
	kAlwaysFalse
	kType
	kCmp
	kRegex
	kStrLen
	kFmod
	kNumItems
	kUnique
	kAllElemFromIndex
	kMatchArrayIndex
	kObjectMatch
	kAllowedProps
	kNumProps
	kExists
	kEq
	kRootDocEq
	kCond
)

// typeSet is the server's MatcherTypeSet.
type typeSet struct {
	allNumbers bool
	types      map[bsonType]bool
}

func (s typeSet) isSingle() bool {
	return (s.allNumbers && len(s.types) == 0) || (!s.allNumbers && len(s.types) == 1)
}

func (s typeSet) has(t bsonType) bool {
	return (s.allNumbers && isNumeric(t)) || s.types[t]
}

func singleType(t bsonType) typeSet { return typeSet{types: map[bsonType]bool{t: true}} }

var numbersSet = typeSet{allNumbers: true}

type pattern struct {
	raw string
	re  *regexp.Regexp
}

// node is one MatchExpression.
type node struct {
	kind     kind
	ann      *annot
	children []*node
	path     string // "" for nodes without a path (top-level)

	types      typeSet        // kType
	cmpOp      string         // kCmp: "$lt", "$lte", "$gt", "$gte"
	rhs        any            // kCmp, kFmod divisor, kEq value, kRootDocEq document
	re         *regexp.Regexp // kRegex
	isMin      bool           // kStrLen, kNumItems, kNumProps
	limit      int64          // kStrLen, kNumItems, kNumProps
	index      int64          // kAllElemFromIndex start index, kMatchArrayIndex index
	properties map[string]bool
	patterns   []pattern // kAllowedProps: children[1+i] is patterns[i]'s filter
}

// placeholder is the server's JSONSchemaParser::kNamePlaceholder: the field
// name under which one array element or one property value is wrapped so
// that a sub-schema parsed with a path can be applied to it.
const placeholder = "i"

// ErrUnsupported is wrapped by the error Compile returns for a validator
// that uses a keyword or query operator this emulator does not implement
// (for example encrypt, $expr, or a query operator such as $gt). The server
// would accept such a validator; the emulator cannot reproduce its errInfo.
var ErrUnsupported = errors.New("jsonschema: unsupported validator feature")

// parser collects unsupported features while parsing so that a caller can
// list them all.
type parser struct {
	unsupported []string
}

func (p *parser) unsupportedf(format string, args ...any) {
	p.unsupported = append(p.unsupported, fmt.Sprintf(format, args...))
}

// schemaKeywords are the keywords the server's $jsonSchema parser knows.
var schemaKeywords = map[string]bool{
	"additionalItems": true, "additionalProperties": true, "allOf": true, "anyOf": true,
	"bsonType": true, "dependencies": true, "description": true, "encrypt": true,
	"encryptMetadata": true, "enum": true, "exclusiveMaximum": true, "exclusiveMinimum": true,
	"items": true, "maxItems": true, "maxLength": true, "maxProperties": true, "maximum": true,
	"minItems": true, "minLength": true, "minProperties": true, "minimum": true,
	"multipleOf": true, "not": true, "oneOf": true, "pattern": true, "patternProperties": true,
	"properties": true, "required": true, "title": true, "type": true, "uniqueItems": true,
}

// serverUnsupported are keywords the server itself rejects.
var serverUnsupported = map[string]bool{
	"$ref": true, "$schema": true, "default": true, "definitions": true, "format": true, "id": true,
}

func schemaErr(format string, args ...any) error {
	return fmt.Errorf("jsonschema: "+format, args...)
}

func isNumberValue(v any) bool { return isNumeric(typeOf(v)) }

func (p *parser) parseTypeSet(keyword string, v any, json bool) (typeSet, error) {
	var aliases []string
	switch x := v.(type) {
	case string:
		aliases = []string{x}
	case bson.A:
		seen := map[string]bool{}
		for _, a := range x {
			s, ok := a.(string)
			if !ok {
				return typeSet{}, schemaErr("$jsonSchema keyword '%s' array elements must be strings", keyword)
			}
			if seen[s] {
				return typeSet{}, schemaErr("$jsonSchema keyword '%s' has duplicate value: %s", keyword, s)
			}
			seen[s] = true
			aliases = append(aliases, s)
		}
	default:
		return typeSet{}, schemaErr("$jsonSchema keyword '%s' must be either a string or an array of strings", keyword)
	}
	ts := typeSet{types: map[bsonType]bool{}}
	for _, a := range aliases {
		if a == "integer" {
			return typeSet{}, schemaErr("$jsonSchema type 'integer' is not currently supported.")
		}
		if a == "number" {
			ts.allNumbers = true
			continue
		}
		var (
			t  bsonType
			ok bool
		)
		if json {
			t, ok = jsonTypeAliases[a]
		} else {
			t, ok = bsonTypeAliases[a]
		}
		if !ok {
			return typeSet{}, schemaErr("unknown type name alias: %s", a)
		}
		ts.types[t] = true
	}
	if !ts.allNumbers && len(ts.types) == 0 {
		return typeSet{}, schemaErr("$jsonSchema keyword '%s' must name at least one type", keyword)
	}
	return ts, nil
}

// makeRestriction mirrors the server's makeRestriction: a keyword that
// applies only to values of one type passes values of other types.
func makeRestriction(restriction typeSet, path string, expr *node, stated *node) *node {
	if stated != nil && stated.types.isSingle() {
		var st bsonType
		if stated.types.allNumbers {
			st = tInt
		} else {
			for t := range stated.types.types {
				st = t
			}
		}
		if restriction.has(st) {
			return expr
		}
		return &node{kind: kAlwaysTrue, ann: ignoreAnn()}
	}
	typeExpr := &node{kind: kType, ann: ignoreAnn(), path: path, types: restriction}
	notExpr := &node{kind: kNot, ann: ignoreAnn(), children: []*node{typeExpr}}
	return &node{kind: kOr, ann: descendAnn(), children: []*node{notExpr, expr}}
}

func objectMatch(path string, child *node) *node {
	return &node{kind: kObjectMatch, ann: descendAnn(), path: path, children: []*node{child}}
}

func wrap(k string, v any) bson.D { return bson.D{{Key: k, Value: v}} }

// parseSchema mirrors the server's _parse. hasPath is false for the
// top-level schema.
func (p *parser) parseSchema(path string, hasPath bool, schema bson.D) (*node, error) {
	kw := map[string]any{}
	for _, e := range schema {
		if !schemaKeywords[e.Key] {
			if serverUnsupported[e.Key] {
				return nil, schemaErr("$jsonSchema keyword '%s' is not currently supported", e.Key)
			}
			return nil, schemaErr("Unknown $jsonSchema keyword: %s", e.Key)
		}
		if _, dup := kw[e.Key]; dup {
			return nil, schemaErr("Duplicate $jsonSchema keyword: %s", e.Key)
		}
		kw[e.Key] = e.Value
	}
	for _, k := range []string{"description", "title"} {
		if v, ok := kw[k]; ok {
			if _, isStr := v.(string); !isStr {
				return nil, schemaErr("$jsonSchema keyword '%s' must be of type string", k)
			}
		}
	}
	typeElem, hasType := kw["type"]
	bsonTypeElem, hasBSONType := kw["bsonType"]
	if hasType && hasBSONType {
		return nil, schemaErr("Cannot specify both $jsonSchema keywords 'type' and 'bsonType'")
	}
	if _, ok := kw["encrypt"]; ok {
		p.unsupportedf("encrypt")
	}
	if _, ok := kw["encryptMetadata"]; ok {
		p.unsupportedf("encryptMetadata")
	}

	var typeExpr *node
	if hasType || hasBSONType {
		name, val, json := "type", typeElem, true
		if hasBSONType {
			name, val, json = "bsonType", bsonTypeElem, false
		}
		ts, err := p.parseTypeSet(name, val, json)
		if err != nil {
			return nil, err
		}
		typeExpr = &node{kind: kType, ann: genAnn(name, wrap(name, val), nil), path: path, types: ts}
	}

	and := &node{kind: kAnd, ann: genAnn("_subschema", bson.D{}, schema)}
	add := func(n *node) { and.children = append(and.children, n) }

	if err := p.scalarKeywords(kw, path, hasPath, typeExpr, add); err != nil {
		return nil, err
	}
	if err := p.arrayKeywords(kw, path, hasPath, typeExpr, add); err != nil {
		return nil, err
	}
	if err := p.objectKeywords(kw, path, hasPath, typeExpr, add); err != nil {
		return nil, err
	}
	if err := p.logicalKeywords(kw, path, hasPath, add); err != nil {
		return nil, err
	}

	if !hasPath && typeExpr != nil && !typeExpr.types.has(tObject) {
		return &node{kind: kAlwaysFalse, ann: genAnn("$jsonSchema", wrap("$jsonSchema", schema), nil)}, nil
	}
	if hasPath && typeExpr != nil {
		add(typeExpr)
	}
	return and, nil
}

func (p *parser) scalarKeywords(kw map[string]any, path string, hasPath bool, typeExpr *node, add func(*node)) error {
	if v, ok := kw["pattern"]; ok {
		s, isStr := v.(string)
		if !isStr {
			return schemaErr("$jsonSchema keyword 'pattern' must be a string")
		}
		ann := genAnn("pattern", wrap("pattern", v), nil)
		re, err := regexp.Compile(s)
		if err != nil {
			p.unsupportedf("pattern %q (not RE2 syntax: %v)", s, err)
		}
		if !hasPath {
			add(&node{kind: kAlwaysTrue, ann: ann})
		} else {
			add(makeRestriction(singleType(tString), path, &node{kind: kRegex, ann: ann, path: path, re: re}, typeExpr))
		}
	}
	for _, k := range []string{"maxLength", "minLength"} {
		if v, ok := kw[k]; ok {
			n, err := p.lengthNode(k, v, path, hasPath, typeExpr, kStrLen, singleType(tString))
			if err != nil {
				return err
			}
			add(n)
		}
	}
	if v, ok := kw["multipleOf"]; ok {
		if !isNumberValue(v) {
			return schemaErr("$jsonSchema keyword 'multipleOf' must be a number")
		}
		if n, _ := toNumber(v); n.nan || compareNumbers(n, number{isInt: true}) <= 0 {
			return schemaErr("$jsonSchema keyword 'multipleOf' must have a positive value")
		}
		ann := genAnn("multipleOf", wrap("multipleOf", v), nil)
		if !hasPath {
			add(&node{kind: kAlwaysTrue, ann: ann})
		} else {
			add(makeRestriction(numbersSet, path, &node{kind: kFmod, ann: ann, path: path, rhs: v}, typeExpr))
		}
	}
	for _, b := range []struct{ kw, excl, op, exclOp string }{
		{"maximum", "exclusiveMaximum", "$lte", "$lt"},
		{"minimum", "exclusiveMinimum", "$gte", "$gt"},
	} {
		v, ok := kw[b.kw]
		if !ok {
			if _, hasExcl := kw[b.excl]; hasExcl {
				return schemaErr("$jsonSchema keyword '%s' must be a present if %s is present", b.kw, b.excl)
			}
			continue
		}
		exclusive := false
		if ev, hasExcl := kw[b.excl]; hasExcl {
			bv, isBool := ev.(bool)
			if !isBool {
				return schemaErr("$jsonSchema keyword '%s' must be a boolean", b.excl)
			}
			exclusive = bv
		}
		if !isNumberValue(v) {
			return schemaErr("$jsonSchema keyword '%s' must be a number", b.kw)
		}
		spec := wrap(b.kw, v)
		op := b.op
		if exclusive {
			spec = append(spec, bson.E{Key: b.excl, Value: true})
			op = b.exclOp
		}
		ann := genAnn(b.kw, spec, nil)
		if !hasPath {
			add(&node{kind: kAlwaysTrue, ann: ann})
			continue
		}
		add(makeRestriction(numbersSet, path, &node{kind: kCmp, ann: ann, path: path, cmpOp: op, rhs: v}, typeExpr))
	}
	return nil
}

func (p *parser) lengthNode(k string, v any, path string, hasPath bool, typeExpr *node, nk kind, restriction typeSet) (*node, error) {
	n, ok := integerArg(v)
	if !ok {
		return nil, schemaErr("$jsonSchema keyword '%s' must be a non-negative integer", k)
	}
	ann := genAnn(k, wrap(k, v), nil)
	if !hasPath {
		return &node{kind: kAlwaysTrue, ann: ann}, nil
	}
	expr := &node{kind: nk, ann: ann, path: path, isMin: k[:3] == "min", limit: n}
	return makeRestriction(restriction, path, expr, typeExpr), nil
}

func (p *parser) arrayKeywords(kw map[string]any, path string, hasPath bool, typeExpr *node, add func(*node)) error {
	for _, k := range []string{"minItems", "maxItems"} {
		if v, ok := kw[k]; ok {
			n, err := p.lengthNode(k, v, path, hasPath, typeExpr, kNumItems, singleType(tArray))
			if err != nil {
				return err
			}
			add(n)
		}
	}
	if v, ok := kw["uniqueItems"]; ok {
		b, isBool := v.(bool)
		if !isBool {
			return schemaErr("$jsonSchema keyword 'uniqueItems' must be a boolean")
		}
		ann := genAnn("uniqueItems", wrap("uniqueItems", v), nil)
		switch {
		case !hasPath || !b:
			add(&node{kind: kAlwaysTrue, ann: ann})
		default:
			add(makeRestriction(singleType(tArray), path, &node{kind: kUnique, ann: ann, path: path}, typeExpr))
		}
	}
	startAdditional, haveStart, err := p.itemsKeyword(kw, path, hasPath, typeExpr, add)
	if err != nil {
		return err
	}
	return p.additionalItemsKeyword(kw, startAdditional, haveStart, path, hasPath, typeExpr, add)
}

// itemsKeyword parses items: a schema every element must match, or an
// array of schemas for the elements at those indexes (then the returned
// start is where additionalItems begins).
func (p *parser) itemsKeyword(kw map[string]any, path string, hasPath bool, typeExpr *node, add func(*node)) (start int64, haveStart bool, err error) {
	v, ok := kw["items"]
	if !ok {
		return 0, false, nil
	}
	switch x := v.(type) {
	case bson.A:
		andItems := &node{kind: kAnd, ann: genAnn("items", wrap("items", v), nil)}
		for i, sub := range x {
			subDoc, isDoc := sub.(bson.D)
			if !isDoc {
				return 0, false, schemaErr("$jsonSchema keyword 'items' requires that each element of the array is an object")
			}
			filter, err := p.parseSchema(placeholder, true, subDoc)
			if err != nil {
				return 0, false, err
			}
			andItems.children = append(andItems.children, &node{
				kind: kMatchArrayIndex, ann: genAnn("", bson.D{}, nil), path: path,
				index: int64(i), children: []*node{filter},
			})
		}
		if !hasPath {
			add(&node{kind: kAlwaysTrue, ann: genAnn("items", wrap("items", v), nil)})
		} else {
			add(makeRestriction(singleType(tArray), path, andItems, typeExpr))
		}
		return int64(len(x)), true, nil
	case bson.D:
		filter, err := p.parseSchema(placeholder, true, x)
		if err != nil {
			return 0, false, err
		}
		ann := genAnn("items", wrap("items", v), nil)
		if !hasPath {
			add(&node{kind: kAlwaysTrue, ann: ann})
		} else {
			all := &node{kind: kAllElemFromIndex, ann: ann, path: path, index: 0, children: []*node{filter}}
			add(makeRestriction(singleType(tArray), path, all, typeExpr))
		}
		return 0, false, nil
	}
	return 0, false, schemaErr("$jsonSchema keyword 'items' must be an array or an object")
}

// additionalItemsKeyword parses additionalItems: the schema of the
// elements past an items array (ignored without one, as by the server).
func (p *parser) additionalItemsKeyword(kw map[string]any, start int64, haveStart bool, path string, hasPath bool, typeExpr *node, add func(*node)) error {
	v, ok := kw["additionalItems"]
	if !ok {
		return nil
	}
	var filter *node
	switch x := v.(type) {
	case bool:
		if x {
			filter = &node{kind: kAlwaysTrue, ann: ignoreAnn()}
		} else {
			filter = &node{kind: kAlwaysFalse, ann: ignoreAnn()}
		}
	case bson.D:
		f, err := p.parseSchema(placeholder, true, x)
		if err != nil {
			return err
		}
		filter = f
	default:
		return schemaErr("$jsonSchema keyword 'additionalItems' must be either an object or a boolean")
	}
	if !haveStart {
		return nil
	}
	ann := genAnn("additionalItems", wrap("additionalItems", v), nil)
	if !hasPath {
		add(&node{kind: kAlwaysTrue, ann: ann})
	} else {
		all := &node{kind: kAllElemFromIndex, ann: ann, path: path, index: start, children: []*node{filter}}
		add(makeRestriction(singleType(tArray), path, all, typeExpr))
	}
	return nil
}

// objectKeywords parses the object keywords of a schema, in the order the
// server checks them (its error for the first bad one is the one
// returned): required, properties, patternProperties and
// additionalProperties, minProperties and maxProperties, dependencies.
func (p *parser) objectKeywords(kw map[string]any, path string, hasPath bool, typeExpr *node, add func(*node)) error {
	o := objectScope{path: path, hasPath: hasPath, typeExpr: typeExpr, add: add}
	required, requiredNames, err := parseRequired(kw)
	if err != nil {
		return err
	}
	propsDoc, err := p.propertiesKeyword(kw, required, o)
	if err != nil {
		return err
	}
	if err := p.allowedPropertiesKeywords(kw, propsDoc, o); err != nil {
		return err
	}
	if len(requiredNames) > 0 {
		sorted := append([]string(nil), requiredNames...)
		sort.Strings(sorted)
		and := &node{kind: kAnd, ann: genAnn("required", wrap("required", kw["required"]), nil)}
		for _, name := range sorted {
			and.children = append(and.children, &node{kind: kExists, ann: genAnn("_propertyExists", bson.D{}, nil), path: name})
		}
		o.emit(and)
	}
	for _, k := range []string{"minProperties", "maxProperties"} {
		v, ok := kw[k]
		if !ok {
			continue
		}
		lim, isInt := integerArg(v)
		if !isInt {
			return schemaErr("$jsonSchema keyword '%s' must be a non-negative integer", k)
		}
		o.emit(&node{kind: kNumProps, ann: genAnn(k, wrap(k, v), nil), isMin: k == "minProperties", limit: lim})
	}
	return p.dependenciesKeyword(kw, o)
}

// objectScope is where an object keyword's node goes: the path it applies
// to and the function collecting the schema's nodes.
type objectScope struct {
	path     string
	hasPath  bool
	typeExpr *node
	add      func(*node)
}

// emit adds n, which matches an object: as is at the top level, else
// restricted to the path's object values.
func (o objectScope) emit(n *node) {
	if !o.hasPath {
		o.add(n)
		return
	}
	o.add(makeRestriction(singleType(tObject), o.path, objectMatch(o.path, n), o.typeExpr))
}

// parseRequired reads the required keyword: the set of names and their
// order.
func parseRequired(kw map[string]any) (map[string]bool, []string, error) {
	required := map[string]bool{}
	v, ok := kw["required"]
	if !ok {
		return required, nil, nil
	}
	arr, isArr := v.(bson.A)
	if !isArr {
		return nil, nil, schemaErr("$jsonSchema keyword 'required' must be an array")
	}
	var names []string
	for _, e := range arr {
		s, isStr := e.(string)
		if !isStr {
			return nil, nil, schemaErr("$jsonSchema keyword 'required' must be an array of strings")
		}
		if required[s] {
			return nil, nil, schemaErr("$jsonSchema keyword 'required' array cannot contain duplicate values")
		}
		required[s] = true
		names = append(names, s)
	}
	if len(names) == 0 {
		return nil, nil, schemaErr("$jsonSchema keyword 'required' cannot be an empty array")
	}
	return required, names, nil
}

// propertiesKeyword parses properties: each property's schema, applied
// when the property exists (always, when it is required). It returns the
// properties document for additionalProperties.
func (p *parser) propertiesKeyword(kw map[string]any, required map[string]bool, o objectScope) (bson.D, error) {
	propsElem, hasProps := kw["properties"]
	if !hasProps {
		return nil, nil
	}
	d, isDoc := propsElem.(bson.D)
	if !isDoc {
		return nil, schemaErr("$jsonSchema keyword 'properties' must be an object")
	}
	and := &node{kind: kAnd, ann: genAnn("properties", bson.D{}, nil)}
	for _, prop := range d {
		sub, isDoc := prop.Value.(bson.D)
		if !isDoc {
			return nil, schemaErr("Nested schema for $jsonSchema property '%s' must be an object", prop.Key)
		}
		nested, err := p.parseSchema(prop.Key, true, sub)
		if err != nil {
			return nil, err
		}
		nested.ann = genAnn("_property", wrap("propertyName", prop.Key), sub)
		if required[prop.Key] {
			and.children = append(and.children, nested)
		} else {
			exists := &node{kind: kExists, ann: ignoreAnn(), path: prop.Key}
			not := &node{kind: kNot, ann: ignoreAnn(), children: []*node{exists}}
			and.children = append(and.children, &node{kind: kOr, ann: descendAnn(), children: []*node{not, nested}})
		}
	}
	o.emit(and)
	return d, nil
}

// allowedPropertiesKeywords parses patternProperties and
// additionalProperties into one node: the properties not named by
// properties nor matched by a pattern must match additionalProperties.
func (p *parser) allowedPropertiesKeywords(kw map[string]any, propsDoc bson.D, o objectScope) error {
	patElem, hasPat := kw["patternProperties"]
	addElem, hasAdd := kw["additionalProperties"]
	if !hasPat && !hasAdd {
		return nil
	}
	n := &node{kind: kAllowedProps, properties: map[string]bool{}}
	for _, prop := range propsDoc {
		n.properties[prop.Key] = true
	}
	otherwise, err := p.additionalProperties(addElem, hasAdd)
	if err != nil {
		return err
	}
	n.children = append(n.children, otherwise)
	if hasPat {
		if err := p.patternProperties(patElem, n); err != nil {
			return err
		}
	}
	if hasAdd {
		n.ann = genAnn("", wrap("additionalProperties", addElem), nil)
	} else {
		n.ann = genAnn("", bson.D{}, nil)
	}
	o.emit(n)
	return nil
}

// additionalProperties returns the filter of the properties no other
// keyword names (everything, when the keyword is absent).
func (p *parser) additionalProperties(addElem any, hasAdd bool) (*node, error) {
	switch x := addElem.(type) {
	case nil:
		if hasAdd {
			return nil, schemaErr("$jsonSchema keyword 'additionalProperties' must be an object or a boolean")
		}
		return &node{kind: kAlwaysTrue, ann: ignoreAnn()}, nil
	case bool:
		if x {
			return &node{kind: kAlwaysTrue, ann: ignoreAnn()}, nil
		}
		return &node{kind: kAlwaysFalse, ann: ignoreAnn()}, nil
	case bson.D:
		return p.parseSchema(placeholder, true, x)
	}
	return nil, schemaErr("$jsonSchema keyword 'additionalProperties' must be an object or a boolean")
}

// patternProperties adds each pattern and its filter to n.
func (p *parser) patternProperties(patElem any, n *node) error {
	pd, isDoc := patElem.(bson.D)
	if !isDoc {
		return schemaErr("$jsonSchema keyword 'patternProperties' must be an object")
	}
	for _, ps := range pd {
		sub, isDoc := ps.Value.(bson.D)
		if !isDoc {
			return schemaErr("$jsonSchema keyword 'patternProperties' has property '%s' which is not an object", ps.Key)
		}
		filter, err := p.parseSchema(placeholder, true, sub)
		if err != nil {
			return err
		}
		re, err := regexp.Compile(ps.Key)
		if err != nil {
			p.unsupportedf("patternProperties regex %q (not RE2 syntax: %v)", ps.Key, err)
		}
		n.patterns = append(n.patterns, pattern{raw: ps.Key, re: re})
		n.children = append(n.children, filter)
	}
	return nil
}

// dependenciesKeyword parses dependencies: for each property, a schema
// (schema dependency) or a list of properties (property dependency) that
// must hold when the property exists.
func (p *parser) dependenciesKeyword(kw map[string]any, o objectScope) error {
	v, ok := kw["dependencies"]
	if !ok {
		return nil
	}
	deps, isDoc := v.(bson.D)
	if !isDoc {
		return schemaErr("$jsonSchema keyword 'dependencies' must be an object")
	}
	and := &node{kind: kAnd, ann: genAnn("dependencies", bson.D{}, deps)}
	for _, dep := range deps {
		var then *node
		var annName string
		switch x := dep.Value.(type) {
		case bson.D:
			nested, err := p.parseSchema(o.path, o.hasPath, x)
			if err != nil {
				return err
			}
			then, annName = nested, "_schemaDependency"
		case bson.A:
			list, err := propertyDependency(dep.Key, x, o)
			if err != nil {
				return err
			}
			then, annName = list, "_propertyDependency"
		default:
			if s := dep.Key; (s == "title" || s == "description") && typeOf(dep.Value) == tString {
				continue
			}
			return schemaErr("property '%s' in $jsonSchema keyword 'dependencies' must be either an object or an array", dep.Key)
		}
		ifClause := ignoreTree(dependencyExists(o.path, o.hasPath, dep.Key))
		and.children = append(and.children, &node{
			kind: kCond, ann: genAnn(annName, wrap(dep.Key, dep.Value), nil),
			children: []*node{ifClause, then, {kind: kAlwaysTrue, ann: ignoreAnn()}},
		})
	}
	o.add(and)
	return nil
}

// propertyDependency returns the node requiring every property of list.
func propertyDependency(key string, list bson.A, o objectScope) (*node, error) {
	if len(list) == 0 {
		return nil, schemaErr("property '%s' in $jsonSchema keyword 'dependencies' cannot be an empty array", key)
	}
	out := &node{kind: kAnd, ann: genAnn("_propertiesExistList", wrap(key, list), nil)}
	seen := map[string]bool{}
	for _, e := range list {
		s, isStr := e.(string)
		if !isStr {
			return nil, schemaErr("array '%s' in $jsonSchema keyword 'dependencies' can only contain strings", key)
		}
		if seen[s] {
			return nil, schemaErr("array '%s' in $jsonSchema keyword 'dependencies' contains duplicate element: %s", key, s)
		}
		seen[s] = true
		out.children = append(out.children, dependencyExists(o.path, o.hasPath, s))
	}
	return out, nil
}

func dependencyExists(path string, hasPath bool, name string) *node {
	exists := &node{kind: kExists, ann: genAnn("_propertyExists", bson.D{}, nil), path: name}
	if !hasPath {
		return exists
	}
	return objectMatch(path, exists)
}

func ignoreTree(n *node) *node {
	n.ann = ignoreAnn()
	for _, c := range n.children {
		ignoreTree(c)
	}
	return n
}

func (p *parser) logicalKeywords(kw map[string]any, path string, hasPath bool, add func(*node)) error {
	for _, b := range []struct {
		kw string
		k  kind
	}{{"allOf", kAnd}, {"anyOf", kOr}, {"oneOf", kXor}} {
		v, ok := kw[b.kw]
		if !ok {
			continue
		}
		arr, isArr := v.(bson.A)
		if !isArr {
			return schemaErr("$jsonSchema keyword '%s' must be an array", b.kw)
		}
		if len(arr) == 0 {
			return schemaErr("$jsonSchema keyword '%s' must be a non-empty array", b.kw)
		}
		list := &node{kind: b.k, ann: genAnn(b.kw, bson.D{}, nil)}
		for _, e := range arr {
			sub, isDoc := e.(bson.D)
			if !isDoc {
				return schemaErr("$jsonSchema keyword '%s' must be an array of objects", b.kw)
			}
			child, err := p.parseSchema(path, hasPath, sub)
			if err != nil {
				return err
			}
			list.children = append(list.children, child)
		}
		add(list)
	}
	if v, ok := kw["not"]; ok {
		sub, isDoc := v.(bson.D)
		if !isDoc {
			return schemaErr("$jsonSchema keyword 'not' must be an object")
		}
		child, err := p.parseSchema(path, hasPath, sub)
		if err != nil {
			return err
		}
		add(&node{kind: kNot, ann: genAnn("not", bson.D{}, nil), children: []*node{child}})
	}
	if v, ok := kw["enum"]; ok {
		arr, isArr := v.(bson.A)
		if !isArr {
			return schemaErr("$jsonSchema keyword 'enum' must be an array")
		}
		if len(arr) == 0 {
			return schemaErr("$jsonSchema keyword 'enum' cannot be an empty array")
		}
		or := &node{kind: kOr, ann: genAnn("enum", wrap("enum", v), nil)}
		for i, e := range arr {
			for _, prev := range arr[:i] {
				if valuesEqual(prev, e) {
					return schemaErr("$jsonSchema keyword 'enum' array cannot contain duplicate values.")
				}
			}
			if !hasPath {
				if d, isDoc := e.(bson.D); isDoc {
					or.children = append(or.children, &node{kind: kRootDocEq, ann: ignoreAnn(), rhs: d})
				}
			} else {
				or.children = append(or.children, &node{kind: kEq, ann: ignoreAnn(), path: path, rhs: e})
			}
		}
		if len(or.children) == 0 {
			add(&node{kind: kAlwaysFalse, ann: genAnn("enum", wrap("enum", v), nil)})
		} else {
			add(or)
		}
	}
	return nil
}

// parseValidator parses a collection validator: {$jsonSchema: {...}}, or
// $and/$or/$nor lists whose clauses are such validators. Any other query
// operator is recorded as unsupported.
func (p *parser) parseValidator(v bson.D) (*node, error) {
	if len(v) == 0 {
		return &node{kind: kAnd, ann: genAnn("$and", bson.D{}, nil)}, nil
	}
	if len(v) > 1 {
		for _, e := range v {
			p.unsupportedf("query operator or field %q in a validator with several top-level clauses", e.Key)
		}
		return nil, nil
	}
	e := v[0]
	switch e.Key {
	case "$jsonSchema":
		schema, ok := e.Value.(bson.D)
		if !ok {
			return nil, schemaErr("$jsonSchema must be an object")
		}
		root, err := p.parseSchema("", false, schema)
		if err != nil || root == nil {
			return root, err
		}
		old := root.ann.annotation
		root.ann = genAnn("$jsonSchema", old, schema)
		return root, nil
	case "$and", "$or", "$nor":
		arr, ok := e.Value.(bson.A)
		if !ok || len(arr) == 0 {
			return nil, schemaErr("%s must be a nonempty array", e.Key)
		}
		k := map[string]kind{"$and": kAnd, "$or": kOr, "$nor": kNor}[e.Key]
		n := &node{kind: k, ann: genAnn(e.Key, bson.D{}, nil)}
		for _, c := range arr {
			clause, isDoc := c.(bson.D)
			if !isDoc {
				return nil, schemaErr("%s argument's entries must be objects", e.Key)
			}
			child, err := p.parseValidator(clause)
			if err != nil {
				return nil, err
			}
			n.children = append(n.children, child)
		}
		return n, nil
	}
	p.unsupportedf("query operator or field %q", e.Key)
	return nil, nil
}
