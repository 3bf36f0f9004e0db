package console

import (
	"errors"
	"net/http"
)

// loginPage asks for a token.
func (s *Server) loginPage(w http.ResponseWriter, r *http.Request) {
	if len(s.guard.tokens) == 0 {
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	s.render(w, r, http.StatusOK, "login", "Sign in", "", localPath(r.URL.Query().Get("next")))
}

// login starts a session for a known token.
func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 16<<10)
	actor, ok := s.guard.actorOfToken(r.PostFormValue("token"))
	if !ok {
		s.log.Warn("console: a sign-in with an unknown token", "remote", r.RemoteAddr)
		s.render(w, r, http.StatusUnauthorized, "login", "Sign in", "", localPath(r.PostFormValue("next")))
		return
	}
	id, _ := s.guard.newSession(actor)
	setSessionCookie(w, r, id, int(sessionTTL.Seconds()))
	http.Redirect(w, r, localPath(r.PostFormValue("next")), http.StatusSeeOther)
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
