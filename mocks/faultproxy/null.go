package faultproxy

import (
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/writeguard/writeguard/policy"
)

// Null backend: answers commands the way a server with no data would, so
// that the driver can run without a server (tests, overhead benchmarks).

// nullElectionID is the electionId the null backend reports as a
// replica-set primary.
var nullElectionID = bson.ObjectID{0x7f, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 1}

// helloReply is the null backend's answer to hello/isMaster: a standalone,
// or the primary of a one-member replica set when a set name is
// configured (then the driver uses retryable writes).
func (p *Proxy) helloReply(legacy bool, connID int64) bson.D {
	d := bson.D{}
	if legacy {
		d = append(d, bson.E{Key: "ismaster", Value: true})
	} else {
		d = append(d, bson.E{Key: "isWritablePrimary", Value: true})
	}
	d = append(d,
		bson.E{Key: "helloOk", Value: true},
		bson.E{Key: "maxBsonObjectSize", Value: int32(policy.MaxBSONSize)},
		bson.E{Key: "maxMessageSizeBytes", Value: int32(48000000)},
		bson.E{Key: "maxWriteBatchSize", Value: int32(100000)},
		bson.E{Key: "localTime", Value: bson.NewDateTimeFromTime(time.Now())},
		bson.E{Key: "logicalSessionTimeoutMinutes", Value: int32(30)},
		bson.E{Key: "connectionId", Value: connID},
		bson.E{Key: "minWireVersion", Value: int32(0)},
		bson.E{Key: "maxWireVersion", Value: p.cfg.maxWireVersion},
		bson.E{Key: "readOnly", Value: false},
	)
	if p.cfg.sharding != nil {
		d = append(d, bson.E{Key: "msg", Value: "isdbgrid"})
	}
	d = p.withLimits(d)
	if p.cfg.replicaSet != "" {
		d = append(d, p.memberFields()...)
	}
	return append(d, bson.E{Key: "ok", Value: 1.0})
}

func okReply(fields ...bson.E) bson.D {
	return append(bson.D(fields), bson.E{Key: "ok", Value: 1.0})
}

func emptyCursor(ns, batch string) bson.E {
	return bson.E{Key: "cursor", Value: bson.D{
		{Key: batch, Value: bson.A{}},
		{Key: "id", Value: int64(0)},
		{Key: "ns", Value: ns},
	}}
}

// nullReply is the null backend's reply to cmd. It stores nothing: writes
// report every statement applied, reads find nothing.
func (p *Proxy) nullReply(cmd *Command, connID int64) bson.D {
	switch cmd.Name {
	case "hello":
		return p.helloReply(false, connID)
	case "isMaster", "ismaster":
		return p.helloReply(true, connID)
	case "buildInfo", "buildinfo":
		return nullBuildInfo()
	case "insert", "delete":
		return okReply(bson.E{Key: "n", Value: int32(len(cmd.Statements()))})
	case "update":
		return nullUpdate(cmd)
	case "findAndModify", "findandmodify":
		return nullFindAndModify(cmd)
	case "find", "aggregate", "listIndexes":
		return okReply(emptyCursor(cmd.Namespace, "firstBatch"))
	case "listCollections":
		return okReply(emptyCursor(cmd.Database+".$cmd.listCollections", "firstBatch"))
	case "getMore":
		return okReply(emptyCursor(cmd.Namespace, "nextBatch"))
	case "killCursors":
		return nullKillCursors(cmd)
	case "count":
		return okReply(bson.E{Key: "n", Value: int32(0)})
	case "distinct":
		return okReply(bson.E{Key: "values", Value: bson.A{}})
	case "listDatabases":
		return okReply(bson.E{Key: "databases", Value: bson.A{}}, bson.E{Key: "totalSize", Value: int64(0)})
	case "bulkWrite":
		return nullBulkWrite(cmd)
	}
	return okReply()
}

