package ui

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"connectrpc.com/connect"

	"corpus/coordinator/auth"
	corpusv1 "corpus/proto/corpus/v1"
	"corpus/proto/corpus/v1/corpusv1connect"
)

// CookieName is the session cookie. The __Host- prefix makes browsers
// keep it only when Secure, for this host alone and the whole path.
const CookieName = "__Host-corpus_session"

// CSRFHeader carries the session's CSRF token on every call the page
// makes with the cookie.
const CSRFHeader = "Corpus-CSRF"

// csrfToken is the session's CSRF token: an HMAC keyed by the session
// token, so only who holds the token (the server, and the page that got
// it from GET /ui/session) can give it; any replica checks it.
func csrfToken(session string) string {
	m := hmac.New(sha256.New, []byte(session))
	m.Write([]byte("corpus dashboard csrf"))
	return hex.EncodeToString(m.Sum(nil))
}

// validCSRF reports whether given is the CSRF token of session.
func validCSRF(session, given string) bool {
	return hmac.Equal([]byte(given), []byte(csrfToken(session)))
}

// sessionInfo is what GET and POST /ui/session answer.
type sessionInfo struct {
	User      string `json:"user"`
	Role      string `json:"role"`
	CSRF      string `json:"csrf"`
	ExpiresAt string `json:"expiresAt,omitempty"`
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	pageHeaders(w.Header())
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"error": msg})
}

// sameOrigin reports whether a request comes from a page of this origin:
// browsers name the requesting site in Sec-Fetch-Site and Origin, and a
// request naming another is refused even with the cookie (a session
// replayed from another origin). Clients that send neither (not
// browsers) hold no cookie unless they stole it, and still need the
// CSRF token.
func sameOrigin(r *http.Request) bool {
	if s := r.Header.Get("Sec-Fetch-Site"); s != "" && s != "same-origin" {
		return false
	}
	if o := r.Header.Get("Origin"); o != "" {
		u, err := url.Parse(o)
		if err != nil || u.Scheme != "https" || u.Host != r.Host {
			return false
		}
	}
	return true
}

// session returns the request's session token and who it is; an error
// says why there is none.
func (d *Dashboard) session(r *http.Request) (string, auth.Principal, error) {
	c, err := r.Cookie(CookieName)
	if err != nil || c.Value == "" {
		return "", auth.Principal{}, errors.New("not logged in")
	}
	p, err := d.authn.Authenticate(nil, "Bearer "+c.Value)
	if err != nil || p.Kind == auth.Anonymous {
		return "", auth.Principal{}, errors.New("the session ended (expired, logged out or revoked): log in again")
	}
	return c.Value, p, nil
}

func (d *Dashboard) info(tok string, p auth.Principal) sessionInfo {
	in := sessionInfo{User: p.User, Role: string(p.Kind), CSRF: csrfToken(tok)}
	if t := d.cfg.Store.Read().UserToken(p.TokenID); t != nil && t.ExpiresAt != nil {
		in.ExpiresAt = t.ExpiresAt.AsTime().UTC().Format(time.RFC3339)
	}
	return in
}

func (d *Dashboard) getSession(w http.ResponseWriter, r *http.Request) {
	tok, p, err := d.session(r)
	if err != nil {
		writeError(w, http.StatusUnauthorized, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, d.info(tok, p))
}

// loginRequest is POST /ui/session's body: a token, or a user's name and
// directory password.
type loginRequest struct {
	Token    string `json:"token"`
	User     string `json:"user"`
	Password string `json:"password"`
}

// postSession opens a session: with a password, by the API's Login (its
// limits and audit apply, for the browser's address); with a user's
// token, by a token of the session's own, made with it (revoking the
// user's token ends the session too); with the
// operator token, by that token for SessionTTL.
func (d *Dashboard) postSession(w http.ResponseWriter, r *http.Request) {
	if !sameOrigin(r) {
		writeError(w, http.StatusForbidden, "a login from another site is refused")
		return
	}
	var in loginRequest
	if err := json.NewDecoder(io.LimitReader(r.Body, 64<<10)).Decode(&in); err != nil {
		writeError(w, http.StatusBadRequest, "want a JSON body {\"token\": ...} or {\"user\": ..., \"password\": ...}")
		return
	}
	var tok string
	var expires time.Time
	switch {
	case in.Token != "" && (in.User != "" || in.Password != ""):
		writeError(w, http.StatusBadRequest, "give a token, or a user name and password, not both")
		return
	case in.Token != "":
		p, err := d.authn.Authenticate(nil, "Bearer "+strings.TrimSpace(in.Token))
		if err != nil || p.Kind == auth.Anonymous {
			writeError(w, http.StatusUnauthorized, "token not accepted: it is wrong, revoked, expired or from another cluster")
			return
		}
		tok, expires = strings.TrimSpace(in.Token), time.Now().Add(SessionTTL)
		if p.User != "" {
			// The session lives no longer than the token it came from.
			ttl := SessionTTL
			if t := d.cfg.Store.Read().UserToken(p.TokenID); t != nil && t.ExpiresAt != nil {
				ttl = min(ttl, time.Until(t.ExpiresAt.AsTime()).Truncate(time.Second))
			}
			if ttl < time.Second {
				writeError(w, http.StatusUnauthorized, "the token expires now: make a new one")
				return
			}
			var res corpusv1.CreateTokenResponse
			err := d.call(r, tok, corpusv1connect.UserServiceCreateTokenProcedure, &corpusv1.CreateTokenRequest{
				User: p.User, TtlSeconds: int64(ttl / time.Second), Description: "dashboard session from " + clientHost(r), Session: true,
			}, &res)
			if err != nil {
				writeCallError(w, err)
				return
			}
			tok, expires = res.Token, res.Info.GetExpiresAt().AsTime()
		}
	case in.User != "":
		var res corpusv1.LoginResponse
		if err := d.call(r, "", corpusv1connect.UserServiceLoginProcedure, &corpusv1.LoginRequest{User: in.User, Password: in.Password}, &res); err != nil {
			writeCallError(w, err)
			return
		}
		tok, expires = res.Token, res.Info.GetExpiresAt().AsTime()
	default:
		writeError(w, http.StatusBadRequest, "give a token, or a user name and password")
		return
	}
	p, err := d.authn.Authenticate(nil, "Bearer "+tok)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "the new session's token is not accepted: "+err.Error())
		return
	}
	http.SetCookie(w, &http.Cookie{
		Name: CookieName, Value: tok, Path: "/", Expires: expires, MaxAge: int(time.Until(expires) / time.Second),
		Secure: true, HttpOnly: true, SameSite: http.SameSiteStrictMode,
	})
	writeJSON(w, http.StatusOK, d.info(tok, p))
}

