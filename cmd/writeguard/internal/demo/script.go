package demo

import (
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/writeguard/writeguard/mocks/faultproxy"
)

// Script is the faultproxy script of the embedded demo: the validator on
// ns and, when faults is true, a seeded random schedule over the insert
// commands on ns. Each insert command independently gets at most one of:
//
//	4 %  189 PrimarySteppedDown, labelled RetryableWriteError (not applied)
//	3 %  10107 NotWritablePrimary, labelled RetryableWriteError (not applied)
//	3 %  the reply is dropped after the insert was applied (network error)
//	5 %  112 WriteConflict on the documents whose _id ends in "0" (1 in 16)
//
// The choice for the n-th insert command depends only on seed and n.
func Script(ns string, seed int64, faults bool) (*faultproxy.Script, error) {
	return faultproxy.NewScript(scriptItems(ns, seed, faults, nil)...)
}

// ShardedScript is Script for the sharded demo (Config.Sharded): the same
// schedule, with shard failures after partial application added after its
// rates (so the other faults fall on the same commands as in Script):
//
//	2 %  one shard's child batch applies its first 20 rows, then its reply
//	     is lost: 6 HostUnreachable on every row of that batch
//	1 %  the second child batch is interrupted before it applies anything:
//	     11602 InterruptedDueToReplStateChange on every row of that batch
func ShardedScript(ns string, seed int64, faults bool) (*faultproxy.Script, error) {
	return faultproxy.NewScript(scriptItems(ns, seed, faults, []faultproxy.Rate{
		{P: 0.02, Fault: faultproxy.FailShard(0, 20, faultproxy.CommandError{Code: 6, CodeName: "HostUnreachable", Message: "Connection reset by peer"})},
		{P: 0.01, Fault: faultproxy.FailShard(1, 0, faultproxy.CommandError{Code: 11602, CodeName: "InterruptedDueToReplStateChange", Message: "operation was interrupted"})},
	})...)
}

func scriptItems(ns string, seed int64, faults bool, extra []faultproxy.Rate) []faultproxy.ScriptItem {
	items := []faultproxy.ScriptItem{faultproxy.Validator(ns, Validator())}
	if faults {
		retryable := []string{"RetryableWriteError"}
		rates := []faultproxy.Rate{
			{P: 0.04, Fault: faultproxy.ErrorReply(faultproxy.CommandError{
				Code: 189, CodeName: "PrimarySteppedDown", Message: "Primary stepped down while waiting for replication", Labels: retryable})},
			{P: 0.03, Fault: faultproxy.ErrorReply(faultproxy.CommandError{
				Code: 10107, CodeName: "NotWritablePrimary", Message: "not primary", Labels: retryable})},
			{P: 0.03, Fault: faultproxy.CloseAfterForward()},
			{P: 0.05, Fault: faultproxy.RejectDocuments(idEndsIn0, faultproxy.WriteError{
				Code: 112, Message: "WriteConflict error: this operation conflicted with another operation. Please retry your operation or multi-document transaction."})},
		}
		items = append(items, faultproxy.On("insert").In(ns).Always().Do(faultproxy.RandomSchedule(seed, append(rates, extra...)...)))
	}
	return items
}

func idEndsIn0(doc bson.Raw) bool {
	id, ok := doc.Lookup("_id").StringValueOK()
	return ok && len(id) > 0 && id[len(id)-1] == '0'
}
