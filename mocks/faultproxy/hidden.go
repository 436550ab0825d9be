package faultproxy

// Hidden attempts: a write applied whose reply is lost, then the driver's
// own retry of it (same lsid and txnNumber) meets a fate that makes the
// driver return an error describing that retry only (mongo-driver v2.10.0
// x/mongo/driver/operation.go: the calculateMaxTimeMS and context checks
// before the retry's send, 747-750 and 818-819; a pool-cleared checkout
// recorded by resetForRetry and returned as prevErr, 585 and 691-700; the
// overload backoff cut short by the deadline, which returns the retry's own
// NoWritesPerformed error, 639-646). And a multi update refused on its k-th
// document after the first k-1 were written (write_ops_exec.cpp
// handleError keeps what the statement changed).

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
)

// The fault kinds of this file (keys of Stats.Faults).
const (
	// FaultReplyLost: a retryable write was applied and its reply lost
	// (HiddenAttempts.ReplyLost); the driver's retry meets a RetryFate.
	FaultReplyLost FaultKind = "reply_lost"
	// FaultHiddenRetry: the driver's retry of a write whose reply was
	// lost was answered by its RetryFate (HiddenAttempts.Retries).
	FaultHiddenRetry FaultKind = "hidden_retry"
	// FaultMultiRefused: a multi update applied to its first k-1
	// documents and refused on the k-th (RefuseMultiAt).
	FaultMultiRefused FaultKind = "multi_refused"
)

// RetryFate is what the driver's retry of a write whose first attempt was
// applied (and its reply lost) meets.
type RetryFate string

// The retry fates.
const (
	// RetryCutByDeadline: the first attempt, applied, is answered with
	// 11602 InterruptedDueToReplStateChange labelled RetryableWriteError
	// (as mongod does when a stepdown interrupts a write waiting for its
	// write concern; the proxy announces the new topologyVersion first, so
	// the server is selectable again and the pool is not cleared), whose
	// errmsg carries RetryCutMarker; a client monitor wrapped by
	// HoldUntilDeadline then holds the driver until the call's deadline
	// has passed, so that the retry's calculateMaxTimeMS / context check
	// fails before the send (operation.go 747-750): the driver returns
	// "context deadline exceeded" or ErrDeadlineWouldBeExceeded with no
	// NetworkError label. Without the monitor the retry is sent and
	// answered from the retryable-write record. (After a dropped
	// connection, C67's report, the same check fails only when the
	// deadline falls between the retry's checkout and its send; a
	// deadline met earlier, in server selection or the checkout, makes
	// the driver return the first attempt's network error: a race the bed
	// replaces by this deterministic path to the same error.)
	RetryCutByDeadline RetryFate = "cut_by_deadline"
	// RetryPoolCleared: the first attempt's connection is closed (the
	// driver clears its pool); the next connection the pool opens is held
	// in its handshake while the monitor's connection is closed, so the
	// pool is cleared again under the retry waiting for its connection
	// (it gets poolClearedError, RetryablePoolError); then every new
	// connection is refused until the first attempt's deadline (its
	// maxTimeMS) has passed, so the driver returns the pool-cleared error
	// (prevErr). Every client of the proxy is cut off meanwhile.
	RetryPoolCleared RetryFate = "pool_cleared"
	// RetryOverloaded: the first attempt's connection is closed; each
	// retry is answered {ok: 0, code: 462, codeName: "IngressRequestRateLimitExceeded"},
	// labelled RetryableError, SystemOverloadedError and
	// NoWritesPerformed, with a baseBackoffMS longer than the call's
	// remaining time when the retry carries maxTimeMS (1 ms otherwise),
	// and RetryCutMarker in its errmsg: HoldUntilDeadline holds the
	// driver until the deadline, so the overload backoff (jittered,
	// capped at 10 s) is always longer than the time left, and the
	// driver returns the retry's own error (operation.go 639-646).
	// Without the monitor it does so unless the jitter draws a backoff
	// shorter than the time left.
	RetryOverloaded RetryFate = "overloaded"
	// RetryIncompleteHistory: the first attempt's connection is closed;
	// the retry is answered {ok: 0, code: 217, codeName:
	// "IncompleteTransactionHistory"}, as mongod does when it cannot tell
	// whether the statement ran (transaction_participant.cpp
	// _checkStatementExecuted; jstests/sharding/resharding_retryable_writes.js).
	RetryIncompleteHistory RetryFate = "incomplete_history"
)

