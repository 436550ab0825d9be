package policy

import (
	"encoding/binary"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// IDValue returns the Go value the driver returns for an _id in
// InsertOneResult.InsertedID and InsertManyResult.InsertedIDs: the BSON
// value decoded into an `any` with the default registry, as the driver's
// ensureID does (mongo/mongo.go). A string _id is a string, an ObjectID a
// bson.ObjectID, an int32 an int32, an int64 an int64, a double a float64,
// an embedded document a bson.D, an array a bson.A. writeguard returns
// this value on every path (first-try success, after retries, in a
// Report's Outcome.ID and in hook events), so a type assertion that holds
// once holds always. A collection configured with a custom registry or
// BSONOptions may decode differently in the driver; writeguard uses the
// defaults. IDValue returns nil for a zero RawValue, and the RawValue
// itself if it cannot be decoded.
func IDValue(v bson.RawValue) any {
	if v.Type == 0 {
		return nil
	}
	doc := make([]byte, 4, 4+1+4+len(v.Value)+1)
	doc = append(doc, byte(v.Type))
	doc = append(doc, "_id"...)
	doc = append(doc, 0)
	doc = append(doc, v.Value...)
	doc = append(doc, 0)
	binary.LittleEndian.PutUint32(doc, uint32(len(doc)))
	var id struct {
		ID any `bson:"_id"`
	}
	if err := bson.Unmarshal(doc, &id); err != nil {
		return v
	}
	return id.ID
}
