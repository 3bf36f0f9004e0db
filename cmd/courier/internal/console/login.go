package console

import (
	"errors"
	"net/http"
	"net/url"
	"path"
	"strings"
)

// loginPage asks for a token.
func (s *Server) loginPage(w http.ResponseWriter, r *http.Request) {
	if len(s.guard.tokens) == 0 || current(r) != nil { // nothing to sign in to, or signed in already
		http.Redirect(w, r, s.nextPage(r.URL.Query().Get("next")), http.StatusSeeOther)
		return
	}
	s.render(w, r, http.StatusOK, "login", "Sign in", "", s.nextPage(r.URL.Query().Get("next")))
}

// login starts a session for a known token.
func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	actor, ok := s.guard.actorOfToken(r.PostForm.Get("token"))
	if !ok {
		s.log.Warn("console: a sign-in with an unknown token", "remote", r.RemoteAddr)
		s.render(w, r, http.StatusUnauthorized, "login", "Sign in", "", s.nextPage(r.PostForm.Get("next")))
		return
	}
	id, _ := s.guard.newSession(actor)
	setSessionCookie(w, r, id, int(sessionTTL.Seconds()))
	http.Redirect(w, r, s.nextPage(r.PostForm.Get("next")), http.StatusSeeOther)
}

// logout ends the session.
func (s *Server) logout(w http.ResponseWriter, r *http.Request) {
	if len(s.guard.tokens) == 0 {
		s.fail(w, r, http.StatusBadRequest, errors.New("this console has no sign-in (no COURIER_CONSOLE_TOKEN)"))
		return
	}
	if c, err := r.Cookie(sessionCookie); err == nil {
		s.guard.end(c.Value)
	}
	setSessionCookie(w, r, "", -1)
	http.Redirect(w, r, "/login", http.StatusSeeOther)
}

// maxNext bounds the page a sign-in goes on to.
const maxNext = 2048

// nextPage is where a sign-in sends the browser: next, cleaned, when it
// names a page of this console (a path the console answers a GET for,
// with its query), else "/". Whatever a browser could read as another
// host never passes: a scheme or a host ("//host"), a backslash ("/\host"
// is "//host" to a browser) or a control character (a tab or a newline,
// which browsers drop) anywhere, dot segments that clean into one.
func (s *Server) nextPage(next string) string {
	if next == "" || len(next) > maxNext || strings.ContainsFunc(next, hostileInPath) {
		return "/"
	}
	u, err := url.Parse(next)
	if err != nil || u.Scheme != "" || u.Opaque != "" || u.User != nil || u.Host != "" || !strings.HasPrefix(u.Path, "/") ||
		strings.ContainsFunc(u.Path, hostileInPath) {
		return "/"
	}
	clean := path.Clean(u.Path)
	_, pattern := s.mux.Handler(&http.Request{Method: http.MethodGet, URL: &url.URL{Path: clean}})
	if pattern == "" || strings.HasPrefix(pattern, "GET /static/") || strings.HasPrefix(pattern, "GET /login") {
		return "/"
	}
	return (&url.URL{Path: clean, RawQuery: u.Query().Encode()}).String()
}

// hostileInPath reports whether r makes a path a browser may read as
// another host's: a backslash or a control character.
func hostileInPath(r rune) bool { return r < 0x20 || r == 0x7f || r == '\\' }
