// Package redact keeps secrets out of the writeguard command's output: it
// redacts MongoDB connection strings (user info and secret options) and
// scrubs the secrets of the URIs it was told about from any text, such as
// a driver error that quotes the URI or one of its options.
//
// The secret options are those the connection string specification
// (mongodb/specifications source/uri-options/uri-options.md) defines to
// carry credentials: authMechanismProperties (AWS_SESSION_TOKEN, ...),
// tlsCertificateKeyFilePassword, the legacy sslClientCertificateKeyPassword
// and sslPEMKeyPassword, proxyUsername and proxyPassword; and, to be safe,
// any option whose name holds "password", "secret" or "token".
package redact

import (
	"io"
	"net/url"
	"regexp"
	"sort"
	"strings"
	"sync"
)

// Mask replaces every secret.
const Mask = "REDACTED"

// secretOption reports whether a URI option (any case) carries a secret.
func secretOption(name string) bool {
	n := strings.ToLower(name)
	switch n {
	case "authmechanismproperties", "proxyusername", "proxypassword",
		"tlscertificatekeyfilepassword", "sslclientcertificatekeypassword", "sslpemkeypassword":
		return true
	}
	return strings.Contains(n, "password") || strings.Contains(n, "secret") || strings.Contains(n, "token")
}

// URI returns s with its user info (user name and password) and the
// values of its secret options replaced by Mask. It does not need s to be
// a valid connection string: a malformed one is redacted as far as it
// looks like one (anything before an '@' in the host part is user info;
// every key=value after a '?' is an option), so that it can be echoed in
// a usage error.
func URI(s string) string {
	p := split(s)
	var b strings.Builder
	if p.scheme != "" {
		b.WriteString(p.scheme + "://")
	}
	if p.hasUserInfo {
		b.WriteString(Mask + "@")
	}
	b.WriteString(p.hosts)
	if p.hasQuery {
		b.WriteString("?" + redactQuery(p.query))
	}
	return b.String()
}

// parts are the pieces of a connection string, as far as they can be
// told apart in a malformed one.
type parts struct {
	scheme      string // "" when there is no "://"
	userInfo    string
	hasUserInfo bool
	hosts       string // hosts and path
	query       string
	hasQuery    bool
}

// split cuts a connection string into parts. User info is everything
// before the last '@' that has no '=' before it (a password may hold '?'
// or '/' unescaped; an option value may hold '@').
func split(s string) parts {
	var p parts
	rest := s
	if sc, r, ok := strings.Cut(s, "://"); ok {
		p.scheme, rest = sc, r
	}
	eq := strings.IndexByte(rest, '=')
	if eq < 0 {
		eq = len(rest)
	}
	if at := strings.LastIndexByte(rest[:eq], '@'); at >= 0 {
		p.userInfo, p.hasUserInfo, rest = rest[:at], true, rest[at+1:]
	}
	p.hosts = rest
	if i := strings.IndexByte(rest, '?'); i >= 0 {
		p.hosts, p.query, p.hasQuery = rest[:i], rest[i+1:], true
	}
	return p
}

// redactQuery masks the values of the secret options of a query string,
// keeping its form (separators, order, unknown pieces).
func redactQuery(q string) string {
	parts := strings.FieldsFunc(q, func(r rune) bool { return r == '&' || r == ';' })
	seps := sepsOf(q)
	var b strings.Builder
	for i, p := range parts {
		k, _, hasV := strings.Cut(p, "=")
		if hasV && secretOption(unescape(k)) {
			p = k + "=" + Mask
		}
		b.WriteString(p)
		if i < len(seps) {
			b.WriteByte(seps[i])
		}
	}
	return b.String()
}

func sepsOf(q string) []byte {
	var out []byte
	prev := true
	for i := 0; i < len(q); i++ {
		if q[i] == '&' || q[i] == ';' {
			if !prev {
				out = append(out, q[i])
			}
			prev = true
			continue
		}
		prev = false
	}
	return out
}

func unescape(s string) string {
	if u, err := url.QueryUnescape(s); err == nil {
		return u
	}
	return s
}

// secretsOf returns the secrets of a connection string: the URI itself,
// its user info, user name and password, and the values of its secret
// options (each as written and percent-decoded, and each key:value of
// authMechanismProperties).
func secretsOf(uri string) []string {
	var out []string
	add := func(s string) {
		if len(s) >= 3 { // shorter strings would mask innocent text
			out = append(out, s)
		}
		if u := unescape(s); u != s && len(u) >= 3 {
			out = append(out, u)
		}
	}
	if URI(uri) != uri {
		add(uri)
	}
	p := split(uri)
	if p.hasUserInfo {
		add(p.userInfo)
		if u, pw, ok := strings.Cut(p.userInfo, ":"); ok {
			add(u)
			add(pw)
		}
	}
	if p.hasQuery {
		for _, kv := range strings.FieldsFunc(p.query, func(r rune) bool { return r == '&' || r == ';' }) {
			k, v, ok := strings.Cut(kv, "=")
			if !ok || !secretOption(unescape(k)) {
				continue
			}
			add(v)
			for _, item := range strings.Split(unescape(v), ",") {
				if _, val, ok := strings.Cut(item, ":"); ok {
					add(val)
				}
			}
		}
	}
	return out
}

// uriRE finds connection strings in text.
var uriRE = regexp.MustCompile(`mongodb(\+srv)?://[^\s"'<>]+`)

// Scrubber removes known secrets, and the user info and secret options of
// any connection string, from text. The zero value is ready; it is safe
// for concurrent use.
type Scrubber struct {
	mu      sync.RWMutex
	secrets []string // longest first
}

// AddURI makes s scrub the secrets of uri (see URI) wherever they appear.
func (s *Scrubber) AddURI(uri string) { s.AddSecrets(secretsOf(uri)...) }

// AddSecrets makes s scrub each of secrets wherever it appears (a header
// value, a token). Strings shorter than 3 bytes are ignored: they would
// mask innocent text.
func (s *Scrubber) AddSecrets(secrets ...string) {
	var add []string
	for _, sec := range secrets {
		if len(sec) >= 3 {
			add = append(add, sec)
		}
	}
	if len(add) == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.secrets = append(s.secrets, add...)
	sort.Slice(s.secrets, func(i, j int) bool { return len(s.secrets[i]) > len(s.secrets[j]) })
}

// String returns text with every known secret replaced by Mask and every
// connection string in it redacted (URI).
func (s *Scrubber) String(text string) string {
	s.mu.RLock()
	for _, sec := range s.secrets {
		if strings.Contains(text, sec) {
			text = strings.ReplaceAll(text, sec, Mask)
		}
	}
	s.mu.RUnlock()
	return uriRE.ReplaceAllStringFunc(text, URI)
}

// Writer returns a writer that scrubs each Write's bytes with s before
// passing them to w. A secret split across two Writes is not seen; the
// command writes each message with one call.
func (s *Scrubber) Writer(w io.Writer) io.Writer { return &writer{s: s, w: w} }

type writer struct {
	s *Scrubber
	w io.Writer
}

func (w *writer) Write(p []byte) (int, error) {
	out := w.s.String(string(p))
	if _, err := io.WriteString(w.w, out); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Error is err with its message scrubbed by s; errors.Is and errors.As
// still see err.
func (s *Scrubber) Error(err error) error {
	if err == nil {
		return nil
	}
	return &scrubbed{msg: s.String(err.Error()), err: err}
}

type scrubbed struct {
	msg string
	err error
}

func (e *scrubbed) Error() string { return e.msg }
func (e *scrubbed) Unwrap() error { return e.err }
