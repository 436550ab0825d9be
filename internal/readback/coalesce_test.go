package readback

import (
	"context"
	"runtime"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/writeguard/writeguard/mocks"
)

// gatedFinder holds each Find until it is released, and records the
// number of _ids each asked for.
type gatedFinder struct {
	Finder
	started chan int      // the _ids of each Find, as it starts
	release chan struct{} // one receive per Find
}

func (g *gatedFinder) Find(ctx context.Context, filter any, opts ...options.Lister[options.FindOptions]) (*mongo.Cursor, error) {
	g.started <- len(filter.(bson.D)[0].Value.(bson.D)[0].Value.(bson.A))
	<-g.release
	return g.Finder.Find(ctx, filter, opts...)
}

func seeded(t *testing.T, n int) *mocks.Fake {
	t.Helper()
	fake := mocks.NewFake("db.c")
	for i := range int32(n) {
		if err := fake.Seed(bson.D{{Key: "_id", Value: i}}); err != nil {
			t.Fatal(err)
		}
	}
	return fake
}

// joined waits until the group gathering behind the running read holds n
// _ids.
func (c *Coalescer) joined(n int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.next != nil && len(c.next.ids) == n
}

// Read-backs that arrive while one runs are read together, in one query,
// when it ends; each caller finds its documents.
func TestCoalescerGathers(t *testing.T) {
	f := &gatedFinder{Finder: seeded(t, 30), started: make(chan int, 4), release: make(chan struct{})}
	var c Coalescer
	type res struct {
		out map[string]bson.Raw
		err error
	}
	run := func(ids bson.A) chan res {
		ch := make(chan res, 1)
		go func() {
			out, err := c.ByID(context.Background(), f, ids)
			ch <- res{out, err}
		}()
		return ch
	}
	a := run(bson.A{int32(0), int32(1)})
	if n := <-f.started; n != 2 {
		t.Fatalf("first read asked for %d _ids, want 2", n)
	}
	b := run(bson.A{int32(10), int32(11), int32(99)})
	for !c.joined(3) {
		waitTurn()
	}
	d := run(bson.A{int32(20)})
	for !c.joined(4) {
		waitTurn()
	}
	f.release <- struct{}{} // the first read ends
	if n := <-f.started; n != 4 {
		t.Fatalf("the gathered read asked for %d _ids, want 4 (both waiters' in one query)", n)
	}
	f.release <- struct{}{}
	ra, rb, rd := <-a, <-b, <-d
	if ra.err != nil || rb.err != nil || rd.err != nil {
		t.Fatal(ra.err, rb.err, rd.err)
	}
	key := func(v int32) string {
		return Key(bson.RawValue{Type: bson.TypeInt32, Value: []byte{byte(v), byte(v >> 8), byte(v >> 16), byte(v >> 24)}})
	}
	if _, ok := rb.out[key(10)]; !ok || len(ra.out) != 2 {
		t.Errorf("a found %d, b found _id 10: %v", len(ra.out), ok)
	}
	if _, ok := rd.out[key(20)]; !ok {
		t.Error("d did not find _id 20")
	}
	if _, ok := rb.out[key(99)]; ok {
		t.Error("an absent _id was found")
	}
	if c.running || c.next != nil {
		t.Errorf("coalescer not idle after the reads: running %v, next %v", c.running, c.next)
	}
}

// The first member of a group leads it; when its context ends before its
// turn, the group is dropped and the other members read alone.
func TestCoalescerLeaderGone(t *testing.T) {
	f := &gatedFinder{Finder: seeded(t, 5), started: make(chan int, 4), release: make(chan struct{})}
	var c Coalescer
	go func() { _, _ = c.ByID(context.Background(), f, bson.A{int32(0)}) }()
	<-f.started
	ctx, cancel := context.WithCancel(context.Background())
	lead := make(chan error, 1)
	go func() {
		_, err := c.ByID(ctx, f, bson.A{int32(1)})
		lead <- err
	}()
	for !c.joined(1) {
		waitTurn()
	}
	member := make(chan map[string]bson.Raw, 1)
	go func() {
		out, err := c.ByID(context.Background(), f, bson.A{int32(2)})
		if err != nil {
			t.Error(err)
		}
		member <- out
	}()
	for !c.joined(2) {
		waitTurn()
	}
	cancel()
	if err := <-lead; err != context.Canceled {
		t.Fatalf("leader: %v, want context.Canceled", err)
	}
	if n := <-f.started; n != 1 { // the member's own read, alone
		t.Fatalf("member read %d _ids, want 1", n)
	}
	f.release <- struct{}{} // the member's read and the first one end, in either order
	f.release <- struct{}{}
	if out := <-member; len(out) != 1 {
		t.Fatalf("member found %d documents, want 1", len(out))
	}
}

// waitTurn lets the other goroutines run (the tests wait for states, not
// for times).
func waitTurn() { runtime.Gosched() }
