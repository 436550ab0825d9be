package jsonschema

import (
	"go.mongodb.org/mongo-driver/v2/bson"
)

// This file ports the server's document validation error generator
// (src/mongo/db/matcher/doc_validation/doc_validation_error.cpp) for the
// expressions a $jsonSchema validator produces: a pre/in/post visitor over
// the match expression tree with a stack of frames.

type runtimeState uint8

const (
	stError runtimeState = iota
	stNoError
	stNeedChildrenInfo
	stIgnoreChildren
)

type frameParams struct {
	doc      bson.D
	inverted bool
}

type frame struct {
	obj        bson.D
	arr        bson.A
	childIndex int
	state      runtimeState
	params     frameParams
}

type errKind uint8

const (
	errNone errKind = iota
	errString
	errObj
	errArr
)

type completeErr struct {
	kind errKind
	s    string
	d    bson.D
	a    bson.A
}

type genCtx struct {
	root       bson.D
	frames     []*frame
	latest     completeErr
	childInput *frameParams
}

func (c *genCtx) top() *frame { return c.frames[len(c.frames)-1] }

func (c *genCtx) push(state runtimeState, p frameParams) {
	c.frames = append(c.frames, &frame{obj: bson.D{}, arr: bson.A{}, state: state, params: p})
}

func (c *genCtx) pushNewFrame(n *node) {
	c.latest = completeErr{}
	if len(c.frames) == 0 {
		c.push(stError, frameParams{doc: c.root})
		return
	}
	parent := c.top().state
	params := c.top().params
	if c.childInput != nil {
		params = *c.childInput
		c.childInput = nil
	}
	if parent == stNoError || parent == stIgnoreChildren || n.ann.mode == modeIgnore {
		c.push(stNoError, params)
		return
	}
	if parent == stNeedChildrenInfo {
		var gen bool
		if matches(n, params.doc) {
			gen = params.inverted
		} else {
			gen = !params.inverted
		}
		if gen {
			c.push(stError, params)
		} else {
			c.push(stNoError, params)
		}
		return
	}
	c.push(stError, params)
}

func (c *genCtx) pop() { c.frames = c.frames[:len(c.frames)-1] }

func (c *genCtx) setState(s runtimeState) {
	if t := c.top(); t.state != stNoError {
		t.state = s
	}
}

func (c *genCtx) setChildInput(doc bson.D) {
	c.childInput = &frameParams{doc: doc, inverted: c.top().params.inverted}
}

func (c *genCtx) currentDoc() bson.D {
	if len(c.frames) == 0 {
		return c.root
	}
	return c.top().params.doc
}

func (c *genCtx) inverted() bool { return c.top().params.inverted }

func (c *genCtx) flip() { c.top().params.inverted = !c.top().params.inverted }

func (c *genCtx) shouldGenerate(n *node) bool {
	return n.ann.mode == modeGenerate && c.top().state != stNoError
}

func producesArray(n *node) bool {
	return n.ann.tag == "_subschema" || n.ann.tag == "_propertiesExistList"
}

func (c *genCtx) finish(n *node) {
	if c.shouldGenerate(n) {
		if producesArray(n) {
			c.latest = completeErr{kind: errArr, a: c.top().arr}
		} else {
			c.latest = completeErr{kind: errObj, d: c.top().obj}
		}
	}
	c.pop()
}

func (c *genCtx) haveLatest() bool { return c.latest.kind != errNone }

// appendLatestToObj appends the latest error under "details".
func (c *genCtx) appendLatestToObj(obj *bson.D) {
	switch c.latest.kind {
	case errObj:
		*obj = append(*obj, bson.E{Key: "details", Value: c.latest.d})
	case errArr:
		*obj = append(*obj, bson.E{Key: "details", Value: c.latest.a})
	}
}

// appendLatestToArr appends the latest error to an array of details; an
// array error (several keyword errors of one schema) is flattened into it.
func (c *genCtx) appendLatestToArr(arr *bson.A) {
	switch c.latest.kind {
	case errObj:
		*arr = append(*arr, c.latest.d)
	case errString:
		*arr = append(*arr, c.latest.s)
	case errArr:
		*arr = append(*arr, c.latest.a...)
	}
}

