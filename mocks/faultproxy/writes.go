package faultproxy

import (
	"fmt"
	"sort"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/writeguard/writeguard/jsonschema"
)

// rejection is one statement the proxy itself failed.
type rejection struct {
	index int    // the client's index
	doc   bson.D // the write error
	kind  FaultKind
}

// validationErrmsg is the server's errmsg for code 121.
const validationErrmsg = "Document failed validation"

// check decides whether statement i is rejected by the emulated validator
// (inserts only) or by a per-document fault.
func check(cmd *Command, st bson.Raw, i int, v *jsonschema.Validator, df *Fault) (rejection, bool, error) {
	if v != nil {
		var d bson.D
		if err := bson.Unmarshal(st, &d); err != nil {
			return rejection{}, false, fmt.Errorf("faultproxy: decode document %d: %w", i, err)
		}
		if errInfo := v.Validate(jsonschema.WithID(d)); errInfo != nil {
			we := WriteError{Code: 121, Message: validationErrmsg, ErrInfo: errInfo}
			return rejection{index: i, doc: we.doc(i), kind: FaultValidation}, true, nil
		}
	}
	if df != nil {
		target := st
		if cmd.Name != "insert" {
			target = nil
			if q, err := st.LookupErr("q"); err == nil {
				target, _ = q.DocumentOK()
			}
		}
		if target != nil && df.match(target) {
			return rejection{index: i, doc: df.we.doc(i), kind: FaultDocument}, true, nil
		}
	}
	return rejection{}, false, nil
}

// execStatements runs an insert, update or delete whose statements the
// proxy partly rejects: it forwards the others in a rewritten command and
// merges the server's reply with its own write errors, with indexes in
// the client's numbering. Ordered commands stop at the first failure: at
// the first rejected statement, or earlier if the server itself failed a
// forwarded one.
func (s *session) execStatements(cmd *Command, stmts []bson.Raw, v *jsonschema.Validator, df *Fault) (bson.Raw, error) {
	ordered := cmd.Ordered()
	var rejected []rejection
	for i, st := range stmts {
		r, bad, err := check(cmd, st, i, v, df)
		if err != nil {
			return nil, err
		}
		if bad {
			rejected = append(rejected, r)
			s.p.counters.fault(r.kind, 1)
			if ordered {
				break
			}
		}
	}
	if len(rejected) == 0 {
		return s.forward(cmd)
	}
	var forwarded []int
	if ordered {
		for i := 0; i < rejected[0].index; i++ {
			forwarded = append(forwarded, i)
		}
	} else {
		skip := map[int]bool{}
		for _, r := range rejected {
			skip[r.index] = true
		}
		for i := range stmts {
			if !skip[i] {
				forwarded = append(forwarded, i)
			}
		}
	}
	var reply bson.D
	if len(forwarded) == 0 {
		reply = emptyWriteReply(cmd.Name)
	} else {
		sub := make([]bson.Raw, len(forwarded))
		for j, i := range forwarded {
			sub[j] = stmts[i]
		}
		raw, err := s.forward(cmd.WithStatements(sub))
		if err != nil {
			return nil, err
		}
		if err := bson.Unmarshal(raw, &reply); err != nil {
			return nil, fmt.Errorf("faultproxy: decode reply: %w", err)
		}
	}
	merged, err := mergeWriteReply(reply, forwarded, rejected, ordered)
	if err != nil {
		return nil, err
	}
	return bson.Marshal(merged)
}

// emptyWriteReply is the reply to a write of which nothing was sent on.
func emptyWriteReply(name string) bson.D {
	if name == "update" {
		return okReply(bson.E{Key: "n", Value: int32(0)}, bson.E{Key: "nModified", Value: int32(0)})
	}
	return okReply(bson.E{Key: "n", Value: int32(0)})
}

func replyOK(reply bson.D) bool {
	for _, e := range reply {
		if e.Key == "ok" {
			switch x := e.Value.(type) {
			case float64:
				return x == 1
			case int32:
				return x == 1
			case int64:
				return x == 1
			case bool:
				return x
			}
		}
	}
	return false
}

func field(d bson.D, key string) (any, bool) {
	for _, e := range d {
		if e.Key == key {
			return e.Value, true
		}
	}
	return nil, false
}

