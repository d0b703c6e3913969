// Package lint holds tests that check the tree itself: every package has
// exactly one package comment, imports keep DESIGN.md's layers, and files
// and packages keep within their sizes.
package lint
