package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	deadletter "github.com/writeguard/writeguard/dlq"
	"github.com/writeguard/writeguard/envelope"
)

// dlqShowHelp is "dlq show --help"'s text, before the flags.
const dlqShowHelp = `Usage: writeguard dlq show [flags] ID

Shows one envelope in full, its original document and the server's errInfo
as Extended JSON. ID is a fingerprint or any unique prefix of one (hex
digits, either case), the dead-lettered document's _id, or the envelope's
id (list --json, or as list prints an undecodable envelope's _id). An
ambiguous prefix is a usage error naming the envelopes it matches; no
match exits 1. An envelope that cannot be decoded is shown as stored, with
the field that is wrong.
`

// dlqShow is "writeguard dlq show".
func dlqShow(ctx context.Context, dlq *mongo.Collection, id string, f dlqFlags, stdout, stderr io.Writer) int {
	found, err := findEnvelope(ctx, dlq, id)
	if err != nil {
		return failure(stderr, "dlq show", err)
	}
	if code, done := showNotOne(found, id, stderr); done {
		return code
	}
	raw := found[0]
	if code, done := showUndecodable(raw, f, stdout, stderr); done {
		return code
	}
	if f.asJSON {
		sh, err := toShown(raw)
		if err != nil {
			return failure(stderr, "dlq show", fmt.Errorf("decode envelope: %w", err))
		}
		if err := writeJSON(stdout, sh); err != nil {
			return failure(stderr, "dlq show", err)
		}
		return exitOK
	}
	return showText(raw, stdout, stderr)
}

// showNotOne says on stderr that id matched no envelope (exit 1) or
// several (a usage error naming them), and reports false when it matched
// exactly one.
func showNotOne(found []bson.Raw, id string, stderr io.Writer) (int, bool) {
	switch {
	case len(found) == 0:
		fmt.Fprintf(stderr, "writeguard dlq show: no envelope with fingerprint, fingerprint prefix or document _id %q\n", id)
		return exitFail, true
	case len(found) > 1:
		var fps []string
		for _, r := range found[:min(len(found), showAmbiguous)] {
			fp := rawString(r.Lookup("fingerprint"))
			fps = append(fps, fp[:min(len(fp), 12)])
		}
		count := strconv.Itoa(len(found))
		if len(found) > showAmbiguous {
			count, fps = "more than "+strconv.Itoa(showAmbiguous), append(fps, "...")
		}
		return usageError(stderr, "dlq show", "%q is ambiguous: it matches %s envelopes (fingerprints %s); give more digits",
			id, count, strings.Join(fps, ", ")), true
	}
	return 0, false
}

