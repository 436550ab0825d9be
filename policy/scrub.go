package policy

import (
	"strings"
)

// ValueMark replaces every value ScrubValues removes.
const ValueMark = "?"

// ScrubValues returns msg without the document values a server or
// driver message may quote, keeping everything that names what failed:
//
//   - a duplicate key's "dup key: { email: "a@b.c", n: 2 }" becomes
//     "dup key: { email: ?, n: ? }": the index and the key's field names
//     stay, never their values (mongodb/mongo
//     src/mongo/db/storage/duplicate_key_error_info.cpp, toString: "dup
//     key: " then the key pattern's fields with their values; FerretDB
//     and the corpus's replies use the same shape); so does a
//     "keyValue: { ... }";
//   - the documents other messages quote keep their top-level field
//     names only, each value replaced by ValueMark (nested documents,
//     arrays, strings and ObjectId('…') whole): TypeMismatch 14's
//     "{_id: ObjectId('…')} has the field 'n' of non-numeric type",
//     PathNotViable 28's "Cannot create field 'x' in element {y: 5}",
//     Unauthorized 13's "not authorized on db to execute command { ... }";
//   - ImmutableField 66's "... was found to have been altered to _id: 2"
//     keeps the field name, not the value (update_stage.cpp).
//
// Any other text, other braces included (JSON, "{...}"), is kept as it
// is, so ScrubValues can run over a JSON line that holds such a message
// (its escaped quotes are understood). Field names in single quotes
// ('n'), index names, namespaces, codes and code names are kept. A
// quoted document that does not close (a message cut short) is replaced
// from its "{" to the end. Used for Report.Error(), replay problems, logs
// and the command's output; only the commands that exist to show stored
// originals (dlq show, dlq list) print values.
func ScrubValues(msg string) string {
	if !strings.ContainsAny(msg, "{") && !strings.Contains(msg, alteredTo) {
		return msg
	}
	var b strings.Builder
	b.Grow(len(msg))
	for i := 0; i < len(msg); {
		switch {
		case msg[i] == '{' && quotesValues(msg, i):
			n, ok := scrubDoc(&b, msg[i:])
			if !ok {
				b.WriteString("{ " + ValueMark + " }")
				return b.String()
			}
			i += n
		case strings.HasPrefix(msg[i:], alteredTo):
			b.WriteString(alteredTo)
			i += len(alteredTo)
			i += scrubAltered(&b, msg[i:])
		default:
			b.WriteByte(msg[i])
			i++
		}
	}
	return b.String()
}

// valueMarkers precede a document of values in a server message.
var valueMarkers = []string{"dup key:", "keyValue:", "in element", "to execute command"}

// quotesValues reports whether the "{" at msg[i] starts a document of
// values: after one of valueMarkers, or followed, once closed, by " has
// the field" (TypeMismatch's message).
func quotesValues(msg string, i int) bool {
	before := strings.TrimRight(msg[:i], " ")
	for _, m := range valueMarkers {
		if strings.HasSuffix(before, m) {
			return true
		}
	}
	if n := valueEnd(msg[i+1:]); n >= 0 {
		j := i + 1 + n
		if j < len(msg) && msg[j] == '}' {
			return strings.HasPrefix(msg[j+1:], " has the field")
		}
	}
	return false
}

// ScrubError returns ScrubValues(err.Error()), "" for a nil err.
func ScrubError(err error) string {
	if err == nil {
		return ""
	}
	return ScrubValues(err.Error())
}

// alteredTo starts the value ImmutableField's message quotes.
const alteredTo = "altered to "

// scrubAltered writes "<field>: ?" for s = "<field>: <value>..." and
// returns the bytes of s it consumed (the value runs to the end of s).
func scrubAltered(b *strings.Builder, s string) int {
	colon := strings.Index(s, ":")
	if colon < 0 {
		return 0
	}
	b.WriteString(s[:colon+1] + " " + ValueMark)
	return len(s)
}

// scrubDoc writes the scrubbed form of the document s starts with ("{")
// and returns its length in s; ok is false when it does not close.
func scrubDoc(b *strings.Builder, s string) (int, bool) {
	var fields []string
	i := 1
	for {
		i += skipSpace(s[i:])
		if i >= len(s) {
			return 0, false
		}
		if s[i] == '}' {
			i++
			break
		}
		// A field name runs to its colon; one that does not (a message's
		// own braces, "{...}") is kept as written when it holds no quote.
		colon := nameEnd(s[i:])
		if colon < 0 {
			end := valueEnd(s[i:])
			if end < 0 {
				return 0, false
			}
			raw := strings.TrimSpace(s[i : i+end])
			switch raw {
			case "":
			case "...":
				fields = append(fields, raw)
			default:
				fields = append(fields, ValueMark)
			}
			i += end
		} else {
			name := strings.TrimSpace(s[i : i+colon])
			i += colon + 1
			end := valueEnd(s[i:])
			if end < 0 {
				return 0, false
			}
			fields = append(fields, name+": "+ValueMark)
			i += end
		}
		if i < len(s) && s[i] == ',' {
			i++
		}
	}
	b.WriteString("{ " + strings.Join(fields, ", ") + " }")
	return i, true
}

// nameEnd returns the index of the colon ending a field name at the start
// of s (a bare or quoted name), -1 when there is none before a value
// separator.
func nameEnd(s string) int {
	if len(s) > 0 && (s[0] == '"' || s[0] == '\'') {
		q := quoteEnd(s)
		if q < 0 {
			return -1
		}
		j := q + skipSpace(s[q:])
		if j < len(s) && s[j] == ':' {
			return j
		}
		return -1
	}
	for j := 0; j < len(s); j++ {
		switch s[j] {
		case ':':
			return j
		case ',', '}', '{', '[', '"', '\'', '(':
			return -1
		}
	}
	return -1
}

// valueEnd returns the length of the value at the start of s, up to the
// "," or "}" that ends it at depth 0 (strings, documents, arrays and
// calls such as ObjectId('…') whole); -1 when it does not end.
func valueEnd(s string) int {
	depth := 0
	for j := 0; j < len(s); j++ {
		switch c := s[j]; c {
		case '\\':
			// A message inside JSON text (a span's description): its
			// strings' quotes are escaped, \"...\".
			if j+1 < len(s) && s[j+1] == '"' {
				k := strings.Index(s[j+2:], `\"`)
				if k < 0 {
					return -1
				}
				j += 2 + k + 1
			}
		case '"', '\'':
			q := quoteEnd(s[j:])
			if q < 0 {
				return -1
			}
			j += q - 1
		case '{', '[', '(':
			depth++
		case ']', ')':
			depth--
		case '}':
			if depth == 0 {
				return j
			}
			depth--
		case ',':
			if depth == 0 {
				return j
			}
		}
	}
	return -1
}

// quoteEnd returns the length of the quoted string at the start of s
// (its closing quote included; a backslash escapes the next byte), -1
// when it does not close.
func quoteEnd(s string) int {
	q := s[0]
	for j := 1; j < len(s); j++ {
		switch s[j] {
		case '\\':
			j++
		case q:
			return j + 1
		}
	}
	return -1
}

func skipSpace(s string) int {
	i := 0
	for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r') {
		i++
	}
	return i
}
