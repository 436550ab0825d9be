package faultproxy

import (
	"fmt"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// RefuseMultiAt makes an update command of one multi: true statement
// write its first k-1 matching documents (by _id order) and refuse the
// k-th with we, as mongod does when a multi update meets a validator
// (121 DocumentValidationFailure) or a unique index (11000) on its k-th
// document: write_ops_exec.cpp handleError records the statement's error
// and keeps what the statement already changed. The reply is {ok: 1, n:
// k-1, nModified: k-1, writeErrors: [{index: 0, code: we.Code, ...}]}.
// It is emulated by running the update one document at a time: find the
// matching _ids, then update each by _id (multi: false). A command with
// another shape, or matching fewer than k documents, is forwarded
// unchanged. k must be at least 1 (k = 1 refuses the first document,
// nothing written) and we.Code must not be 0.
func RefuseMultiAt(k int, we WriteError) Fault {
	return Fault{kind: FaultMultiRefused, k: k, we: we, handler: func(cmd *Command, forward func(*Command) (bson.Raw, error)) (bson.Raw, error) {
		return refuseMulti(cmd, forward, k, we)
	}}
}

func refuseMulti(cmd *Command, forward func(*Command) (bson.Raw, error), k int, we WriteError) (bson.Raw, error) {
	stmts := cmd.Statements()
	if cmd.Name != "update" || len(stmts) != 1 || !isMulti(stmts[0]) || k < 1 {
		return forward(cmd)
	}
	st := stmts[0]
	ids, err := matchingIDs(cmd, forward, st.Lookup("q"), k)
	if err != nil || len(ids) < k {
		return forward(cmd)
	}
	for _, id := range ids[:k-1] {
		one := bson.D{{Key: "q", Value: bson.D{{Key: "_id", Value: id}}}, {Key: "u", Value: st.Lookup("u")}, {Key: "multi", Value: false}}
		if _, err := forward(subCommand(cmd, bson.D{{Key: "update", Value: cmd.Collection}, {Key: "updates", Value: bson.A{one}}, {Key: "ordered", Value: true}})); err != nil {
			return nil, err
		}
	}
	if we.Message == "" {
		we.Message = fmt.Sprintf("faultproxy: multi update refused on its document %d", k)
	}
	return bson.Marshal(bson.D{
		{Key: "n", Value: int32(k - 1)}, {Key: "nModified", Value: int32(k - 1)},
		{Key: "writeErrors", Value: bson.A{we.doc(0)}},
		{Key: "ok", Value: 1.0},
	})
}

// matchingIDs returns the _ids of the first k documents q matches, in _id
// order.
func matchingIDs(cmd *Command, forward func(*Command) (bson.Raw, error), q bson.RawValue, k int) ([]bson.RawValue, error) {
	filter := bson.Raw(nil)
	if d, ok := q.DocumentOK(); ok {
		filter = d
	}
	if filter == nil {
		filter, _ = bson.Marshal(bson.D{})
	}
	reply, err := forward(subCommand(cmd, bson.D{{Key: "find", Value: cmd.Collection}, {Key: "filter", Value: filter},
		{Key: "sort", Value: bson.D{{Key: "_id", Value: 1}}}, {Key: "projection", Value: bson.D{{Key: "_id", Value: 1}}},
		{Key: "limit", Value: int64(k)}, {Key: "singleBatch", Value: true}}))
	if err != nil {
		return nil, err
	}
	batch, err := reply.LookupErr("cursor", "firstBatch")
	if err != nil {
		return nil, fmt.Errorf("faultproxy: find for RefuseMultiAt: %s", reply)
	}
	vals, err := batch.Array().Values()
	if err != nil {
		return nil, err
	}
	out := make([]bson.RawValue, 0, len(vals))
	for _, v := range vals {
		if id, err := v.Document().LookupErr("_id"); err == nil {
			out = append(out, id)
		}
	}
	return out, nil
}

// subCommand is a command of the proxy's own on cmd's database (body
// gets $db appended).
func subCommand(cmd *Command, body bson.D) *Command {
	raw, err := bson.Marshal(append(body, bson.E{Key: "$db", Value: cmd.Database}))
	if err != nil {
		raw = cmd.Body
	}
	c := &Command{Body: raw, Database: cmd.Database}
	c.fillNames()
	c.fillNamespace()
	return c
}

// ShardKeyMove fails child batch batch of a sharded write as mongos does
// when the batch's second update would move its document to another
// shard: the shard applied the first statement, and the batch's error is
// copied as 72 InvalidOptions (batch_write_op.cpp noteBatchError: one
// copy at the sub-batch's first index when ordered, one per statement
// when unordered; the copies on statements the shard applied say nothing
// true about them). FailShard with applied 1 and code 72.
func ShardKeyMove(batch int) Fault {
	return FailShard(batch, 1, CommandError{Code: 72, CodeName: "InvalidOptions",
		Message: "Document shard key value updates that cause the doc to move shards must be sent with write batch of size 1"})
}

// ShardReplyLost is a findAndModify (or any write) that mongos fails as a
// whole with code (6 HostUnreachable, 89 NetworkTimeout, 9001
// SocketException) after the shard ran it: its reply from the shard was
// lost (cluster_find_and_modify_cmd.cpp). ApplyThenError(1, ...), with no
// RetryableWriteError label unless labels say so.
func ShardReplyLost(code int32, labels ...string) Fault {
	names := map[int32]string{6: "HostUnreachable", 89: "NetworkTimeout", 9001: "SocketException"}
	return ApplyThenError(1, CommandError{Code: code, CodeName: names[code], Labels: labels,
		Message: "Write results unavailable from shard :: caused by :: " + names[code]})
}

func isMulti(st bson.Raw) bool {
	b, ok := st.Lookup("multi").BooleanOK()
	return ok && b
}
