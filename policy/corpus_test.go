package policy_test

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/writeguard/writeguard/mocks"
	"github.com/writeguard/writeguard/policy"
)

// want is the expected classification of one reply: one class per failure
// Extract finds, in order, and whether the whole-command failure is
// ambiguous.
type want struct {
	classes   []policy.Class
	ambiguous []bool        // per failure; nil = all false
	retry     time.Duration // RetryAfter of the first failure
	origin    policy.Origin // of the first failure
	keyPat    string        // keyPattern of the first failure, as relaxed ext JSON ("" = none)
	none      bool          // the driver reports success
}

// expected holds every entry of testdata/server_replies.json (copied from
// the project's corpus, sources inside). A new entry without an
// expectation fails TestCorpusServerReplies.
var expected = map[string][]want{
	"insert-121-ordered-writeErrors-errInfo":       {{classes: cl(policy.Invalid)}},
	"insert-121-unordered-two-writeErrors":         {{classes: cl(policy.Invalid, policy.Invalid)}},
	"insert-121-pre50-no-errInfo":                  {{classes: cl(policy.Invalid)}},
	"findAndModify-121-top-level":                  {{classes: cl(policy.Invalid)}},
	"insert-11000-writeError-keyPattern-keyValue":  {{classes: cl(policy.Conflict), keyPat: `{"name":1}`}},
	"insert-11000-objectid-id":                     {{classes: cl(policy.Conflict), keyPat: `{"_id":1}`}},
	"insert-11000-text-index-compound":             {{classes: cl(policy.Conflict), keyPat: `{"_fts":"text","_ftsx":1}`}},
	"insert-11000-shell-id-double":                 {{classes: cl(policy.Conflict)}},
	"findAndModify-11000-top-level-keyPattern":     {{classes: cl(policy.Conflict), keyPat: `{"x":1}`}},
	"dup-key-extra-fields-server-source":           {{classes: cl(policy.Conflict), keyPat: `{"a":1}`}},
	"bulkWrite-8.0-unordered-dup-keys":             {{classes: cl(policy.Conflict, policy.Conflict), keyPat: `{"_id":1}`}},
	"bulkWrite-8.0-response-format-spec":           {{none: true}},
	"wce-64-wtimeout-with-writeConcern-provenance": {{classes: cl(policy.Unknown), ambiguous: []bool{true}, origin: policy.OriginWriteConcern}},
	"wce-64-docs-remove":                           {{classes: cl(policy.Unknown), ambiguous: []bool{true}, origin: policy.OriginWriteConcern}},
	"wce-91-shutdown-retryable-write-label":        {{classes: cl(policy.Transient), ambiguous: []bool{true}, origin: policy.OriginWriteConcern}},
	// 10107 is in the server's NotPrimaryError category: a whole-command
	// reply of that category may follow a partly applied batch
	// (InterruptedCodes), so it proves nothing about the documents.
	"top-level-retryable-code-with-RetryableWriteError": {{classes: cl(policy.Transient), ambiguous: []bool{true}}},
	"top-level-NoWritesPerformed":                       {{classes: cl(policy.Transient), ambiguous: []bool{false}}},
	"top-level-20-illegaloperation-standalone":          {{classes: cl(policy.Configuration)}},
	"top-level-50-maxtimemsexpired":                     {{classes: cl(policy.Transient), ambiguous: []bool{true}, origin: policy.OriginTimeout}},
	"top-level-112-writeconflict-in-transaction":        {{classes: cl(policy.Transient)}},
	"failpoint-errmsg-format":                           {{classes: cl(policy.Transient)}},
	"overload-462-ingress-request-rate-limiter":         {{classes: cl(policy.Throttled)}},
	"overload-with-baseBackoffMS":                       {{classes: cl(policy.Throttled), retry: 250 * time.Millisecond}},
	"overload-error-codes-server": {
		{classes: cl(policy.Unknown)}, // 433: SystemOverloadedError without RetryableError is not retried
		{classes: cl(policy.Unknown)}, // 449
		{classes: cl(policy.Unknown)}, // 450
		{classes: cl(policy.Throttled)},
	},
	"cosmos-16500-writeError-in-bulk-partial-success": {{classes: cl(policy.Throttled), retry: 8 * time.Millisecond}},
	"cosmos-16500-top-level-2019-format":              {{classes: cl(policy.Throttled)}},
	"wce-abbreviated-examples-spec": {
		{classes: cl(policy.Transient), ambiguous: []bool{true}, origin: policy.OriginWriteConcern},     // 91
		{classes: cl(policy.Transient), ambiguous: []bool{true}, origin: policy.OriginWriteConcern},     // 189
		{classes: cl(policy.Transient), ambiguous: []bool{true}, origin: policy.OriginWriteConcern},     // 11600
		{classes: cl(policy.Unknown), ambiguous: []bool{true}, origin: policy.OriginWriteConcern},       // 11601 Interrupted: not retryable
		{classes: cl(policy.Transient), ambiguous: []bool{true}, origin: policy.OriginWriteConcern},     // 11602
		{classes: cl(policy.Unknown), ambiguous: []bool{true}, origin: policy.OriginWriteConcern},       // 64
		{classes: cl(policy.Unknown), ambiguous: []bool{true}, origin: policy.OriginWriteConcern},       // 64 from mongos
		{classes: cl(policy.Unknown), ambiguous: []bool{true}, origin: policy.OriginWriteConcern},       // 50 as a WCE
		{classes: cl(policy.Configuration), ambiguous: []bool{true}, origin: policy.OriginWriteConcern}, // 100
		{classes: cl(policy.Configuration), ambiguous: []bool{true}, origin: policy.OriginWriteConcern}, // 79
		{classes: cl(policy.Unknown)}, // ok:0 251 with a WCE
	},
}

