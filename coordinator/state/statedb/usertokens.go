package statedb

import (
	"sort"

	corpusv1 "corpus/proto/corpus/v1"
)

// UserToken returns the token with that id, or nil.
func (v *Snap) UserToken(id string) *corpusv1.UserToken {
	return first[*corpusv1.UserToken](v, TableUserTokens, "id", id)
}

// UserTokens returns a user's tokens (all users' for ""), oldest first.
func (v *Snap) UserTokens(user string) []*corpusv1.UserToken {
	var out []*corpusv1.UserToken
	if user == "" {
		out = all[*corpusv1.UserToken](v, TableUserTokens, "id")
	} else {
		out = all[*corpusv1.UserToken](v, TableUserTokens, "user", user)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].CreateIndex < out[j].CreateIndex })
	return out
}