func (c *genCtx) objAppend(k string, v any) {
	t := c.top()
	t.obj = append(t.obj, bson.E{Key: k, Value: v})
}

func (c *genCtx) hasReason() bool {
	for _, e := range c.top().obj {
		if e.Key == "reason" {
			return true
		}
	}
	return false
}

func (c *genCtx) appendReason(normal, inverted string) {
	if c.hasReason() {
		return
	}
	if c.inverted() {
		c.objAppend("reason", inverted)
	} else {
		c.objAppend("reason", normal)
	}
}

func (c *genCtx) appendOperatorName(n *node) {
	if n.ann.tag != "" {
		c.objAppend("operatorName", n.ann.tag)
	}
}

func (c *genCtx) appendErrorDetails(n *node) {
	c.appendOperatorName(n)
	c.objAppend("specifiedAs", n.ann.annotation)
}

func (c *genCtx) appendSchemaAnnotations(n *node, obj *bson.D) {
	*obj = append(*obj, n.ann.schemaAnn...)
}

// valueForKeyword mirrors getValueForKeywordExpressionIfShouldGenerateError:
// a JSON Schema keyword explains a failure only when its value is present
// and of the type the keyword applies to.
func (c *genCtx) valueForKeyword(n *node, expected ...bsonType) (any, bool) {
	if !c.shouldGenerate(n) || c.inverted() {
		return nil, false
	}
	v, ok := lookup(c.currentDoc(), n.path)
	if !ok {
		return nil, false
	}
	t := typeOf(v)
	for _, e := range expected {
		if e == t {
			return v, true
		}
	}
	return nil, false
}

var numericTypes = []bsonType{tLong, tDouble, tDecimal, tInt}

var orderedClauses = map[string]bool{"$and": true, "$or": true, "$nor": true, "allOf": true, "anyOf": true, "oneOf": true}

func (c *genCtx) finishLogicalChild(n *node) {
	t := c.top()
	if c.shouldGenerate(n) && t.state != stIgnoreChildren && c.haveLatest() {
		if orderedClauses[n.ann.tag] {
			sub := bson.D{{Key: "index", Value: int32(t.childIndex)}}
			c.appendSchemaAnnotations(n.children[t.childIndex], &sub)
			c.appendLatestToObj(&sub)
			t.arr = append(t.arr, sub)
		} else {
			c.appendLatestToArr(&t.arr)
		}
	}
	t.childIndex++
}

func (c *genCtx) walk(n *node) {
	c.pre(n)
	for i, ch := range n.children {
		c.walk(ch)
		if i < len(n.children)-1 {
			c.in(n)
		}
	}
	c.post(n)
}

func (c *genCtx) preVisitTreeOperator(n *node) {
	c.pushNewFrame(n)
	if c.shouldGenerate(n) {
		tag := n.ann.tag
		if tag == "" || tag[0] != '_' {
			c.appendOperatorName(n)
		}
		if tag == "required" {
			c.objAppend("specifiedAs", n.ann.annotation)
		} else {
			t := c.top()
			t.obj = append(t.obj, n.ann.annotation...)
		}
	}
}

func (c *genCtx) generatePathError(n *node, normal, inverted string, expected []bsonType) {
	c.pushNewFrame(n)
	if !c.shouldGenerate(n) {
		return
	}
	if _, ok := c.valueForKeyword(n, expected...); !ok {
		c.setState(stNoError)
		return
	}
	c.appendErrorDetails(n)
	v, ok := lookup(c.currentDoc(), n.path)
	if !ok {
		c.objAppend("reason", "field was missing")
	}
	c.appendReason(normal, inverted)
	if ok {
		c.objAppend("consideredValue", v)
	}
}

// pre is called before a node's children are visited: it opens the
// node's frame of error details (see the server's
// doc_validation_error.cpp, ValidationErrorPreVisitor).
func (c *genCtx) pre(n *node) {
	switch n.kind {
	case kAnd, kOr, kNor, kNot, kXor:
		c.preLogical(n)
	case kAlwaysTrue, kAlwaysFalse, kType, kCmp, kRegex, kStrLen, kFmod, kNumItems, kUnique, kNumProps:
		c.preLeaf(n)
	default:
		c.preStructure(n)
	}
}

