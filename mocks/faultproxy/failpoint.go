package faultproxy

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// Fail points like mongod's (server code: src/mongo/util/fail_point.h,
// the failCommand fail point in src/mongo/db/commands.cpp, and
// onPrimaryTransactionalWrite in src/mongo/db/ops/write_ops_exec.cpp; the
// drivers' spec tests configure them with configureFailPoint). The proxy
// answers configureFailPoint itself, with any backend, and never forwards
// it.
//
// failCommand: {configureFailPoint: "failCommand", mode, data} where mode
// is "alwaysOn", "off", {times: n} or {skip: n}, and data holds
// failCommands (command names, required), and optionally appName (only
// connections whose handshake named this application), errorCode (answer
// ok: 0 with this code; the command does not run), errorLabels (the
// labels of that reply or of the write concern error reply, exactly),
// writeConcernError (the command runs, then this document is added as
// the reply's writeConcernError), closeConnection (close the connection;
// the command does not run), blockConnection with blockTimeMS (wait that
// long first). Without errorLabels, a retryable write (a command carrying
// txnNumber outside a transaction) whose error code, or write concern
// error code, is a retryable one gets the RetryableWriteError label, as
// the server adds it for clients of wire version 9 (4.4) and later.
//
// onPrimaryTransactionalWrite (replica-set mode with an upstream): when a
// write carrying txnNumber is about to execute statements (not when a
// retry is answered from the record), the write is applied and then the
// connection closes (data.closeConnection, default true); with
// data.failBeforeCommitExceptionCode nothing is applied and the
// connection closes, or, with closeConnection false, the command fails
// with that code.

// FaultFailPoint counts commands on which a fail point configured with
// configureFailPoint acted (error, close, write concern error or block).
const FaultFailPoint FaultKind = "fail_point"

// retryableWriteCodes are the codes for which the server adds the
// RetryableWriteError label to a retryable write's error (retryable
// writes specification, "Determining Retryable Errors"; server
// ErrorLabelBuilder).
var retryableWriteCodes = map[int32]bool{
	11600: true, 11602: true, 10107: true, 13435: true, 13436: true, 189: true, 91: true,
	7: true, 6: true, 89: true, 9001: true, 262: true,
}

// codeNames names the codes fail points commonly use (server
// error_codes.yml), for the reply's codeName.
var codeNames = map[int32]string{
	2: "BadValue", 6: "HostUnreachable", 7: "HostNotFound", 8: "UnknownError", 9: "FailedToParse",
	11: "UserNotFound", 13: "Unauthorized", 20: "IllegalOperation", 24: "LockTimeout", 50: "MaxTimeMSExpired",
	64: "WriteConcernTimeout", 79: "UnknownReplWriteConcern", 89: "NetworkTimeout", 91: "ShutdownInProgress",
	100: "UnsatisfiableWriteConcern", 112: "WriteConflict", 121: "DocumentValidationFailure",
	189: "PrimarySteppedDown", 225: "TransactionTooOld", 251: "NoSuchTransaction", 262: "ExceededTimeLimit",
	9001: "SocketException", 10107: "NotWritablePrimary", 11000: "DuplicateKey", 11600: "InterruptedAtShutdown",
	11601: "Interrupted", 11602: "InterruptedDueToReplStateChange", 13435: "NotPrimaryNoSecondaryOk",
	13436: "NotPrimaryOrSecondary", 10058: "LegacyNotPrimary", 16500: "RequestRateTooLarge",
}

type failMode struct {
	on    bool
	times int64 // remaining activations; -1: no limit
	skip  int64 // matching evaluations still to skip
}

// fire decides one evaluation of an enabled fail point.
func (m *failMode) fire() bool {
	if !m.on {
		return false
	}
	if m.skip > 0 {
		m.skip--
		return false
	}
	if m.times == 0 {
		m.on = false
		return false
	}
	if m.times > 0 {
		m.times--
		if m.times == 0 {
			m.on = false
		}
	}
	return true
}

type failCommandData struct {
	commands     map[string]bool
	appName      string
	errorCode    int32
	errorLabels  []string
	hasLabels    bool
	wce          bson.Raw
	closeConn    bool
	block        bool  // blockConnection
	blockMS      int64 // blockTimeMS
	beforeCommit int32 // onPrimaryTransactionalWrite failBeforeCommitExceptionCode
}

type failPoints struct {
	armed     atomic.Bool // some fail point is on: the fast path skips mu
	mu        sync.Mutex
	failCmd   failMode
	failData  failCommandData
	onPrimary failMode
	opData    failCommandData
}

// rearm records whether any fail point is still on; fp.mu is held.
func (fp *failPoints) rearm() { fp.armed.Store(fp.failCmd.on || fp.onPrimary.on) }