// logout ends the session: its own token is revoked, the cookie cleared.
func (d *Dashboard) logout(w http.ResponseWriter, r *http.Request) {
	tok, p, err := d.session(r)
	switch {
	case !sameOrigin(r):
		writeError(w, http.StatusForbidden, "a logout from another site is refused")
		return
	case err == nil && !validCSRF(tok, r.Header.Get(CSRFHeader)):
		writeError(w, http.StatusForbidden, "missing or wrong "+CSRFHeader+" header")
		return
	}
	if err == nil && p.TokenID != "" {
		err := d.call(r, tok, corpusv1connect.UserServiceRevokeTokenProcedure, &corpusv1.RevokeTokenRequest{Id: p.TokenID}, &corpusv1.RevokeTokenResponse{})
		// A call that revokes its own token may be told so (its token
		// went away during the call): what counts is that it is gone.
		if err != nil && d.cfg.Store.Read().UserToken(p.TokenID) != nil {
			writeCallError(w, err)
			return
		}
	}
	http.SetCookie(w, &http.Cookie{Name: CookieName, Value: "", Path: "/", MaxAge: -1, Secure: true, HttpOnly: true, SameSite: http.SameSiteStrictMode})
	pageHeaders(w.Header())
	w.WriteHeader(http.StatusNoContent)
}

// apiPrefix starts the paths of the API's procedures, the only ones the
// session's cookie speaks for.
const apiPrefix = "/corpus.v1."

// Credentials wraps the API: a request with the session cookie and no
// Authorization header of its own gets the session's token as its
// bearer token, when it comes from this origin with the CSRF header;
// otherwise it is refused. Requests without the cookie pass as they are.
func (d *Dashboard) Credentials(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := r.Cookie(CookieName)
		if err != nil || r.Header.Get("Authorization") != "" || !strings.HasPrefix(r.URL.Path, apiPrefix) {
			next.ServeHTTP(w, r)
			return
		}
		if !sameOrigin(r) {
			writeConnectError(w, connect.CodePermissionDenied, "a call with the dashboard's session from another site is refused")
			return
		}
		if !validCSRF(c.Value, r.Header.Get(CSRFHeader)) {
			writeConnectError(w, connect.CodePermissionDenied, "a call with the dashboard's session needs its "+CSRFHeader+" header")
			return
		}
		r = r.Clone(r.Context())
		r.Header.Set("Authorization", "Bearer "+c.Value)
		next.ServeHTTP(w, r)
	})
}

// writeConnectError answers as a Connect unary call fails, which the
// page reads as it reads the API's own errors.
func writeConnectError(w http.ResponseWriter, code connect.Code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusForbidden)
	json.NewEncoder(w).Encode(map[string]string{"code": code.String(), "message": msg})
}

// writeCallError answers with the error of an API call.
func writeCallError(w http.ResponseWriter, err error) {
	status := http.StatusBadGateway
	var ce *connect.Error
	if errors.As(err, &ce) {
		switch ce.Code() {
		case connect.CodeUnauthenticated:
			status = http.StatusUnauthorized
		case connect.CodePermissionDenied:
			status = http.StatusForbidden
		case connect.CodeInvalidArgument, connect.CodeFailedPrecondition:
			status = http.StatusBadRequest
		case connect.CodeResourceExhausted:
			status = http.StatusTooManyRequests
		case connect.CodeUnavailable:
			status = http.StatusServiceUnavailable
		}
		writeError(w, status, ce.Message())
		return
	}
	writeError(w, status, err.Error())
}

// clientHost is the browser's address without its port.
func clientHost(r *http.Request) string {
	if h, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		return h
	}
	return r.RemoteAddr
}