// RetryCutMarker is part of the errmsg of a RetryCutByDeadline first
// attempt's reply and of a RetryOverloaded retry's reply:
// HoldUntilDeadline holds the driver on it.
const RetryCutMarker = "faultproxy: reply lost, retry to be cut by the deadline"

// HiddenAttempts keeps the writes whose reply a ReplyLost fault lost and
// answers their retries. Make one per proxy with NewHiddenAttempts; put
// its Retries rule first in the script, and ReplyLost faults wherever
// (usually in a RandomSchedule). Safe for concurrent use.
type HiddenAttempts struct {
	p       *Proxy
	mu      sync.Mutex
	pending map[string]pendingRetry
	lost    map[RetryFate]int
	met     map[RetryFate]int
	trap    poolTrap
}

type pendingRetry struct {
	fate     RetryFate
	deadline time.Time // zero without maxTimeMS
}

// NewHiddenAttempts returns the hidden-attempt state of p and installs its
// connection gate (RetryPoolCleared) in p.
func NewHiddenAttempts(p *Proxy) *HiddenAttempts {
	h := &HiddenAttempts{p: p, pending: map[string]pendingRetry{}, lost: map[RetryFate]int{}, met: map[RetryFate]int{}}
	p.hidden.Store(h)
	return h
}

// ReplyLost forwards a retryable write (it is applied and recorded for its
// lsid and txnNumber), loses its reply as fate says, and leaves the
// retry to the Retries rule. A write without txnNumber (retryable writes
// off, a multi statement) is applied and its connection closed.
func (h *HiddenAttempts) ReplyLost(fate RetryFate) Fault {
	return Fault{kind: FaultReplyLost, handler: func(cmd *Command, forward func(*Command) (bson.Raw, error)) (bson.Raw, error) {
		if _, err := forward(cmd); err != nil {
			return nil, err
		}
		key, ok := retryKey(cmd)
		if !ok {
			return nil, ErrCloseConnection
		}
		var deadline time.Time
		if ms, ok := maxTimeMS(cmd); ok {
			deadline = time.Now().Add(time.Duration(ms) * time.Millisecond)
		}
		h.mu.Lock()
		h.pending[key] = pendingRetry{fate: fate, deadline: deadline}
		h.lost[fate]++
		h.mu.Unlock()
		switch fate {
		case RetryCutByDeadline:
			// As the existing ApplyThenError 11602 faults do: the new
			// topologyVersion is announced first, so the server is
			// selectable again when the driver retries.
			h.p.topologyEvent()
			return bson.Marshal(h.p.errorReply(CommandError{Code: 11602, CodeName: "InterruptedDueToReplStateChange",
				Message: "operation was interrupted; " + RetryCutMarker, Labels: []string{"RetryableWriteError"}}))
		case RetryPoolCleared:
			h.trap.arm(deadline)
		}
		return nil, ErrCloseConnection
	}}
}

// Retries is the rule that answers the retries of the writes ReplyLost
// lost; place it before the rules that may fire on the same commands.
func (h *HiddenAttempts) Retries() *Rule {
	return OnAny().Where(h.IsRetry).Always().Do(Fault{kind: FaultHiddenRetry, handler: h.answerRetry})
}