// configureFailPoint handles the command and returns its reply.
func (fp *failPoints) configure(cmd *Command) bson.D {
	name, _ := cmd.Body.Lookup("configureFailPoint").StringValueOK()
	mode, err := parseFailMode(cmd.Body.Lookup("mode"))
	if err != nil {
		return errorReplyDoc(CommandError{Code: 2, CodeName: "BadValue", Message: err.Error()})
	}
	data := failCommandData{closeConn: name == "onPrimaryTransactionalWrite"}
	if d, ok := cmd.Body.Lookup("data").DocumentOK(); ok {
		if data, err = parseFailData(d, data); err != nil {
			return errorReplyDoc(CommandError{Code: 2, CodeName: "BadValue", Message: err.Error()})
		}
	}
	fp.mu.Lock()
	defer fp.mu.Unlock()
	switch name {
	case "failCommand":
		if mode.on && len(data.commands) == 0 {
			return errorReplyDoc(CommandError{Code: 2, CodeName: "BadValue", Message: "failCommand: data.failCommands must name at least one command"})
		}
		fp.failCmd, fp.failData = mode, data
	case "onPrimaryTransactionalWrite":
		fp.onPrimary, fp.opData = mode, data
	default:
		return errorReplyDoc(CommandError{Code: 2, CodeName: "BadValue",
			Message: fmt.Sprintf("faultproxy: no fail point named %q (failCommand and onPrimaryTransactionalWrite are emulated)", name)})
	}
	fp.rearm()
	return okReply(bson.E{Key: "count", Value: int32(0)})
}

func parseFailMode(v bson.RawValue) (failMode, error) {
	if s, ok := v.StringValueOK(); ok {
		switch s {
		case "alwaysOn":
			return failMode{on: true, times: -1}, nil
		case "off":
			return failMode{}, nil
		}
		return failMode{}, fmt.Errorf("configureFailPoint: unknown mode %q", s)
	}
	d, ok := v.DocumentOK()
	if !ok {
		return failMode{}, fmt.Errorf("configureFailPoint: mode must be a string or a document")
	}
	if n, err := d.LookupErr("times"); err == nil {
		k, ok := n.AsInt64OK()
		if !ok || k < 0 {
			return failMode{}, fmt.Errorf("configureFailPoint: bad times %v", n)
		}
		return failMode{on: k > 0, times: k}, nil
	}
	if n, err := d.LookupErr("skip"); err == nil {
		k, ok := n.AsInt64OK()
		if !ok || k < 0 {
			return failMode{}, fmt.Errorf("configureFailPoint: bad skip %v", n)
		}
		return failMode{on: true, times: -1, skip: k}, nil
	}
	return failMode{}, fmt.Errorf("configureFailPoint: mode %v is not supported (times, skip, alwaysOn, off)", d)
}

func parseFailData(d bson.Raw, out failCommandData) (failCommandData, error) {
	elems, err := d.Elements()
	if err != nil {
		return out, err
	}
	for _, e := range elems {
		v := e.Value()
		switch e.Key() {
		case "failCommands":
			arr, ok := v.ArrayOK()
			if !ok {
				return out, fmt.Errorf("failCommand: failCommands must be an array")
			}
			vals, _ := arr.Values()
			out.commands = map[string]bool{}
			for _, c := range vals {
				if s, ok := c.StringValueOK(); ok {
					out.commands[s] = true
				}
			}
		case "appName":
			out.appName, _ = v.StringValueOK()
		case "errorCode":
			n, ok := v.AsInt64OK()
			if !ok {
				return out, fmt.Errorf("failCommand: errorCode must be a number")
			}
			out.errorCode = int32(n)
		case "failBeforeCommitExceptionCode":
			n, ok := v.AsInt64OK()
			if !ok {
				return out, fmt.Errorf("onPrimaryTransactionalWrite: failBeforeCommitExceptionCode must be a number")
			}
			out.beforeCommit = int32(n)
		case "errorLabels":
			arr, ok := v.ArrayOK()
			if !ok {
				return out, fmt.Errorf("failCommand: errorLabels must be an array")
			}
			vals, _ := arr.Values()
			out.hasLabels, out.errorLabels = true, []string{}
			for _, l := range vals {
				if s, ok := l.StringValueOK(); ok {
					out.errorLabels = append(out.errorLabels, s)
				}
			}
		case "writeConcernError":
			doc, ok := v.DocumentOK()
			if !ok {
				return out, fmt.Errorf("failCommand: writeConcernError must be a document")
			}
			out.wce = doc
		case "closeConnection":
			out.closeConn, _ = v.BooleanOK()
		case "blockConnection":
			out.block, _ = v.BooleanOK()
		case "blockTimeMS":
			n, ok := v.AsInt64OK()
			if !ok || n < 0 {
				return out, fmt.Errorf("failCommand: blockTimeMS must be a non-negative number")
			}
			out.blockMS = n
		}
	}
	return out, nil
}

