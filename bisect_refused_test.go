package writeguard_test

import (
	"errors"
	"fmt"
	"testing"
	"testing/synctest"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/writeguard/writeguard"
	"github.com/writeguard/writeguard/mocks"
)

// refusedCall runs an InsertMany of n documents (prefix+index) against
// fake, with the fixture's sink, and returns its Report, the commands the
// server received and the documents they carried.
func refusedCall(t *testing.T, fake *mocks.Fake, prefix string, n int, ordered bool) (*writeguard.Report, *fixture, int, int) {
	t.Helper()
	fx := newFixture(t, fake)
	docs := make([]any, n)
	for i := range docs {
		docs[i] = bson.D{{Key: "_id", Value: fmt.Sprintf("%s%03d", prefix, i)}, {Key: "n", Value: int32(i)}}
	}
	_, err := fx.g.InsertMany(ctx, docs, options.InsertMany().SetOrdered(ordered))
	var r *writeguard.Report
	if !errors.As(err, &r) {
		t.Fatalf("err = %v, want a Report", err)
	}
	checkOutcomes(t, r)
	sent := 0
	for _, c := range fake.Calls() {
		sent += c.Models
	}
	return r, fx, len(fake.Calls()), sent
}

// everyCommand returns n scripted faults answering reply.
func everyCommand(reply string, n int) []mocks.Fault {
	out := make([]mocks.Fault, n)
	for i := range out {
		out[i] = mocks.Reply(reply)
	}
	return out
}

// B2 (first-time user's trial): a server that refuses every insert
// command as a whole with a per-document code (2 BadValue, 14
// TypeMismatch) proves nothing about any document: no command succeeds,
// so the bisection's lone rejections are no verdict. No document is
// dead-lettered or claimed invalid; each ends failed (not_retried; an
// ordered write's later ones exhausted, ordered_stop), never written. The
// call stops bisecting at the second lone rejection: the narrowing (8
// commands), the others once, their narrowing (7), what is left once, the
// doubted document once more: 17 commands, at most 5 documents sent per
// input (it was 89 commands and 4,435 documents); 2 or 3 documents
// likewise, ordered or not.
func TestBisectNoVerdictWhenEveryCommandFails(t *testing.T) {
	replies := map[string]string{
		"2":  `{"ok":0,"code":2,"codeName":"BadValue","errmsg":"bad value"}`,
		"14": `{"ok":0,"code":14,"codeName":"TypeMismatch","errmsg":"type mismatch"}`,
	}
	// inputs -> commands: two narrowings, what is left once, the doubted one again
	maxCmds := map[int]int{200: 17, 2: 4, 3: 5}
	for code, reply := range replies {
		for n, max := range maxCmds {
			for _, ordered := range []bool{false, true} {
				t.Run(fmt.Sprintf("code=%s/n=%d/ordered=%v", code, n, ordered), func(t *testing.T) {
					refusedEvery(t, reply, n, ordered, max)
				})
			}
		}
	}
}

// refusedEvery runs one case of TestBisectNoVerdictWhenEveryCommandFails.
func refusedEvery(t *testing.T, reply string, n int, ordered bool, maxCmds int) {
	synctest.Test(t, func(t *testing.T) {
		fake := mocks.NewFake("db.b2").Script(everyCommand(reply, 1000)...)
		r, fx, cmds, sent := refusedCall(t, fake, "r", n, ordered)
		if len(fx.sink.Envelopes()) != 0 || r.Count(writeguard.DeadLettered) != 0 {
			t.Errorf("%d dead-lettered, counts %v: a refused command is no verdict", len(fx.sink.Envelopes()), r.Counts())
		}
		for _, o := range r.Outcomes {
			failed := o.Disposition == writeguard.Failed && o.Reason == writeguard.ReasonNotRetried
			stopped := ordered && o.Disposition == writeguard.Exhausted && o.Reason == writeguard.ReasonOrderedStop
			if !failed && !stopped || o.MaybeWritten {
				t.Fatalf("input %d: %s maybe=%v reason=%v: want failed (not_retried) or, ordered, exhausted (ordered_stop), never written", o.Index, o.Disposition, o.MaybeWritten, o.Reason)
			}
		}
		if len(fake.Docs()) != 0 {
			t.Errorf("%d stored", len(fake.Docs()))
		}
		if cmds > maxCmds {
			t.Errorf("%d commands, want at most %d", cmds, maxCmds)
		}
		if sent > 5*n {
			t.Errorf("%d documents sent for %d inputs, want at most 5 per input", sent, n)
		}
		t.Logf("%d commands, %d documents sent, counts %v", cmds, sent, r.Counts())
	})
}

