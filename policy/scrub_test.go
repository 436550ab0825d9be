package policy

import (
	"strings"
	"testing"
)

// TestScrubValues: the messages of the corpus (testdata copies of
// shared/corpus/server_replies.json's errmsgs) and others that quote
// values keep their field and index names and lose every value.
func TestScrubValues(t *testing.T) {
	cases := []struct{ in, want string }{
		{`E11000 duplicate key error collection: test.pizzas index: _id_ dup key: { _id: 2 }`,
			`E11000 duplicate key error collection: test.pizzas index: _id_ dup key: { _id: ? }`},
		{`E11000 duplicate key error collection: gather.user index: _id_ dup key: { _id: ObjectId('628a531e6ff79d8e94abba87') }`,
			`E11000 duplicate key error collection: gather.user index: _id_ dup key: { _id: ? }`},
		{`E11000 duplicate key error collection: HeadHunter.vacancy index: unique link dup key: { _fts: "20scienc", _ftsx: 0.5555555555555556 }`,
			`E11000 duplicate key error collection: HeadHunter.vacancy index: unique link dup key: { _fts: ?, _ftsx: ? }`},
		{`E11000 duplicate key error collection: shop.users index: email_1 dup key: { email: "ann}, x: {@example.com" }`,
			`E11000 duplicate key error collection: shop.users index: email_1 dup key: { email: ? }`},
		{`E11000 duplicate key error collection: a.b index: a_1_b_1 dup key: { a: { x: [1, "}"] }, b: "q\"uote" }`,
			`E11000 duplicate key error collection: a.b index: a_1_b_1 dup key: { a: ?, b: ? }`},
		{`write exception: write errors: [E11000 duplicate key error collection: s.u index: email_1 dup key: { email: "ann@example.com" }]`,
			`write exception: write errors: [E11000 duplicate key error collection: s.u index: email_1 dup key: { email: ? }]`},
		{`Cannot apply $inc to a value of non-numeric type. {_id: ObjectId('5f1')} has the field 'n' of non-numeric type string`,
			`Cannot apply $inc to a value of non-numeric type. { _id: ? } has the field 'n' of non-numeric type string`},
		{`Cannot create field 'x' in element {y: 5}`, `Cannot create field 'x' in element { y: ? }`},
		{`After applying the update, the (immutable) field '_id' was found to have been altered to _id: "secret"`,
			`After applying the update, the (immutable) field '_id' was found to have been altered to _id: ?`},
		{`multiple errors reported : {...} at shardName1 :: and :: {...} at shardName2`,
			`multiple errors reported : {...} at shardName1 :: and :: {...} at shardName2`},
		{`Message: {"Errors":["Request rate is large"]}`, `Message: {"Errors":["Request rate is large"]}`},
		{`{"name":"x","attributes":{"a":1}}`, `{"name":"x","attributes":{"a":1}}`},
		{`{"d":"E11000 duplicate key error collection: s.u index: email_1 dup key: { email: \"ann@x\" }","n":1}`,
			`{"d":"E11000 duplicate key error collection: s.u index: email_1 dup key: { email: ? }","n":1}`},
		{`keyValue: { email: "ann@x" }`, `keyValue: { email: ? }`},
		{`dup key: { email: "cut short`, `dup key: { ? }`},
		{`Document failed validation`, `Document failed validation`},
		{`Rate limiter 'ingressRequestRateLimiter' rate exceeded`, `Rate limiter 'ingressRequestRateLimiter' rate exceeded`},
	}
	for _, c := range cases {
		if got := ScrubValues(c.in); got != c.want {
			t.Errorf("ScrubValues(%q)\n got %q\nwant %q", c.in, got, c.want)
		}
	}
	for _, secret := range []string{"ann@", "secret", "628a531e", "20scienc"} {
		for _, c := range cases {
			if strings.Contains(c.want, secret) {
				t.Errorf("want of %q holds %q", c.in, secret)
			}
		}
	}
	if ScrubError(nil) != "" {
		t.Error("ScrubError(nil)")
	}
}

// FuzzScrubValues: ScrubValues never panics, and a scrubbed message
// scrubs to itself.
func FuzzScrubValues(f *testing.F) {
	f.Add(`dup key: { a: "x", b: { c: [1, '}'] } }`)
	f.Add(`{`)
	f.Add(`altered to `)
	f.Fuzz(func(t *testing.T, s string) {
		out := ScrubValues(s)
		if again := ScrubValues(out); again != out {
			t.Errorf("not stable: %q -> %q -> %q", s, out, again)
		}
	})
}

// TestScrubValuesJSON: a message as JSON text holds it (escaped quotes).
func TestScrubValuesJSON(t *testing.T) {
	in := `"Description": "E11000 duplicate key error collection: s.u index: email_1 dup key: { email: \"carol@example.com\" }",`
	want := `"Description": "E11000 duplicate key error collection: s.u index: email_1 dup key: { email: ? }",`
	if got := ScrubValues(in); got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
}
