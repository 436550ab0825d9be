package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/writeguard/writeguard/cmd/writeguard/internal/demo"
)

// The demo on the sharded bed (--sharded): the embedded server behind a
// faultproxy that presents itself as a mongos with two shards, announces
// maxWriteBatchSize 100 and fails a shard after it applied part of a
// batch, besides the default faults. The check is the default demo's: every
// disposition true, nothing lost, nothing stored twice, no transient fault
// left unresolved.
func TestDemoShardedEveryDispositionTrue(t *testing.T) {
	if testing.Short() {
		t.Skip("sharded demo with 16 writers: skipped with -short")
	}
	shardFaults := int64(0)
	for seed := 1; seed <= 3; seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			code, out, errOut := runCmd(t, context.Background(), "demo", "--json", "--sharded", "--workers", "16", "--batch", "250", "--limit", "6000", "--seed", fmt.Sprint(seed))
			var r demo.Result
			if err := json.Unmarshal([]byte(out), &r); err != nil {
				t.Fatalf("exit %d, output is not JSON: %v\n%s\n%s", code, err, out, errOut)
			}
			t.Logf("demo --sharded --workers 16 --seed %d: exit %d, dispositions %v, faults %v, child batches %v", seed, code, r.Dispositions, r.Faults, r.ChildBatches)
			if !r.Sharded || len(r.ChildBatches) != 2 {
				t.Errorf("sharded %v, child batches %v: want both shards used", r.Sharded, r.ChildBatches)
			}
			// 6,000 rows in batches of 250 under maxWriteBatchSize 100: at
			// least 3 insert commands per batch.
			if n := r.ServerCommandsByName["insert"]; n < 3*24 {
				t.Errorf("%d insert commands for 24 batches of 250, want at least 72 (the driver splits by maxWriteBatchSize 100)", n)
			}
			shardFaults += r.Faults["shard_failure"]
			if code != exitOK || !r.OK || r.Failed+r.Exhausted+r.Unknown != 0 || r.Lost != 0 || r.Duplicates != 0 {
				t.Errorf("exit %d, ok %v, failed %d, exhausted %d, unknown %d, lost %d, duplicates %d; problems %v",
					code, r.OK, r.Failed, r.Exhausted, r.Unknown, r.Lost, r.Duplicates, r.Problems)
			}
		})
	}
	if shardFaults == 0 {
		t.Error("no shard failure fired in seeds 1..3: the sharded schedule does not exercise it")
	}
}

func TestDemoShardedIsForTheEmbeddedServer(t *testing.T) {
	code, _, errOut := runCmd(t, context.Background(), "demo", "--sharded", "--uri", "mongodb://localhost:1")
	if code != exitUsage || !strings.Contains(errOut, "-sharded applies to the embedded server only") {
		t.Errorf("exit %d, stderr %q; want a usage error", code, errOut)
	}
}
