//go:build !unix

package statelock

import "os"

func tryLock(f *os.File) (bool, error) { return false, ErrNotSupported }

func unlock(f *os.File) error { return ErrNotSupported }

func holderPID(path string) int { return 0 }
