package writeguard_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/writeguard/writeguard"
	"github.com/writeguard/writeguard/envelope"
	"github.com/writeguard/writeguard/mocks"
	"github.com/writeguard/writeguard/policy"
)

// secretEmail is a unique key's value: users' data that no printed error
// may hold.
const secretEmail = "carol@example.com"

// dupKeySinkErr is a sink failing with a server error that quotes a
// value (a duplicate key on a unique index of the dead-letter
// collection), then with 13 Unauthorized.
func sinkFailing(code int32, name, msg string) envelope.Sink {
	return envelope.SinkFunc(func(context.Context, []envelope.Envelope) error {
		return mongo.CommandError{Code: code, Name: name, Message: msg}
	})
}

// TestNoValuesInPrintedErrors (issue 30 items 6 and 7): a table over the
// places the library prints errors: Report.Error() (and fmt's %v of it),
// each Outcome's Err, the logger's lines. A duplicate key's value is in
// none of them; the index and key field names are; a dead_letter_failed
// document's sink failure is named by code and class, in the Report's
// text and in the outcome's error.
func TestNoValuesInPrintedErrors(t *testing.T) {
	dupMsg := `E11000 duplicate key error collection: db.dlq index: email_1 dup key: { email: "` + secretEmail + `" }`
	cases := []struct {
		name  string
		sink  envelope.Sink
		want  []string // in Report.Error()
		wantO []string // in the first outcome's Err
	}{
		{"sink 13 Unauthorized", sinkFailing(13, "Unauthorized", "not authorized on db to execute command { insert: \""+secretEmail+"\" }"),
			[]string{"2 dead_letter_failed (sink: 13 Unauthorized, "}, []string{"dead-letter sink failed (13 Unauthorized, ", "{ insert: ? }"}},
		{"sink duplicate key", sinkFailing(11000, "DuplicateKey", dupMsg),
			[]string{"2 dead_letter_failed (sink: 11000 DuplicateKey, "}, []string{"index: email_1 dup key: { email: ? }"}},
		{"target duplicate key", nil, []string{"1 conflict"}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var logs bytes.Buffer
			fake := mocks.NewFake("db.users").Unique("email")
			if err := fake.Seed(bson.D{{Key: "_id", Value: 0}, {Key: "email", Value: secretEmail}}); err != nil {
				t.Fatal(err)
			}
			docs := []any{bson.D{{Key: "email", Value: secretEmail}}}
			opts := []writeguard.Option{writeguard.WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})))}
			if c.sink != nil {
				fake.Validator(func(bson.Raw) (bson.Raw, bool) { return nil, true })
				docs = []any{bson.D{{Key: "email", Value: secretEmail}, {Key: "n", Value: 1}}, bson.D{{Key: "email", Value: secretEmail}, {Key: "n", Value: 2}}}
				opts = append(opts, writeguard.WithDeadLetter(c.sink), writeguard.WithBackoff(fastBackoffForScrub))
			}
			g, err := writeguard.New(fake, opts...)
			if err != nil {
				t.Fatal(err)
			}
			_, err = g.InsertMany(context.Background(), docs, options.InsertMany().SetOrdered(false))
			var r *writeguard.Report
			if !errors.As(err, &r) {
				t.Fatalf("err = %v, want a Report", err)
			}
			printed := map[string]string{"Report.Error()": r.Error(), "%v": fmt.Sprintf("%v", err), "logs": logs.String()}
			for i, o := range r.Outcomes {
				if o.Err != nil {
					printed[fmt.Sprintf("Outcomes[%d].Err", i)] = o.Err.Error()
				}
			}
			t.Logf("%q", printed)
			for where, text := range printed {
				if strings.Contains(text, secretEmail) {
					t.Errorf("%s holds the value %q: %s", where, secretEmail, text)
				}
			}
			for _, w := range c.want {
				if !strings.Contains(r.Error(), w) {
					t.Errorf("Report.Error() = %q, want %q in it", r.Error(), w)
				}
			}
			for _, w := range c.wantO {
				if o := r.Outcomes[0]; o.Err == nil || !strings.Contains(o.Err.Error(), w) {
					t.Errorf("Outcomes[0].Err = %v, want %q in it", o.Err, w)
				}
			}
		})
	}
}

// fastBackoffForScrub keeps a sink's retryable failures quick.
var fastBackoffForScrub = policy.Backoff{Base: time.Millisecond, Cap: time.Millisecond, MaxAttempts: 2}
