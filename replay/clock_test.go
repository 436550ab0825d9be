package replay

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/writeguard/writeguard/mocks/faultproxy"
)

// TestServerClock: the runner's clock against the server's (hello's
// localTime, here the fault proxy's null backend, on this host's clock):
// a host behind or ahead by more than the lease is refused, naming the
// skew; within it, the server's time is what the runner uses.
func TestServerClock(t *testing.T) {
	ctx := context.Background()
	p, err := faultproxy.New()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	client, err := mongo.Connect(options.Client().ApplyURI(p.URI()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Disconnect(ctx) })
	db := client.Database("app")
	for _, tc := range []struct {
		skew time.Duration // of this host's clock against the server's
		want string        // "" or the error's words
	}{
		{-10 * time.Minute, "this host's clock is 10m0s behind the server's (lease 1m0s)"},
		{10 * time.Minute, "this host's clock is 10m0s ahead of the server's (lease 1m0s)"},
		{30 * time.Second, ""},
		{-30 * time.Second, ""},
	} {
		c := &serverClock{local: func() time.Time { return time.Now().Add(tc.skew) }, db: db, lease: time.Minute}
		err := c.sync(ctx)
		if tc.want != "" {
			if !errors.Is(err, ErrClockSkew) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("skew %v: %v, want ErrClockSkew saying %q", tc.skew, err, tc.want)
			}
			continue
		}
		if err != nil {
			t.Fatalf("skew %v: %v", tc.skew, err)
		}
		if off := time.Until(c.now()); off.Abs() > 2*time.Second {
			t.Errorf("skew %v: the runner's server time is %v off the server's", tc.skew, off)
		}
	}
	var nilClock *serverClock
	if err := nilClock.sync(ctx); err != nil {
		t.Errorf("a runner without a clock (tests): %v", err)
	}
}
