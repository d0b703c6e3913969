package main

import (
	"bufio"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"corpus/cmd/corpus/cli"
	"corpus/cmd/corpus/daemon"
)

// TestDocCommands: every corpus command line the README and docs/ show
// in a shell code block names commands and flags the binary has, each
// flag with a value where it takes one. Words such as NAME stand for
// values; [optional parts] are left out. How many arguments a line gives
// is not checked: synopses such as "stop|start|delete NAME" or
// "(--a | --b)" are not shell.
func TestDocCommands(t *testing.T) {
	root := cli.NewRoot(cli.NewGlobals(io.Discard, io.Discard), daemon.Commands)
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	top := filepath.Join("..", "..")
	files := []string{filepath.Join(top, "README.md")}
	filepath.WalkDir(filepath.Join(top, "docs"), func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".md") {
			files = append(files, path)
		}
		return nil
	})
	seen := 0
	for _, f := range files {
		lines, err := docCommandLines(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range lines {
			seen++
			if err := checkCommandLine(root, l.args); err != nil {
				rel, _ := filepath.Rel(top, f)
				t.Errorf("%s:%d: %s: %v", rel, l.line, l.text, err)
			}
		}
	}
	if seen < 20 {
		t.Fatalf("found %d corpus command lines in %d files; is the walk rooted right?", seen, len(files))
	}
}

// TestCheckCommandLine: the check refuses what the binary would.
func TestCheckCommandLine(t *testing.T) {
	root := cli.NewRoot(cli.NewGlobals(io.Discard, io.Discard), daemon.Commands)
	for _, tt := range []struct {
		line, err string // err "" when the line parses
	}{
		{"corpus guest list --node n1 --json", ""},
		{"corpus --env prod guest list", ""},
		{"corpus guest create NAME [--image IMAGE]", ""},
		{"corpus node add-k8s --help", ""},
		{`corpus guest exec web -- sh -c "echo hi"`, ""},
		{"corpus agent --name=n1 --coordinator 10.0.0.1:7400", ""},
		{"corpus gest list", `unknown command "gest" for "corpus"`},
		{"corpus guest", ""}, // a group prints its help
		{"corpus guest lst", `unknown command "lst" for "corpus guest"`},
		{"corpus guest list --nod n1", `corpus guest list: unknown flag: --nod`},
		{"corpus guest list --node", `corpus guest list: flag needs an argument: --node`},
		{"corpus guest list --json=maybe", `corpus guest list: invalid argument "maybe" for "--json"`},
		{"corpus guest list -z", `corpus guest list: unknown shorthand flag: 'z' in -z`},
		{"corpus volume trim db -1G", ""}, // after NAME, -1G is the size
		{"corpus audit --limit N", ""},
		{"corpus audit --limit many", `corpus audit: invalid argument "many" for "--limit"`},
		{"corpus audit --limit 10x", `corpus audit: invalid argument "10x" for "--limit"`},
		{"corpus tls ca-create --dir DIR && corpus guest list | jq . > out.json 2>&1", ""},
		{"corpus tls ca-create --dir DIR && corpus gest", `unknown command "gest" for "corpus"`},
		{"corpus guest list >/dev/null 2>&1; corpus guest lst", `unknown command "lst"`},
		{"CORPUS_ENV=prod sudo corpus guest list # all of them", ""},
		{"corpus guest stop <name> --timeout 5s < /dev/null", ""},
		{"corpus guest stop <name> --timeout", "flag needs an argument: --timeout"},
	} {
		var err error
		cmds := corpusCommands(tt.line)
		for _, args := range cmds {
			if err == nil {
				err = checkCommandLine(root, args)
			}
		}
		if len(cmds) == 0 {
			err = fmt.Errorf("runs no corpus command")
		}
		switch {
		case tt.err == "" && err != nil:
			t.Errorf("check(%q) = %v, want no error", tt.line, err)
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
			t.Errorf("check(%q) = %v, want an error with %q", tt.line, err, tt.err)
		}
	}
}

// docLine is a corpus command line of a Markdown file.
type docLine struct {
	line int
	text string
	args []string // after "corpus"
}

// shellInfo are the info strings of the code blocks read as shell.
var shellInfo = map[string]bool{"": true, "sh": true, "shell": true, "bash": true, "console": true, "sh-session": true, "text": true}