// showText shows an envelope that decodes: its fields as a table, then
// its original and errInfo as indented Extended JSON.
func showText(raw bson.Raw, stdout, stderr io.Writer) int {
	l, err := toListed(raw)
	if err != nil {
		return failure(stderr, "dlq show", err)
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	printShownFields(tw, raw, l)
	e, err := envelope.Decode(raw)
	if err != nil {
		return failure(stderr, "dlq show", err)
	}
	printStoredForm(tw, &e)
	tw.Flush()
	printShownDocuments(stdout, &e)
	return exitOK
}

// printShownFields prints the fields of the envelope l, read from raw, one
// row each.
func printShownFields(tw io.Writer, raw bson.Raw, l listed) {
	fmt.Fprintf(tw, "fingerprint\t%s\n", l.Fingerprint)
	fmt.Fprintf(tw, "document _id\t%s\n", l.DocumentID)
	fmt.Fprintf(tw, "namespace\t%s\n", l.Namespace)
	fmt.Fprintf(tw, "status\t%s\n", l.Status)
	fmt.Fprintf(tw, "code\t%s\n", codeString(deadletter.CodeGroup{Code: l.Code, CodeName: l.CodeName}))
	fmt.Fprintf(tw, "errmsg\t%s\n", rawString(raw.Lookup("errmsg")))
	fmt.Fprintf(tw, "failing keywords\t%s\n", strings.Join(l.FailingKeywords, ", "))
	fmt.Fprintf(tw, "failing paths\t%s\n", strings.Join(l.FailingPaths, ", "))
	fmt.Fprintf(tw, "attempts\t%d\n", l.Attempts)
	fmt.Fprintf(tw, "first seen\t%s\n", l.FirstSeen.UTC().Format(time.RFC3339Nano))
	fmt.Fprintf(tw, "last seen\t%s\n", l.LastSeen.UTC().Format(time.RFC3339Nano))
	for _, k := range []string{"replayed_at", "discarded_at", envelope.FieldReplayFailures, envelope.FieldReplayReason, envelope.FieldReplayHold, "trace_id"} {
		if v, err := raw.LookupErr(k); err == nil {
			fmt.Fprintf(tw, "%s\t%s\n", strings.ReplaceAll(k, "_", " "), rawString(v))
		}
	}
}

// printStoredForm prints what of e is stored as bytes, withheld, cut or
// kept apart in pieces.
func printStoredForm(tw io.Writer, e *envelope.Envelope) {
	if p := e.OriginalPieces; p != nil {
		fmt.Fprintf(tw, "original in pieces	%d bytes in %d pieces, sha256 %s (in the side collection; not printed, replay reassembles it)\n",
			p.Size, p.Count, p.SHA256)
	}
	for _, b := range e.Binary {
		fmt.Fprintf(tw, "stored as bytes\t%s (%s)\n", b.Field, b.Reason)
	}
	for _, w := range e.Withheld {
		fmt.Fprintf(tw, "withheld\t%s (%s)\n", w.Path, w.Reason)
	}
	if e.WithheldNote != "" {
		fmt.Fprintf(tw, "withheld note\t%s\n", e.WithheldNote)
	}
	for _, c := range e.Cut {
		fmt.Fprintf(tw, "cut\t%s (%d bytes", c.Field, c.Size)
		if c.Total > 0 {
			fmt.Fprintf(tw, ", kept %d of %d", c.Kept, c.Total)
		}
		fmt.Fprintln(tw, ")")
	}
}

// printShownDocuments prints e's original and errInfo as indented
// Extended JSON.
func printShownDocuments(stdout io.Writer, e *envelope.Envelope) {
	for _, x := range []struct {
		k   string
		doc bson.Raw
	}{{"original", e.Original}, {"err_info", e.ErrInfo}} {
		k, doc := x.k, x.doc
		if len(doc) == 0 || k == "original" && e.OriginalPieces != nil {
			continue // an original kept in pieces is named by printStoredForm
		}
		js, err := bson.MarshalExtJSONIndent(doc, false, false, "  ", "  ")
		if err != nil {
			continue
		}
		fmt.Fprintf(stdout, "%s:\n  %s\n", k, js)
	}
}

var hexRE = regexp.MustCompile(`^[0-9a-f]{1,64}$`)

// showAmbiguous is how many of the envelopes an ambiguous prefix matches
// dlq show names.
const showAmbiguous = 5

// shown is dlq show --json's object: list --json's fields under the same
// names, then the rest of the envelope.
type shown struct {
	listed
	ErrMsg      string     `json:"errmsg,omitempty"`
	ReplayedAt  *time.Time `json:"replayed_at,omitempty"`
	DiscardedAt *time.Time `json:"discarded_at,omitempty"`
	TraceID     string     `json:"trace_id,omitempty"`
	SpanID      string     `json:"span_id,omitempty"`
	// Original and ErrInfo are relaxed Extended JSON, whether stored as
	// sub-documents or as exact bytes (Binary says which).
	Original json.RawMessage `json:"original,omitempty"`
	ErrInfo  json.RawMessage `json:"err_info,omitempty"`
	// Format 2: the write's kind, what is stored as binary, withheld or
	// cut.
	Kind         string                   `json:"kind,omitempty"`
	Binary       []envelope.BinaryField   `json:"binary,omitempty"`
	Withheld     []envelope.WithheldField `json:"withheld,omitempty"`
	WithheldNote string                   `json:"withheld_note,omitempty"`
	Cut          []envelope.CutField      `json:"cut,omitempty"`
	// OriginalPieces is set, and Original left out, when the original is
	// kept whole in pieces in the side collection (too large to print
	// here; replay reassembles it).
	OriginalPieces *envelope.Pieces `json:"original_pieces,omitempty"`
}

func toShown(raw bson.Raw) (shown, error) {
	l, err := toListed(raw)
	if err != nil {
		return shown{}, err
	}
	e, err := envelope.Decode(raw)
	if err != nil {
		return shown{}, err
	}
	out := shown{listed: l, ErrMsg: e.ErrMsg, TraceID: e.TraceID, SpanID: e.SpanID,
		Kind: e.Kind, Binary: e.Binary, Withheld: e.Withheld, WithheldNote: e.WithheldNote, Cut: e.Cut,
		OriginalPieces: e.OriginalPieces}
	if !e.ReplayedAt.IsZero() {
		out.ReplayedAt = &e.ReplayedAt
	}
	if !e.DiscardedAt.IsZero() {
		out.DiscardedAt = &e.DiscardedAt
	}
	for _, x := range []struct {
		key string
		doc bson.Raw
		dst *json.RawMessage
	}{{"original", e.Original, &out.Original}, {"err_info", e.ErrInfo, &out.ErrInfo}} {
		if doc := x.doc; len(doc) > 0 && (x.key != "original" || e.OriginalPieces == nil) {
			js, err := bson.MarshalExtJSON(doc, false, false)
			if err != nil {
				return shown{}, fmt.Errorf("%s: %w", x.key, err)
			}
			*x.dst = js
		}
	}
	return out, nil
}

// findEnvelope finds the envelope id names: a fingerprint or any prefix of
// one (hex digits, either case), else the dead-lettered document's _id (a
// string or an ObjectID's hex), else the envelope's own _id (list's "id"). It returns the envelopes it matched, at
// most showAmbiguous+1 of them.
func findEnvelope(ctx context.Context, dlq *mongo.Collection, id string) ([]bson.Raw, error) {
	var found []bson.Raw
	find := func(q bson.D) error {
		cur, err := dlq.Find(ctx, q, options.Find().SetLimit(showAmbiguous+1).SetSort(bson.D{{Key: "fingerprint", Value: 1}}))
		if err != nil {
			return err
		}
		defer cur.Close(ctx)
		for cur.Next(ctx) {
			found = append(found, append(bson.Raw(nil), cur.Current...))
		}
		return cur.Err()
	}
	lower := strings.ToLower(id)
	var err error
	switch {
	case len(lower) == 64 && hexRE.MatchString(lower):
		err = find(bson.D{{Key: "fingerprint", Value: lower}})
	case hexRE.MatchString(lower):
		err = find(bson.D{{Key: "fingerprint", Value: bson.D{{Key: "$regex", Value: "^" + lower}}}})
	}
	if err == nil && len(found) == 0 {
		err = find(bson.D{{Key: "document_id", Value: id}})
	}
	if err == nil && len(found) == 0 {
		if oid, perr := bson.ObjectIDFromHex(lower); perr == nil {
			err = find(bson.D{{Key: "$or", Value: bson.A{bson.D{{Key: "document_id", Value: oid}}, bson.D{{Key: "_id", Value: oid}}}}})
		}
	}
	if err == nil && len(found) == 0 {
		// The envelope's own _id as dlq list prints it (an undecodable
		// envelope's, say): a string, or Extended JSON.
		if ids, perr := parseEnvelopeID(id); perr == nil {
			in := make(bson.A, len(ids))
			for i, v := range ids {
				in[i] = v
			}
			err = find(bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: in}}}})
		}
	}
	return found, err
}

// showUndecodable shows an envelope that cannot be decoded: why (which
// field), then the stored document as it is, relaxed Extended JSON. It
// reports false for an envelope that decodes.
func showUndecodable(raw bson.Raw, f dlqFlags, stdout, stderr io.Writer) (int, bool) {
	_, err := envelope.Decode(raw)
	var de *envelope.DecodeError
	if !errors.As(err, &de) {
		return 0, false
	}
	p := toProblem(de)
	js, jerr := bson.MarshalExtJSON(raw, false, false)
	if jerr != nil {
		js = nil
	}
	if f.asJSON {
		out := map[string]any{"id": p.ID, "decode_error": p}
		if js != nil {
			out["document"] = json.RawMessage(js)
		}
		if err := writeJSON(stdout, out); err != nil {
			return failure(stderr, "dlq show", err), true
		}
		return exitOK, true
	}
	fmt.Fprintf(stdout, "%s\n(writeguard dlq discard --id %s takes it out of the way)\n", p.Message, shellWord(p.ID))
	if ijs, err := bson.MarshalExtJSONIndent(raw, false, false, "  ", "  "); err == nil {
		fmt.Fprintf(stdout, "stored document:\n  %s\n", ijs)
	}
	return exitOK, true
}
