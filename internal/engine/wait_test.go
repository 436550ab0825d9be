package engine_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/writeguard/writeguard/internal/engine"
)

func TestWaitNeverSleepsPastDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		t0 := time.Now()
		if err := engine.Wait(ctx, nil, 500*time.Millisecond); !errors.Is(err, engine.ErrDeadlineTooClose) {
			t.Errorf("err = %v, want ErrDeadlineTooClose", err)
		}
		if d := time.Since(t0); d != 0 {
			t.Errorf("slept %v before giving up", d)
		}
		if err := engine.Wait(ctx, nil, 100*time.Millisecond); err != nil {
			t.Errorf("a wait inside the deadline: %v", err)
		}
		if d := time.Since(t0); d != 100*time.Millisecond {
			t.Errorf("slept %v, want 100ms", d)
		}
	})
}

func TestWaitReturnsOnCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- engine.Wait(ctx, nil, time.Hour) }()
	time.Sleep(10 * time.Millisecond)
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("err = %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Wait did not return after cancel")
	}
}