// preLogical handles the logical operators: $and, $or, $nor, $not, $_internalSchemaXor.
func (c *genCtx) preLogical(n *node) {
	switch n.kind {
	case kAnd:
		if n.ann.tag == "items" {
			c.preItemsSchemaArray(n)
			return
		}
		c.preVisitTreeOperator(n)
		if !c.inverted() {
			c.setState(stNeedChildrenInfo)
		}
		if n.ann.tag == "$jsonSchema" && c.inverted() {
			c.setState(stIgnoreChildren)
			c.appendReason("", "schema matched")
		}
	case kOr:
		if n.ann.tag == "enum" {
			c.preEnum(n)
			return
		}
		c.preVisitTreeOperator(n)
		if c.inverted() {
			c.setState(stNeedChildrenInfo)
		}
	case kNor:
		c.preVisitTreeOperator(n)
		if !c.inverted() {
			c.setState(stNeedChildrenInfo)
		}
		c.flip()
	case kNot:
		c.preVisitTreeOperator(n)
		c.flip()
		if c.shouldGenerate(n) && n.ann.tag == "not" {
			c.appendReason("", "child expression matched")
			c.setState(stIgnoreChildren)
		}
	case kXor:
		c.preVisitTreeOperator(n)
		c.setState(stNeedChildrenInfo)
		if c.shouldGenerate(n) {
			doc := c.currentDoc()
			matching := bson.A{}
			for i, ch := range n.children {
				if matches(ch, doc) {
					matching = append(matching, int32(i))
				}
			}
			if len(matching) > 0 {
				c.flip()
				c.setState(stIgnoreChildren)
				c.appendReason("", "more than one subschema matched")
				c.objAppend("matchingSchemaIndexes", matching)
			}
		}
	}
}

// preLeaf handles the nodes that test a value and report it.
func (c *genCtx) preLeaf(n *node) {
	switch n.kind {
	case kAlwaysTrue, kAlwaysFalse:
		c.pushNewFrame(n)
		if c.shouldGenerate(n) {
			c.appendErrorDetails(n)
			c.appendReason("expression always evaluates to false", "expression always evaluates to true")
		}
	case kType:
		c.pushNewFrame(n)
		if !c.shouldGenerate(n) {
			return
		}
		v, ok := lookup(c.currentDoc(), n.path)
		if !ok {
			c.setState(stNoError)
			return
		}
		c.appendErrorDetails(n)
		c.appendReason("type did not match", "type did match")
		c.objAppend("consideredValue", v)
		c.objAppend("consideredType", typeOf(v).String())
	case kCmp:
		c.generatePathError(n, "comparison failed", "comparison succeeded", numericTypes)
	case kRegex:
		c.generatePathError(n, "regular expression did not match", "regular expression did match",
			[]bsonType{tString, tSymbol, tRegex})
	case kStrLen:
		c.generatePathError(n, "specified string length was not satisfied", "specified string length was satisfied",
			[]bsonType{tString})
	case kFmod:
		c.generatePathError(n, "considered value is not a multiple of the specified value",
			"considered value is a multiple of the specified value", numericTypes)
	case kNumItems:
		c.pushNewFrame(n)
		if v, ok := c.valueForKeyword(n, tArray); ok {
			c.appendErrorDetails(n)
			c.appendReason("array did not match specified length", "")
			c.objAppend("consideredValue", v)
			c.objAppend("numberOfItems", int32(len(v.(bson.A))))
		} else {
			c.setState(stNoError)
		}
	case kUnique:
		c.pushNewFrame(n)
		if v, ok := c.valueForKeyword(n, tArray); ok {
			c.appendErrorDetails(n)
			c.appendReason("found a duplicate item", "")
			c.objAppend("consideredValue", v)
			if dup, found := firstDuplicate(v.(bson.A)); found {
				c.objAppend("duplicatedValue", dup)
			}
		} else {
			c.setState(stNoError)
		}
	case kNumProps:
		c.pushNewFrame(n)
		if c.shouldGenerate(n) {
			c.appendErrorDetails(n)
			c.appendReason("specified number of properties was not satisfied", "")
			c.objAppend("numberOfProperties", int32(len(c.currentDoc())))
		}
	}
}

