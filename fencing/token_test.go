package fencing

import (
	"errors"
	"math"
	"os"
	"strings"
	"testing"
)

func TestTokenParse(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Token
		err  string // substring of the error; "" for success
	}{
		{in: "0", want: 0},
		{in: "1", want: 1},
		{in: "42", want: 42},
		{in: "007", want: 7},
		{in: "4294967296", want: 1 << 32},
		{in: "9223372036854775807", want: math.MaxInt64},
		{in: "", err: "invalid fencing token: empty"},
		{in: "-1", err: `invalid fencing token "-1": negative`},
		{in: "-9223372036854775809", err: "negative"},
		{in: "9223372036854775808", err: `invalid fencing token "9223372036854775808": larger than 9223372036854775807`},
		{in: "99999999999999999999999", err: "larger than"},
		{in: "abc", err: `invalid fencing token "abc": not a decimal integer`},
		{in: "-", err: "not a decimal integer"},
		{in: "+5", err: "not a decimal integer"},
		{in: " 5", err: "not a decimal integer"},
		{in: "5\n", err: "not a decimal integer"},
		{in: "4.2", err: "not a decimal integer"},
		{in: "1e3", err: "not a decimal integer"},
		{in: "0x10", err: "not a decimal integer"},
		{in: "--1", err: "not a decimal integer"},
		{in: "٣", err: "not a decimal integer"}, // a non-ASCII digit
	} {
		got, err := Parse(tc.in)
		if tc.err == "" {
			if err != nil || got != tc.want {
				t.Errorf("Parse(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
			}
			continue
		}
		if err == nil {
			t.Errorf("Parse(%q) = %d, want an error containing %q", tc.in, got, tc.err)
			continue
		}
		if !errors.Is(err, ErrInvalidToken) {
			t.Errorf("Parse(%q) error %v does not match ErrInvalidToken", tc.in, err)
		}
		if !strings.Contains(err.Error(), tc.err) {
			t.Errorf("Parse(%q) error %q, want it to contain %q", tc.in, err, tc.err)
		}
	}
}

func TestTokenStringRoundTrip(t *testing.T) {
	for _, tok := range []Token{0, 1, 42, 1<<32 + 7, math.MaxInt64} {
		got, err := Parse(tok.String())
		if err != nil || got != tok {
			t.Errorf("Parse(%d.String()) = %d, %v", tok, got, err)
		}
	}
}

func TestTokenCompare(t *testing.T) {
	for _, tc := range []struct {
		a, b Token
		cmp  int
	}{
		{a: 1, b: 2, cmp: -1},
		{a: 2, b: 1, cmp: 1},
		{a: 5, b: 5, cmp: 0},
		{a: 0, b: math.MaxInt64, cmp: -1},
	} {
		if got := tc.a.Compare(tc.b); got != tc.cmp {
			t.Errorf("%d.Compare(%d) = %d, want %d", tc.a, tc.b, got, tc.cmp)
		}
		if got := tc.a.Less(tc.b); got != (tc.cmp < 0) {
			t.Errorf("%d.Less(%d) = %v", tc.a, tc.b, got)
		}
	}
}

func TestTokenFromEnv(t *testing.T) {
	t.Run("unset", func(t *testing.T) {
		t.Setenv(EnvToken, "")
		os.Unsetenv(EnvToken)
		_, err := FromEnv()
		if !errors.Is(err, ErrNoToken) || !strings.Contains(err.Error(), EnvToken+" is not set") {
			t.Fatalf("FromEnv() error = %v, want ErrNoToken naming %s", err, EnvToken)
		}
	})
	t.Run("empty", func(t *testing.T) {
		t.Setenv(EnvToken, "")
		_, err := FromEnv()
		if !errors.Is(err, ErrNoToken) || !strings.Contains(err.Error(), EnvToken+" is empty") {
			t.Fatalf("FromEnv() error = %v, want ErrNoToken naming %s", err, EnvToken)
		}
	})
	t.Run("invalid", func(t *testing.T) {
		t.Setenv(EnvToken, "x1")
		_, err := FromEnv()
		if !errors.Is(err, ErrInvalidToken) || !strings.Contains(err.Error(), EnvToken) {
			t.Fatalf("FromEnv() error = %v, want ErrInvalidToken naming %s", err, EnvToken)
		}
	})
	t.Run("set", func(t *testing.T) {
		t.Setenv(EnvToken, "8589934593")
		got, err := FromEnv()
		if err != nil || got != 8589934593 {
			t.Fatalf("FromEnv() = %d, %v", got, err)
		}
	})
}
