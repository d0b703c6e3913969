package api

import "time"

// A blocking query waits DefaultWait unless asked, at most MaxWait.
const (
	DefaultWait = 60 * time.Second
	MaxWait     = 5 * time.Minute
)

// WaitFor is how long a blocking query waits: seconds as asked, within
// bounds.
func WaitFor(seconds int64) time.Duration {
	wait := time.Duration(seconds) * time.Second
	switch {
	case seconds <= 0:
		return DefaultWait
	case seconds > int64(MaxWait/time.Second):
		return MaxWait
	}
	return wait
}
