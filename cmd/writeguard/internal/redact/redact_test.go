package redact

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
)

const (
	pw    = "hunter2pw"
	kpw   = "keyfilepw9"
	token = "AWSTOKEN123"
)

var secretURI = "mongodb://alice:" + pw + "@db1:27017,db2/admin?replicaSet=rs0&tlsCertificateKeyFilePassword=" + kpw +
	"&authMechanism=MONGODB-AWS&authMechanismProperties=AWS_SESSION_TOKEN:" + token + "&sslClientCertificateKeyPassword=" + kpw

func TestURI(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"mongodb://localhost:27017", "mongodb://localhost:27017"},
		{"mongodb://u:p@h/?w=1", "mongodb://REDACTED@h/?w=1"},
		{secretURI, "mongodb://REDACTED@db1:27017,db2/admin?replicaSet=rs0&tlsCertificateKeyFilePassword=REDACTED" +
			"&authMechanism=MONGODB-AWS&authMechanismProperties=REDACTED&sslClientCertificateKeyPassword=REDACTED"},
		// Malformed: a bad port, no scheme, a password with '?' and '/'.
		{"mongodb://bob:" + pw + "@localhost:notaport", "mongodb://REDACTED@localhost:notaport"},
		{"bob:" + pw + "@localhost:27017", "REDACTED@localhost:27017"},
		{"mongodb://bob:p?a/s@h/?appName=x@y", "mongodb://REDACTED@h/?appName=x@y"},
		{"mongodb+srv://u:" + pw + "@c.example.net/?proxyPassword=" + pw + ";proxyUsername=me", "mongodb+srv://REDACTED@c.example.net/?proxyPassword=REDACTED;proxyUsername=REDACTED"},
		{"localhost:27017", "localhost:27017"},
	} {
		if got := URI(c.in); got != c.want {
			t.Errorf("URI(%q)\n = %q\nwant %q", c.in, got, c.want)
		}
	}
}

// TestScrubber: a driver-style error quoting the URI, an option or a
// decoded password loses every secret; text without secrets is kept.
func TestScrubber(t *testing.T) {
	var s Scrubber
	s.AddURI(secretURI)
	s.AddURI("mongodb://carol:p%40ss%2Fword@h")
	for _, in := range []string{
		"error parsing uri: " + secretURI,
		`connection() error occurred during connection handshake: auth error: sasl conversation error: unable to authenticate using mechanism "SCRAM-SHA-256": (AuthenticationFailed) Authentication failed. password ` + pw,
		"tls: failed to decrypt key with password " + kpw + ": bad",
		"invalid authMechanismProperties: AWS_SESSION_TOKEN:" + token,
		"password p@ss/word rejected",
		"see mongodb://dave:" + pw + "x@other/?tlsCertificateKeyFilePassword=zzz9",
	} {
		out := s.String(in)
		for _, sec := range []string{pw, kpw, token, "p@ss/word", "zzz9"} {
			if strings.Contains(out, sec) {
				t.Errorf("%q\nscrubbed to %q: still holds %q", in, out, sec)
			}
		}
	}
	if got := s.String("plain text, mongodb://h:1/db"); got != "plain text, mongodb://h:1/db" {
		t.Errorf("plain text changed: %q", got)
	}
	var buf bytes.Buffer
	fmt.Fprintf(s.Writer(&buf), "connect to %s: refused\n", secretURI)
	if strings.Contains(buf.String(), pw) || !strings.Contains(buf.String(), "refused") {
		t.Errorf("Writer: %q", buf.String())
	}
	base := errors.New("dial " + secretURI)
	err := s.Error(fmt.Errorf("wrapped: %w", base))
	if strings.Contains(err.Error(), pw) || !errors.Is(err, base) {
		t.Errorf("Error: %v", err)
	}
}

// TestAddSecrets: each secret added is masked wherever it appears; strings
// under 3 bytes are ignored.
func TestAddSecrets(t *testing.T) {
	var s Scrubber
	s.AddSecrets("Bearer tok-12345", "tok-12345", "ab")
	if got := s.String("header Authorization: Bearer tok-12345; again tok-12345; ab stays"); got != "header Authorization: "+Mask+"; again "+Mask+"; ab stays" {
		t.Errorf("String = %q", got)
	}
}
