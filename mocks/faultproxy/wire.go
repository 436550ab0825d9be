package faultproxy

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver/wiremessage"
)

// maxMessageSize bounds a wire message the proxy will read (the server's
// maxMessageSizeBytes is 48,000,000 bytes; leave room for headers).
const maxMessageSize = 48*1000*1000 + 16*1024

// message is one wire protocol message as read from a connection.
type message struct {
	raw        []byte // the whole message, header included
	requestID  int32
	responseTo int32
	opcode     wiremessage.OpCode
}

// readMessage reads one wire message.
func readMessage(r io.Reader) (*message, error) {
	var hdr [16]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	length := int32(binary.LittleEndian.Uint32(hdr[0:4]))
	if length < 16 || length > maxMessageSize {
		return nil, fmt.Errorf("faultproxy: invalid message length %d", length)
	}
	raw := make([]byte, length)
	copy(raw, hdr[:])
	if _, err := io.ReadFull(r, raw[16:]); err != nil {
		return nil, err
	}
	return &message{
		raw:        raw,
		requestID:  int32(binary.LittleEndian.Uint32(hdr[4:8])),
		responseTo: int32(binary.LittleEndian.Uint32(hdr[8:12])),
		opcode:     wiremessage.OpCode(int32(binary.LittleEndian.Uint32(hdr[12:16]))),
	}, nil
}

// sequence is an OP_MSG kind-1 section: a named list of documents.
type sequence struct {
	identifier string
	docs       []bsoncore.Document
}

// opMsg is a parsed OP_MSG.
type opMsg struct {
	flags     wiremessage.MsgFlag
	body      bsoncore.Document
	sequences []sequence
}

var errMalformed = errors.New("faultproxy: malformed OP_MSG")

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// parseOpMsg parses an OP_MSG message (header included). The checksum, when
// present, is verified.
func parseOpMsg(raw []byte) (*opMsg, error) {
	rem := raw[16:]
	flags, rem, ok := wiremessage.ReadMsgFlags(rem)
	if !ok {
		return nil, errMalformed
	}
	if flags&wiremessage.ChecksumPresent != 0 {
		if len(rem) < 4 {
			return nil, errMalformed
		}
		want := binary.LittleEndian.Uint32(raw[len(raw)-4:])
		if crc32.Checksum(raw[:len(raw)-4], castagnoli) != want {
			return nil, errors.New("faultproxy: OP_MSG checksum mismatch")
		}
		rem = rem[:len(rem)-4]
	}
	m := &opMsg{flags: flags}
	for len(rem) > 0 {
		var stype wiremessage.SectionType
		stype, rem, ok = wiremessage.ReadMsgSectionType(rem)
		if !ok {
			return nil, errMalformed
		}
		switch stype {
		case wiremessage.SingleDocument:
			var doc bsoncore.Document
			doc, rem, ok = wiremessage.ReadMsgSectionSingleDocument(rem)
			if !ok || m.body != nil {
				return nil, errMalformed
			}
			if err := doc.Validate(); err != nil {
				return nil, fmt.Errorf("faultproxy: OP_MSG body: %w", err)
			}
			m.body = doc
		case wiremessage.DocumentSequence:
			var (
				id   string
				docs []bsoncore.Document
			)
			id, docs, rem, ok = wiremessage.ReadMsgSectionDocumentSequence(rem)
			if !ok {
				return nil, errMalformed
			}
			m.sequences = append(m.sequences, sequence{identifier: id, docs: docs})
		default:
			return nil, fmt.Errorf("faultproxy: unknown OP_MSG section kind %d", stype)
		}
	}
	if m.body == nil {
		return nil, errMalformed
	}
	return m, nil
}

// encode serializes m as an OP_MSG with the given header ids. A checksum is
// never written: the flag is cleared (checksums are optional).
func (m *opMsg) encode(requestID, responseTo int32) []byte {
	idx, dst := wiremessage.AppendHeaderStart(nil, requestID, responseTo, wiremessage.OpMsg)
	dst = wiremessage.AppendMsgFlags(dst, m.flags&^wiremessage.ChecksumPresent)
	dst = wiremessage.AppendMsgSectionType(dst, wiremessage.SingleDocument)
	dst = append(dst, m.body...)
	for _, s := range m.sequences {
		dst = wiremessage.AppendMsgSectionType(dst, wiremessage.DocumentSequence)
		start := len(dst)
		dst = append(dst, 0, 0, 0, 0)
		dst = append(dst, s.identifier...)
		dst = append(dst, 0)
		for _, d := range s.docs {
			dst = append(dst, d...)
		}
		binary.LittleEndian.PutUint32(dst[start:], uint32(len(dst)-start))
	}
	return bsoncore.UpdateLength(dst, idx, int32(len(dst)))
}

// encodeReplyMsg builds an OP_MSG reply holding body.
func encodeReplyMsg(body []byte, responseTo int32) []byte {
	m := &opMsg{body: body}
	return m.encode(wiremessage.NextRequestID(), responseTo)
}

// encodeStreamingReply builds an OP_MSG reply with the moreToCome flag (an
// exhaust reply: another one follows without a request) and returns it
// with its requestID, which the next reply answers.
func encodeStreamingReply(body []byte, responseTo int32) ([]byte, int32) {
	m := &opMsg{body: body, flags: wiremessage.MoreToCome}
	id := wiremessage.NextRequestID()
	return m.encode(id, responseTo), id
}

// opQuery is the part of a legacy OP_QUERY the proxy needs.
type opQuery struct {
	collection string
	query      bsoncore.Document
}

