package faultproxy

import (
	"bytes"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// DocumentSequence is an OP_MSG kind-1 section: the driver sends insert
// "documents", update "updates" and delete "deletes" this way.
type DocumentSequence struct {
	// Identifier names the command field the documents belong to.
	Identifier string
	// Documents are the documents, in order.
	Documents []bson.Raw
}

// Command is a command as the proxy parsed it from an OP_MSG (or a legacy
// OP_QUERY handshake). Rules and Custom handlers see it; a Custom handler
// may modify a copy and forward that.
type Command struct {
	// Name is the command name: the first field of the body (e.g.
	// "insert").
	Name string
	// Database is the body's $db (or the OP_QUERY database).
	Database string
	// Collection is the collection the command names: the string value of
	// the first field (insert, update, find, ...) or getMore's
	// "collection"; "" for database-level commands.
	Collection string
	// Namespace is "Database.Collection", or Database alone when the
	// command names no collection.
	Namespace string
	// Body is the command document (the OP_MSG kind-0 section). It may
	// hold statements inline (e.g. "documents") instead of a sequence.
	Body bson.Raw
	// Sequences are the kind-1 sections, in order.
	Sequences []DocumentSequence
	// Legacy is true for a command that came as an OP_QUERY on
	// "<db>.$cmd" (the driver's first handshake message).
	Legacy bool
	// RequestID is the client's wire requestID for the message.
	RequestID int32
}

// statementField returns the field that holds a write command's
// statements: "documents", "updates", "deletes" (or "" for other
// commands).
func statementField(name string) string {
	switch name {
	case "insert":
		return "documents"
	case "update":
		return "updates"
	case "delete":
		return "deletes"
	}
	return ""
}

func hasStatements(name string) bool { return statementField(name) != "" }

// Statements returns the statements of an insert (its documents), update
// (its update statements) or delete (its delete statements), from the
// document sequence or the body, in order; nil for other commands.
func (c *Command) Statements() []bson.Raw {
	field := statementField(c.Name)
	if field == "" {
		return nil
	}
	for _, s := range c.Sequences {
		if s.Identifier == field {
			return s.Documents
		}
	}
	v, err := c.Body.LookupErr(field)
	if err != nil {
		return nil
	}
	arr, ok := v.ArrayOK()
	if !ok {
		return nil
	}
	vals, err := arr.Values()
	if err != nil {
		return nil
	}
	out := make([]bson.Raw, 0, len(vals))
	for _, v := range vals {
		if d, ok := v.DocumentOK(); ok {
			out = append(out, d)
		}
	}
	return out
}

// Ordered returns the command's "ordered" flag (true when absent, the
// server's default).
func (c *Command) Ordered() bool {
	v, err := c.Body.LookupErr("ordered")
	if err != nil {
		return true
	}
	if b, ok := v.BooleanOK(); ok {
		return b
	}
	return true
}

// WithStatements returns a copy of c whose statements (see Statements)
// are stmts, sent as a document sequence; the body loses any inline copy.
func (c *Command) WithStatements(stmts []bson.Raw) *Command {
	field := statementField(c.Name)
	out := *c
	if field == "" {
		return &out
	}
	out.Body = bodyWithout(c.Body, field)
	out.Sequences = nil
	for _, s := range c.Sequences {
		if s.Identifier != field {
			out.Sequences = append(out.Sequences, s)
		}
	}
	out.Sequences = append(out.Sequences, DocumentSequence{Identifier: field, Documents: stmts})
	return &out
}

// firstStatements returns a copy of c holding only its first k statements
// (all of them when k is larger), in the form the client used: the document
// sequence keeps being a sequence, an array in the body stays an array.
// Every other field (ordered, lsid, txnNumber, ...) is unchanged.
func (c *Command) firstStatements(k int) *Command {
	field := statementField(c.Name)
	out := *c
	if field == "" {
		return &out
	}
	for i, s := range c.Sequences {
		if s.Identifier != field {
			continue
		}
		if k > len(s.Documents) {
			k = len(s.Documents)
		}
		out.Sequences = append([]DocumentSequence(nil), c.Sequences...)
		out.Sequences[i] = DocumentSequence{Identifier: field, Documents: s.Documents[:k]}
		return &out
	}
	out.Body = bodyWithArrayPrefix(c.Body, field, k)
	return &out
}

// newCommand builds a Command from a parsed OP_MSG.
func newCommand(m *opMsg, requestID int32) *Command {
	c := &Command{Body: bson.Raw(m.body), RequestID: requestID}
	for _, s := range m.sequences {
		ds := DocumentSequence{Identifier: s.identifier}
		for _, d := range s.docs {
			ds.Documents = append(ds.Documents, bson.Raw(d))
		}
		c.Sequences = append(c.Sequences, ds)
	}
	c.fillNames()
	if db, err := c.Body.LookupErr("$db"); err == nil {
		c.Database, _ = db.StringValueOK()
	}
	c.fillNamespace()
	return c
}

func (c *Command) fillNames() {
	elems, err := c.Body.Elements()
	if err != nil || len(elems) == 0 {
		return
	}
	c.Name = elems[0].Key()
	if s, ok := elems[0].Value().StringValueOK(); ok {
		c.Collection = s
	}
	if c.Name == "getMore" {
		if v, err := c.Body.LookupErr("collection"); err == nil {
			c.Collection, _ = v.StringValueOK()
		}
	}
}

func (c *Command) fillNamespace() {
	c.Namespace = c.Database
	if c.Collection != "" {
		c.Namespace = c.Database + "." + c.Collection
	}
}

// toRawValue marshals a Go value into a bson.RawValue.
func toRawValue(v any) (bson.RawValue, error) {
	b, err := bson.Marshal(bson.D{{Key: "v", Value: v}})
	if err != nil {
		return bson.RawValue{}, err
	}
	return bson.Raw(b).Lookup("v"), nil
}

// rawValuesEqual compares two values; numbers compare by value across
// int32, int64 and double.
func rawValuesEqual(a, b bson.RawValue) bool {
	if na, ok := numberOf(a); ok {
		nb, ok := numberOf(b)
		return ok && na == nb
	}
	return a.Type == b.Type && bytes.Equal(a.Value, b.Value)
}

func numberOf(v bson.RawValue) (float64, bool) {
	switch v.Type {
	case bson.TypeInt32:
		return float64(v.Int32()), true
	case bson.TypeInt64:
		return float64(v.Int64()), true
	case bson.TypeDouble:
		return v.Double(), true
	}
	return 0, false
}
