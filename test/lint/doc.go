// Package lint holds tests that check the tree itself: every package has
// exactly one package comment.
package lint
