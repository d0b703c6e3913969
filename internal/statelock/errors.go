package statelock

import (
	"errors"
	"fmt"
)

// ErrNotSupported means this OS has no flock(2).
var ErrNotSupported = errors.New("state folder locks are not supported on this OS")

// InUseError is Acquire's refusal: Dir is held by process PID (0 when
// the holder has not written its PID).
type InUseError struct {
	Dir  string
	File string
	PID  int
}

func (e *InUseError) Error() string {
	who := "another process"
	if e.PID > 0 {
		who = fmt.Sprintf("process %d", e.PID)
	}
	return fmt.Sprintf("state folder %s is in use by %s (it holds %s): stop that process first, or give this one another folder", e.Dir, who, e.File)
}
