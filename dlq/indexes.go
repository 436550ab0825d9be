package dlq

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// The indexes EnsureCollection gives the dead-letter collection (the
// unique fingerprint index, the TTL index, the status index), matched by
// keys, and the listing MongoSink checks before each Put.

// indexInfo is the part of a listIndexes entry EnsureCollection reads.
type indexInfo struct {
	Name               string   `bson:"name"`
	Key                bson.Raw `bson:"key"`
	Unique             bool     `bson:"unique"`
	ExpireAfterSeconds *float64 `bson:"expireAfterSeconds"`
}

func (s *setup) listIndexes(ctx context.Context) ([]indexInfo, error) {
	return listIndexes(ctx, s.db.Collection(s.name))
}

// listIndexes returns the indexes of coll.
func listIndexes(ctx context.Context, coll *mongo.Collection) ([]indexInfo, error) {
	cur, err := coll.Indexes().List(ctx)
	if err != nil {
		return nil, fmt.Errorf("dlq: listIndexes: %w", err)
	}
	var out []indexInfo
	for cur.Next(ctx) {
		var ii indexInfo
		if err := decodeIndex(cur.Current, &ii); err != nil {
			_ = cur.Close(ctx)
			return nil, fmt.Errorf("dlq: listIndexes: %w", err)
		}
		out = append(out, ii)
	}
	err = cur.Err()
	_ = cur.Close(ctx)
	if err != nil {
		return nil, fmt.Errorf("dlq: listIndexes: %w", err)
	}
	return out, nil
}

// decodeIndex reads an index spec, accepting expireAfterSeconds of any
// numeric type and unique as a boolean or a number.
func decodeIndex(raw bson.Raw, ii *indexInfo) error {
	if v, err := raw.LookupErr("name"); err == nil {
		ii.Name, _ = v.StringValueOK()
	}
	v, err := raw.LookupErr("key")
	if err != nil {
		return fmt.Errorf("index without key: %v", raw)
	}
	doc, ok := v.DocumentOK()
	if !ok {
		return fmt.Errorf("index key is not a document: %v", raw)
	}
	ii.Key = doc
	if v, err := raw.LookupErr("unique"); err == nil {
		ii.Unique = truthy(v)
	}
	if v, err := raw.LookupErr("expireAfterSeconds"); err == nil {
		if f, ok := asFloat(v); ok {
			ii.ExpireAfterSeconds = &f
		}
	}
	return nil
}

func truthy(v bson.RawValue) bool {
	if b, ok := v.BooleanOK(); ok {
		return b
	}
	f, ok := asFloat(v)
	return ok && f != 0
}

func asFloat(v bson.RawValue) (float64, bool) {
	switch v.Type {
	case bson.TypeInt32:
		return float64(v.Int32()), true
	case bson.TypeInt64:
		return float64(v.Int64()), true
	case bson.TypeDouble:
		return v.Double(), true
	}
	return 0, false
}

// keyField is one field of an index key: its name and direction.
type keyField struct {
	name string
	dir  float64
}

// sameKeys compares an index key document with want (names in order,
// directions by numeric value, so 1, 1.0 and int64 1 are equal).
func sameKeys(key bson.Raw, want []keyField) bool {
	elems, err := key.Elements()
	if err != nil || len(elems) != len(want) {
		return false
	}
	for i, e := range elems {
		f, ok := asFloat(e.Value())
		if !ok || e.Key() != want[i].name || f != want[i].dir {
			return false
		}
	}
	return true
}

func keysDoc(k []keyField) bson.D {
	d := make(bson.D, len(k))
	for i, f := range k {
		d[i] = bson.E{Key: f.name, Value: int32(f.dir)}
	}
	return d
}

func (s *setup) indexes(ctx context.Context) error {
	idx, err := s.listIndexes(ctx)
	if err != nil {
		return err
	}
	fpKeys := []keyField{{"fingerprint", 1}}
	fr := s.ensureIndex(ctx, idx, FeatureFingerprintIndex, FingerprintIndexName, fpKeys, true)
	s.rep.add(fr)
	if fr.State != FeatureApplied && fr.State != FeatureAlready {
		return fmt.Errorf("dlq: %s: the unique index on fingerprint is required: %s", s.rep.Namespace, fr.String())
	}
	if s.cfg.ttl == 0 {
		s.rep.add(FeatureResult{Feature: FeatureTTLIndex, State: FeatureDisabled})
	} else {
		s.rep.add(s.ensureTTL(ctx, idx))
	}
	if !s.cfg.status {
		s.rep.add(FeatureResult{Feature: FeatureStatusIndex, State: FeatureDisabled})
	} else {
		s.rep.add(s.ensureIndex(ctx, idx, FeatureStatusIndex, StatusIndexName,
			[]keyField{{"status", 1}, {"namespace", 1}, {"first_seen", 1}}, false))
	}
	return nil
}

