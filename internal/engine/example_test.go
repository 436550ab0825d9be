package engine_test

import (
	"fmt"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/writeguard/writeguard/internal/engine"
	"github.com/writeguard/writeguard/mocks"
	"github.com/writeguard/writeguard/policy"
)

// What a reply proves decides what happens: an interruption after the
// server committed the start of a batch (11600) may have applied every
// document of it. An insert is sent again (its _id makes that safe, and a
// duplicate on it is read back); a $inc update is not, and ends unknown.
func ExampleRoute() {
	var raw bson.Raw
	_ = bson.UnmarshalExtJSON([]byte(`{"ok":0,"code":11600,"codeName":"InterruptedAtShutdown","errmsg":"interrupted at shutdown"}`), false, &raw)
	f := policy.Extract(mocks.ReplyError(mocks.OpInsertMany, raw))[0]
	class := policy.Default().Classify(f)
	fmt.Println("shape:", f.Shape, "proof:", f.Proof(), "class:", class)

	for _, kind := range []engine.Kind{engine.KindInsert, engine.KindUpdate} {
		d := engine.Route(engine.Facts{Class: class, WholeCommand: true, Proof: f.Proof(), Kind: kind})
		fmt.Printf("%s: action %s, disposition %q, rule %s\n", map[engine.Kind]string{engine.KindInsert: "insert", engine.KindUpdate: "update"}[kind], d.Action, d.Disposition, d.Rule)
	}
	// Output:
	// shape: interrupted proof: maybe_applied class: transient
	// insert: action retry, disposition "", rule retryable
	// update: action settle, disposition "unknown", rule maybe_applied
}
