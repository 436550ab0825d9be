package faultproxy

import (
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// Replica-set mode in front of an upstream server: the proxy presents the
// upstream (a standalone, e.g. the embedded FerretDB) to the driver as the
// primary of a one-member replica set, and does the server's
// retryable-write bookkeeping itself (retryable.go).

// maxAwaitHello caps how long the proxy holds an awaitable hello. The
// driver's streaming monitor sends maxAwaitTimeMS = heartbeatFrequencyMS
// (10 s by default) and a server holds the hello that long when nothing
// changes; the proxy answers after at most 500 ms, because after a dropped
// connection the Go driver (v2.10) sometimes waits for the monitor's held
// hello before it retries, which would cost a full 10 s per fault.
const maxAwaitHello = 500 * time.Millisecond

// emulated reports whether the proxy emulates a replica-set primary or a
// mongos in front of an upstream server: it rewrites hello, streams
// awaitable hellos, and does the retryable-write bookkeeping.
func (s *session) emulated() bool { return s.p.emulated() }

func (p *Proxy) emulated() bool {
	return (p.cfg.replicaSet != "" || p.cfg.sharding != nil) && p.cfg.upstream != ""
}

// rewritesHello reports whether the upstream's hello replies are rewritten:
// in replica-set or sharded mode, or to announce Limits.
func (s *session) rewritesHello() bool {
	return s.p.cfg.upstream != "" && (s.emulated() || s.p.hasLimits())
}

func isHello(name string) bool {
	return name == "hello" || name == "isMaster" || name == "ismaster"
}

// replicaSetFields are the hello fields of the primary of a one-member
// replica set named set whose only member is addr, in the server's order:
// the writable-primary flag first, then topologyVersion, setName,
// setVersion, hosts, primary, me, secondary, electionId.
func (p *Proxy) replicaSetFields(legacy bool) bson.D {
	return append(p.writablePrimaryFields(legacy), p.memberFields()...)
}

// memberFields are the hello fields that make the proxy the primary of a
// one-member replica set, in the server's order: setName, setVersion,
// hosts, primary, me, secondary, electionId.
func (p *Proxy) memberFields() []bson.E {
	addr := p.Addr()
	return []bson.E{
		{Key: "setName", Value: p.cfg.replicaSet},
		{Key: "setVersion", Value: int32(1)},
		{Key: "hosts", Value: bson.A{addr}},
		{Key: "primary", Value: addr},
		{Key: "me", Value: addr},
		{Key: "secondary", Value: false},
		{Key: "electionId", Value: nullElectionID},
	}
}

// writablePrimaryFields are the first hello fields of a writable primary
// and of a mongos alike: the writable-primary flag (ismaster in a reply
// to the legacy hello) and topologyVersion, with the proxy's process id
// and current counter.
func (p *Proxy) writablePrimaryFields(legacy bool) bson.D {
	p.topoMu.Lock()
	counter := p.topoCounter
	p.topoMu.Unlock()
	primary := bson.E{Key: "isWritablePrimary", Value: true}
	if legacy {
		primary.Key = "ismaster"
	}
	return bson.D{
		primary,
		{Key: "topologyVersion", Value: bson.D{
			{Key: "processId", Value: p.procID},
			{Key: "counter", Value: counter},
		}},
	}
}

// rewriteHello turns an upstream server's hello reply into the reply of a
// replica-set primary: the replica-set fields replace any the server sent,
// logicalSessionTimeoutMinutes is added (30, the server's default) when
// missing so that the driver uses sessions and retryable writes, and every
// other field (limits, wire versions, connectionId, ...) is kept. A reply
// that is not ok is returned unchanged.
func (p *Proxy) rewriteHello(body bson.Raw, legacy bool) (bson.Raw, error) {
	var reply bson.D
	if err := bson.Unmarshal(body, &reply); err != nil {
		return nil, fmt.Errorf("faultproxy: decode hello reply: %w", err)
	}
	if !replyOK(reply) {
		return body, nil
	}
	if !p.emulated() {
		// Limits only: the server's reply with the announced limits,
		// without topologyVersion, so that the driver polls instead of
		// streaming hellos the proxy would have to rewrite one by one.
		out := bson.D{}
		for _, e := range p.withLimits(reply) {
			if e.Key != "topologyVersion" {
				out = append(out, e)
			}
		}
		return bson.Marshal(out)
	}
	drop := map[string]bool{
		"isWritablePrimary": true, "ismaster": true, "topologyVersion": true, "setName": true,
		"setVersion": true, "hosts": true, "passives": true, "arbiters": true, "primary": true,
		"me": true, "secondary": true, "arbiterOnly": true, "electionId": true, "msg": true,
	}
	out := p.replicaSetFields(legacy)
	if p.cfg.sharding != nil {
		out = p.mongosFields(legacy)
	}
	reply = p.withLimits(reply)
	hasTimeout := false
	for _, e := range reply {
		if drop[e.Key] || e.Key == "ok" {
			continue
		}
		if e.Key == "logicalSessionTimeoutMinutes" {
			hasTimeout = true
		}
		out = append(out, e)
	}
	if !hasTimeout {
		out = append(out, bson.E{Key: "logicalSessionTimeoutMinutes", Value: int32(30)})
	}
	out = append(out, bson.E{Key: "ok", Value: 1.0})
	return bson.Marshal(out)
}

// helloWait returns what an awaitable hello (one carrying maxAwaitTimeMS
// and topologyVersion, sent by the driver's streaming monitor) asks: how
// long the server may hold it (maxAwaitTimeMS, capped at maxAwaitHello)
// and the topologyVersion counter the client knows; ok is false for a
// plain hello, answered at once.
func helloWait(cmd *Command) (d time.Duration, counter int64, ok bool) {
	tv, err := cmd.Body.LookupErr("topologyVersion")
	if err != nil {
		return 0, 0, false
	}
	v, err := cmd.Body.LookupErr("maxAwaitTimeMS")
	if err != nil {
		return 0, 0, false
	}
	ms, isInt := v.AsInt64OK()
	if !isInt || ms < 0 {
		return 0, 0, false
	}
	counter = -1
	if doc, isDoc := tv.DocumentOK(); isDoc {
		if c, err := doc.LookupErr("counter"); err == nil {
			counter, _ = c.AsInt64OK()
		}
	}
	return min(time.Duration(ms)*time.Millisecond, maxAwaitHello), counter, true
}

// waitTopology waits as the server does for an awaitable hello: not at
// all when the client's counter is older than the proxy's, otherwise for
// d or until the topology changes (topologyEvent). It returns false when
// the proxy is closing.
func (s *session) waitTopology(d time.Duration, known int64) bool {
	s.p.topoMu.Lock()
	event, counter := s.p.topoCh, s.p.topoCounter
	s.p.topoMu.Unlock()
	if known < counter {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-event:
	case <-s.p.done:
		return false
	}
	return true
}

// serveHello answers a hello or isMaster in replica-set mode with an
// upstream: the upstream's reply, rewritten (rewriteHello). An awaitable
// hello is held as the server holds it (waitTopology); with the
// exhaustAllowed flag the replies are streamed (moreToCome), one each
// maxAwaitTimeMS or at each topology change, until the client closes the
// connection, as the server's streaming protocol does (server discovery
// and monitoring specification, "Streaming Protocol").
func (s *session) serveHello(cmd *Command, responseTo int32, exhaust bool) error {
	legacy := cmd.Name != "hello"
	d, known, awaitable := helloWait(cmd)
	for {
		if awaitable && !s.waitTopology(d, known) {
			return errCloseClient
		}
		s.p.topoMu.Lock()
		known = s.p.topoCounter
		s.p.topoMu.Unlock()
		body, err := s.forwardPlain(cmd)
		if err == nil {
			body, err = s.p.rewriteHello(body, legacy)
		}
		if err != nil {
			return err
		}
		if !awaitable || !exhaust {
			return s.writeClient(encodeReplyMsg(body, responseTo))
		}
		msg, id := encodeStreamingReply(body, responseTo)
		if err := s.writeClient(msg); err != nil {
			return err
		}
		responseTo = id
	}
}

// stateChangeCodes are the server's NotPrimaryError and ShutdownError
// categories (error_codes.yml): the errors after which the driver marks
// the server Unknown unless the reply's topologyVersion is stale (server
// discovery and monitoring specification).
var stateChangeCodes = map[int32]bool{
	10107: true, 13435: true, 13436: true, 189: true, 11602: true, 10058: true, // NotPrimaryError
	11600: true, 91: true, // ShutdownError
}

// withTopologyVersion adds the current topologyVersion to a reply whose
// write concern error has a state-change code, in replica-set mode with an
// upstream, as errorReply does for error replies.
func (p *Proxy) withTopologyVersion(body bson.Raw, code int32) (bson.Raw, error) {
	if !p.emulated() || !stateChangeCodes[code] {
		return body, nil
	}
	var reply bson.D
	if err := bson.Unmarshal(body, &reply); err != nil {
		return nil, fmt.Errorf("faultproxy: decode reply: %w", err)
	}
	return bson.Marshal(setBeforeOK(reply, "topologyVersion", p.topologyVersion()))
}

func (p *Proxy) topologyVersion() bson.D {
	p.topoMu.Lock()
	defer p.topoMu.Unlock()
	return bson.D{{Key: "processId", Value: p.procID}, {Key: "counter", Value: p.topoCounter}}
}

// errorReply is the error reply for e. In replica-set mode with an
// upstream, a state-change error carries the current topologyVersion, as
// the server's does, so that a driver that has already seen the hello
// announcing the change treats it as stale.
func (p *Proxy) errorReply(e CommandError) bson.D {
	d := errorReplyDoc(e)
	if !p.emulated() || !stateChangeCodes[e.Code] {
		return d
	}
	return append(d[:len(d):len(d)], bson.E{Key: "topologyVersion", Value: p.topologyVersion()})
}

// topologyEvent increments topologyVersion.counter and answers every held
// awaitable hello at once. The proxy calls it when it answers with a
// state-change error (NotPrimary and Shutdown categories), as a reply or a
// write concern error: the driver then marks the server Unknown and waits
// for its monitor's next hello, which a server whose state changed
// answers at once. A dropped connection needs none: the driver cancels its
// monitor's check itself (server discovery and monitoring specification).
func (p *Proxy) topologyEvent() {
	p.topoMu.Lock()
	p.topoCounter++
	close(p.topoCh)
	p.topoCh = make(chan struct{})
	p.topoMu.Unlock()
}

// errTransactions is the reply to a command that starts or continues a
// multi-document transaction in replica-set mode with an upstream.
func errTransactions() bson.D {
	return errorReplyDoc(CommandError{
		Code: 20, CodeName: "IllegalOperation",
		Message: "transactions are not supported by the faultproxy bed",
	})
}

// inTransaction reports whether cmd starts or continues a multi-document
// transaction (startTransaction: true, autocommit: false, or
// commitTransaction / abortTransaction).
func inTransaction(cmd *Command) bool {
	if cmd.Name == "commitTransaction" || cmd.Name == "abortTransaction" {
		return true
	}
	if v, err := cmd.Body.LookupErr("startTransaction"); err == nil && v.Type == bson.TypeBoolean && v.Boolean() {
		return true
	}
	if v, err := cmd.Body.LookupErr("autocommit"); err == nil && v.Type == bson.TypeBoolean && !v.Boolean() {
		return true
	}
	return false
}
