// Package runner tests the test runner's shell scripts beside it:
// test/sweep, which removes what a group of tests left behind.
package runner
