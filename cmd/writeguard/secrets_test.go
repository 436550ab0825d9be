package main

import (
	"context"
	"strings"
	"testing"

	"github.com/writeguard/writeguard/replay"
)

// TestNoSecretInOutput: whatever the command prints about a -uri (a usage
// error for a malformed one, a connection failure, --help) holds neither
// its password nor its secret options. Before the change a malformed
// -uri was echoed whole, password included, and connection errors could
// quote tlsCertificateKeyFilePassword or authMechanismProperties.
func TestNoSecretInOutput(t *testing.T) {
	const (
		pw    = "hunter2pw"
		kpw   = "keypw9999"
		token = "TOKEN7777"
	)
	secrets := []string{pw, kpw, token}
	unreachable := "mongodb://alice:" + pw + "@127.0.0.1:1/?serverSelectionTimeoutMS=300&tlsCertificateKeyFilePassword=" + kpw
	for _, c := range []struct {
		args []string
		code int
	}{
		{[]string{"dlq", "stats", "--uri", "mongodb://alice:" + pw + "@localhost:notaport"}, exitUsage},
		{[]string{"dlq", "list", "--uri", "alice:" + pw + "@localhost:27017"}, exitUsage},
		{[]string{"demo", "--uri", "mongodb://alice:" + pw + "@localhost/?tlsCertificateKeyFilePassword=" + kpw + "&connectTimeoutMS=x"}, exitUsage},
		{[]string{"dlq", "show", "x", "--uri", "mongodb://alice:" + pw + "@h/?authMechanism=MONGODB-AWS&authMechanismProperties=AWS_SESSION_TOKEN:" + token + "&connectTimeoutMS=x"}, exitUsage},
		{[]string{"dlq", "stats", "--uri", unreachable}, exitFail},
		{[]string{"dlq", "discard", "--all", "--uri", unreachable}, exitFail},
		{[]string{"dlq", "stats", "--uri", unreachable, "--help"}, exitOK},
		{[]string{"demo", "--limit", "10", "--otlp-endpoint", "http://alice:" + pw + "@localhost:notaport"}, exitUsage},
	} {
		code, out, errOut := runCmd(t, context.Background(), c.args...)
		if code != c.code {
			t.Errorf("%v: exit %d, want %d (stderr %q)", c.args, code, c.code, errOut)
		}
		for _, s := range secrets {
			if strings.Contains(out+errOut, s) {
				t.Errorf("%v printed the secret %q:\nstdout: %s\nstderr: %s", c.args, s, out, errOut)
			}
		}
		if c.code == exitUsage && !strings.Contains(errOut, "-uri") && !strings.Contains(errOut, "-otlp-endpoint") {
			t.Errorf("%v: the usage error does not name -uri: %q", c.args, errOut)
		}
	}
}

// TestScrubbedDupKey: a duplicate key error's key values are left out of
// the command's messages (they are users' data); the code stays.
func TestScrubbedDupKey(t *testing.T) {
	msg := `write exception: E11000 duplicate key error collection: shop.users index: email_1 dup key: { email: "carol@example.com" } (code 11000)`
	got := scrubbed(msg)
	if strings.Contains(got, "carol@example.com") || !strings.Contains(got, "E11000") || !strings.Contains(got, "(code 11000)") {
		t.Errorf("scrubbed = %q", got)
	}
	// As a span's JSON holds it (the trace file).
	js := `"Description": "E11000 duplicate key error collection: shop.users index: email_1 dup key: { email: \"carol@example.com\" }",`
	if got := scrubbed(js); strings.Contains(got, "carol@example.com") || !strings.HasSuffix(got, `}",`) {
		t.Errorf("scrubbed JSON = %q", got)
	}
}

// TestReplayOutputScrubbed (issue 30 item 6): dlq replay's table names a
// problem's duplicate key fields, never their values.
func TestReplayOutputScrubbed(t *testing.T) {
	var b strings.Builder
	res := replay.Result{Problems: []replay.Problem{{Outcome: "conflict", Fingerprint: "0123456789abcdef", Code: 11000,
		Reason: `E11000 duplicate key error collection: shop.users index: email_1 dup key: { email: "carol@example.com" }`}}}
	printReplay(&b, []replayOut{{Namespace: "shop.users", Result: res}}, dlqFlags{}, nil)
	if out := b.String(); strings.Contains(out, "carol@example.com") || !strings.Contains(out, "dup key: { email: ? }") {
		t.Errorf("dlq replay printed:\n%s", out)
	}
}
