package nat

import (
	"bytes"
	"errors"
	"slices"
	"strings"
)

// snapshot is one table as iptables-save printed it, reduced to what corpus
// owns.
type snapshot struct {
	// chains maps each of corpus's chains that exists to its rules, in
	// order, as printed after "-A <chain> ".
	chains map[string][]string
	// jumps are the rules of built-in chains that jump to one of corpus's
	// chains.
	jumps []Jump
}

// parseSave reads the section of table in iptables-save output. Lines of
// other chains are skipped without being split, which keeps a 10,000-rule
// table cheap to read. A table missing from data is an empty snapshot.
func (l layout) parseSave(table string, data []byte) snapshot {
	snap := snapshot{chains: map[string][]string{}}
	prefix := []byte(l.prefix + "-")
	in := false
	for len(data) > 0 {
		line := data
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line, data = data[:i], data[i+1:]
		} else {
			data = nil
		}
		line = bytes.TrimRight(line, " \t\r")
		if len(line) == 0 {
			continue
		}
		switch line[0] {
		case '*':
			in = string(line[1:]) == table
		case ':':
			if !in {
				continue
			}
			name, _, _ := bytes.Cut(line[1:], []byte(" "))
			if bytes.HasPrefix(name, prefix) {
				if _, ok := snap.chains[string(name)]; !ok {
					snap.chains[string(name)] = nil
				}
			}
		case '-':
			if !in || !bytes.HasPrefix(line, []byte("-A ")) {
				continue
			}
			chain, rule, _ := bytes.Cut(line[3:], []byte(" "))
			switch {
			case bytes.HasPrefix(chain, prefix):
				snap.chains[string(chain)] = append(snap.chains[string(chain)], string(rule))
			case bytes.Contains(rule, prefix) && slices.Contains(builtins[table], string(chain)):
				args, err := splitArgs(string(rule))
				if err == nil && l.owned(target(args)) {
					snap.jumps = append(snap.jumps, Jump{Chain{table, string(chain)}, string(rule)})
				}
			}
		case 'C':
			if string(line) == "COMMIT" {
				in = false
			}
		}
	}
	return snap
}

// target returns the -j or -g target of a rule's arguments, or "".
func target(args []string) string {
	for i := 0; i+1 < len(args); i++ {
		switch args[i] {
		case "-j", "--jump", "-g", "--goto":
			return args[i+1]
		}
	}
	return ""
}

var errQuote = errors.New("unterminated quote")

// splitArgs splits a rule as iptables-save prints it into arguments: words
// separated by spaces, double quotes around words with spaces, backslash
// escaping the next byte (iptables-save writes \" and \\ inside quotes).
func splitArgs(s string) ([]string, error) {
	var args []string
	var cur strings.Builder
	inWord, quoted := false, false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\\' && i+1 < len(s):
			i++
			cur.WriteByte(s[i])
			inWord = true
		case c == '"':
			quoted = !quoted
			inWord = true
		case (c == ' ' || c == '\t') && !quoted:
			if inWord {
				args = append(args, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	if quoted {
		return nil, errQuote
	}
	if inWord {
		args = append(args, cur.String())
	}
	return args, nil
}