func findIndex(idx []indexInfo, keys []keyField) *indexInfo {
	for i := range idx {
		if sameKeys(idx[i].Key, keys) {
			return &idx[i]
		}
	}
	return nil
}

func (s *setup) ensureIndex(ctx context.Context, idx []indexInfo, feature, name string, keys []keyField, unique bool) FeatureResult {
	for round := 0; ; round++ {
		if ex := findIndex(idx, keys); ex != nil {
			if unique && !ex.Unique {
				return FeatureResult{Feature: feature, State: FeatureFailed,
					Message: fmt.Sprintf("index %q on %v exists but is not unique: drop it and run again", ex.Name, keysDoc(keys))}
			}
			return FeatureResult{Feature: feature, State: FeatureAlready, Detail: fmt.Sprintf("index %q", ex.Name)}
		}
		opts := options.Index().SetName(name)
		if unique {
			opts.SetUnique(true)
		}
		created, err := s.createIndex(ctx, mongo.IndexModel{Keys: keysDoc(keys), Options: opts}, name)
		if err == nil {
			return FeatureResult{Feature: feature, State: FeatureApplied, Detail: fmt.Sprintf("index %q created", created)}
		}
		if round == 0 && (hasCode(err, codeIndexOptionsConflict) || hasCode(err, codeIndexKeySpecsConflict)) {
			// Created concurrently with other options: look again.
			if idx, err = s.listIndexes(ctx); err == nil {
				continue
			}
		}
		fr := s.optional(feature, "", err)
		return fr
	}
}

// createIndex creates m, named name or, if that name is taken by other
// keys (86 IndexKeySpecsConflict), name+"_wg". It returns the name used.
func (s *setup) createIndex(ctx context.Context, m mongo.IndexModel, name string) (string, error) {
	_, err := s.db.Collection(s.name).Indexes().CreateOne(ctx, m)
	if err != nil && hasCode(err, codeIndexKeySpecsConflict) {
		name += "_wg"
		m.Options.SetName(name)
		_, err = s.db.Collection(s.name).Indexes().CreateOne(ctx, m)
	}
	return name, err
}

func (s *setup) ensureTTL(ctx context.Context, idx []indexInfo) FeatureResult {
	want := int64(s.cfg.ttl / time.Second)
	name := s.cfg.ttlField + ttlIndexSuffix
	for round := 0; ; round++ {
		var ex *indexInfo
		for _, dir := range []float64{1, -1} {
			if ex = findIndex(idx, []keyField{{s.cfg.ttlField, dir}}); ex != nil {
				break
			}
		}
		if ex != nil {
			if ex.ExpireAfterSeconds != nil && *ex.ExpireAfterSeconds == float64(want) {
				return FeatureResult{Feature: FeatureTTLIndex, State: FeatureAlready,
					Detail: fmt.Sprintf("index %q, expireAfterSeconds %d", ex.Name, want)}
			}
			detail := fmt.Sprintf("index %q made TTL (expireAfterSeconds %d) with collMod", ex.Name, want)
			if ex.ExpireAfterSeconds != nil {
				detail = fmt.Sprintf("index %q expireAfterSeconds changed from %s to %d with collMod", ex.Name,
					strconv.FormatFloat(*ex.ExpireAfterSeconds, 'f', -1, 64), want)
			}
			err := s.db.RunCommand(ctx, bson.D{
				{Key: "collMod", Value: s.name},
				{Key: "index", Value: bson.D{{Key: "keyPattern", Value: ex.Key}, {Key: "expireAfterSeconds", Value: want}}},
			}).Err()
			return s.optional(FeatureTTLIndex, detail, err)
		}
		m := mongo.IndexModel{
			Keys:    bson.D{{Key: s.cfg.ttlField, Value: int32(1)}},
			Options: options.Index().SetName(name).SetExpireAfterSeconds(int32(want)),
		}
		created, err := s.createIndex(ctx, m, name)
		if err == nil {
			return FeatureResult{Feature: FeatureTTLIndex, State: FeatureApplied,
				Detail: fmt.Sprintf("index %q created, expireAfterSeconds %d", created, want)}
		}
		if round == 0 && (hasCode(err, codeIndexOptionsConflict) || hasCode(err, codeIndexKeySpecsConflict)) {
			if idx, err = s.listIndexes(ctx); err == nil {
				continue
			}
		}
		return s.optional(FeatureTTLIndex, "", err)
	}
}