// setBeforeOK replaces field key of d, or inserts it before "ok" (the
// server's reply order puts ok after the write results).
func setBeforeOK(d bson.D, key string, v any) bson.D {
	for i, e := range d {
		if e.Key == key {
			d[i].Value = v
			return d
		}
	}
	for i, e := range d {
		if e.Key == "ok" {
			out := append(bson.D{}, d[:i]...)
			out = append(out, bson.E{Key: key, Value: v})
			return append(out, d[i:]...)
		}
	}
	return append(d, bson.E{Key: key, Value: v})
}

func asInt(v any) (int, bool) {
	switch x := v.(type) {
	case int32:
		return int(x), true
	case int64:
		return int(x), true
	case float64:
		return int(x), true
	}
	return 0, false
}

// remapIndexes rewrites the "index" field of each document of arr from
// the forwarded command's numbering to the client's.
func remapIndexes(arr bson.A, forwarded []int) bson.A {
	out := make(bson.A, 0, len(arr))
	for _, el := range arr {
		d, ok := el.(bson.D)
		if !ok {
			out = append(out, el)
			continue
		}
		d = append(bson.D{}, d...)
		for i, e := range d {
			if e.Key != "index" {
				continue
			}
			if j, ok := asInt(e.Value); ok && j >= 0 && j < len(forwarded) {
				d[i].Value = int32(forwarded[j])
			}
		}
		out = append(out, d)
	}
	return out
}

func indexOf(el any) int {
	if d, ok := el.(bson.D); ok {
		if v, ok := field(d, "index"); ok {
			if i, ok := asInt(v); ok {
				return i
			}
		}
	}
	return -1
}

// mergeWriteReply merges the server's reply to the forwarded statements
// with the proxy's rejections.
func mergeWriteReply(reply bson.D, forwarded []int, rejected []rejection, ordered bool) (bson.D, error) {
	if !replyOK(reply) {
		// The command as a whole failed: that is the answer.
		return reply, nil
	}
	var serverErrs bson.A
	if v, ok := field(reply, "writeErrors"); ok {
		arr, isArr := v.(bson.A)
		if !isArr {
			return nil, fmt.Errorf("faultproxy: writeErrors is %T, not an array", v)
		}
		serverErrs = remapIndexes(arr, forwarded)
	}
	if v, ok := field(reply, "upserted"); ok {
		if arr, isArr := v.(bson.A); isArr {
			reply = setBeforeOK(reply, "upserted", remapIndexes(arr, forwarded))
		}
	}
	all := append(bson.A{}, serverErrs...)
	if !ordered || len(serverErrs) == 0 {
		// An ordered write stops at its first failure: when the server
		// failed a forwarded statement, every rejected one comes later
		// and was never reached.
		for _, r := range rejected {
			all = append(all, r.doc)
		}
	}
	sort.SliceStable(all, func(i, j int) bool { return indexOf(all[i]) < indexOf(all[j]) })
	return setBeforeOK(reply, "writeErrors", all), nil
}

// addWriteConcernError adds a writeConcernError (and its labels) to a
// reply document.
func addWriteConcernError(body bson.Raw, w WriteConcernError) (bson.Raw, error) {
	var reply bson.D
	if err := bson.Unmarshal(body, &reply); err != nil {
		return nil, fmt.Errorf("faultproxy: decode reply: %w", err)
	}
	msg := w.Message
	if msg == "" {
		msg = fmt.Sprintf("faultproxy: injected write concern error %d", w.Code)
	}
	wce := bson.D{{Key: "code", Value: w.Code}}
	if w.CodeName != "" {
		wce = append(wce, bson.E{Key: "codeName", Value: w.CodeName})
	}
	wce = append(wce, bson.E{Key: "errmsg", Value: msg})
	if w.ErrInfo != nil {
		wce = append(wce, bson.E{Key: "errInfo", Value: w.ErrInfo})
	}
	reply = setBeforeOK(reply, "writeConcernError", wce)
	if len(w.Labels) > 0 {
		labels := bson.A{}
		seen := map[string]bool{}
		if v, ok := field(reply, "errorLabels"); ok {
			if arr, isArr := v.(bson.A); isArr {
				for _, l := range arr {
					if s, isStr := l.(string); isStr && !seen[s] {
						seen[s] = true
						labels = append(labels, s)
					}
				}
			}
		}
		for _, l := range w.Labels {
			if !seen[l] {
				seen[l] = true
				labels = append(labels, l)
			}
		}
		reply = setBeforeOK(reply, "errorLabels", labels)
	}
	return bson.Marshal(reply)
}
