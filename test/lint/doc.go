// Package lint holds tests that check the tree itself: every package has
// exactly one package comment, every relative link of the Markdown files
// (the README and the docs site) resolves, imports keep DESIGN.md's
// layers, and files and packages keep within their sizes.
package lint
