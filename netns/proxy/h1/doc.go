// Package h1 parses HTTP/1.1 message heads for the proxy's lean path: a
// request's head as a client sent it and a target's response head, kept
// as byte slices into the connection's buffer (parse.go).
package h1
