package state

import (
	"fmt"
	"slices"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"corpus/coordinator/compat"
	"corpus/coordinator/state/statedb"
	corpusv1 "corpus/proto/corpus/v1"
)

// maxTokensPerUser bounds the tokens one user holds.
const maxTokensPerUser = 50

func (a *applier) createUserToken(c *corpusv1.CreateUserToken) error {
	t := c.Token
	if t == nil || t.Id == "" || t.User == "" || t.SecretHash == "" {
		return fmt.Errorf("token without id, user or secret: %w", ErrInvalid)
	}
	if _, err := a.user(t.User); err != nil {
		return err
	}
	if a.get(statedb.TableUserTokens, "id", t.Id) != nil {
		return fmt.Errorf("token %s: %w", t.Id, ErrExists)
	}
	// A replica of a release before session tokens keeps the parent
	// as an unknown field and checks nothing: neither may this one then.
	if t.Parent != "" && a.allows(compat.SessionTokens) {
		if p, ok := a.get(statedb.TableUserTokens, "id", t.Parent).(*corpusv1.UserToken); !ok || p.User != t.User {
			return fmt.Errorf("token %s to make a session with (revoked meanwhile?): %w", t.Parent, ErrNotFound)
		}
	}
	if n := len(a.view().UserTokens(t.User)); n >= maxTokensPerUser {
		return fmt.Errorf("user %s holds %d tokens, the most allowed; revoke some: %w", t.User, n, ErrExhausted)
	}
	t = proto.Clone(t).(*corpusv1.UserToken)
	t.CreatedAt = a.now
	t.CreateIndex = a.index
	a.put(statedb.TableUserTokens, t)
	return nil
}

// userLogin issues the token of an accepted password login, or records a
// refused one (nothing changes but the audit log).
func (a *applier) userLogin(c *corpusv1.UserLogin) error {
	if c.Token == nil {
		return fmt.Errorf("%w: %s", ErrLoginRefused, c.Refused)
	}
	if c.Token.User != c.User {
		return fmt.Errorf("login of %s with a token of %s: %w", c.User, c.Token.User, ErrInvalid)
	}
	if _, err := a.user(c.User); err != nil {
		return err
	}
	tokens := a.view().UserTokens(c.User)
	kept := len(tokens)
	for _, t := range tokens {
		if t.ExpiresAt != nil && !a.now.AsTime().Before(t.ExpiresAt.AsTime()) {
			a.deleteToken(t)
			kept--
		}
	}
	for _, t := range tokens {
		if kept < maxTokensPerUser {
			break
		}
		if t.Login && (t.ExpiresAt == nil || a.now.AsTime().Before(t.ExpiresAt.AsTime())) {
			a.deleteToken(t)
			kept--
		}
	}
	t := proto.Clone(c.Token).(*corpusv1.UserToken)
	t.Login = true
	return a.createUserToken(&corpusv1.CreateUserToken{Token: t})
}

func (a *applier) deleteToken(t *corpusv1.UserToken) {
	if err := a.txn.Delete(statedb.TableUserTokens, t); err != nil {
		panic(fmt.Sprintf("state: deleting token: %v", err))
	}
}

func (a *applier) revokeUserToken(c *corpusv1.RevokeUserToken) error {
	raw := a.get(statedb.TableUserTokens, "id", c.Id)
	if raw == nil {
		return fmt.Errorf("token %s: %w", c.Id, ErrNotFound)
	}
	a.deleteToken(raw.(*corpusv1.UserToken))
	if a.allows(compat.SessionTokens) {
		a.revokeSessions(raw.(*corpusv1.UserToken))
	}
	return nil
}

// revokeSessions deletes the session tokens made with t, and theirs.
func (a *applier) revokeSessions(t *corpusv1.UserToken) {
	for _, s := range a.view().UserTokens(t.User) {
		if s.Parent == t.Id {
			a.deleteToken(s)
			a.revokeSessions(s)
		}
	}
}

// deleteUserTokens removes a deleted user's tokens.
func (a *applier) deleteUserTokens(user string) {
	if _, err := a.txn.DeleteAll(statedb.TableUserTokens, "user", user); err != nil {
		panic(fmt.Sprintf("state: deleting tokens: %v", err))
	}
}

// MaxTokenUses bounds the uses (of tokens and of SSH keys together) one
// TouchUserTokens entry carries.
const MaxTokenUses = 500

// touchUserTokens records tokens' and SSH keys' last uses. A token
// revoked (or a key removed) since its use was noted is skipped, and a
// use older than the one recorded changes nothing: replicas' batches
// may commit in any order. A use is not a change of its user: the
// user's modify index stays.
func (a *applier) touchUserTokens(c *corpusv1.TouchUserTokens) error {
	if n := len(c.Uses) + len(c.KeyUses); n > MaxTokenUses {
		return fmt.Errorf("%d token and key uses in one entry, at most %d: %w", n, MaxTokenUses, ErrInvalid)
	}
	for _, u := range append(slices.Clip(c.Uses), c.KeyUses...) {
		if u.Id == "" || u.At == nil {
			return fmt.Errorf("token or key use without id or time: %w", ErrInvalid)
		}
	}
	for _, u := range c.Uses {
		raw := a.get(statedb.TableUserTokens, "id", u.Id)
		if raw == nil {
			continue
		}
		t := raw.(*corpusv1.UserToken)
		if !newerUse(u, t.LastUsedAt) {
			continue
		}
		t = proto.Clone(t).(*corpusv1.UserToken)
		t.LastUsedAt, t.LastUsedFrom = u.At, u.From
		a.put(statedb.TableUserTokens, t)
	}
	for _, u := range c.KeyUses {
		owner := a.view().UserByFingerprint(u.Id)
		if owner == nil {
			continue
		}
		owner = proto.Clone(owner).(*corpusv1.User)
		for _, k := range owner.Keys {
			if k.Fingerprint == u.Id && newerUse(u, k.LastUsedAt) {
				k.LastUsedAt, k.LastUsedFrom = u.At, u.From
				a.put(statedb.TableUsers, owner)
			}
		}
	}
	return nil
}

// newerUse says whether u is later than the last use recorded (nil:
// none).
func newerUse(u *corpusv1.TokenUse, last *timestamppb.Timestamp) bool {
	return last == nil || u.At.AsTime().After(last.AsTime())
}
