package coordinator_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"corpus/coordinator"
	"corpus/coordinator/ldapauth"
	"corpus/coordinator/ui"
	"corpus/internal/pki"
	"corpus/internal/rpc"
	"corpus/internal/slapdtest"
	corpusv1 "corpus/proto/corpus/v1"
)

// browser is an HTTP client of the dashboard that keeps cookies as a
// browser does and sends what a page of origin sends.
type browser struct {
	t      *testing.T
	base   string
	hc     *http.Client
	origin string
	csrf   string
}

func (s *server) browser(t *testing.T) *browser {
	jar, _ := cookiejar.New(nil)
	hc := rpc.HTTPClient(pki.ClientConfig(s.caPool(), nil, pki.RoleCoordinator, ""))
	hc.Jar = jar
	return &browser{t: t, base: s.url(), hc: hc, origin: s.url()}
}

// do sends a request as a page of b.origin, with the CSRF token known.
func (b *browser) do(method, path string, body any, header ...string) (*http.Response, string) {
	b.t.Helper()
	var rd io.Reader
	if body != nil {
		j, _ := json.Marshal(body)
		rd = bytes.NewReader(j)
	}
	req, _ := http.NewRequest(method, b.base+path, rd)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Origin", b.origin)
	if b.csrf != "" {
		req.Header.Set(ui.CSRFHeader, b.csrf)
	}
	for i := 0; i+1 < len(header); i += 2 {
		if header[i+1] == "" {
			req.Header.Del(header[i])
		} else {
			req.Header.Set(header[i], header[i+1])
		}
	}
	res, err := b.hc.Do(req)
	if err != nil {
		b.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	out, _ := io.ReadAll(res.Body)
	return res, string(out)
}

// login opens a session with body, keeping its CSRF token.
func (b *browser) login(body map[string]string) (*http.Response, map[string]string) {
	b.t.Helper()
	res, out := b.do("POST", "/ui/session", body)
	info := map[string]string{}
	json.Unmarshal([]byte(out), &info)
	b.csrf = info["csrf"]
	return res, info
}

// TestDashboardSessions: the dashboard's sessions are HttpOnly, Secure,
// SameSite=Strict cookies; a call with one needs the session's CSRF
// header and this origin, or it is refused and changes nothing; roles
// are the API's; a session of a user is a token of its own that logging
// out revokes; password logins go through the API's Login; the pages
// forbid framing.
func TestDashboardSessions(t *testing.T) {
	t.Parallel()
	dir := slapdtest.Start(t, map[string]string{"lou": "lou-pw"})
	s := start(t, t.TempDir(), func(c *coordinator.Config) {
		c.LDAP = ldapauth.Config{URL: dir.URL, UserDN: slapdtest.UserDN, StartTLS: true, CAFile: dir.CAFile}
	})
	ctx := context.Background()
	ops := s.ops()
	if _, err := ops.project.CreateProject(ctx, connect.NewRequest(&corpusv1.CreateProjectRequest{Name: "hello", Env: "dev"})); err != nil {
		t.Fatal(err)
	}
	if _, err := ops.users.CreateUser(ctx, connect.NewRequest(&corpusv1.CreateUserRequest{Name: "lou", Role: "viewer", Auth: "ldap"})); err != nil {
		t.Fatal(err)
	}
	valTok := s.userToken("val", "viewer", 0)
	if _, err := ops.project.GrantProject(ctx, connect.NewRequest(&corpusv1.GrantProjectRequest{Name: "hello", User: "val"})); err != nil {
		t.Fatal(err)
	}

	// The page: no framing, scripts from here only.
	b := s.browser(t)
	res, page := b.do("GET", "/ui/", nil)
	if res.StatusCode != 200 || !strings.Contains(page, "/ui/app.js") {
		t.Fatalf("GET /ui/ = %d %q", res.StatusCode, page)
	}
	if res.Header.Get("X-Frame-Options") != "DENY" || !strings.Contains(res.Header.Get("Content-Security-Policy"), "frame-ancestors 'none'") ||
		!strings.Contains(res.Header.Get("Content-Security-Policy"), "script-src 'self'") || res.Header.Get("X-Content-Type-Options") != "nosniff" {
		t.Errorf("page headers: %v", res.Header)
	}
	if res, _ := b.do("GET", "/ui/app.js", nil); res.StatusCode != 200 || !strings.Contains(res.Header.Get("Content-Type"), "javascript") {
		t.Errorf("app.js: %d %s", res.StatusCode, res.Header.Get("Content-Type"))
	}
	if res, _ := b.do("GET", "/ui/session", nil); res.StatusCode != http.StatusUnauthorized {
		t.Errorf("session before login: %d", res.StatusCode)
	}

	// Bad logins set no cookie.
	for _, body := range []map[string]string{{"token": "cusr_nope_nope"}, {"user": "lou", "password": "wrong"}, {}, {"token": valTok, "user": "lou"}} {
		if res, _ := b.login(body); res.StatusCode < 400 || len(res.Cookies()) != 0 {
			t.Errorf("login %v: %d, cookies %v", body, res.StatusCode, res.Cookies())
		}
	}
	// A login from another site is refused.
	b.origin = "https://evil.example"
	if res, _ := b.login(map[string]string{"token": valTok}); res.StatusCode != http.StatusForbidden {
		t.Errorf("login from another origin: %d", res.StatusCode)
	}
	b.origin = b.base

	// A viewer's session: its own token, in a cookie scripts cannot read.
	res, info := b.login(map[string]string{"token": valTok})
	if res.StatusCode != 200 || info["role"] != "viewer" || info["user"] != "val" || info["csrf"] == "" || info["expiresAt"] == "" {
		t.Fatalf("val's login: %d %v", res.StatusCode, info)
	}
	var cookie *http.Cookie
	for _, c := range res.Cookies() {
		if c.Name == ui.CookieName {
			cookie = c
		}
	}
	if cookie == nil || !cookie.HttpOnly || !cookie.Secure || cookie.SameSite != http.SameSiteStrictMode || cookie.Path != "/" || cookie.Value == valTok {
		t.Fatalf("session cookie: %+v", cookie)
	}
	if toks, err := ops.users.ListTokens(ctx, connect.NewRequest(&corpusv1.ListTokensRequest{User: "val"})); err != nil || len(toks.Msg.Tokens) != 2 {
		t.Errorf("val's tokens after a login: %v, %v (want the API token and the session's)", toks, err)
	}

	list := "/corpus.v1.GuestService/ListGuests"
	stop := "/corpus.v1.GuestService/StopGuest"
	if res, out := b.do("POST", list, map[string]any{}); res.StatusCode != 200 || !strings.Contains(out, "hello-dev") {
		t.Errorf("val lists guests with the session: %d %s", res.StatusCode, out)
	}
	// Forged and cross-site calls are refused before the API.
	for name, h := range map[string][]string{
		"no csrf header":        {ui.CSRFHeader, ""},
		"a wrong csrf header":   {ui.CSRFHeader, strings.Repeat("0", 64)},
		"another origin":        {"Origin", "https://evil.example"},
		"a cross-site fetch":    {"Sec-Fetch-Site", "cross-site"},
		"a same-site subdomain": {"Sec-Fetch-Site", "same-site"},
	} {
		if res, out := b.do("POST", list, map[string]any{}, h...); res.StatusCode != http.StatusForbidden || !strings.Contains(out, "permission_denied") {
			t.Errorf("a call with %s: %d %s", name, res.StatusCode, out)
		}
	}
	// The cookie speaks for API calls only: other paths see none.
	if res, _ := b.do("GET", "/healthz", nil, ui.CSRFHeader, "", "Sec-Fetch-Site", "cross-site"); res.StatusCode != 200 {
		t.Errorf("healthz with the cookie from another site: %d", res.StatusCode)
	}
	// The viewer's write is refused by the API, as with the CLI.
	if res, out := b.do("POST", stop, map[string]any{"name": "hello-dev"}); res.StatusCode != http.StatusForbidden || !strings.Contains(out, "may not call") {
		t.Errorf("val stops hello-dev: %d %s", res.StatusCode, out)
	}
	if g := s.Store().Read().GuestByName("hello-dev"); g.DesiredState != "running" {
		t.Errorf("a refused write changed hello-dev: %s", g.DesiredState)
	}
	// A bearer token of its own wins over the cookie (the CLI's way).
	if res, out := b.do("POST", stop, map[string]any{"name": "hello-dev"}, "Authorization", "Bearer "+s.OpsToken(), ui.CSRFHeader, ""); res.StatusCode != 200 {
		t.Errorf("a call with its own token: %d %s", res.StatusCode, out)
	}

	// Logging out needs the CSRF header, revokes the session's token and
	// clears the cookie; the old cookie then opens nothing.
	old := cookie.Value
	csrf := b.csrf
	b.csrf = ""
	if res, _ := b.do("POST", "/ui/logout", nil); res.StatusCode != http.StatusForbidden {
		t.Errorf("logout without csrf: %d", res.StatusCode)
	}
	b.csrf = csrf
	if res, _ := b.do("POST", "/ui/logout", nil); res.StatusCode != http.StatusNoContent {
		t.Errorf("logout: %d", res.StatusCode)
	}
	if res, _ := b.do("GET", "/ui/session", nil); res.StatusCode != http.StatusUnauthorized {
		t.Errorf("session after logout: %d", res.StatusCode)
	}
	u, _ := url.Parse(b.base)
	b.hc.Jar.SetCookies(u, []*http.Cookie{{Name: ui.CookieName, Value: old, Path: "/"}})
	if res, out := b.do("POST", list, map[string]any{}); res.StatusCode != http.StatusUnauthorized || !strings.Contains(out, "unauthenticated") {
		t.Errorf("the logged-out session's cookie replayed: %d %s", res.StatusCode, out)
	}

	// A session lives no longer than the token it was opened with.
	shortTok := s.userToken("shorty", "viewer", 10*time.Minute)
	b4 := s.browser(t)
	if res, info := b4.login(map[string]string{"token": shortTok}); res.StatusCode != 200 {
		t.Errorf("shorty's login: %d", res.StatusCode)
	} else if exp, err := time.Parse(time.RFC3339, info["expiresAt"]); err != nil || time.Until(exp) > 10*time.Minute {
		t.Errorf("a session from a 10-minute token expires %q", info["expiresAt"])
	}

	// Revoking the token a session was opened with ends the session:
	// its open live-view read, and every call after.
	waited := make(chan string, 1)
	go func() {
		res, out := b4.do("POST", "/corpus.v1.ClusterService/Wait", map[string]any{"afterIndex": "1000000000000", "waitSeconds": "60"})
		waited <- fmt.Sprint(res.StatusCode, " ", out)
	}()
	shortID, _, _ := strings.Cut(strings.TrimPrefix(shortTok, "cusr_"), "_")
	if _, err := ops.users.RevokeToken(ctx, connect.NewRequest(&corpusv1.RevokeTokenRequest{Id: shortID})); err != nil {
		t.Fatal(err)
	}
	if out := <-waited; !strings.HasPrefix(out, "401 ") || !strings.Contains(out, "unauthenticated") {
		t.Errorf("the session's live view after its token was revoked: %s", out)
	}
	if res, _ := b4.do("GET", "/ui/session", nil); res.StatusCode != http.StatusUnauthorized {
		t.Errorf("a session after the token it came from was revoked: %d", res.StatusCode)
	}
	if toks, err := ops.users.ListTokens(ctx, connect.NewRequest(&corpusv1.ListTokensRequest{User: "shorty"})); err != nil || len(toks.Msg.Tokens) != 0 {
		t.Errorf("shorty's tokens after the revoke: %v, %v; want none (the session's went with it)", toks, err)
	}

	// A directory password opens a session through Login.
	b2 := s.browser(t)
	res, info = b2.login(map[string]string{"user": "lou", "password": "lou-pw"})
	if res.StatusCode != 200 || info["user"] != "lou" || info["role"] != "viewer" {
		t.Fatalf("lou's password login: %d %v", res.StatusCode, info)
	}
	if exp, err := time.Parse(time.RFC3339, info["expiresAt"]); err != nil || time.Until(exp) > coordinator.Default().LoginTokenTTL+time.Minute {
		t.Errorf("lou's session expires %q (%v)", info["expiresAt"], err)
	}
	// The operator token opens an ops session; nothing is revoked when
	// it ends.
	b3 := s.browser(t)
	if res, info := b3.login(map[string]string{"token": s.OpsToken()}); res.StatusCode != 200 || info["role"] != "ops" {
		t.Fatalf("ops login: %d %v", res.StatusCode, info)
	}
	if res, _ := b3.do("POST", "/ui/logout", nil); res.StatusCode != http.StatusNoContent {
		t.Errorf("ops logout: %d", res.StatusCode)
	}
	if _, err := ops.cluster.Status(ctx, connect.NewRequest(&corpusv1.StatusRequest{})); err != nil {
		t.Errorf("the ops token after an ops session ended: %v", err)
	}
}