// preStructure handles the nodes that choose what their children see:
// objects, array elements, conditions, allowed properties.
func (c *genCtx) preStructure(n *node) {
	switch n.kind {
	case kExists:
		c.pushNewFrame(n)
	case kEq, kRootDocEq:
		// These nodes take no part in error generation.
	case kCond:
		c.pushNewFrame(n)
		if c.shouldGenerate(n) && !matches(n.children[0], c.currentDoc()) {
			c.setState(stNoError)
		}
	case kObjectMatch:
		c.pushNewFrame(n)
		if c.top().state != stNoError {
			v, _ := lookup(c.currentDoc(), n.path)
			if d, ok := v.(bson.D); ok {
				c.setChildInput(d)
			} else {
				c.setState(stNoError)
			}
		}
	case kMatchArrayIndex:
		c.pushNewFrame(n)
		if c.shouldGenerate(n) {
			v, _ := lookup(c.currentDoc(), n.path)
			a, _ := v.(bson.A)
			if n.index >= int64(len(a)) {
				c.setState(stNoError)
				return
			}
			c.objAppend("itemIndex", n.index)
			c.setChildInput(bson.D{{Key: placeholder, Value: a[n.index]}})
		}
	case kAllElemFromIndex:
		c.preAllElemFromIndex(n)
	case kAllowedProps:
		c.preAllowedProperties(n)
	}
}

func isAdditionalItemsFalse(n *node) bool {
	if n.ann.tag != "additionalItems" || len(n.ann.annotation) == 0 {
		return false
	}
	_, isBool := n.ann.annotation[0].Value.(bool)
	return isBool
}

func (c *genCtx) preAllElemFromIndex(n *node) {
	c.pushNewFrame(n)
	v, ok := c.valueForKeyword(n, tArray)
	if !ok {
		c.setState(stNoError)
		return
	}
	a := v.(bson.A)
	if isAdditionalItemsFalse(n) {
		c.appendErrorDetails(n)
		c.appendReason("found additional items", "")
		extra := bson.A{}
		if int(n.index) < len(a) {
			extra = append(extra, a[n.index:]...)
		}
		c.objAppend("additionalItems", extra)
		return
	}
	reason := "At least one item did not match the sub-schema"
	if n.ann.tag == "additionalItems" {
		reason = "At least one additional item did not match the sub-schema"
	}
	c.appendOperatorName(n)
	c.appendSchemaAnnotations(n.children[0], &c.top().obj)
	c.appendReason(reason, "")
	i, found := firstMismatch(n, a)
	if !found {
		c.setState(stNoError)
		return
	}
	c.objAppend("itemIndex", int32(i))
	c.setChildInput(bson.D{{Key: placeholder, Value: a[i]}})
}

func (c *genCtx) preItemsSchemaArray(n *node) {
	c.pushNewFrame(n)
	if len(n.children) == 0 {
		return
	}
	if _, ok := c.valueForKeyword(n.children[0], tArray); ok {
		c.appendOperatorName(n)
		c.setState(stNeedChildrenInfo)
	} else {
		c.setState(stNoError)
	}
}

func (c *genCtx) preEnum(n *node) {
	c.pushNewFrame(n)
	if !c.shouldGenerate(n) {
		return
	}
	c.appendErrorDetails(n)
	var (
		v  any
		ok bool
	)
	if len(n.children) > 0 && n.children[0].kind == kRootDocEq {
		v, ok = c.root, true
	} else if len(n.children) > 0 {
		v, ok = lookup(c.currentDoc(), n.children[0].path)
	}
	if !ok {
		c.setState(stNoError)
		return
	}
	c.appendReason("value was not found in enum", "value was found in enum")
	c.objAppend("consideredValue", v)
}

func (c *genCtx) preAllowedProperties(n *node) {
	c.pushNewFrame(n)
	c.setState(stIgnoreChildren)
	if !c.shouldGenerate(n) {
		return
	}
	doc := c.currentDoc()
	additional := additionalProperties(n, doc)
	var apValue any
	if len(n.ann.annotation) > 0 {
		apValue = n.ann.annotation[0].Value
	}
	switch apValue.(type) {
	case bool:
		if !matches(n.children[0], doc) && len(additional) > 0 {
			c.objAppend("operatorName", "additionalProperties")
			c.objAppend("specifiedAs", bson.D{{Key: "additionalProperties", Value: false}})
			c.objAppend("additionalProperties", additional)
		}
	case bson.D:
		if v, ok := firstFailingAdditional(n, additional, doc); ok {
			c.setState(stError)
			c.setChildInput(bson.D{{Key: placeholder, Value: v}})
		}
	}
}

