// Package e2e runs corpus end to end: real `corpus` processes (built once
// per test run), real LXC containers, real signals. Tests need root and a
// working liblxc; without them they skip with the reason. CI provides both.
package e2e
