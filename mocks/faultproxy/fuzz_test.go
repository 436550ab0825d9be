package faultproxy

import (
	"bytes"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver/wiremessage"
)

// FuzzParseOpMsg feeds arbitrary bytes to the proxy's wire reader and
// OP_MSG parser, then to what the proxy does with a parsed command (its
// statements, first k statements, ordered flag, re-encoding). Nothing may
// panic, and a message that parses re-encodes to one that parses to the
// same command. Seeds: testdata/fuzz/FuzzParseOpMsg and an insert with a
// document sequence.
func FuzzParseOpMsg(f *testing.F) {
	seed := &opMsg{
		body: bsoncore.Document(mustRaw(f, bson.D{{Key: "insert", Value: "c"}, {Key: "ordered", Value: false}, {Key: "$db", Value: "d"}})),
		sequences: []sequence{{identifier: "documents", docs: []bsoncore.Document{
			bsoncore.Document(mustRaw(f, bson.D{{Key: "_id", Value: 1}})),
		}}},
	}
	f.Add(seed.encode(1, 0))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := readMessage(bytes.NewReader(data))
		if err != nil || m.opcode != wiremessage.OpMsg {
			return
		}
		msg, err := parseOpMsg(m.raw)
		if err != nil {
			return
		}
		cmd := newCommand(msg, m.requestID)
		stmts := cmd.Statements()
		_ = cmd.Ordered()
		_ = cmd.firstStatements(len(stmts) / 2)
		again, err := parseOpMsg(cmd.encode(msg.flags &^ wiremessage.ChecksumPresent))
		if err != nil {
			t.Fatalf("a parsed command does not parse once re-encoded: %v", err)
		}
		if back := newCommand(again, m.requestID); back.Name != cmd.Name || back.Namespace != cmd.Namespace || len(back.Statements()) != len(stmts) {
			t.Fatalf("re-encoded command %q %q (%d statements), was %q %q (%d)", back.Name, back.Namespace, len(back.Statements()), cmd.Name, cmd.Namespace, len(stmts))
		}
	})
}

func mustRaw(tb testing.TB, d bson.D) bson.Raw {
	tb.Helper()
	b, err := bson.Marshal(d)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}