func cl(cs ...policy.Class) []policy.Class { return cs }

type entry struct {
	ID          string            `json:"id"`
	Reply       json.RawMessage   `json:"reply"`
	WriteError  json.RawMessage   `json:"write_error"`
	ErrmsgEx    string            `json:"errmsg_example"`
	ShellOutput json.RawMessage   `json:"shell_output"`
	Examples    []json.RawMessage `json:"examples"`
	Observed    json.RawMessage   `json:"observed_reply"`
	Codes       []struct {
		Code       int32    `json:"code"`
		Name       string   `json:"name"`
		Categories []string `json:"categories"`
	} `json:"codes"`
}

// replies turns a corpus entry into the server replies it stands for. The
// corpus keeps some replies in other shapes (a bare write error, shell
// output, a client bulkWrite cursor, placeholders); each is rebuilt here
// as the insert command's reply carrying the same error fields, with the
// rebuilding named in a comment.
func replies(t *testing.T, e entry) []string {
	t.Helper()
	switch e.ID {
	case "insert-11000-shell-id-double":
		// Only the errmsg is in the corpus: a write error without keyPattern.
		b, _ := json.Marshal(e.ErrmsgEx)
		return []string{`{"ok":1,"n":0,"writeErrors":[{"index":0,"code":11000,"errmsg":` + string(b) + `}]}`}
	case "dup-key-extra-fields-server-source":
		// Field list only: a write error carrying every optional field.
		return []string{`{"ok":1,"n":0,"writeErrors":[{"index":0,"code":11000,"errmsg":"E11000 duplicate key error collection: db.c index: a_1 collation: {locale: \"fr\"} dup key: { a: \"x\" }","keyPattern":{"a":1},"keyValue":{"a":"x"},"hexEncoded":[false],"collation":{"locale":"fr"}}]}`}
	case "bulkWrite-8.0-unordered-dup-keys":
		// The client-level bulkWrite reply (cursor.firstBatch of per-op
		// results) as the insert command reports the same errors.
		var r struct {
			Cursor struct {
				FirstBatch []map[string]any `json:"firstBatch"`
			} `json:"cursor"`
		}
		if err := json.Unmarshal(e.Reply, &r); err != nil {
			t.Fatal(err)
		}
		var wes []map[string]any
		for _, op := range r.Cursor.FirstBatch {
			if op["ok"] == float64(0) {
				wes = append(wes, map[string]any{"index": op["idx"], "code": op["code"], "errmsg": op["errmsg"], "keyPattern": op["keyPattern"], "keyValue": op["keyValue"]})
			}
		}
		b, _ := json.Marshal(map[string]any{"ok": 1, "n": 2, "writeErrors": wes})
		return []string{string(b)}
	case "bulkWrite-8.0-response-format-spec":
		return []string{string(e.Observed)}
	case "overload-with-baseBackoffMS":
		// Placeholders filled with 462 and 250 ms.
		s := strings.NewReplacer(`"<code>"`, `462`, `"<codeName>"`, `"IngressRequestRateLimitExceeded"`, `"<ms>"`, `"250"`).Replace(string(e.Reply))
		return []string{s}
	case "overload-error-codes-server":
		var out []string
		for _, c := range e.Codes {
			labels := []string{}
			for _, cat := range c.Categories {
				switch cat {
				case "SystemOverloadedError":
					labels = append(labels, "SystemOverloadedError")
				case "RetriableError":
					labels = append(labels, "RetryableError")
				}
			}
			b, _ := json.Marshal(map[string]any{"ok": 0, "code": c.Code, "codeName": c.Name, "errmsg": "overloaded", "errorLabels": labels})
			out = append(out, string(b))
		}
		return out
	case "wce-abbreviated-examples-spec":
		var out []string
		for _, x := range e.Examples {
			out = append(out, string(x))
		}
		return out
	}
	switch {
	case e.Reply != nil:
		return []string{string(e.Reply)}
	case e.WriteError != nil:
		return []string{`{"ok":1,"n":0,"writeErrors":[` + string(e.WriteError) + `]}`}
	case e.ShellOutput != nil:
		// Shell output: the server's reply is {ok:1, n, writeConcernError}.
		var so map[string]json.RawMessage
		_ = json.Unmarshal(e.ShellOutput, &so)
		return []string{`{"ok":1,"n":1,"writeConcernError":` + string(so["writeConcernError"]) + `}`}
	}
	t.Fatalf("entry %s has no reply", e.ID)
	return nil
}