// IsRetry reports whether c is a retry (same lsid and txnNumber) of a
// write whose reply ReplyLost lost: rules that must fire on first
// attempts only exclude it in their Where.
func (h *HiddenAttempts) IsRetry(c *Command) bool {
	key, ok := retryKey(c)
	if !ok {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	_, ok = h.pending[key]
	return ok
}

func (h *HiddenAttempts) answerRetry(cmd *Command, forward func(*Command) (bson.Raw, error)) (bson.Raw, error) {
	key, _ := retryKey(cmd)
	h.mu.Lock()
	pr := h.pending[key]
	h.met[pr.fate]++
	h.mu.Unlock()
	switch pr.fate {
	case RetryOverloaded:
		backoff := int64(1)
		if ms, ok := maxTimeMS(cmd); ok {
			backoff = 4*ms + 10_000
		}
		return bson.Marshal(errorReplyDoc(CommandError{Code: 462, CodeName: "IngressRequestRateLimitExceeded",
			Message: "faultproxy: the server is overloaded; " + RetryCutMarker,
			Labels:  []string{"RetryableError", "SystemOverloadedError", "NoWritesPerformed"},
			Extra:   bson.D{{Key: "baseBackoffMS", Value: backoff}}}))
	case RetryIncompleteHistory:
		return bson.Marshal(errorReplyDoc(CommandError{Code: 217, CodeName: "IncompleteTransactionHistory",
			Message: "Incomplete history detected for transaction " + key[strings.LastIndexByte(key, '/')+1:] + " on session " + key[:strings.LastIndexByte(key, '/')]}))
	}
	// Sent after all (no HoldUntilDeadline, the trap released): the
	// retryable-write record answers for the applied statements.
	return forward(cmd)
}

// Counts returns how many writes each fate's ReplyLost applied and lost,
// and how many retries each fate answered.
func (h *HiddenAttempts) Counts() (lost, retries map[RetryFate]int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	lost, retries = map[RetryFate]int{}, map[RetryFate]int{}
	for k, v := range h.lost {
		lost[k] = v
	}
	for k, v := range h.met {
		retries[k] = v
	}
	return lost, retries
}

// retryKey is a retryable write's lsid id and txnNumber.
func retryKey(cmd *Command) (string, bool) {
	if !isRetryableWrite(cmd.Name) {
		return "", false
	}
	tn, err := cmd.Body.LookupErr("txnNumber")
	if err != nil {
		return "", false
	}
	num, ok := tn.AsInt64OK()
	if !ok {
		return "", false
	}
	lsid, err := cmd.Body.LookupErr("lsid")
	if err != nil {
		return "", false
	}
	id := lsid.Value
	if d, ok := lsid.DocumentOK(); ok {
		if v, err := d.LookupErr("id"); err == nil {
			id = v.Value
		}
	}
	return fmt.Sprintf("%x/%d", id, num), true
}

func maxTimeMS(cmd *Command) (int64, bool) {
	v, err := cmd.Body.LookupErr("maxTimeMS")
	if err != nil {
		return 0, false
	}
	return v.AsInt64OK()
}

// HoldUntilDeadline wraps inner (nil: none) so that a CommandFailedEvent
// whose failure carries RetryCutMarker blocks until the operation's
// context is done, when it has a deadline: the driver's retry then meets
// its pre-send checks with the deadline passed (RetryCutByDeadline).
// Every other event goes to inner unchanged.
func HoldUntilDeadline(inner *event.CommandMonitor) *event.CommandMonitor {
	out := &event.CommandMonitor{Failed: func(ctx context.Context, e *event.CommandFailedEvent) {
		if _, ok := ctx.Deadline(); ok && e.Failure != nil && strings.Contains(e.Failure.Error(), RetryCutMarker) {
			<-ctx.Done()
		}
		if inner != nil && inner.Failed != nil {
			inner.Failed(ctx, e)
		}
	}}
	if inner != nil {
		out.Started, out.Succeeded = inner.Started, inner.Succeeded
	}
	return out
}

// poolTrap is RetryPoolCleared's connection gate. Armed, it lets the
// first new connection through (the monitor's, which makes the server
// selectable again after the dropped connection), holds the second in its
// handshake (the pool's, for the retry) while it closes the first, and
// then refuses new connections until the deadline.
type poolTrap struct {
	mu       sync.Mutex
	armed    bool
	fresh    int
	first    *session
	deadline time.Time
	refuse   time.Time // new connections are closed until then
}

func (t *poolTrap) arm(deadline time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.armed, t.fresh, t.first, t.deadline = true, 0, nil, deadline
}

var errRefused = errors.New("faultproxy: new connection refused (pool-clear trap)")

// hiddenGate runs on every message a session receives; it acts on a
// session's first message only.
func (s *session) hiddenGate() error {
	if s.hiddenSeen {
		return nil
	}
	s.hiddenSeen = true
	h := s.p.hidden.Load()
	if h == nil {
		return nil
	}
	t := &h.trap
	t.mu.Lock()
	if time.Now().Before(t.refuse) {
		t.mu.Unlock()
		return errRefused
	}
	if !t.armed {
		t.mu.Unlock()
		return nil
	}
	t.fresh++
	if t.fresh == 1 {
		t.first = s
		t.mu.Unlock()
		return nil
	}
	first, deadline := t.first, t.deadline
	t.armed = false
	margin := 50 * time.Millisecond
	if !deadline.IsZero() {
		t.refuse = deadline.Add(margin)
	}
	t.mu.Unlock()
	// Closing the monitor's connection clears the pool while this
	// connection's handshake holds the retry in the wait queue.
	first.closeConns()
	if !deadline.IsZero() {
		s.sleep(time.Until(deadline.Add(margin)))
	}
	return errRefused
}
