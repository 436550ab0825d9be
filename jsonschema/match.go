package jsonschema

import (
	"go.mongodb.org/mongo-driver/v2/bson"
)

// matches evaluates n against doc with the server's semantics for the
// expressions a $jsonSchema translates into (no implicit array traversal).
func matches(n *node, doc bson.D) bool {
	switch n.kind {
	case kAnd:
		for _, c := range n.children {
			if !matches(c, doc) {
				return false
			}
		}
		return true
	case kOr:
		for _, c := range n.children {
			if matches(c, doc) {
				return true
			}
		}
		return false
	case kNor:
		for _, c := range n.children {
			if matches(c, doc) {
				return false
			}
		}
		return true
	case kNot:
		return !matches(n.children[0], doc)
	case kXor:
		count := 0
		for _, c := range n.children {
			if matches(c, doc) {
				count++
			}
		}
		return count == 1
	case kAlwaysTrue:
		return true
	case kAlwaysFalse:
		return false
	case kRootDocEq:
		return docsEqualUnordered(doc, n.rhs.(bson.D))
	case kNumProps:
		return limitOK(n, int64(len(doc)))
	case kCond:
		if matches(n.children[0], doc) {
			return matches(n.children[1], doc)
		}
		return matches(n.children[2], doc)
	case kAllowedProps:
		return allowedPropertiesMatch(n, doc)
	}

	v, ok := lookup(doc, n.path)
	switch n.kind {
	case kExists:
		return ok
	case kType:
		return ok && n.types.has(typeOf(v))
	case kEq:
		return ok && valuesEqual(v, n.rhs)
	}
	if !ok {
		return false
	}
	return matchesValue(n, v)
}

// matchesValue evaluates a path expression against the value at its path.
func matchesValue(n *node, v any) bool {
	switch n.kind {
	case kCmp:
		a, ok := toNumber(v)
		if !ok {
			return false
		}
		b, _ := toNumber(n.rhs)
		if a.nan || b.nan {
			return a.nan && b.nan && (n.cmpOp == "$lte" || n.cmpOp == "$gte")
		}
		c := compareNumbers(a, b)
		switch n.cmpOp {
		case "$lt":
			return c < 0
		case "$lte":
			return c <= 0
		case "$gt":
			return c > 0
		case "$gte":
			return c >= 0
		}
		return false
	case kRegex:
		t := typeOf(v)
		if t != tString && t != tSymbol {
			return false
		}
		return n.re != nil && n.re.MatchString(stringOf(v))
	case kStrLen:
		s, ok := v.(string)
		return ok && limitOK(n, int64(utf8Len(s)))
	case kFmod:
		if !isNumeric(typeOf(v)) {
			return false
		}
		return isMultipleOf(v, n.rhs)
	case kNumItems:
		a, ok := v.(bson.A)
		return ok && limitOK(n, int64(len(a)))
	case kUnique:
		a, ok := v.(bson.A)
		if !ok {
			return false
		}
		_, dup := firstDuplicate(a)
		return !dup
	case kAllElemFromIndex:
		a, ok := v.(bson.A)
		if !ok {
			return false
		}
		_, found := firstMismatch(n, a)
		return !found
	case kMatchArrayIndex:
		a, ok := v.(bson.A)
		if !ok {
			return false
		}
		if n.index >= int64(len(a)) {
			return true
		}
		return matchesElement(n.children[0], a[n.index])
	case kObjectMatch:
		d, ok := v.(bson.D)
		return ok && matches(n.children[0], d)
	}
	return false
}

func limitOK(n *node, size int64) bool {
	if n.isMin {
		return size >= n.limit
	}
	return size <= n.limit
}

// matchesElement applies a placeholder filter to one value.
func matchesElement(filter *node, v any) bool {
	return matches(filter, bson.D{{Key: placeholder, Value: v}})
}

// firstMismatch returns the index of the first element, from n.index on,
// that fails n's filter.
func firstMismatch(n *node, a bson.A) (int, bool) {
	for i := int(n.index); i < len(a); i++ {
		if !matchesElement(n.children[0], a[i]) {
			return i, true
		}
	}
	return 0, false
}

// firstDuplicate returns the first element equal (valuesEqual) to an
// earlier one. Each element is reduced to a canonical key (equalKey) that
// equal values share, and looked up in a map: time and memory linear in
// the array's size (n log n for the field names of embedded documents),
// where comparing every pair took 19 s for 40,000 elements
// (BenchmarkUniqueItems16MiB). A key hit is confirmed with valuesEqual.
func firstDuplicate(a bson.A) (any, bool) {
	first := make(map[string]int, len(a))
	var more map[string][]int // keys shared by unequal values (none known)
	var b []byte
	for i, v := range a {
		b = equalKey(b[:0], v)
		j, ok := first[string(b)]
		if !ok {
			first[string(b)] = i
			continue
		}
		if valuesEqual(a[j], v) {
			return v, true
		}
		for _, j := range more[string(b)] {
			if valuesEqual(a[j], v) {
				return v, true
			}
		}
		if more == nil {
			more = map[string][]int{}
		}
		more[string(b)] = append(more[string(b)], i)
	}
	return nil, false
}

func allowedPropertiesMatch(n *node, doc bson.D) bool {
	for _, e := range doc {
		checkOtherwise := true
		for i, p := range n.patterns {
			if p.re != nil && p.re.MatchString(e.Key) {
				checkOtherwise = false
				if !matchesElement(n.children[1+i], e.Value) {
					return false
				}
			}
		}
		if checkOtherwise && n.properties[e.Key] {
			checkOtherwise = false
		}
		if checkOtherwise && !matchesElement(n.children[0], e.Value) {
			return false
		}
	}
	return true
}

// additionalProperties lists the fields of doc named neither by
// 'properties' nor matched by a 'patternProperties' regex.
func additionalProperties(n *node, doc bson.D) bson.A {
	out := bson.A{}
	for _, e := range doc {
		if n.properties[e.Key] {
			continue
		}
		additional := true
		for _, p := range n.patterns {
			if p.re != nil && p.re.MatchString(e.Key) {
				additional = false
				break
			}
		}
		if additional {
			out = append(out, e.Key)
		}
	}
	return out
}
