package main

import (
	"slices"
	"testing"
	"time"
)

func TestParseHogs(t *testing.T) {
	got, err := parseHogs("0, 4,12")
	if err != nil || !slices.Equal(got, []int{0, 4, 12}) {
		t.Fatalf("parseHogs: %v, %v", got, err)
	}
	for _, bad := range []string{"", "-1", "x", "65", "4,,12"} {
		if _, err := parseHogs(bad); err == nil {
			t.Errorf("parseHogs(%q) accepted", bad)
		}
	}
}

func TestPingLogP99(t *testing.T) {
	var l pingLog
	if l.p99() != 0 {
		t.Fatal("p99 of no pings")
	}
	for i := 1; i <= 100; i++ {
		l.add(time.Duration(101-i) * time.Millisecond)
	}
	if got := l.p99(); got != 99 {
		t.Fatalf("p99 %v ms, want 99", got)
	}
}