func nullBuildInfo() bson.D {
	return okReply(
		bson.E{Key: "version", Value: "7.0.0"},
		bson.E{Key: "gitVersion", Value: "faultproxy-null-backend"},
		bson.E{Key: "versionArray", Value: bson.A{int32(7), int32(0), int32(0), int32(0)}},
		bson.E{Key: "bits", Value: int32(64)},
		bson.E{Key: "maxBsonObjectSize", Value: int32(policy.MaxBSONSize)},
	)
}

// nullUpdate reports every update statement matched and modified, and
// every upsert upserted (with the _id of its query, else a new ObjectID).
func nullUpdate(cmd *Command) bson.D {
	var n, modified int32
	upserted := bson.A{}
	for i, st := range cmd.Statements() {
		n++
		if up, err := st.LookupErr("upsert"); err == nil && up.Type == bson.TypeBoolean && up.Boolean() {
			upserted = append(upserted, bson.D{{Key: "index", Value: int32(i)}, {Key: "_id", Value: upsertID(st)}})
			continue
		}
		modified++
	}
	fields := []bson.E{{Key: "n", Value: n}, {Key: "nModified", Value: modified}}
	if len(upserted) > 0 {
		fields = append(fields, bson.E{Key: "upserted", Value: upserted})
	}
	return okReply(fields...)
}

// upsertID is the _id an upsert statement would insert: its query's
// (non-document) _id, else a new ObjectID.
func upsertID(st bson.Raw) any {
	if q, err := st.LookupErr("q"); err == nil {
		if qd, ok := q.DocumentOK(); ok {
			if v, err := qd.LookupErr("_id"); err == nil && v.Type != bson.TypeEmbeddedDocument {
				return v
			}
		}
	}
	return bson.NewObjectID()
}

func nullFindAndModify(cmd *Command) bson.D {
	leo := bson.D{{Key: "n", Value: int32(0)}, {Key: "updatedExisting", Value: false}}
	if up, err := cmd.Body.LookupErr("upsert"); err == nil && up.Type == bson.TypeBoolean && up.Boolean() {
		leo = bson.D{{Key: "n", Value: int32(1)}, {Key: "updatedExisting", Value: false}, {Key: "upserted", Value: bson.NewObjectID()}}
	}
	return okReply(bson.E{Key: "lastErrorObject", Value: leo}, bson.E{Key: "value", Value: nil})
}

// nullKillCursors reports every cursor not found (the null backend has
// none).
func nullKillCursors(cmd *Command) bson.D {
	notFound := bson.A{}
	if v, err := cmd.Body.LookupErr("cursors"); err == nil {
		if arr, ok := v.ArrayOK(); ok {
			vals, _ := arr.Values()
			for _, c := range vals {
				notFound = append(notFound, c)
			}
		}
	}
	return okReply(
		bson.E{Key: "cursorsKilled", Value: bson.A{}},
		bson.E{Key: "cursorsNotFound", Value: notFound},
		bson.E{Key: "cursorsAlive", Value: bson.A{}},
		bson.E{Key: "cursorsUnknown", Value: bson.A{}},
	)
}

// nullBulkWrite answers the server's bulkWrite command (8.0+) with every
// operation applied.
func nullBulkWrite(cmd *Command) bson.D {
	var inserted, updated, deleted int32
	for _, s := range cmd.Sequences {
		if s.Identifier != "ops" {
			continue
		}
		for _, op := range s.Documents {
			elems, err := op.Elements()
			if err != nil || len(elems) == 0 {
				continue
			}
			switch elems[0].Key() {
			case "insert":
				inserted++
			case "update":
				updated++
			case "delete":
				deleted++
			}
		}
	}
	return okReply(
		emptyCursor("admin.$cmd.bulkWrite", "firstBatch"),
		bson.E{Key: "nErrors", Value: int32(0)},
		bson.E{Key: "nInserted", Value: inserted},
		bson.E{Key: "nMatched", Value: updated},
		bson.E{Key: "nModified", Value: updated},
		bson.E{Key: "nUpserted", Value: int32(0)},
		bson.E{Key: "nDeleted", Value: deleted},
	)
}