func firstFailingAdditional(n *node, additional bson.A, doc bson.D) (any, bool) {
	for _, name := range additional {
		var v any
		for _, e := range doc {
			if e.Key == name {
				v = e.Value
				break
			}
		}
		if !matchesElement(n.children[0], v) {
			return v, true
		}
	}
	return nil, false
}

func (c *genCtx) findFailingProperty(n *node, i int) (bson.E, bool) {
	p := n.patterns[i]
	for _, e := range c.currentDoc() {
		if p.re != nil && p.re.MatchString(e.Key) && !matchesElement(n.children[1+i], e.Value) {
			return e, true
		}
	}
	return bson.E{}, false
}

func (c *genCtx) generateAllowedPropertiesSchemaError(n *node) {
	idx := c.top().childIndex
	if !c.haveLatest() {
		return
	}
	if idx == 0 {
		if len(n.ann.annotation) == 0 {
			return
		}
		if _, isDoc := n.ann.annotation[0].Value.(bson.D); !isDoc {
			return
		}
		doc := c.currentDoc()
		additional := additionalProperties(n, doc)
		var failing string
		found := false
		for _, name := range additional {
			for _, e := range doc {
				if e.Key == name && !matchesElement(n.children[0], e.Value) {
					failing, found = e.Key, true
					break
				}
			}
			if found {
				break
			}
		}
		if !found {
			return
		}
		c.objAppend("operatorName", "additionalProperties")
		c.appendSchemaAnnotations(n.children[0], &c.top().obj)
		c.objAppend("reason", "at least one additional property did not match the subschema")
		c.objAppend("failingProperty", failing)
		t := c.top()
		c.appendLatestToObj(&t.obj)
		return
	}
	pi := idx - 1
	e, found := c.findFailingProperty(n, pi)
	if c.shouldGenerate(n) && found {
		pb := bson.D{{Key: "propertyName", Value: e.Key}}
		c.appendSchemaAnnotations(n.children[1+pi], &pb)
		pb = append(pb, bson.E{Key: "regexMatched", Value: n.patterns[pi].raw})
		c.appendLatestToObj(&pb)
		t := c.top()
		t.arr = append(t.arr, pb)
	}
}

func (c *genCtx) in(n *node) {
	switch n.kind {
	case kAnd, kOr, kNor:
		c.finishLogicalChild(n)
	case kXor:
		if !c.inverted() {
			c.finishLogicalChild(n)
		}
	case kAllowedProps:
		if c.shouldGenerate(n) {
			c.generateAllowedPropertiesSchemaError(n)
			c.setState(stIgnoreChildren)
			idx := c.top().childIndex
			if idx < len(n.patterns) {
				if e, found := c.findFailingProperty(n, idx); found {
					c.setState(stError)
					c.setChildInput(bson.D{{Key: placeholder, Value: e.Value}})
				}
			}
		}
		c.top().childIndex++
	case kCond:
		if c.shouldGenerate(n) && c.top().childIndex == 1 && c.haveLatest() {
			c.objAppend("conditionalProperty", n.ann.annotation[0].Key)
			switch n.ann.tag {
			case "_schemaDependency":
				t := c.top()
				c.appendLatestToObj(&t.obj)
			case "_propertyDependency":
				if c.latest.kind == errArr {
					c.objAppend("missingProperties", c.latest.a)
				}
			}
		}
		c.top().childIndex++
	}
}

var andDetails = map[string][2]string{
	"$and":                 {"clausesNotSatisfied", "clausesSatisfied"},
	"allOf":                {"schemasNotSatisfied", ""},
	"properties":           {"propertiesNotSatisfied", ""},
	"$jsonSchema":          {"schemaRulesNotSatisfied", ""},
	"_subschema":           {"", ""},
	"_propertiesExistList": {"", ""},
	"items":                {"details", ""},
	"dependencies":         {"failingDependencies", ""},
	"required":             {"missingProperties", ""},
	"_property":            {"details", ""},
	"":                     {"details", ""},
}