// B2's contrast: real poison documents are still isolated cheaply, the
// first one included (its narrowing meets no success: the rest, sent
// first, proves the server healthy, and the poison's lone rejection is
// then its verdict; ordered, the documents after it are that probe):
// dead-lettered, the others written, in as many commands as before; two
// poisons, the first one first (the others fail too, and their narrowing
// finds a half written: the truth oracle's seed 3), likewise.
func TestBisectPoisonStillIsolated(t *testing.T) {
	badValue := `{"ok":0,"code":2,"codeName":"BadValue","errmsg":"bad value"}`
	cases := []struct {
		poisons []int
		reply   string
		ordered bool
		maxCmds int
	}{
		{[]int{57}, badValue, false, 10},
		{[]int{0}, badValue, false, 9},
		{[]int{0}, badValue, true, 9},
		{[]int{199}, badValue, false, 10},
		{[]int{3, 100, 199}, tooLarge, false, 26},
		{[]int{0, 150}, tooLarge, false, 17},
		{[]int{0, 150}, tooLarge, true, 17},
	}
	for _, cs := range cases {
		t.Run(fmt.Sprintf("%v/ordered=%v", cs.poisons, cs.ordered), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				fake := mocks.NewFake("db.b2p")
				for _, p := range cs.poisons {
					fake.Poison(fmt.Sprintf("p%03d", p), mocks.Reply(cs.reply))
				}
				r, _, cmds, sent := refusedCall(t, fake, "p", 200, cs.ordered)
				if r.Count(writeguard.DeadLettered) != len(cs.poisons) || r.Count(writeguard.Written) != 200-len(cs.poisons) {
					t.Errorf("counts %v: want the poisons dead-lettered, the others written", r.Counts())
				}
				for _, p := range cs.poisons {
					if d := r.Outcomes[p].Disposition; d != writeguard.DeadLettered {
						t.Errorf("poison %d: %s", p, d)
					}
				}
				if cmds > cs.maxCmds {
					t.Errorf("%d commands, want at most %d", cmds, cs.maxCmds)
				}
				t.Logf("%d commands, %d documents sent", cmds, sent)
			})
		})
	}
}

// C4 (first-time user's trial): an input that ends unknown after a
// whole-command error of the Unknown class (1 InternalError, an unknown
// code), read back and not found, says why in Outcome.Reason:
// not_retried (ReasonNone is only for stored or handled inputs).
func TestUnknownClassOutcomeReason(t *testing.T) {
	replies := map[string]string{
		"1":      `{"ok":0,"code":1,"codeName":"InternalError","errmsg":"internal"}`,
		"424242": `{"ok":0,"code":424242,"codeName":"Whatever","errmsg":"whatever"}`,
	}
	for code, reply := range replies {
		t.Run(code, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				fake := mocks.NewFake("db.c4").Script(everyCommand(reply, 100)...)
				r, _, cmds, _ := refusedCall(t, fake, "u", 20, false)
				for _, o := range r.Outcomes {
					if o.Disposition == writeguard.Written || o.Reason != writeguard.ReasonNotRetried {
						t.Fatalf("input %d: %s reason=%q, want unstored with reason not_retried", o.Index, o.Disposition, o.Reason)
					}
				}
				t.Logf("%d commands, counts %v", cmds, r.Counts())
			})
		})
	}
}
