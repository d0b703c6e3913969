// Package lint holds tests that check the tree itself: every package has
// exactly one package comment, and every relative link of the Markdown
// files (the README and the docs site) resolves.
package lint