var orDetails = map[string][2]string{
	"$or":   {"clausesNotSatisfied", "clausesSatisfied"},
	"anyOf": {"schemasNotSatisfied", ""},
}

func (c *genCtx) postVisitTreeOperator(n *node, details string) {
	t := c.top()
	c.appendSchemaAnnotations(n, &t.obj)
	c.finishLogicalChild(n)
	tag := n.ann.tag
	if c.shouldGenerate(n) && (tag == "properties" || tag == "_property") && len(t.arr) == 0 {
		c.setState(stNoError)
	}
	if c.shouldGenerate(n) && !producesArray(n) {
		t.obj = append(t.obj, bson.E{Key: details, Value: t.arr})
	}
	c.finish(n)
}

func pick(pair [2]string, inverted bool) string {
	if inverted {
		return pair[1]
	}
	return pair[0]
}

func (c *genCtx) post(n *node) {
	switch n.kind {
	case kAnd:
		if n.ann.tag == "$jsonSchema" && c.inverted() {
			c.finish(n)
			return
		}
		c.postVisitTreeOperator(n, pick(andDetails[n.ann.tag], c.inverted()))
	case kOr:
		if n.ann.tag == "enum" || !c.shouldGenerate(n) {
			c.finish(n)
			return
		}
		c.postVisitTreeOperator(n, pick(orDetails[n.ann.tag], c.inverted()))
	case kNor:
		if c.inverted() {
			c.postVisitTreeOperator(n, "clausesSatisfied")
		} else {
			c.postVisitTreeOperator(n, "clausesNotSatisfied")
		}
	case kXor:
		if !c.inverted() {
			c.postVisitTreeOperator(n, "schemasNotSatisfied")
		} else {
			c.finish(n)
		}
	case kNot:
		if c.shouldGenerate(n) && n.ann.tag != "not" {
			t := c.top()
			c.appendLatestToObj(&t.obj)
		}
		c.finish(n)
	case kExists:
		if c.shouldGenerate(n) && n.ann.tag == "_propertyExists" {
			c.latest = completeErr{kind: errString, s: n.path}
			c.pop()
			return
		}
		c.finish(n)
	case kAllElemFromIndex:
		if !isAdditionalItemsFalse(n) && c.shouldGenerate(n) {
			t := c.top()
			c.appendLatestToObj(&t.obj)
		}
		c.finish(n)
	case kMatchArrayIndex:
		if c.shouldGenerate(n) {
			t := c.top()
			c.appendLatestToObj(&t.obj)
		}
		c.finish(n)
	case kAllowedProps:
		if c.shouldGenerate(n) {
			c.generateAllowedPropertiesSchemaError(n)
			t := c.top()
			ap := t.obj
			var pp bson.D
			if len(t.arr) > 0 {
				pp = bson.D{{Key: "operatorName", Value: "patternProperties"}, {Key: "details", Value: t.arr}}
			}
			switch {
			case len(ap) == 0 && len(pp) == 0:
				c.latest = completeErr{}
			case len(ap) == 0:
				c.latest = completeErr{kind: errObj, d: pp}
			case len(pp) == 0:
				c.latest = completeErr{kind: errObj, d: ap}
			default:
				c.latest = completeErr{kind: errArr, a: bson.A{ap, pp}}
			}
		}
		c.pop()
	case kEq, kRootDocEq:
	default:
		c.finish(n)
	}
}

// maxErrorDepth is the server's computeMaxAllowedValidationErrorDepth() with
// the default maxBSONDepth of 200.
const maxErrorDepth = 190

// nesting returns how many documents and arrays deep v goes, v itself
// counting as one level when it is a document or an array.
func nesting(v any) int {
	deepest := 0
	switch x := v.(type) {
	case bson.D:
		for _, e := range x {
			deepest = max(deepest, nesting(e.Value))
		}
	case bson.A:
		for _, e := range x {
			deepest = max(deepest, nesting(e))
		}
	default:
		return 0
	}
	return deepest + 1
}