// failAction is what the fail points do to one command.
type failAction struct {
	fired     bool
	block     time.Duration
	errReply  bson.D   // answer this, do not run the command
	code      int32    // errReply's code
	closeConn bool     // close, do not run the command
	wce       bson.Raw // run, then add this writeConcernError
	labels    []string // top-level errorLabels added with wce
}

// retryableWrite reports whether cmd is a retryable write: a write
// carrying txnNumber outside a multi-document transaction.
func retryableWrite(cmd *Command) bool {
	if !isRetryableWrite(cmd.Name) || inTransaction(cmd) {
		return false
	}
	_, err := cmd.Body.LookupErr("txnNumber")
	return err == nil
}

// failPointAction evaluates the fail points for cmd, sent on a connection
// whose handshake named appName.
func (p *Proxy) failPointAction(cmd *Command, appName string) failAction {
	fp := p.failPoints
	if !fp.armed.Load() {
		return failAction{}
	}
	fp.mu.Lock()
	defer fp.mu.Unlock()
	defer fp.rearm()
	var a failAction
	rw := retryableWrite(cmd)
	if fp.failData.commands[cmd.Name] && (fp.failData.appName == "" || fp.failData.appName == appName) && fp.failCmd.fire() {
		d := fp.failData
		a.fired = true
		if d.block {
			a.block = time.Duration(d.blockMS) * time.Millisecond
		}
		switch {
		case d.closeConn:
			a.closeConn = true
		case d.errorCode != 0:
			e := CommandError{Code: d.errorCode, CodeName: codeNames[d.errorCode],
				Message: "Failing command via 'failCommand' failpoint"}
			e.Labels = p.serverLabels(d, rw, d.errorCode)
			a.errReply, a.code = p.errorReply(e), d.errorCode
		case d.wce != nil:
			a.wce = d.wce
			code := int32(0)
			if c, err := d.wce.LookupErr("code"); err == nil {
				if n, ok := c.AsInt64OK(); ok {
					code = int32(n)
				}
			}
			a.labels = p.serverLabels(d, rw, code)
		}
	}
	return a
}

// onPrimaryWrite evaluates onPrimaryTransactionalWrite for a retryable
// write about to execute statements (the server evaluates it where it
// commits, so a retry answered from the record does not). It returns
// whether it fired, the error reply to send instead of executing (nil:
// execute), and whether to close the connection (after executing when
// errReply is nil; instead of replying when not).
func (p *Proxy) onPrimaryWrite() (fired bool, errReply bson.D, closeConn bool) {
	fp := p.failPoints
	if !fp.armed.Load() {
		return false, nil, false
	}
	fp.mu.Lock()
	defer fp.mu.Unlock()
	defer fp.rearm()
	if !fp.onPrimary.fire() {
		return false, nil, false
	}
	d := fp.opData
	if c := d.beforeCommit; c != 0 {
		e := CommandError{Code: c, CodeName: codeNames[c], Message: "Failing command via 'onPrimaryTransactionalWrite' failpoint"}
		e.Labels = p.serverLabels(d, true, c)
		errReply = p.errorReply(e)
	}
	return true, errReply, d.closeConn
}

// serverLabels returns the errorLabels the server puts on a fail point's
// error: data.errorLabels when given, else RetryableWriteError for a
// retryable code on a retryable write (wire version 9 and later).
func (p *Proxy) serverLabels(d failCommandData, retryable bool, code int32) []string {
	if d.hasLabels {
		return d.errorLabels
	}
	if retryable && retryableWriteCodes[code] && p.cfg.maxWireVersion >= 9 {
		return []string{"RetryableWriteError"}
	}
	return nil
}

// addFailPointWCE adds a fail point's writeConcernError (as given) and
// labels to a reply.
func addFailPointWCE(body bson.Raw, wce bson.Raw, labels []string) (bson.Raw, error) {
	var reply bson.D
	if err := bson.Unmarshal(body, &reply); err != nil {
		return nil, fmt.Errorf("faultproxy: decode reply: %w", err)
	}
	reply = setBeforeOK(reply, "writeConcernError", wce)
	if len(labels) > 0 {
		arr := bson.A{}
		for _, l := range labels {
			arr = append(arr, l)
		}
		reply = setBeforeOK(reply, "errorLabels", arr)
	}
	return bson.Marshal(reply)
}

// clientAppName returns client.application.name of a handshake.
func clientAppName(body bson.Raw) (string, bool) {
	v, err := body.LookupErr("client", "application", "name")
	if err != nil {
		return "", false
	}
	return v.StringValueOK()
}
