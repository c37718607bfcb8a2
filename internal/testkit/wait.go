package testkit

import (
	"context"
	"testing"
	"time"
)

// pollEvery is how often Poll asks. Short, since most conditions are
// cheap and a test waits for each of them many times.
const pollEvery = 5 * time.Millisecond

// Poll asks cond until it holds (true) or d passes (false).
func Poll(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		<-tick.C
	}
	return true
}

// WaitFor asks cond until it holds, or fails the test after d saying what
// it waited for.
func WaitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	if !Poll(d, cond) {
		t.Fatalf("timed out after %v waiting for %s", d, what)
	}
}

// Context is a context that ends after d or with the test, whichever
// comes first.
func Context(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// Recv waits up to d for a value from ch, or fails the test saying what
// it waited for.
func Recv[T any](t testing.TB, ch <-chan T, d time.Duration, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(d):
		t.Fatalf("timed out after %v waiting for %s", d, what)
		panic("unreachable")
	}
}
