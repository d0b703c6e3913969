package lint

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// generatedDocs are folders a make target writes (`make docs` writes the
// command reference). A link into one is checked once the folder exists;
// before that, the target that makes it is named in the test's log.
var generatedDocs = map[string]string{
	"docs/reference": "make docs",
}

// TestMarkdownLinks: every relative link and image in the repository's
// Markdown files names a file or folder of the repository, and every
// #anchor names a heading of the Markdown file it points into, so the
// README and the docs site never send a reader to nothing.
func TestMarkdownLinks(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "node_modules" || d.Name() == "bin" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(d.Name(), ".md") {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 5 {
		t.Fatalf("found only %d Markdown files; is the walk rooted right?", len(files))
	}
	anchors := map[string]map[string]bool{} // file -> its headings' anchors
	anchorsOf := func(file string) map[string]bool {
		if a, ok := anchors[file]; ok {
			return a
		}
		src, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		a := headingAnchors(string(src))
		anchors[file] = a
		return a
	}
	checked := 0
	for _, file := range files {
		src, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, file)
		for _, l := range markdownLinks(string(src)) {
			target, anchor, _ := strings.Cut(l.target, "#")
			if strings.Contains(target, ":") || (target == "" && anchor == "") {
				continue // a URL (https:, mailto:), or nothing
			}
			checked++
			where := rel + ":" + strconv.Itoa(l.line)
			path := file
			if target != "" {
				if strings.HasPrefix(target, "/") {
					path = filepath.Join(root, target)
				} else {
					path = filepath.Join(filepath.Dir(file), target)
				}
			}
			inRepo, err := filepath.Rel(root, path)
			if err != nil || inRepo == ".." || strings.HasPrefix(inRepo, "../") {
				t.Errorf("%s: link %q leaves the repository", where, l.target)
				continue
			}
			if _, err := os.Stat(path); err != nil {
				if made := generatedBy(root, inRepo); made != "" {
					t.Logf("%s: link %q: %s makes it", where, l.target, made)
					continue
				}
				t.Errorf("%s: link %q: %s does not exist", where, l.target, inRepo)
				continue
			}
			if anchor != "" && strings.HasSuffix(path, ".md") && !anchorsOf(path)[anchor] {
				t.Errorf("%s: link %q: %s has no heading whose anchor is #%s", where, l.target, inRepo, anchor)
			}
		}
	}
	if checked == 0 {
		t.Fatal("no relative links found; is the parser right?")
	}
}

// generatedBy names the make target that writes the missing path (a path
// of the repository, slash-separated), when a target does and its folder
// does not exist yet; "" otherwise.
func generatedBy(root, path string) string {
	path = filepath.ToSlash(path)
	for dir, target := range generatedDocs {
		if path != dir && !strings.HasPrefix(path, dir+"/") {
			continue
		}
		if _, err := os.Stat(filepath.Join(root, dir)); err != nil {
			return target
		}
	}
	return ""
}

type link struct {
	target string
	line   int
}

var (
	mdLink   = regexp.MustCompile(`!?\[[^\]]*\]\(\s*<?([^)\s>]*)>?(?:\s+"[^"]*")?\s*\)`)
	htmlLink = regexp.MustCompile(`(?i)<(?:img|a)\s[^>]*?(?:src|href)="([^"]*)"`)
	codeSpan = regexp.MustCompile("`[^`]*`")
	heading  = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)
)

// markdownLinks returns the targets of the links and images of a Markdown
// text (inline `[text](target)`, `![alt](target)`, and HTML `<img src>`
// and `<a href>`), leaving out fenced code blocks and code spans.
func markdownLinks(src string) []link {
	var links []link
	fenced := false
	for i, line := range strings.Split(src, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if fenced {
			continue
		}
		line = codeSpan.ReplaceAllString(line, "")
		for _, m := range mdLink.FindAllStringSubmatch(line, -1) {
			links = append(links, link{m[1], i + 1})
		}
		for _, m := range htmlLink.FindAllStringSubmatch(line, -1) {
			links = append(links, link{m[1], i + 1})
		}
	}
	return links
}

// headingAnchors returns the anchors GitHub gives the headings of a
// Markdown text: "## What `make test` does" is #what-make-test-does, and
// a repeated heading gets -1, -2, ... after the first.
func headingAnchors(src string) map[string]bool {
	anchors := map[string]bool{}
	seen := map[string]int{}
	fenced := false
	for _, line := range strings.Split(src, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		m := heading.FindStringSubmatch(line)
		if fenced || m == nil {
			continue
		}
		a := slug(m[1])
		if n := seen[a]; n > 0 {
			anchors[a+"-"+strconv.Itoa(n)] = true
		} else {
			anchors[a] = true
		}
		seen[a]++
	}
	return anchors
}

// slug is GitHub's anchor of a heading's text: links reduced to their
// text, lowercased, every character but letters, digits, '-', '_' and
// spaces dropped, spaces made '-'.
func slug(text string) string {
	text = mdLink.ReplaceAllStringFunc(text, func(l string) string {
		return l[strings.Index(l, "[")+1 : strings.Index(l, "]")]
	})
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case unicode.IsLetter(r), unicode.IsDigit(r), r == '-', r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteRune('-')
		}
	}
	return b.String()
}

func TestSlug(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ heading, want string }{
		{"Install", "install"},
		{"What `make test` does", "what-make-test-does"},
		{"`CORPUS_TEST_SCALE`", "corpus_test_scale"},
		{"VM guests (libvirt)", "vm-guests-libvirt"},
		{"Guests' logs on the node", "guests-logs-on-the-node"},
		{"Export and import: clone a project", "export-and-import-clone-a-project"},
		{"See [the guide](guide.md) first", "see-the-guide-first"},
	} {
		if got := slug(tc.heading); got != tc.want {
			t.Errorf("slug(%q) = %q, want %q", tc.heading, got, tc.want)
		}
	}
}

func TestHeadingAnchorsRepeated(t *testing.T) {
	t.Parallel()
	got := headingAnchors("# A\n## Figures\n```\n# not a heading\n```\n## Figures\n")
	for _, want := range []string{"a", "figures", "figures-1"} {
		if !got[want] {
			t.Errorf("headingAnchors: no #%s in %v", want, got)
		}
	}
	if got["not-a-heading"] {
		t.Errorf("headingAnchors: a line in a code block is a heading: %v", got)
	}
}

func TestMarkdownLinksSkipsCode(t *testing.T) {
	t.Parallel()
	src := "see [a](a.md#x) and `[b](b.md)`\n```\n[c](c.md)\n```\n<img src=\"ui/p.png\" width=\"2\"> ![d](d.png \"title\")\n"
	var got []string
	for _, l := range markdownLinks(src) {
		got = append(got, l.target)
	}
	want := []string{"a.md#x", "d.png", "ui/p.png"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("markdownLinks = %v, want %v", got, want)
	}
}
