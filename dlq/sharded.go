package dlq

import (
	"context"
	"errors"
	"fmt"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// FeatureSharding is the check, reported by EnsureCollection before the
// indexes, of whether the dead-letter collection is sharded and, if so,
// whether its unique fingerprint index can hold. A unique index on a
// sharded collection must start with the shard key's fields
// (mongodb/mongo src/mongo/s/shard_key_pattern.cpp
// ShardKeyPattern::isUniqueIndexCompatible: the shard key's field names
// are a prefix of the index's, or the index starts with _id; createIndexes
// refuses others with 67 CannotCreateIndex): the index {fingerprint: 1}
// holds only when the shard key is on fingerprint alone (ranged or
// hashed). States: already (not sharded, or sharded on fingerprint),
// failed (sharded on another key: the index cannot be had; Detail says
// what to do), unsupported (the server would not say: config.collections
// cannot be read, e.g. without the clusterMonitor role). It is reported
// only when the server is a mongos or cannot say whether it is one: a
// replica set or a standalone holds no sharded collection.
const FeatureSharding = "sharding"

// sharding reports FeatureSharding for the collection: it asks hello
// whether the server is a mongos (msg "isdbgrid"; a replica set or a
// standalone holds no sharded collection), then reads the collection's
// entry in config.collections (_id "<db>.<coll>", key: the shard key;
// manual, "Config Database" → config.collections).
func (s *setup) sharding(ctx context.Context) FeatureResult {
	var hello struct {
		Msg string `bson:"msg"`
	}
	if err := s.db.Client().Database("admin").RunCommand(ctx, bson.D{{Key: "hello", Value: 1}}).Decode(&hello); err != nil {
		return shardingVerdict(false, nil, fmt.Errorf("hello: %w", err), s.rep.Namespace)
	}
	if hello.Msg != "isdbgrid" {
		return shardingVerdict(false, nil, nil, s.rep.Namespace) // not added to the report
	}
	var entry bson.Raw
	err := s.db.Client().Database("config").Collection("collections").
		FindOne(ctx, bson.D{{Key: "_id", Value: s.rep.Namespace}, {Key: "dropped", Value: bson.D{{Key: "$ne", Value: true}}}}).Decode(&entry)
	if errors.Is(err, mongo.ErrNoDocuments) {
		err, entry = nil, nil
	}
	return shardingVerdict(true, entry, err, s.rep.Namespace)
}

// notMongos is the Detail of a FeatureSharding result on a server that is
// not a mongos; EnsureCollection leaves such a result out of its report.
const notMongos = "not sharded (not a mongos)"

// shardingVerdict decides FeatureSharding from what the server said: mongos
// (the server is a mongos), entry (the collection's config.collections
// document, nil when it has none: not sharded) and readErr (reading
// failed).
func shardingVerdict(mongos bool, entry bson.Raw, readErr error, ns string) FeatureResult {
	r := FeatureResult{Feature: FeatureSharding}
	switch {
	case readErr != nil:
		r.State = FeatureUnsupported
		r.Detail = "cannot tell whether the collection is sharded (a sharded collection needs the shard key {fingerprint: 1} " +
			"for the unique fingerprint index)"
		r.Code, r.CodeName, r.Message = serverError(readErr)
		if r.Message == "" {
			r.Message = readErr.Error()
		}
		return r
	case !mongos:
		r.State, r.Detail = FeatureAlready, notMongos
		return r
	case entry == nil:
		r.State, r.Detail = FeatureAlready, "not sharded"
		return r
	}
	key, _ := entry.Lookup("key").DocumentOK()
	if uniqueFingerprintHolds(key) {
		r.State, r.Detail = FeatureAlready, fmt.Sprintf("sharded on %s: the unique fingerprint index holds", key)
		return r
	}
	r.State = FeatureFailed
	r.Detail = fmt.Sprintf("sharded on %s: a unique index must start with the shard key's fields, "+
		"so the fingerprint index cannot be unique and recaptures could make duplicate envelopes; keep the dead-letter collection "+
		"unsharded (it holds rejects, not traffic: drop it after draining and run EnsureCollection again), or reshard it "+
		"with db.adminCommand({reshardCollection: %q, key: {fingerprint: 1}})", key, ns)
	return r
}

// uniqueFingerprintHolds reports whether a unique index {fingerprint: 1}
// is compatible with the shard key (isUniqueIndexCompatible: the shard
// key's field names are a prefix of the index's).
func uniqueFingerprintHolds(shardKey bson.Raw) bool {
	elems, err := shardKey.Elements()
	return err == nil && len(elems) == 1 && elems[0].Key() == "fingerprint"
}
