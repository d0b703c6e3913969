// Package ui serves the web dashboard on the coordinator's API address:
// the built single-page app (embedded, see web/ and `make ui`), its
// session endpoints, and a websocket bridge for the in-browser terminal.
//
// The app calls the API itself (Connect's JSON protocol, same origin), so
// a dashboard user can do exactly what their token can through the CLI.
// The session is the token, held in an HttpOnly, Secure, SameSite=Strict
// cookie the page's scripts cannot read; Credentials turns it into the
// request's bearer token only for same-origin requests that carry the
// session's CSRF token in a header, which no other site can read or
// forge. Sessions opened with a user's token or password are a token of
// their own, so they expire and logging out revokes them.
package ui

import (
	"embed"
	"io/fs"
	"net/http"
	"os"
	"path"
	"time"

	"corpus/coordinator/auth"
	"corpus/coordinator/state"
)

// dist is the built app (make ui writes it from web/).
//
//go:embed dist
var dist embed.FS

// SessionTTL is how long a session opened with a token lasts.
const SessionTTL = 12 * time.Hour

// Config is what the dashboard needs from its coordinator.
type Config struct {
	// Store authenticates session tokens.
	Store *state.Store
	// API is the coordinator's API handler: session logins and logouts
	// are calls to it, made in-process for the browser's address.
	API http.Handler
	// Dial returns a client of this coordinator's own API and its base
	// URL, for the terminal's bidirectional stream.
	Dial func() (*http.Client, string)
}

// Dashboard serves the dashboard.
type Dashboard struct {
	cfg    Config
	authn  *auth.Authenticator
	static http.Handler
}

// DirEnv names a folder to serve the app from instead of the embedded
// build: for working on the app (node web/build.mjs --watch writes it).
const DirEnv = "CORPUS_UI_DIR"

// New returns the dashboard of a coordinator.
func New(cfg Config) *Dashboard {
	sub, err := fs.Sub(dist, "dist")
	if err != nil {
		panic(err) // the embedded folder is part of the build
	}
	if dir := os.Getenv(DirEnv); dir != "" {
		sub = os.DirFS(dir)
	}
	return &Dashboard{cfg: cfg, authn: &auth.Authenticator{Store: cfg.Store}, static: http.FileServerFS(sub)}
}

// Mount registers the dashboard's paths on mux.
func (d *Dashboard) Mount(mux *http.ServeMux) {
	mux.Handle("GET /ui", http.RedirectHandler("/ui/", http.StatusMovedPermanently))
	mux.HandleFunc("GET /ui/{file...}", d.serveStatic)
	mux.HandleFunc("GET /ui/session", d.getSession)
	mux.HandleFunc("POST /ui/session", d.postSession)
	mux.HandleFunc("POST /ui/logout", d.logout)
	mux.HandleFunc("GET /ui/shell", d.shell)
}

// pageHeaders are sent with every dashboard answer: no framing by
// other sites (clickjacking), scripts and styles from here only, no
// sniffing, no referrer, and no caching of answers that hold data.
func pageHeaders(h http.Header) {
	h.Set("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "+
		"connect-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	h.Set("Cross-Origin-Resource-Policy", "same-origin")
	h.Set("Cache-Control", "no-store")
}

func (d *Dashboard) serveStatic(w http.ResponseWriter, r *http.Request) {
	pageHeaders(w.Header())
	file := path.Clean("/" + r.PathValue("file"))
	switch file {
	case "/app.js", "/app.css":
		// The file server sets the type from the name; the app is
		// small and changes with the binary, so it is not cached.
	default:
		// Every other path is the app's page: it routes by the hash.
		file = "/"
	}
	r2 := r.Clone(r.Context())
	r2.URL.Path = file
	d.static.ServeHTTP(w, r2)
}
