package policy

import "go.mongodb.org/mongo-driver/v2/bson"

// SameDocument reports whether stored holds exactly the top-level fields
// of sent, with byte-equal values, in any order (the server moves _id
// first). It decides whether a document found under an _id after a
// duplicate key is the caller's own earlier write (already written) or
// another writer's (a conflict). Numeric types count: int32 1 and double
// 1.0 differ, as they do in the stored BSON. Invalid BSON is never the
// same.
func SameDocument(stored, sent bson.Raw) bool {
	se, err := sent.Elements()
	if err != nil {
		return false
	}
	st, err := stored.Elements()
	if err != nil || len(st) != len(se) {
		return false
	}
	for _, e := range se {
		v, err := stored.LookupErr(e.Key())
		if err != nil || !v.Equal(e.Value()) {
			return false
		}
	}
	return true
}
