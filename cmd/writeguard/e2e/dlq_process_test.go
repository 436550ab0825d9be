package e2e

// The replay fencing and the discard's leases with the built command as
// separate processes, paused and killed at events the proxy reports.

import (
	"os/exec"
	"syscall"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/writeguard/writeguard/dlq"
	"github.com/writeguard/writeguard/envelope"
	"github.com/writeguard/writeguard/mocks/faultproxy"
	"github.com/writeguard/writeguard/replay"
)

// marksInFlight reports whether a write to the lease collection says "in
// flight": a send token (an insert of a lease with in_flight), or, as
// earlier versions did, an update setting in_flight on a claim.
func marksInFlight(c *faultproxy.Command) bool {
	for _, st := range c.Statements() {
		if v, ok := st.Lookup("in_flight").BooleanOK(); ok && v {
			return true
		}
		if v, ok := st.Lookup("u", "$set", "in_flight").BooleanOK(); ok && v {
			return true
		}
	}
	return false
}

// TestDLReplayPauseAndStealProcesses: two "writeguard dlq replay"
// processes and one $inc envelope. The first, through the proxy, is
// paused between its claim and its send (the proxy holds its "in flight"
// write and its lease renewals, as for a stopped process); its lease
// lapses; the second replays the $inc and exits; the first is let go and
// does not send it: the counter is 1, the first reports the envelope
// lost to its new owner. (The first used to send it again: 2.)
func TestDLReplayPauseAndStealProcesses(t *testing.T) {
	b := newDLBed(t, nil)
	dlCounters(t, b, 1, false)
	leases := b.dbName + "." + dlDLQ + replay.LeaseCollectionSuffix
	send, renewals := newDLHold(t), newDLHold(t)
	b.proxy.SetScript(faultproxy.MustScript(
		faultproxy.OnAny().In(leases).Where(marksInFlight).Always().Do(send.fault()),
		faultproxy.On("update").In(leases).Always().Do(renewals.fault()),
	))
	args := []string{"--into", b.ns(), "--allow", "update", "--no-validator", "--lease", "1s"}
	first := dlStartReplay(t, b, "first", b.proxy.URI(), args...)
	send.wait(t, "the first process's send")
	dlUntil(t, time.Minute, "the first process's lease lapses", func() bool { return b.lapsed("") })

	second := dlStartReplay(t, b, "second", dlServer.URI(), args...)
	code := second.wait(t, 90*time.Second)
	res2 := second.report(t)
	t.Logf("second: exit %d, %+v", code, res2.Counts)
	if code != 0 || res2.Replayed != 1 {
		t.Fatalf("second: exit %d, %+v; want the $inc replayed\nstderr: %s", code, res2.Counts, second.stderr.String())
	}
	if c := b.counters(); c["c-0"] != 1 {
		t.Fatalf("counter %d after the second process, want 1", c["c-0"])
	}

	renewals.open()
	send.open()
	code = first.wait(t, 90*time.Second)
	res1 := first.report(t)
	t.Logf("first: exit %d, %+v, lost %d, problems %+v\nstderr: %s", code, res1.Counts, res1.LeasesLost, res1.Problems, first.stderr.String())
	if c := b.counters(); c["c-0"] != 1 {
		t.Errorf("counter %d, want 1: the first process sent the $inc again", c["c-0"])
	}
	if code != 0 || res1.LeasesLost != 1 || res1.Scanned != 0 || len(res1.Problems) != 1 || res1.Problems[0].Outcome != "lost" {
		t.Errorf("first: exit %d, %+v, lost %d; want its claim lost, nothing sent", code, res1.Counts, res1.LeasesLost)
	}
	if envs := b.stored(bson.D{}); len(envs) != 1 || envs[0].Status != envelope.StatusReplayed {
		t.Errorf("envelope %+v, want replayed (by the second)", envs)
	}
	if ls := b.leasesOf(""); len(ls) != 0 {
		t.Errorf("leases left: %+v", ls)
	}
}

