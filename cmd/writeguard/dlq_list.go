package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	deadletter "github.com/writeguard/writeguard/dlq"
	"github.com/writeguard/writeguard/envelope"
)

// dlqListHelp is "dlq list --help"'s text, before the flags.
const dlqListHelp = `Usage: writeguard dlq list [flags]

Lists the envelopes the filters select, newest first (every status unless
--status says), at most --limit of them. An envelope that cannot be
decoded (a field of the wrong type: a hand-edited or foreign document) is
listed as UNDECODABLE with its _id and the field; --undecodable lists only
those.
`

// dlqList is "writeguard dlq list".
func dlqList(ctx context.Context, dlq *mongo.Collection, filter deadletter.Filter, f dlqFlags, stdout, stderr io.Writer) int {
	q, err := filter.Query(time.Now())
	if err != nil {
		return usageError(stderr, "dlq list", "%v", err)
	}
	// Whole envelopes (original included): an original of the wrong type
	// is an undecodable envelope too. err_info is not decoded.
	fo := options.Find().SetSort(bson.D{{Key: "last_seen", Value: -1}, {Key: "_id", Value: -1}}).
		SetProjection(bson.D{{Key: "err_info", Value: 0}, {Key: "err_info_raw", Value: 0}})
	if f.limit > 0 && !f.undecodable {
		fo.SetLimit(int64(f.limit))
	}
	cur, err := dlq.Find(ctx, q, fo)
	if err != nil {
		return failure(stderr, "dlq list", err)
	}
	defer cur.Close(ctx)
	var items []listed
	for cur.Next(ctx) {
		l, err := toListed(cur.Current)
		if err != nil {
			return failure(stderr, "dlq list", fmt.Errorf("decode envelope: %w", err))
		}
		if f.undecodable && l.DecodeError == nil {
			continue
		}
		items = append(items, l)
		if f.limit > 0 && len(items) == f.limit {
			break
		}
	}
	if err := cur.Err(); err != nil {
		return failure(stderr, "dlq list", err)
	}
	if f.asJSON {
		if items == nil {
			items = []listed{}
		}
		if err := writeJSON(stdout, items); err != nil {
			return failure(stderr, "dlq list", err)
		}
		return exitOK
	}
	printList(stdout, items, f)
	return exitOK
}

// printList prints list's table, then how to show or discard each
// envelope that cannot be decoded, then the count.
func printList(stdout io.Writer, items []listed, f dlqFlags) {
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "FINGERPRINT\tDOCUMENT _ID\tSTATUS\tCODE\tKEYWORDS\tPATHS\tATTEMPTS\tLAST SEEN\tNAMESPACE")
	var bad []*decodeProblem
	for _, l := range items {
		if l.DecodeError != nil {
			bad = append(bad, l.DecodeError)
			fmt.Fprintf(tw, "%s\t%s\t%s\t-\t-\t-\t-\t-\t-\n", orDash(l.Fingerprint[:min(12, len(l.Fingerprint))]), "?", "UNDECODABLE")
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%d\t%s\t%s\n", l.Fingerprint[:min(12, len(l.Fingerprint))], l.DocumentID,
			l.Status, l.Code, strings.Join(l.FailingKeywords, ","), strings.Join(l.FailingPaths, ","), l.Attempts,
			l.LastSeen.UTC().Format(time.RFC3339), l.Namespace)
	}
	tw.Flush()
	for _, p := range bad {
		fmt.Fprintf(stdout, "%s\n  (writeguard dlq show %s; writeguard dlq discard --id %s)\n", p.Message, shellWord(p.ID), shellWord(p.ID))
	}
	fmt.Fprintf(stdout, "%s listed", plural(len(items), "envelope"))
	if len(bad) > 0 {
		fmt.Fprintf(stdout, ", %d undecodable", len(bad))
	}
	if f.limit > 0 && len(items) == f.limit {
		fmt.Fprintf(stdout, " (limit %d; -limit 0 lists all)", f.limit)
	}
	fmt.Fprintln(stdout)
}

// listed is one envelope as dlq list --json prints it (show --json starts
// with the same fields).
type listed struct {
	ID              string    `json:"id"`
	Fingerprint     string    `json:"fingerprint"`
	DocumentID      string    `json:"document_id"`
	Status          string    `json:"status"`
	Code            int32     `json:"code"`
	CodeName        string    `json:"code_name,omitempty"`
	FailingKeywords []string  `json:"failing_keywords"`
	FailingPaths    []string  `json:"failing_paths"`
	Namespace       string    `json:"namespace"`
	Attempts        int       `json:"attempts"`
	FirstSeen       time.Time `json:"first_seen"`
	LastSeen        time.Time `json:"last_seen"`
	// ReplayFailures, ReplayReason and ReplayHold are what replay
	// recorded (envelope.FieldReplayFailures, ...).
	ReplayFailures int    `json:"replay_failures,omitempty"`
	ReplayReason   string `json:"replay_reason,omitempty"`
	ReplayHold     string `json:"replay_hold,omitempty"`
	// DecodeError says why the envelope cannot be decoded (the other
	// fields are then empty but id, and fingerprint and status when they
	// are strings).
	DecodeError *decodeProblem `json:"decode_error,omitempty"`
}

// decodeProblem is an envelope.DecodeError in JSON: which envelope, which
// field, what it holds and what it should; never the value.
type decodeProblem struct {
	ID      string `json:"id"`
	Field   string `json:"field,omitempty"`
	Type    string `json:"type,omitempty"`
	Want    string `json:"want,omitempty"`
	Message string `json:"message"`
}

func toProblem(de *envelope.DecodeError) *decodeProblem {
	p := &decodeProblem{ID: envelope.IDString(de.ID), Field: de.Field, Want: de.Want, Message: de.Error()}
	switch {
	case de.Field != "" && de.Type == 0:
		p.Type = "missing"
	case de.Field != "":
		p.Type = de.Type.String()
	}
	return p
}

func decodeProblems(des []*envelope.DecodeError) []*decodeProblem {
	out := make([]*decodeProblem, len(des))
	for i, de := range des {
		out[i] = toProblem(de)
	}
	return out
}

// toListed decodes a stored envelope for list and show. One that cannot
// be decoded is data too: it is returned with DecodeError set, and
// the error is nil.
func toListed(raw bson.Raw) (listed, error) {
	e, err := envelope.Decode(raw)
	if err != nil {
		var de *envelope.DecodeError
		if !errors.As(err, &de) {
			return listed{}, err
		}
		l := listed{ID: rawString(raw.Lookup("_id")), DecodeError: toProblem(de), FailingKeywords: []string{}, FailingPaths: []string{}}
		l.Fingerprint, _ = raw.Lookup("fingerprint").StringValueOK()
		l.Status, _ = raw.Lookup("status").StringValueOK()
		return l, nil
	}
	return listed{
		ID: rawString(raw.Lookup("_id")), Fingerprint: e.Fingerprint, DocumentID: rawString(e.DocumentID),
		Status: e.Status, Code: e.Code, CodeName: e.CodeName, FailingKeywords: e.FailingKeywords,
		FailingPaths: e.FailingPaths, Namespace: e.Namespace, Attempts: e.Attempts,
		FirstSeen: e.FirstSeen, LastSeen: e.LastSeen,
		ReplayFailures: int(rawInt(raw.Lookup(envelope.FieldReplayFailures))),
		ReplayReason:   rawString(raw.Lookup(envelope.FieldReplayReason)),
		ReplayHold:     rawString(raw.Lookup(envelope.FieldReplayHold)),
	}, nil
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
