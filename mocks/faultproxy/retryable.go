package faultproxy

import (
	"bytes"
	"fmt"
	"sort"
	"sync"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// Retryable writes, as the server does them (retryable writes
// specification; server code: TransactionParticipant, "retryable writes"
// in the architecture guide): a write carrying lsid and txnNumber is
// executed once per (lsid, txnNumber). The server records each statement
// it executes (stmtId, the statement's index in the command, since the
// driver sends no stmtIds over OP_MSG); a retry with the same txnNumber
// executes only the statements not recorded and answers for the others
// from the record. A statement that failed (write error, ok: 0) is not
// recorded and runs again on a retry. A txnNumber lower than the
// session's last one is refused with 225 TransactionTooOld.
//
// The proxy keeps, per session (lsid), only the last txnNumber and what it
// recorded for it, for at most maxTxnSessions sessions (the oldest is
// forgotten first).

// maxTxnSessions bounds the number of sessions whose last retryable write
// the proxy remembers.
const maxTxnSessions = 10000

// stmtResult is what the server recorded for one executed statement.
type stmtResult struct {
	n, nModified int32
	upserted     any // the upserted _id, nil if none
	hasUpserted  bool
}

// txnRecord is the retryable-write record of one session.
type txnRecord struct {
	mu        sync.Mutex // held while a command of the session executes
	txnNumber int64
	started   bool
	stmts     map[int]stmtResult // client statement index → result
	whole     bson.Raw           // reply of a write without statements (findAndModify)
}

// advance moves the record to txnNumber. It returns the error reply to
// send when txnNumber is older than the record's.
func (r *txnRecord) advance(txnNumber int64) (bson.D, bool) {
	switch {
	case r.started && txnNumber < r.txnNumber:
		return errorReplyDoc(CommandError{
			Code: 225, CodeName: "TransactionTooOld",
			Message: fmt.Sprintf("Retryable write with txnNumber %d is prohibited on session because a newer retryable write with txnNumber %d has already started on this session.", txnNumber, r.txnNumber),
		}), true
	case !r.started || txnNumber > r.txnNumber:
		r.started, r.txnNumber, r.stmts, r.whole = true, txnNumber, map[int]stmtResult{}, nil
	}
	return nil, false
}

type txnTable struct {
	mu    sync.Mutex
	recs  map[string]*txnRecord
	order []string
}

func newTxnTable() *txnTable { return &txnTable{recs: map[string]*txnRecord{}} }

func (t *txnTable) get(key string) *txnRecord {
	t.mu.Lock()
	defer t.mu.Unlock()
	if r, ok := t.recs[key]; ok {
		return r
	}
	r := &txnRecord{}
	t.recs[key] = r
	t.order = append(t.order, key)
	for len(t.order) > maxTxnSessions {
		delete(t.recs, t.order[0])
		t.order = t.order[1:]
	}
	return r
}

// txnCtx is the retryable write a session is executing.
type txnCtx struct {
	rec         *txnRecord
	txnNumber   int64
	clientStmts []bson.Raw // the statements as the client sent them
	// scope, when not nil, holds the client indexes the statements being
	// forwarded come from (a sharded child batch), so that two equal
	// statements of one command in different child batches map to their
	// own indexes.
	scope []int
}

// isRetryableWrite reports whether a command with a txnNumber is a write
// the server executes once per txnNumber.
func isRetryableWrite(name string) bool {
	switch name {
	case "insert", "update", "delete", "findAndModify", "findandmodify":
		return true
	}
	return false
}

// beginRetryable returns the retryable-write context of cmd, with its
// session's record locked, or nil when cmd is not a retryable write
// (no lsid or txnNumber, or not a write). The caller unlocks ctx.rec.mu.
func (s *session) beginRetryable(cmd *Command) *txnCtx {
	if !isRetryableWrite(cmd.Name) {
		return nil
	}
	tn, err := cmd.Body.LookupErr("txnNumber")
	if err != nil {
		return nil
	}
	num, ok := tn.AsInt64OK()
	if !ok {
		return nil
	}
	lsid, err := cmd.Body.LookupErr("lsid")
	if err != nil {
		return nil
	}
	key := string(lsid.Value)
	if d, ok := lsid.DocumentOK(); ok {
		if id, err := d.LookupErr("id"); err == nil {
			key = string(id.Value)
		}
	}
	rec := s.p.txns.get(key)
	rec.mu.Lock()
	return &txnCtx{rec: rec, txnNumber: num, clientStmts: cmd.Statements()}
}

// clientIndexes maps each statement of a command the proxy forwards (the
// client's command or a part of it) to its index in the client's command,
// by content; -1 when not found (a Custom handler's own statement).
func (t *txnCtx) clientIndexes(stmts []bson.Raw) []int {
	used := make([]bool, len(t.clientStmts))
	cands := t.scope
	if cands == nil {
		cands = make([]int, len(t.clientStmts))
		for i := range cands {
			cands[i] = i
		}
	}
	out := make([]int, len(stmts))
	for pos, st := range stmts {
		out[pos] = -1
		for _, i := range cands {
			if i >= 0 && i < len(t.clientStmts) && !used[i] && bytes.Equal(st, t.clientStmts[i]) {
				used[i], out[pos] = true, i
				break
			}
		}
	}
	return out
}

// withoutTxnFields strips what an upstream standalone must not see: the
// proxy owns the retryable-write semantics, and a standalone mongod
// refuses txnNumber (20 IllegalOperation "Transaction numbers are only
// allowed on a replica set member or mongos"); FerretDB ignores it.
func withoutTxnFields(cmd *Command) *Command {
	out := *cmd
	out.Body = bodyWithout(cmd.Body, "txnNumber")
	return &out
}

// forwardRetryable executes cmd, a part of the session's retryable write,
// at most once per statement (see the top of this file) and returns its
// reply in cmd's numbering.
func (s *session) forwardRetryable(t *txnCtx, cmd *Command) (bson.Raw, error) {
	if d, stale := t.rec.advance(t.txnNumber); stale {
		return bson.Marshal(d)
	}
	if !hasStatements(cmd.Name) {
		return s.forwardRetryableWhole(t, cmd)
	}
	stmts := cmd.Statements()
	idx := t.clientIndexes(stmts)
	var run, done []int
	for pos, i := range idx {
		if _, ok := t.rec.stmts[i]; ok && i >= 0 {
			done = append(done, pos)
		} else {
			run = append(run, pos)
		}
	}
	reply := emptyWriteReply(cmd.Name)
	if len(run) > 0 {
		var raw bson.Raw
		var err error
		if reply, raw, err = s.runStatements(t, cmd, stmts, idx, run); reply == nil {
			return raw, err
		}
	}
	if len(done) > 0 {
		reply = t.rec.addRecorded(cmd.Name, reply, done, idx)
	}
	return bson.Marshal(reply)
}

// forwardRetryableWhole executes a retryable command without statements
// (findAndModify) once, and answers a retry from the recorded reply.
func (s *session) forwardRetryableWhole(t *txnCtx, cmd *Command) (bson.Raw, error) {
	if t.rec.whole != nil {
		return t.rec.whole, nil
	}
	raw, err := s.forwardPlain(withoutTxnFields(cmd))
	if err != nil {
		return nil, err
	}
	var reply bson.D
	if err := bson.Unmarshal(raw, &reply); err == nil && replyOK(reply) {
		t.rec.whole = raw
	}
	return raw, nil
}

// runStatements forwards the statements of cmd at positions run (those not
// yet executed), records what the server executed, and returns the reply
// renumbered in cmd's positions. A nil reply means raw (or err) is the
// answer as it is: a fail point's reply, a failed command.
func (s *session) runStatements(t *txnCtx, cmd *Command, stmts []bson.Raw, idx, run []int) (bson.D, bson.Raw, error) {
	sub := cmd
	if len(run) < len(stmts) {
		part := make([]bson.Raw, len(run))
		for j, pos := range run {
			part[j] = stmts[pos]
		}
		sub = cmd.WithStatements(part)
	}
	fpFired, fpReply, fpClose := s.p.onPrimaryWrite()
	if fpFired {
		s.p.counters.fault(FaultFailPoint, 1)
		if fpReply != nil {
			if fpClose {
				return nil, nil, errCloseClient
			}
			raw, err := bson.Marshal(fpReply)
			return nil, raw, err
		}
	}
	raw, err := s.forwardPlain(withoutTxnFields(sub))
	if err != nil {
		return nil, nil, err
	}
	var reply bson.D
	if err := bson.Unmarshal(raw, &reply); err != nil {
		return nil, nil, fmt.Errorf("faultproxy: decode reply: %w", err)
	}
	if !replyOK(reply) {
		return nil, raw, nil
	}
	clientIdx := make([]int, len(run))
	for j, pos := range run {
		clientIdx[j] = idx[pos]
	}
	t.rec.record(cmd.Name, cmd.Ordered(), reply, clientIdx)
	if fpFired && fpClose {
		return nil, nil, errCloseClient
	}
	if len(run) < len(stmts) {
		for _, key := range []string{"writeErrors", "upserted"} {
			if v, ok := field(reply, key); ok {
				if arr, isArr := v.(bson.A); isArr {
					reply = setBeforeOK(reply, key, remapIndexes(arr, run))
				}
			}
		}
	}
	return reply, nil, nil
}

// record notes the statements of a forwarded part that the server
// executed: all but those with a write error, and for an ordered command
// only those before the first write error. clientIdx[j] is the client
// index of the part's statement j (-1: not recorded). Per-statement counts
// of a multi-statement update or delete are not in the reply; the matched
// and modified totals are given to the first executed statements (each
// retryable update or delete statement touches at most one document).
func (r *txnRecord) record(name string, ordered bool, reply bson.D, clientIdx []int) {
	failed := map[int]bool{}
	first := len(clientIdx)
	if v, ok := field(reply, "writeErrors"); ok {
		if arr, isArr := v.(bson.A); isArr {
			for _, el := range arr {
				if i := indexOf(el); i >= 0 {
					failed[i] = true
					first = min(first, i)
				}
			}
		}
	}
	upserted := map[int]any{}
	if v, ok := field(reply, "upserted"); ok {
		if arr, isArr := v.(bson.A); isArr {
			for _, el := range arr {
				if d, isDoc := el.(bson.D); isDoc {
					id, _ := field(d, "_id")
					upserted[indexOf(el)] = id
				}
			}
		}
	}
	total, modified := 0, 0
	if v, ok := field(reply, "n"); ok {
		total, _ = asInt(v)
	}
	if v, ok := field(reply, "nModified"); ok {
		modified, _ = asInt(v)
	}
	matched := total - len(upserted)
	for j, ci := range clientIdx {
		if failed[j] || (ordered && j > first) || ci < 0 {
			continue
		}
		var res stmtResult
		switch {
		case name == "insert":
			res.n = 1
		default:
			if id, ok := upserted[j]; ok {
				res.n, res.upserted, res.hasUpserted = 1, id, true
				break
			}
			if matched > 0 {
				res.n, matched = 1, matched-1
			}
			if modified > 0 {
				res.nModified, modified = 1, modified-1
			}
		}
		r.stmts[ci] = res
	}
}

// addRecorded adds the recorded results of the already executed
// statements (positions done of the command, client indexes idx) to reply.
func (r *txnRecord) addRecorded(name string, reply bson.D, done, idx []int) bson.D {
	n, nModified := 0, 0
	if v, ok := field(reply, "n"); ok {
		n, _ = asInt(v)
	}
	if v, ok := field(reply, "nModified"); ok {
		nModified, _ = asInt(v)
	}
	var upserted bson.A
	if v, ok := field(reply, "upserted"); ok {
		upserted, _ = v.(bson.A)
	}
	for _, pos := range done {
		res := r.stmts[idx[pos]]
		n += int(res.n)
		nModified += int(res.nModified)
		if res.hasUpserted {
			upserted = append(upserted, bson.D{{Key: "index", Value: int32(pos)}, {Key: "_id", Value: res.upserted}})
		}
	}
	reply = setBeforeOK(reply, "n", int32(n))
	if name == "update" {
		reply = setBeforeOK(reply, "nModified", int32(nModified))
		if len(upserted) > 0 {
			sort.SliceStable(upserted, func(i, j int) bool { return indexOf(upserted[i]) < indexOf(upserted[j]) })
			reply = setBeforeOK(reply, "upserted", upserted)
		}
	}
	return reply
}