// opQueryCode is OP_QUERY (2004). The driver still sends its first
// handshake message as an OP_QUERY, although the wiremessage helpers for it
// are deprecated; the proxy parses it by hand.
const opQueryCode wiremessage.OpCode = 2004

var errMalformedQuery = errors.New("faultproxy: malformed OP_QUERY")

// parseOpQuery parses an OP_QUERY: int32 flags, cstring
// fullCollectionName, int32 numberToSkip, int32 numberToReturn, document
// query (an optional field selector follows and is ignored).
func parseOpQuery(raw []byte) (*opQuery, error) {
	rem := raw[16:]
	if len(rem) < 4 {
		return nil, errMalformedQuery
	}
	rem = rem[4:]
	end := bytes.IndexByte(rem, 0)
	if end < 0 {
		return nil, errMalformedQuery
	}
	coll := string(rem[:end])
	rem = rem[end+1:]
	if len(rem) < 8 {
		return nil, errMalformedQuery
	}
	q, _, ok := bsoncore.ReadDocument(rem[8:])
	if !ok {
		return nil, errMalformedQuery
	}
	return &opQuery{collection: coll, query: q}, nil
}

// encodeOpReply builds a legacy OP_REPLY holding one document.
func encodeOpReply(doc []byte, responseTo int32) []byte {
	idx, dst := wiremessage.AppendHeaderStart(nil, wiremessage.NextRequestID(), responseTo, wiremessage.OpReply)
	dst = wiremessage.AppendReplyFlags(dst, wiremessage.AwaitCapable)
	dst = wiremessage.AppendReplyCursorID(dst, 0)
	dst = wiremessage.AppendReplyStartingFrom(dst, 0)
	dst = wiremessage.AppendReplyNumberReturned(dst, 1)
	dst = append(dst, doc...)
	return bsoncore.UpdateLength(dst, idx, int32(len(dst)))
}

// replyBody extracts the reply document from an OP_MSG or OP_REPLY reply.
func replyBody(m *message) (bson.Raw, error) {
	switch m.opcode {
	case wiremessage.OpMsg:
		om, err := parseOpMsg(m.raw)
		if err != nil {
			return nil, err
		}
		return bson.Raw(om.body), nil
	case wiremessage.OpReply:
		rem := m.raw[16:]
		_, rem, ok := wiremessage.ReadReplyFlags(rem)
		if ok {
			_, rem, ok = wiremessage.ReadReplyCursorID(rem)
		}
		if ok {
			_, rem, ok = wiremessage.ReadReplyStartingFrom(rem)
		}
		if ok {
			_, rem, ok = wiremessage.ReadReplyNumberReturned(rem)
		}
		if ok {
			var doc bsoncore.Document
			doc, _, ok = wiremessage.ReadReplyDocument(rem)
			if ok {
				return bson.Raw(doc), nil
			}
		}
		return nil, errors.New("faultproxy: malformed OP_REPLY")
	}
	return nil, fmt.Errorf("faultproxy: unexpected reply opcode %v", m.opcode)
}

// moreToCome reports whether an OP_MSG has the moreToCome flag set.
func moreToCome(m *message) bool {
	return m.opcode == wiremessage.OpMsg && wiremessage.IsMsgMoreToCome(m.raw)
}

// The rest of the package reaches the driver's x/ packages only through
// this file (wire_test.go pins the wire format they produce).

// opMsgCode is OP_MSG (2013).
const opMsgCode = wiremessage.OpMsg

// moreToCome reports the OP_MSG flag moreToCome: no reply is expected.
func (m *opMsg) moreToCome() bool { return m.flags&wiremessage.MoreToCome != 0 }

// exhaustAllowed reports the OP_MSG flag exhaustAllowed: the client takes
// a stream of replies (awaitable hello).
func (m *opMsg) exhaustAllowed() bool { return m.flags&wiremessage.ExhaustAllowed != 0 }

// encode serializes the command as an OP_MSG carrying requestID.
func (c *Command) encode(flags wiremessage.MsgFlag) []byte {
	m := &opMsg{body: bsoncore.Document(c.Body), flags: flags}
	for _, s := range c.Sequences {
		seq := sequence{identifier: s.Identifier}
		for _, d := range s.Documents {
			seq.docs = append(seq.docs, bsoncore.Document(d))
		}
		m.sequences = append(m.sequences, seq)
	}
	return m.encode(c.RequestID, 0)
}

// bodyWithArrayPrefix returns body with its array field cut to its first k
// elements.
func bodyWithArrayPrefix(body bson.Raw, field string, k int) bson.Raw {
	elems, err := bsoncore.Document(body).Elements()
	if err != nil {
		return body
	}
	idx, dst := bsoncore.AppendDocumentStart(nil)
	for _, e := range elems {
		arr, ok := e.Value().ArrayOK()
		if e.Key() != field || !ok {
			dst = append(dst, e...)
			continue
		}
		vals, err := arr.Values()
		if err != nil {
			dst = append(dst, e...)
			continue
		}
		if k < len(vals) {
			vals = vals[:k]
		}
		dst = bsoncore.AppendArrayElement(dst, field, bsoncore.BuildArray(nil, vals...))
	}
	dst, _ = bsoncore.AppendDocumentEnd(dst, idx)
	return bson.Raw(dst)
}

// bodyWithout returns body without the named top-level field.
func bodyWithout(body bson.Raw, field string) bson.Raw {
	elems, err := bsoncore.Document(body).Elements()
	if err != nil {
		return body
	}
	idx, dst := bsoncore.AppendDocumentStart(nil)
	for _, e := range elems {
		if e.Key() == field {
			continue
		}
		dst = append(dst, e...)
	}
	dst, _ = bsoncore.AppendDocumentEnd(dst, idx)
	return bson.Raw(dst)
}
