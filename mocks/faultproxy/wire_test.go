package faultproxy

import (
	"context"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"net"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver/wiremessage"
)

func rawDoc(t *testing.T, d bson.D) bsoncore.Document {
	t.Helper()
	b, err := bson.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestOpMsgRoundTripWithSequences(t *testing.T) {
	m := &opMsg{
		body: rawDoc(t, bson.D{{Key: "insert", Value: "users"}, {Key: "$db", Value: "app"}}),
		sequences: []sequence{{identifier: "documents", docs: []bsoncore.Document{
			rawDoc(t, bson.D{{Key: "_id", Value: 1}}), rawDoc(t, bson.D{{Key: "_id", Value: 2}}),
		}}},
	}
	raw := m.encode(42, 0)
	got, err := parseOpMsg(raw)
	if err != nil {
		t.Fatal(err)
	}
	cmd := newCommand(got, 42)
	if cmd.Name != "insert" || cmd.Namespace != "app.users" || len(cmd.Statements()) != 2 || !cmd.Ordered() {
		t.Fatalf("command = %+v", cmd)
	}
	// Statements inline in the body are found too.
	inline := newCommand(&opMsg{body: rawDoc(t, bson.D{
		{Key: "delete", Value: "users"}, {Key: "deletes", Value: bson.A{bson.D{{Key: "q", Value: bson.D{}}}}},
		{Key: "ordered", Value: false}, {Key: "$db", Value: "app"},
	})}, 1)
	if len(inline.Statements()) != 1 || inline.Ordered() {
		t.Fatalf("inline statements = %v, ordered %v", inline.Statements(), inline.Ordered())
	}
	moved := inline.WithStatements(nil)
	if _, err := moved.Body.LookupErr("deletes"); err == nil || len(moved.Sequences) != 1 {
		t.Fatalf("WithStatements kept the inline copy: %v", moved.Body)
	}
}

func TestOpMsgChecksum(t *testing.T) {
	m := &opMsg{body: rawDoc(t, bson.D{{Key: "ping", Value: 1}, {Key: "$db", Value: "admin"}})}
	raw := m.encode(7, 0)
	// Add a checksum by hand: set the flag, append CRC-32C, fix the length.
	raw[16] |= byte(wiremessage.ChecksumPresent)
	raw = binary.LittleEndian.AppendUint32(raw, 0)
	binary.LittleEndian.PutUint32(raw, uint32(len(raw)))
	binary.LittleEndian.PutUint32(raw[len(raw)-4:], crc32.Checksum(raw[:len(raw)-4], castagnoli))
	if _, err := parseOpMsg(raw); err != nil {
		t.Fatalf("valid checksum rejected: %v", err)
	}
	raw[len(raw)-1] ^= 0xff
	if _, err := parseOpMsg(raw); err == nil {
		t.Fatal("bad checksum accepted")
	}
}

// TestExhaustRepliesAreRelayed puts the proxy in front of a fake upstream
// that answers each request with a moreToCome reply followed by a final
// one, as a server does for an exhaust stream.
func TestExhaustRepliesAreRelayed(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		for {
			req, err := readMessage(c)
			if err != nil {
				return
			}
			for i, more := range []bool{true, false} {
				m := &opMsg{body: rawDoc(t, bson.D{{Key: "seq", Value: i}, {Key: "ok", Value: 1.0}})}
				if more {
					m.flags = wiremessage.MoreToCome
				}
				if _, err := c.Write(m.encode(int32(100+i), req.requestID)); err != nil {
					return
				}
			}
		}
	}()
	defer func() {
		ln.Close()
		wg.Wait()
	}()

	p, err := New(WithUpstream(ln.Addr().String()))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	req := &opMsg{body: rawDoc(t, bson.D{{Key: "hello", Value: 1}, {Key: "$db", Value: "admin"}}), flags: wiremessage.ExhaustAllowed}
	if _, err := c.Write(req.encode(9, 0)); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		reply, err := readMessage(c)
		if err != nil {
			t.Fatalf("reply %d: %v", i, err)
		}
		body, err := replyBody(reply)
		if err != nil {
			t.Fatal(err)
		}
		if seq := body.Lookup("seq").Int32(); seq != int32(i) || reply.responseTo != 9 || moreToCome(reply) != (i == 0) {
			t.Fatalf("reply %d: seq %d, responseTo %d, moreToCome %v", i, seq, reply.responseTo, moreToCome(reply))
		}
	}
}

func TestNullBackendRejectsUnknownOpcodes(t *testing.T) {
	p, err := New()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	idx, msg := wiremessage.AppendHeaderStart(nil, 1, 0, wiremessage.OpGetMore)
	msg = append(msg, 0, 0, 0, 0)
	msg = bsoncore.UpdateLength(msg, idx, int32(len(msg)))
	if _, err := c.Write(msg); err != nil {
		t.Fatal(err)
	}
	var buf [1]byte
	if _, err := c.Read(buf[:]); err == nil {
		t.Fatal("the null backend answered an OP_GET_MORE")
	} else if ne := (net.Error)(nil); errors.As(err, &ne) && ne.Timeout() {
		t.Fatal("the connection was not closed")
	}
}

// TestMoreToComeReplyIsDropped puts the proxy in front of an upstream that
// answers every request, moreToCome ones included (as FerretDB does): a
// w:0 insert (OP_MSG flag moreToCome) followed by a normal insert on the
// same connection gets the second insert's own reply, never the first's.
func TestMoreToComeReplyIsDropped(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		for seq := 1; ; seq++ {
			req, err := readMessage(c)
			if err != nil {
				return
			}
			m := &opMsg{body: rawDoc(t, bson.D{{Key: "seq", Value: seq}, {Key: "n", Value: 1}, {Key: "ok", Value: 1.0}})}
			if _, err := c.Write(m.encode(int32(100+seq), req.requestID)); err != nil {
				return
			}
		}
	}()
	defer func() {
		ln.Close()
		wg.Wait()
	}()
	p, err := New(WithUpstream(ln.Addr().String()))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	insert := func(id int, w int) bson.D {
		return bson.D{{Key: "insert", Value: "c"}, {Key: "documents", Value: bson.A{bson.D{{Key: "_id", Value: id}}}},
			{Key: "writeConcern", Value: bson.D{{Key: "w", Value: w}}}, {Key: "$db", Value: "db"}}
	}
	unacked := &opMsg{body: rawDoc(t, insert(1, 0)), flags: wiremessage.MoreToCome}
	if _, err := c.Write(unacked.encode(7, 0)); err != nil {
		t.Fatal(err)
	}
	acked := &opMsg{body: rawDoc(t, insert(2, 1))}
	if _, err := c.Write(acked.encode(8, 0)); err != nil {
		t.Fatal(err)
	}
	reply, err := readMessage(c)
	if err != nil {
		t.Fatal(err)
	}
	body, err := replyBody(reply)
	if err != nil {
		t.Fatal(err)
	}
	if seq := body.Lookup("seq").Int32(); seq != 2 || reply.responseTo != 8 {
		t.Fatalf("the normal insert got reply seq %d to request %d; want its own (seq 2, request 8)", seq, reply.responseTo)
	}
}