// TestCorpusServerReplies runs every reply of the corpus through the real
// driver (mocks.ReplyError) for insertOne, insertMany and bulkWrite, then
// Extract and the default classifier.
func TestCorpusServerReplies(t *testing.T) {
	raw, err := os.ReadFile("../testdata/server_replies.json")
	if err != nil {
		t.Fatal(err)
	}
	var entries []entry
	if err := json.Unmarshal(raw, &entries); err != nil {
		t.Fatal(err)
	}
	table := policy.Default()
	seen := 0
	for _, e := range entries {
		wants, ok := expected[e.ID]
		if !ok {
			t.Errorf("corpus entry %q has no expected classification", e.ID)
			continue
		}
		rs := replies(t, e)
		if len(rs) != len(wants) {
			t.Fatalf("%s: %d replies, %d expectations", e.ID, len(rs), len(wants))
		}
		for i, r := range rs {
			w := wants[i]
			var reply bson.Raw
			if err := bson.UnmarshalExtJSON([]byte(r), false, &reply); err != nil {
				t.Fatalf("%s[%d]: %v", e.ID, i, err)
			}
			for _, op := range []string{mocks.OpInsertOne, mocks.OpInsertMany, mocks.OpBulkWrite} {
				name := fmt.Sprintf("%s/%d/%s", e.ID, i, op)
				t.Run(name, func(t *testing.T) {
					seen++
					derr := mocks.ReplyError(op, reply)
					fails := policy.Extract(derr)
					if w.none {
						if derr != nil {
							t.Fatalf("driver error %v, want success", derr)
						}
						return
					}
					if derr == nil {
						t.Fatalf("the driver reported success for %s", r)
					}
					if len(fails) != len(w.classes) {
						t.Fatalf("%d failures %+v, want %d", len(fails), fails, len(w.classes))
					}
					for j, f := range fails {
						if got := table.Classify(f); got != w.classes[j] {
							t.Errorf("failure %d (code %d, origin %s, labels %v): class %s, want %s", j, f.Code, f.Origin, f.Labels, got, w.classes[j])
						}
						amb := false
						if w.ambiguous != nil {
							amb = w.ambiguous[j]
						}
						if f.Ambiguous != amb {
							t.Errorf("failure %d: ambiguous %v, want %v", j, f.Ambiguous, amb)
						}
						if f.Err == nil || f.Err.Error() != derr.Error() {
							t.Errorf("failure %d does not keep the driver error", j)
						}
					}
					f := fails[0]
					if f.RetryAfter != w.retry {
						t.Errorf("RetryAfter %v, want %v", f.RetryAfter, w.retry)
					}
					if f.Origin != w.origin && !(w.origin == policy.OriginServer) {
						t.Errorf("origin %s, want %s", f.Origin, w.origin)
					}
					if w.keyPat != "" {
						var got, exp any
						if f.KeyPattern == nil {
							t.Fatalf("keyPattern not parsed, want %s", w.keyPat)
						}
						js, _ := bson.MarshalExtJSON(f.KeyPattern, false, false)
						_ = json.Unmarshal(js, &got)
						_ = json.Unmarshal([]byte(w.keyPat), &exp)
						if fmt.Sprint(got) != fmt.Sprint(exp) {
							t.Errorf("keyPattern %s, want %s", js, w.keyPat)
						}
					}
				})
			}
		}
	}
	if len(expected) != len(entries) {
		t.Errorf("%d expectations for %d corpus entries", len(expected), len(entries))
	}
	t.Logf("classified %d (reply, operation) pairs from %d corpus entries", seen, len(entries))
}
