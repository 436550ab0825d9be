// Command writeguard shows and operates writeguard.
//
//	writeguard demo                 load real order lines through a guarded collection
//	writeguard dlq stats|list|show|replay|discard
//	                                inspect and drain a dead-letter collection
//
// Run "writeguard help" or "writeguard <command> --help" for the flags.
//
// Exit status: 0 success; 1 operational failure (server unreachable, a
// write or read failed); 2 usage error (unknown command or flag, bad
// value such as a malformed --uri, found before any connection); 3 the
// data check failed (demo: the accounting check; dlq
// replay: documents are still invalid, or conflicts remain).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/writeguard/writeguard/cmd/writeguard/internal/redact"
	"github.com/writeguard/writeguard/policy"
)

// Exit statuses scripts can rely on.
const (
	exitOK    = 0
	exitFail  = 1
	exitUsage = 2
	exitCheck = 3
)

const usage = `writeguard — guarded MongoDB writes: retry what is transient, dead-letter
what is invalid, resolve duplicates, account for every document.

Usage:
  writeguard demo [flags]            load 42,481 real order lines through writeguard
                                     against an embedded server with injected faults
  writeguard dlq stats [flags]       summarise a dead-letter collection
  writeguard dlq list [flags]        list envelopes
  writeguard dlq show [flags] ID     show one envelope (fingerprint, prefix, or _id)
  writeguard dlq replay [flags]      write pending originals to their collection
  writeguard dlq discard [flags]     give pending envelopes up
  writeguard dlq watch [flags]       serve the dead-letter backlog as metrics (Prometheus, OTLP)
  writeguard help [command]          this text, or a command's flags

Every command takes --help.

Exit status:
  0  success
  1  operational failure (server unreachable, a write or read failed)
  2  usage error (unknown command or flag, bad value such as a malformed
     --uri); the message names it
  3  check failed: demo accounting (rows lost, duplicated, or left failed,
     exhausted or unknown by an injected transient fault), or dlq replay
     left documents still invalid or in conflict
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run is the whole command, for tests: args without the program name.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	scrubOTelEnv() // OTEL_*_HEADERS and OTEL_*_ENDPOINT secrets, before any output
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	switch args[0] {
	case "demo":
		return runDemo(ctx, args[1:], stdout, stderr)
	case "dlq":
		return runDLQ(ctx, args[1:], stdout, stderr)
	case "help", "-h", "-help", "--help":
		if len(args) > 1 && args[0] == "help" {
			return run(ctx, append(args[1:], "--help"), stdout, stderr)
		}
		fmt.Fprint(stdout, usage)
		return exitOK
	default:
		fmt.Fprintf(stderr, "writeguard: unknown command %q\n\n%s", args[0], usage)
		return exitUsage
	}
}

// parseFlags parses args with fs, allowing flags after positional
// arguments ("show ID --json"). It returns the positional arguments and
// an exit status when the caller must stop: 0 after --help (usage printed
// on stdout), 2 after a bad flag (the flag package's message, which names
// the flag, is on stderr) or a malformed -uri (checkURI).
func parseFlags(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) ([]string, int, bool) {
	// The flag package prints the usage on its own after -help and after
	// a bad flag; print it once, on stdout, for -help only.
	usage := fs.Usage
	fs.Usage = func() {}
	defer func() { fs.Usage = usage }()
	fs.SetOutput(stderr)
	var pos []string
	for {
		err := fs.Parse(args)
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(stdout)
			usage()
			return nil, exitOK, true
		}
		if err != nil {
			// The flag package has printed the error, naming the flag.
			fmt.Fprintf(stderr, "Run '%s --help' for usage.\n", fs.Name())
			return nil, exitUsage, true
		}
		for _, name := range []string{"uri", "otlp-endpoint"} {
			if f := fs.Lookup(name); f != nil && f.Value.String() != "" {
				scrub.AddURI(f.Value.String())
			}
		}
		rest := fs.Args()
		if len(rest) == 0 || rest[0] == "--" {
			if len(rest) > 0 {
				pos = append(pos, rest[1:]...)
			}
			if f := fs.Lookup("uri"); f != nil && f.Value.String() != "" {
				if err := checkURI(f.Value.String()); err != nil {
					fmt.Fprintf(stderr, "%s: -uri: %s\nRun '%s --help' for usage.\n", fs.Name(), scrubbed(err.Error()), fs.Name())
					return nil, exitUsage, true
				}
			}
			return pos, 0, false
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// checkURI reports a -uri value the driver cannot parse as a usage error
// (exit 2), before any connection: a missing or unknown scheme, a bad
// port, an unknown or malformed option. A mongodb+srv URI is only checked
// for its scheme here: parsing it looks the SRV record up in DNS, which
// is the connection's business (a failed lookup is an operational
// failure, exit 1).
func checkURI(uri string) error {
	const std, srv = "mongodb://", "mongodb+srv://"
	switch {
	case strings.HasPrefix(uri, srv):
		if len(uri) == len(srv) {
			return fmt.Errorf("%q names no host; want %shost[/?options]", uri, srv)
		}
		return nil
	case !strings.HasPrefix(uri, std):
		return fmt.Errorf("%q is not a MongoDB connection string; want %shost[:port][,host...][/?options] or %shost", redact.URI(uri), std, srv)
	}
	if err := options.Client().ApplyURI(uri).Validate(); err != nil {
		var sc redact.Scrubber
		sc.AddURI(uri)
		return fmt.Errorf("%q: %v", redact.URI(uri), sc.String(err.Error()))
	}
	return nil
}

// scrub knows the secrets of every -uri the command was given (parseFlags
// adds them): the messages the command prints about errors go through it
// (usageError, failure, scrubbed), so that neither a password nor a
// secret URI option (tlsCertificateKeyFilePassword,
// authMechanismProperties, ...) is printed, even when a driver error
// quotes them; a URI in them is printed redacted (redact.URI).
var scrub redact.Scrubber

// scrubbed returns a message fit to print: the secrets of the URIs given
// scrubbed, and the values a server message quotes (a duplicate key's
// "dup key: { email: ? }", ...) left out by the library's scrubber,
// policy.ScrubValues: the values of a unique key are users' data. Only
// dlq show and dlq list print stored originals.
func scrubbed(msg string) string {
	return policy.ScrubValues(scrub.String(msg))
}

// usageError prints a usage error naming what was wrong and returns 2.
func usageError(stderr io.Writer, cmd, format string, args ...any) int {
	fmt.Fprintf(stderr, "writeguard %s: %s\nRun 'writeguard %s --help' for usage.\n", cmd, scrubbed(fmt.Sprintf(format, args...)), cmd)
	return exitUsage
}

// failure prints an operational error and returns 1.
func failure(stderr io.Writer, cmd string, err error) int {
	fmt.Fprintf(stderr, "writeguard %s: %s\n", cmd, scrubbed(fmt.Sprint(err)))
	return exitFail
}
