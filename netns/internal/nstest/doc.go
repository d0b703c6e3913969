// Package nstest gives tests network namespaces of their own, so tests of
// bridges, veths and NAT touch real kernel state without touching the
// node's: every namespace is named corpustest-<suffix>-<role> with a suffix
// unique to the test, and is deleted (with every link and rule in it) in
// t.Cleanup, also when the test fails.
//
// Code runs inside a namespace through NS.Do, on an OS thread that is
// switched into the namespace, checked to be there, and thrown away
// afterwards, so no other goroutine ever runs in a test namespace and no
// test code runs in the node's namespace by mistake.
package nstest
