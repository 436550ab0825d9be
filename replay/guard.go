package replay

import (
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// Operations is a set of the kinds of write a replay may run (WithOperations).
// An insert replays an insertOne/insertMany envelope (its original, by
// _id); the others replay the update, replace and delete models of
// bulkWrite envelopes.
type Operations uint8

// The kinds of write of Operations.
const (
	// Inserts: insertOne of the original (by its _id, so at most once).
	Inserts Operations = 1 << iota
	// Updates: updateOne and (with WithMultiDocument) updateMany models.
	Updates
	// Replaces: replaceOne models.
	Replaces
	// Deletes: deleteOne and (with WithMultiDocument) deleteMany models.
	Deletes
)

// DefaultOperations is what a replay runs unless WithOperations says
// otherwise: inserts only.
const DefaultOperations = Inserts

// String lists the set: "inserts,updates".
func (o Operations) String() string {
	var parts []string
	for _, k := range []struct {
		op   Operations
		name string
	}{{Inserts, "inserts"}, {Updates, "updates"}, {Replaces, "replaces"}, {Deletes, "deletes"}} {
		if o&k.op != 0 {
			parts = append(parts, k.name)
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ",")
}

// refusedDatabases are the databases replay never writes: admin (users,
// roles, server configuration), local (the oplog and replication state)
// and config (sharding metadata, sessions, transactions). The MongoDB
// manual, "Reserved databases" and "system collections".
var refusedDatabases = map[string]bool{"admin": true, "local": true, "config": true}

// refusedNamespace returns why replay must not write into ns
// ("<database>.<collection>"), or "": a malformed namespace, a refused
// database, a system collection ("system." prefix: system.users,
// system.views, system.js, ...), the dead-letter collection, its side
// collections (its name followed by "_", as the lease collection "dlq_leases")
// and the lease collection.
func refusedNamespace(ns string, dlq, leases *mongo.Collection) string {
	db, coll, ok := strings.Cut(ns, ".")
	switch {
	case !ok || db == "" || coll == "":
		return "namespace " + quote(ns) + " is not <database>.<collection>"
	case refusedDatabases[db]:
		return "namespace " + quote(ns) + " is in the " + db + " database, which replay never writes"
	case strings.HasPrefix(coll, "system."):
		return "namespace " + quote(ns) + " is a system collection, which replay never writes"
	}
	if dlq != nil && db == dlq.Database().Name() && (coll == dlq.Name() || strings.HasPrefix(coll, dlq.Name()+"_")) {
		return "namespace " + quote(ns) + " is the dead-letter collection or one of its side collections"
	}
	if leases != nil && db == leases.Database().Name() && coll == leases.Name() {
		return "namespace " + quote(ns) + " is the replay's lease collection"
	}
	return ""
}

// RefusedNamespace returns why replay never writes into ns
// ("<database>.<collection>"), whatever the operator names, or "": a
// malformed namespace, the admin, local or config database, a system
// collection ("system.*"), or dlq (the dead-letter collection) or one of
// its side collections ("<dlq>_*", the lease collection among them).
// dlq may be nil.
func RefusedNamespace(ns string, dlq *mongo.Collection) string {
	return refusedNamespace(ns, dlq, nil)
}

// quote quotes a namespace for a reason, cut to 120 bytes (a forged one
// can be long).
func quote(ns string) string {
	if len(ns) > 120 {
		ns = ns[:120] + "..."
	}
	return `"` + ns + `"`
}

// opKind returns the Operations bit and the name of a model built by
// buildModel, and whether it may change more than one document.
func opKind(m mongo.WriteModel) (Operations, string, bool) {
	switch m.(type) {
	case *mongo.InsertOneModel:
		return Inserts, "insert", false
	case *mongo.UpdateOneModel:
		return Updates, "updateOne", false
	case *mongo.UpdateManyModel:
		return Updates, "updateMany", true
	case *mongo.ReplaceOneModel:
		return Replaces, "replaceOne", false
	case *mongo.DeleteOneModel:
		return Deletes, "deleteOne", false
	case *mongo.DeleteManyModel:
		return Deletes, "deleteMany", true
	}
	return 0, "unknown", true
}

// modelFilter returns the filter of an update, replace or delete model.
func modelFilter(m mongo.WriteModel) any {
	switch t := m.(type) {
	case *mongo.UpdateOneModel:
		return t.Filter
	case *mongo.UpdateManyModel:
		return t.Filter
	case *mongo.ReplaceOneModel:
		return t.Filter
	case *mongo.DeleteOneModel:
		return t.Filter
	case *mongo.DeleteManyModel:
		return t.Filter
	}
	return nil
}

// hasIDCondition reports whether a model filter (as buildModel builds
// it: bson.Raw) selects by _id: a top-level _id that is a value (equality,
// including an embedded document without operators), {$eq: v} or
// {$in: [...]}. Any other _id operator ($gt, $ne, $exists, ...) or an _id
// only inside $or/$and does not count: it can select any number of
// documents.
func hasIDCondition(filter any) bool {
	raw, ok := filter.(bson.Raw)
	if !ok {
		return false
	}
	v, err := raw.LookupErr("_id")
	if err != nil {
		return false
	}
	doc, isDoc := v.DocumentOK()
	if !isDoc {
		return v.Type != bson.TypeRegex // a regular expression matches many
	}
	elems, err := doc.Elements()
	if err != nil {
		return false
	}
	operators := 0
	for _, el := range elems {
		if strings.HasPrefix(el.Key(), "$") {
			operators++
			if el.Key() != "$eq" && el.Key() != "$in" {
				return false
			}
		}
	}
	// No operator: equality on an embedded document _id. Only $eq/$in:
	// an _id condition. (A mix of operators and plain keys is an error
	// on the server.)
	return operators == 0 || operators == len(elems)
}

// guard returns why the envelope's write must not be run, or "": its
// namespace (and the target's) must be named and not refused (see
// refusedNamespace), its kind of write allowed (WithOperations), and a
// multi-document model or a filter without an _id condition needs
// WithMultiDocument.
func (r *runner) guard(envNS string, m mongo.WriteModel) string {
	if why := r.cfg.targetRefused; why != "" {
		return why
	}
	if why := refusedNamespace(envNS, r.dlq, r.cfg.leases); why != "" {
		return why
	}
	if !r.cfg.allowed(envNS) {
		return "namespace " + quote(envNS) + " not named for this replay (WithInto, --into)"
	}
	op, name, multi := opKind(m)
	if r.cfg.ops&op == 0 {
		return name + " not allowed (allowed: " + r.cfg.ops.String() + "; WithOperations, --allow)"
	}
	if op == Inserts || r.cfg.multi {
		return ""
	}
	if multi {
		return name + " may change many documents: needs WithMultiDocument (--allow-multi)"
	}
	if !hasIDCondition(modelFilter(m)) {
		return name + " filter has no _id condition: needs WithMultiDocument (--allow-multi)"
	}
	return ""
}
