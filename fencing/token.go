package fencing

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"
)

// Environment variables the supervisor sets for the job it runs.
const (
	// EnvToken holds the holder's fencing token, a decimal int64.
	EnvToken = "COORDRUN_FENCING_TOKEN"
	// EnvLock holds the name of the lock the job runs under.
	EnvLock = "COORDRUN_LOCK"
	// EnvLockNode holds the full path of the holder's lock node.
	EnvLockNode = "COORDRUN_LOCK_NODE"
	// EnvScheduledTime holds the time the run was scheduled for, when a
	// schedule started it.
	EnvScheduledTime = "COORDRUN_SCHEDULED_TIME"
	// EnvAttempt holds which run of a scheduled firing this is: 1, or
	// more once runs lost with their host were run again.
	EnvAttempt = "COORDRUN_ATTEMPT"

	// EnvVar is the old name of EnvToken.
	//
	// Deprecated: use EnvToken, named like its siblings.
	EnvVar = EnvToken
)

var (
	// ErrInvalidToken is matched by errors from [Parse]: the text is not a
	// non-negative decimal int64.
	ErrInvalidToken = errors.New("invalid fencing token")
	// ErrNoToken is matched by the error of [FromEnv] when [EnvToken] is
	// unset or empty.
	ErrNoToken = errors.New("no fencing token")
)

// Token is a fencing token: the czxid of a lock holder's node. Tokens of
// successive holders of one lock rise strictly; see the package
// documentation. The zero value is a valid token lower than any real one.
type Token int64

// Parse reads a token in the form the supervisor writes it: decimal
// digits, no sign, no spaces, at most [math.MaxInt64]. The error matches
// [ErrInvalidToken] and says what is wrong.
func Parse(s string) (Token, error) {
	if s == "" {
		return 0, fmt.Errorf("%w: empty", ErrInvalidToken)
	}
	if s[0] == '-' && len(s) > 1 && isDigits(s[1:]) {
		return 0, fmt.Errorf("%w %q: negative", ErrInvalidToken, s)
	}
	if !isDigits(s) {
		return 0, fmt.Errorf("%w %q: not a decimal integer", ErrInvalidToken, s)
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		// Only digits remain, so the one possible failure is the range.
		return 0, fmt.Errorf("%w %q: larger than %d", ErrInvalidToken, s, int64(math.MaxInt64))
	}
	return Token(n), nil
}

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// String returns the token in decimal, the form [Parse] reads.
func (t Token) String() string { return strconv.FormatInt(int64(t), 10) }

// Compare returns -1, 0 or +1 as t is older than, the same as, or newer
// than u.
func (t Token) Compare(u Token) int { return cmp.Compare(t, u) }

// Less reports whether t is older than u.
func (t Token) Less(u Token) bool { return t < u }

// FromEnv parses the token in [EnvToken]. When the variable is unset or empty
// the error matches [ErrNoToken] and names the variable; when it does not
// parse, the error matches [ErrInvalidToken].
func FromEnv() (Token, error) {
	s, ok := os.LookupEnv(EnvToken)
	if !ok {
		return 0, fmt.Errorf("%w: %s is not set (is this process run by coordrun?)", ErrNoToken, EnvToken)
	}
	if s == "" {
		return 0, fmt.Errorf("%w: %s is empty", ErrNoToken, EnvToken)
	}
	t, err := Parse(s)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", EnvToken, err)
	}
	return t, nil
}
