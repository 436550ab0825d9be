package policy

import (
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// DuplicateKeyIndex names the unique index a duplicate-key failure (11000,
// 11001, 12582, or 16460 wrapping an E11000) hit, as far as the reply says:
//
//   - fields: the index's key fields, in order, from keyPattern (servers
//     4.2+ send it: {email: 1} gives ["email"]); nil without keyPattern;
//   - name: the index name from errmsg, in every format servers have used:
//     "E11000 duplicate key error collection: db.c index: email_1 dup key:
//     ..." (4.0+), "E11000 duplicate key error index: db.c.$email_1 dup
//     key: ..." (before 4.0); "" when errmsg names none (Azure Cosmos DB:
//     "Failed _id or unique index constraint").
//
// known is false when neither names the index: a handler that writes must
// not guess which document holds the key.
func DuplicateKeyIndex(f Failure) (name string, fields []string, known bool) {
	if len(f.KeyPattern) > 0 {
		if elems, err := f.KeyPattern.Elements(); err == nil {
			for _, e := range elems {
				fields = append(fields, e.Key())
			}
		}
	}
	name = indexNameFromMessage(f.Message)
	return name, fields, name != "" || len(fields) > 0
}

func indexNameFromMessage(msg string) string {
	if !strings.Contains(msg, "E11000") {
		return ""
	}
	if _, rest, ok := strings.Cut(msg, " index: "); ok {
		name, _, _ := strings.Cut(rest, " dup key")
		name = strings.TrimSpace(name)
		// Before 4.0 the index is "<db>.<collection>.$<name>".
		if i := strings.LastIndex(name, ".$"); i >= 0 {
			name = name[i+2:]
		}
		return name
	}
	if _, rest, ok := strings.Cut(msg, "duplicate key error index: "); ok {
		name, _, _ := strings.Cut(rest, " dup key")
		if i := strings.LastIndex(name, ".$"); i >= 0 {
			return strings.TrimSpace(name[i+2:])
		}
	}
	return ""
}

// OnIDIndex reports whether a duplicate-key failure is on the _id index:
// keyPattern {_id: 1}, or errmsg naming the index "_id_".
func OnIDIndex(f Failure) bool {
	name, fields, _ := DuplicateKeyIndex(f)
	return len(fields) == 1 && fields[0] == "_id" || len(fields) == 0 && name == "_id_"
}

// KeyIdentifies reports whether a duplicate key's value (keyValue, e.g.
// {username: "ann"}) identifies one stored document. A component that is
// null or missing (fewer values than keyPattern has fields) identifies
// nobody: on MongoDB such a key also matches every document where the
// field is absent, so a handler that filtered by it could overwrite or
// skip for someone else's document (a non-sparse unique index and null
// values: Automattic/mongoose#3984). field names the first such component
// ("" when keyValue is empty: the server sent none).
func KeyIdentifies(keyPattern, keyValue bson.Raw) (ok bool, field string) {
	if len(keyValue) == 0 {
		return false, ""
	}
	vals, err := keyValue.Elements()
	if err != nil || len(vals) == 0 {
		return false, ""
	}
	for _, e := range vals {
		switch e.Value().Type {
		case bson.TypeNull, bson.TypeUndefined:
			return false, e.Key()
		}
	}
	if len(keyPattern) > 0 {
		if fields, err := keyPattern.Elements(); err == nil && len(fields) > len(vals) {
			return false, fields[len(vals)].Key()
		}
	}
	return true, ""
}

// IsDuplicateKey reports whether f is a duplicate-key failure: its code is
// in DefaultConflictCodes, or it is 16460 wrapping an E11000 (mongos,
// SERVER-11493), as mongo.IsDuplicateKeyError decides.
func IsDuplicateKey(f Failure) bool {
	return inCodes(DefaultConflictCodes, f.Code) || wrappedDuplicateKey(f)
}

// wrappedDuplicateKey reports mongos's 16460 wrapping a shard's E11000
// (SERVER-11493), as mongo.IsDuplicateKeyError reads it.
func wrappedDuplicateKey(f Failure) bool {
	return f.Code == 16460 && strings.Contains(f.Message, " E11000 ")
}