// docCommandLines returns the lines of path's shell code blocks that run
// corpus, continuation lines joined. A block that draws (box or arrow
// characters) is a diagram, not commands.
func docCommandLines(path string) ([]docLine, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	var (
		out     []docLine
		block   []docLine
		fence   string // the open block's fence, "" outside one
		shell   bool
		drawing bool
		pending string
		start   int
	)
	sc := bufio.NewScanner(fh)
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		s := strings.TrimSpace(sc.Text())
		if fence == "" {
			for _, f := range []string{"```", "~~~"} {
				if strings.HasPrefix(s, f) {
					fence, block, drawing, pending = f, nil, false, ""
					shell = shellInfo[strings.ToLower(strings.TrimSpace(strings.TrimLeft(s, f[:1])))]
				}
			}
			continue
		}
		if strings.HasPrefix(s, fence) {
			if shell && !drawing {
				out = append(out, block...)
			}
			fence = ""
			continue
		}
		drawing = drawing || strings.ContainsAny(s, "─│►▶▼◄┌┐└┘├┤")
		if pending != "" {
			s = pending + " " + s
		} else {
			start = n
		}
		if c, ok := strings.CutSuffix(s, `\`); ok {
			pending = strings.TrimSpace(c)
			continue
		}
		pending = ""
		for _, args := range corpusCommands(s) {
			block = append(block, docLine{line: start, text: s, args: args})
		}
	}
	return out, sc.Err()
}

// corpusCommands returns the words after corpus of each command of a
// shell line that runs it (after a prompt, sudo or variable
// assignments).
func corpusCommands(line string) [][]string {
	var out [][]string
	for _, words := range parseWords(strings.TrimPrefix(line, "$ ")) {
		for len(words) > 0 && (words[0] == "sudo" || strings.Contains(words[0], "=") && !strings.HasPrefix(words[0], "-")) {
			words = words[1:]
		}
		if len(words) == 0 {
			continue
		}
		switch words[0] {
		case "corpus", "bin/corpus", "./bin/corpus", "/usr/bin/corpus":
			out = append(out, words[1:])
		}
	}
	return out
}

// parseWords splits a shell line into its commands (at |, ||, &&, ;, &)
// and each into words, up to a comment: quotes and $(...) hold a word
// together, a redirection and its file are left out, and [optional
// parts] and <placeholders> are dropped.
func parseWords(line string) [][]string {
	var (
		cmds     [][]string
		words    []string
		w        strings.Builder
		inWord   bool
		redirect bool // the next word is a redirection's file
		quote    rune
		paren    int
		bracket  int
	)
	end := func() {
		if inWord && bracket == 0 {
			s := w.String()
			switch {
			case redirect:
				redirect = false
			case strings.HasPrefix(s, "<") && strings.HasSuffix(s, ">"):
			default:
				words = append(words, s)
			}
		}
		w.Reset()
		inWord = false
	}
	endCommand := func() {
		end()
		if len(words) > 0 {
			cmds = append(cmds, words)
		}
		words, redirect = nil, false
	}
	rs := []rune(line)
	for i := 0; i < len(rs); i++ {
		r := rs[i]
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			} else {
				w.WriteRune(r)
			}
			continue
		case paren > 0:
			w.WriteRune(r)
			if r == '(' {
				paren++
			} else if r == ')' {
				paren--
			}
			continue
		case r == '$' && i+1 < len(rs) && rs[i+1] == '(':
			w.WriteString("$(")
			inWord = true
			paren = 1
			i++
			continue
		case r == '\'' || r == '"':
			quote = r
			inWord = true
			continue
		case r == '[' && !inWord:
			bracket++
			continue
		case r == ']' && bracket > 0:
			bracket--
			end()
			continue
		case bracket > 0:
			continue // | inside [a|b] is no pipe
		case r == ' ' || r == '\t':
			end()
			continue
		case r == '#' && !inWord:
			endCommand()
			return cmds
		case r == '|' || r == ';' || r == '&' && !(i > 0 && rs[i-1] == '>'):
			endCommand()
			continue
		case r == '<' && !inWord && i+1 < len(rs) && unicode.IsLetter(rs[i+1]),
			r == '>' && strings.HasPrefix(w.String(), "<"):
			// <placeholder>
		case r == '>' || r == '<':
			// 2>&1, > file, >> file, < file: no argument of the command.
			if w.String() == "2" || w.String() == "1" {
				w.Reset()
				inWord = false
			}
			end()
			for i+1 < len(rs) && (rs[i+1] == '>' || rs[i+1] == '&') {
				i++
			}
			redirect = !(i+1 < len(rs) && rs[i+1] >= '0' && rs[i+1] <= '9')
			if !redirect {
				i++ // the 1 of 2>&1
			}
			continue
		}
		w.WriteRune(r)
		inWord = true
	}
	endCommand()
	return cmds
}

// checkCommandLine parses args as the binary would under root: the
// words naming commands lead to one, whose flags pflag parses, each
// placeholder value (NAME, $VAR) replaced by one of the flag's type.
func checkCommandLine(root *cobra.Command, args []string) error {
	c := root
	var rest []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") || a == "-" {
			if sub := subcommand(c, a); sub != nil {
				c = sub
				continue
			}
		}
		if a == "--" || !strings.HasPrefix(a, "-") {
			rest = append(rest, args[i:]...) // the first argument: the rest is the command's
			break
		}
		rest = append(rest, a)
		if f := flagOf(c, a); f != nil && f.NoOptDefVal == "" && !strings.Contains(a, "=") && i+1 < len(args) {
			i++
			rest = append(rest, args[i])
		}
	}
	// Placeholders stand for values of the flag's type.
	for i, a := range rest {
		if a == "--" {
			break
		}
		f := flagOf(c, a)
		if f == nil || f.NoOptDefVal != "" && !strings.Contains(a, "=") {
			continue
		}
		if name, v, ok := strings.Cut(a, "="); ok && placeholder(v) {
			rest[i] = name + "=" + sampleValue(f)
		} else if !ok && i+1 < len(rest) && placeholder(rest[i+1]) {
			rest[i+1] = sampleValue(f)
		}
	}
	c.InitDefaultHelpFlag()
	if err := c.ParseFlags(rest); err != nil {
		return fmt.Errorf("%s: %w", c.CommandPath(), err)
	}
	if pos := c.Flags().Args(); len(pos) > 0 && c.HasSubCommands() && len(strings.Fields(c.Use)) == 1 {
		return fmt.Errorf("unknown command %q for %q", pos[0], c.CommandPath())
	}
	return nil
}

// sampleValue is a value f takes, for a placeholder.
func sampleValue(f *pflag.Flag) string {
	switch f.Value.Type() {
	case "int", "int8", "int16", "int32", "int64", "uint", "uint8", "uint16", "uint32", "uint64", "float32", "float64", "count":
		return "1"
	case "duration":
		return "1s"
	case "bool":
		return "true"
	case "stringToString", "stringToInt", "stringToInt64":
		return "k=1"
	}
	return "x"
}

// subcommand returns c's subcommand named or aliased name.
func subcommand(c *cobra.Command, name string) *cobra.Command {
	for _, s := range c.Commands() {
		if s.Name() == name || s.HasAlias(name) {
			return s
		}
	}
	return nil
}

// flagOf returns the flag an argument such as --name, --name=v or -n
// names among c's own and inherited flags, nil for none.
func flagOf(c *cobra.Command, arg string) *pflag.Flag {
	name, _, _ := strings.Cut(arg, "=")
	for _, fs := range []*pflag.FlagSet{c.LocalFlags(), c.InheritedFlags()} {
		switch {
		case strings.HasPrefix(name, "--"):
			if f := fs.Lookup(name[2:]); f != nil {
				return f
			}
		case len(name) == 2 && name[0] == '-':
			if f := fs.ShorthandLookup(name[1:]); f != nil {
				return f
			}
		}
	}
	return nil
}

// placeholder says whether a flag's value stands for one: a word in
// capitals such as SECONDS, an ellipsis, or a shell substitution.
func placeholder(v string) bool {
	return strings.ContainsAny(v, "ABCDEFGHIJKLMNOPQRSTUVWXYZ") && strings.ToUpper(v) == v ||
		strings.Contains(v, "$") || strings.Contains(v, "...")
}
