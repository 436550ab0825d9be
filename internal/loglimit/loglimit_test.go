package loglimit

import (
	"testing"
	"time"
)

func TestAllowOncePerInterval(t *testing.T) {
	now := time.Unix(0, 0)
	l := New(time.Minute, func() time.Time { return now })
	if !l.Allow(1) || l.Allow(1) {
		t.Fatal("want the first record of a key, not the second within the interval")
	}
	if !l.Allow(2) {
		t.Fatal("another key is limited apart")
	}
	now = now.Add(time.Minute)
	if !l.Allow(1) {
		t.Fatal("want a record again after the interval")
	}
}

func TestMemoryIsBounded(t *testing.T) {
	l := New(time.Minute, nil)
	for k := range int64(10 * MaxKeys) {
		l.Allow(k)
	}
	if n := len(l.last); n > MaxKeys {
		t.Fatalf("%d keys remembered, want at most %d", n, MaxKeys)
	}
}
