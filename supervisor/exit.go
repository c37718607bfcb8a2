package supervisor

// Exit codes of coordrun, every command's in one table. A supervised job's
// own code is passed through coordrun run unchanged (128+N when signal N
// killed it), so these sit where shells and cron rarely look, and they
// must stay distinct: a job may pass any of them on. Run and RunCron say
// bad usage by returning ExitUsage with the error.
const (
	ExitOK      = 0
	ExitFailure = 1  // any other error
	ExitUsage   = 64 // EX_USAGE: bad invocation, configuration or jobs file, or no permission on the lock's folder or on the records read
	// ExitNotFound (EX_NOINPUT): the lock or cron job named does not
	// exist, so that a typo'd name does not read as a free lock.
	ExitNotFound = 66
	// ExitUnavailable (EX_UNAVAILABLE): no ensemble member answered
	// within the connect timeout. Unlike ExitUsage, trying again later
	// can help: units restart on it and not on 64.
	ExitUnavailable = 69
	// ExitNotAcquired: --try or --timeout, the lock was held by another.
	ExitNotAcquired = 75
	// ExitSessionLost: the session's lease ran out; the job was killed.
	ExitSessionLost = 76
	// ExitStaleToken: coordrun fence check refused a token because the
	// resource already accepted a newer holder's (EX_NOPERM). A job's
	// `coordrun fence check ... || exit $?` passes it through coordrun run
	// to whoever reads the run's exit code.
	ExitStaleToken = 77
	// ExitLockLost: another client deleted or changed the holder's lock
	// nodes while the job ran; the job was stopped (TERM, then KILL after
	// the kill grace).
	ExitLockLost = 78
)