// TestDLDiscardLeaseFollowsLease: replay.Discard's claims last WithLease
// (not a fixed minute) and are renewed while it marks: held in its update
// of the DLQ, its leases say until = claimed_at + 2 s, then move forward;
// released, it discards its envelopes.
func TestDLDiscardLeaseFollowsLease(t *testing.T) {
	b := newDLBed(t, nil)
	putInsertEnvelopes(t, b, "d-1", "d-2")
	hold := newDLHold(t)
	b.proxy.SetScript(faultproxy.MustScript(faultproxy.On("update").In(b.dbName + "." + dlDLQ).Always().Do(hold.fault())))
	type out struct {
		res replay.DiscardResult
		err error
	}
	done := make(chan out, 1)
	coll := b.proxiedDLQ()
	go func() {
		d, err := replay.Discard(b.ctx, coll, dlq.Filter{Namespaces: []string{b.ns()}}, replay.WithLease(2*time.Second))
		done <- out{d, err}
	}()
	hold.wait(t, "the discard's update")
	ls := b.leasesOf("")
	if len(ls) != 2 {
		t.Fatalf("the discard's claims: %+v", ls)
	}
	for _, l := range ls {
		if d := l.Until.Sub(l.ClaimedAt); d < 2*time.Second || d > 10*time.Second {
			t.Errorf("lease %s lasts %v, want 2s (renewed at most a little)", l.ID, d)
		}
	}
	seen := ls[0].Until
	dlUntil(t, time.Minute, "the discard renews its leases", func() bool {
		ls := b.leasesOf("")
		return len(ls) == 2 && ls[0].Until.After(seen)
	})
	hold.open()
	o := <-done
	if o.err != nil || o.res.Discarded != 2 || o.res.Busy != 0 {
		t.Errorf("discard: %+v, %v", o.res, o.err)
	}
	if ls := b.leasesOf(""); len(ls) != 0 {
		t.Errorf("leases left: %+v", ls)
	}
}

// TestDLDiscardCommandKilledFollowsLease: "writeguard dlq discard --lease
// 2s" killed (SIGKILL) after its claim, in its update of the DLQ, leaves
// leases that end at most 2 s after its death (they used to last a fixed
// minute whatever --lease said); a replay then takes the envelopes and
// writes them.
func TestDLDiscardCommandKilledFollowsLease(t *testing.T) {
	b := newDLBed(t, nil)
	putInsertEnvelopes(t, b, "k-1", "k-2", "k-3")
	hold := newDLHold(t)
	hold.drop = true // the update of a process killed waiting for its reply is not applied afterwards
	b.proxy.SetScript(faultproxy.MustScript(faultproxy.On("update").In(b.dbName + "." + dlDLQ).Always().Do(hold.fault())))
	p := &dlProcess{name: "discard", done: make(chan struct{})}
	p.cmd = exec.Command(dlCommandBinary(t), "dlq", "discard", "--all", "--lease", "2s", "--uri", b.proxy.URI(), "--db", b.dbName, "--dlq", dlDLQ)
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	hold.wait(t, "the discard's update")
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-p.done
	killed := time.Now()
	ls := b.leasesOf("")
	if len(ls) != 3 {
		t.Fatalf("the killed discard's leases: %+v", ls)
	}
	for _, l := range ls {
		if l.Until.After(killed.Add(2*time.Second + 500*time.Millisecond)) {
			t.Errorf("lease %s until %v, %v after the discard died: want at most --lease (2s)", l.ID, l.Until, l.Until.Sub(killed))
		}
	}
	hold.open()
	r := dlStartReplay(t, b, "replay", dlServer.URI(), "--into", b.ns(), "--no-validator")
	code := r.wait(t, 90*time.Second)
	res := r.report(t)
	if code != 0 || res.Replayed != 3 {
		t.Errorf("replay after the killed discard: exit %d, %+v\nstderr: %s", code, res.Counts, r.stderr.String())
	}
	if n := b.count(dlDLQ, bson.D{{Key: "status", Value: envelope.StatusDiscarded}}); n != 0 {
		t.Errorf("%d envelopes discarded by the killed discard", n)
	}
}
