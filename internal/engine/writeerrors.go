package engine

import (
	"context"

	"github.com/writeguard/writeguard/policy"
)

// readWriteErrors reads each write error of an attempt again, with what
// Extract could not know: the statement it names and the deployment.
//
//   - A write error on a multi statement (updateMany, deleteMany, their
//     models) is policy.ShapeWriteErrorMulti, maybe applied whatever its
//     code: the statement may have changed documents before the one
//     refused (C70).
//   - Otherwise policy.WriteErrorShape decides, with mongod true on a
//     standalone or a replica set member (the hello reply) and the
//     caller's own verdict codes (Config.VerdictCodes). The deployment is
//     asked only for a code whose reading depends on it.
func (c *Call) readWriteErrors(ctx context.Context, batch []*item, fails []policy.Failure) {
	asked, mongod := false, false
	for i := range fails {
		f := &fails[i]
		if f.Index < 0 || f.Index >= len(batch) || f.Shape != policy.ShapeWriteError && f.Shape != policy.ShapeWriteErrorUnproven {
			continue
		}
		if multi(batch[f.Index]) {
			f.Shape = policy.ShapeWriteErrorMulti
		} else if f.Shape == policy.ShapeWriteErrorUnproven {
			if !asked {
				d := c.deployment(ctx)
				asked, mongod = true, d == DeploymentStandalone || d == DeploymentReplicaSet
			}
			f.Shape = policy.WriteErrorShape(f.Code, f.Message, mongod, c.e.cfg.VerdictCodes)
		}
		f.Ambiguous = f.Proof() == policy.MaybeApplied
	}
}

// multi reports whether it is a statement that can touch several
// documents (multi: true).
func multi(it *item) bool { return it.cmd == cmdUpdateMany || it.cmd == cmdDeleteMany }

// codeInvalidOptions is InvalidOptions (error_codes.yml), the code mongos
// gives the copies of a shard's batch in which a statement moved a
// document's shard key (batch_write_op.cpp: "Must run update to shard key
// field in a multi-statement transaction or with retryWrites: true").
const codeInvalidOptions = 72

// shardKeyMove decides a write error 72 on a statement sent with others:
// it proves nothing about the statement (the shard may have applied it),
// and heals only by sending the statement alone, where mongos runs a
// shard key move as a retryable write of its own. That is done only for
// a model marked idempotent (it may have been applied): it is isolated
// (sent alone from now on) and retried. Any other 72 goes to Route.
func (c *Call) shardKeyMove(it *item, v verdict, batchLen int) (Decision, bool) {
	if v.fail == nil || v.notOwn || v.fail.Code != codeInvalidOptions || batchLen < 2 || !c.idempotentItem(it) {
		return Decision{}, false
	}
	c.isolate(it)
	return Decision{Action: Retry, Rule: RuleShardKeyMoveAlone}, true
}

// RuleShardKeyMoveAlone is the Decision.Rule of an idempotent model whose
// statement met a 72 in a command of several: it is sent again alone.
const RuleShardKeyMoveAlone = "shard_key_move_alone"
