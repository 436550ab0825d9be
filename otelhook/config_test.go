package otelhook

import (
	"fmt"
	"testing"
	"time"

	"go.opentelemetry.io/otel"

	"github.com/writeguard/writeguard/internal/loglimit"
)

func TestNewConfigDefaults(t *testing.T) {
	c := newConfig(nil, WithTracerProvider(nil), WithMeterProvider(nil), WithLogger(nil))
	if c.tracerProvider != otel.GetTracerProvider() || c.meterProvider != otel.GetMeterProvider() {
		t.Error("nil providers do not fall back to the global ones")
	}
	if c.logger == nil || c.logger.Enabled(t.Context(), 12) {
		t.Error("the default logger is not silent")
	}
	if len(c.server) != 0 {
		t.Errorf("server attributes %v by default", c.server)
	}
}

func TestWithServerAddress(t *testing.T) {
	for _, tc := range []struct {
		host string
		port int
		want string
	}{
		{"db.example", 27017, "[server.address=db.example server.port=27017]"},
		{"db.example", 0, "[server.address=db.example]"},
		{"", 27017, "[]"},
	} {
		c := newConfig(WithServerAddress("old", 1), WithServerAddress(tc.host, tc.port))
		var got []string
		for _, kv := range c.server {
			got = append(got, string(kv.Key)+"="+kv.Value.String())
		}
		if s := fmt.Sprint(got); s != tc.want {
			t.Errorf("WithServerAddress(%q, %d) = %s, want %s", tc.host, tc.port, s, tc.want)
		}
	}
}

func TestLimiter(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	l := loglimit.New(time.Minute, func() time.Time { return now })
	if !l.Allow(8000) || l.Allow(8000) {
		t.Fatal("want the first record of a code through and the second held")
	}
	if !l.Allow(8001) || !l.Allow(budgetKey) {
		t.Error("another key is held")
	}
	now = now.Add(59 * time.Second)
	if l.Allow(8000) {
		t.Error("a record passed within the minute")
	}
	now = now.Add(time.Second)
	if !l.Allow(8000) {
		t.Error("a record was held after a minute")
	}
}
