package api

import "time"

// A blocking query waits defaultWait unless asked, at most maxWait.
const (
	defaultWait = 60 * time.Second
	maxWait     = 5 * time.Minute
)

// WaitFor is how long a blocking query waits: seconds as asked, within
// bounds.
func WaitFor(seconds int64) time.Duration {
	wait := time.Duration(seconds) * time.Second
	switch {
	case seconds <= 0:
		return defaultWait
	case seconds > int64(maxWait/time.Second):
		return maxWait
	}
	return wait
}
