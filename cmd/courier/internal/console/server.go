package console

import (
	"bytes"
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/IBM/sarama"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/courierkit/courier/cmd/courier/internal/display"
	"github.com/courierkit/courier/producer"
)

//go:embed assets
var assets embed.FS

// ErrInvalidConfig is matched by the errors of New for a config it cannot
// run with.
var ErrInvalidConfig = errors.New("console: invalid config")

// Config configures a console.
type Config struct {
	// DB is the database of the outbox (and of the audit table). Required.
	DB *pgxpool.Pool
	// Schema and Table name the outbox table. Default to "public" and
	// "courier_outbox".
	Schema, Table string
	// Kafka is the client the dead-letter pages and the health page read
	// through. Required.
	Kafka sarama.Client
	// Brokers and Sarama are what a replay connects with (dlq.Replay opens
	// its own client). Brokers is required.
	Brokers []string
	Sarama  *sarama.Config
	// ReplayGroup keeps the replays' position in each dead-letter topic
	// (dlq.ReplayConfig.Group). Defaults to dlq.DefaultReplayGroup.
	ReplayGroup string
	// RetryDelays and RetrySuffix are the retry tiers of the consumer
	// groups (retrytopics.Config): with them, a dead letter can be replayed
	// to the group that failed it only. Empty: that choice is not offered.
	RetryDelays []time.Duration
	RetrySuffix string
	// Relays are the health URLs (…/healthz) of relays started with
	// --metrics-addr; the health page shows their breakers.
	Relays []string
	// Tokens maps a name to its token. Empty: no sign-in, and only
	// requests whose Host is a loopback name are answered (the CLI refuses
	// to listen beyond the loopback without tokens).
	Tokens map[string]string
	// LocalActor is who the audit names for a console without tokens,
	// e.g. the operating-system user running it. Defaults to "local".
	LocalActor string
	// ReadOnly hides and refuses every action.
	ReadOnly bool
	// Logger receives the console's errors. Defaults to slog.Default().
	Logger *slog.Logger
}

// Server is a running console's state. Serve its Handler; Close it when
// done.
type Server struct {
	cfg     Config
	admin   *producer.Admin
	guard   *guard
	pages   map[string]*template.Template
	static  fs.FS
	handler http.Handler
	// mux routes the console's pages (nextPage asks it which exist).
	mux     *http.ServeMux
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	jobs    *jobs
	indexes *indexes
	// indexClient is the dead-letter indexes' own Kafka client (see
	// newIndexClient).
	indexClient sarama.Client
	auditable   bool
	log         *slog.Logger
}

// New checks cfg and returns a console. It checks that the outbox tables
// exist; when the audit table does not, every action is refused with the
// migrate command that creates it.
func New(ctx context.Context, cfg Config) (*Server, error) {
	switch {
	case cfg.DB == nil:
		return nil, fmt.Errorf("%w: DB is nil; the console needs the outbox's database", ErrInvalidConfig)
	case cfg.Kafka == nil:
		return nil, fmt.Errorf("%w: Kafka is nil; the console needs a Kafka client", ErrInvalidConfig)
	case len(cfg.Brokers) == 0:
		return nil, fmt.Errorf("%w: Brokers is empty; name the Kafka bootstrap addresses", ErrInvalidConfig)
	}
	holders := map[string]string{}
	for name, token := range cfg.Tokens {
		if err := CheckToken(name, token); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
		}
		if other, dup := holders[token]; dup {
			return nil, fmt.Errorf("%w: %q and %q have the same token; give each its own, so that the audit can tell them apart", ErrInvalidConfig, min(name, other), max(name, other))
		}
		holders[token] = name
	}
	if cfg.LocalActor == "" {
		cfg.LocalActor = "local"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	admin, err := producer.NewAdmin(cfg.DB, producer.AdminConfig{Schema: cfg.Schema, Table: cfg.Table})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	conf := producer.AdminConfig{Schema: cfg.Schema, Table: cfg.Table}.WithDefaults()
	cfg.Schema, cfg.Table = conf.Schema, conf.Table
	auditable, err := producer.AuditReady(ctx, cfg.DB, cfg.Schema, cfg.Table)
	if err != nil {
		return nil, fmt.Errorf("console: look up the audit table of %s.%s: %w", cfg.Schema, cfg.Table, err)
	}
	pages, err := parsePages()
	if err != nil {
		return nil, err
	}
	static, err := fs.Sub(assets, "assets/static")
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, admin: admin, guard: newGuard(cfg.Tokens), pages: pages,
		static: static, jobs: newJobs(), auditable: auditable, log: cfg.Logger}
	if s.indexClient, err = newIndexClient(cfg.Brokers, cfg.Sarama); err != nil {
		return nil, fmt.Errorf("console: connect to Kafka for the dead-letter pages: %w", err)
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.indexes = newIndexes(s.ctx, s.indexClient, &s.wg)
	s.handler = s.routes()
	return s, nil
}

// Handler serves the console.
func (s *Server) Handler() http.Handler { return s.handler }

// Close stops the replays still running (each stops after its batch in
// flight, its position committed) and the dead-letter topics' indexing,
// and waits for them.
func (s *Server) Close() {
	s.cancel()
	s.wg.Wait()
	_ = s.indexClient.Close()
}

// CheckToken refuses a token name or token Config.Tokens cannot hold: a
// name of 1 to 64 printable characters without ':' or ',', a token of 16
// printable ASCII characters or more without spaces or ','. Its errors
// never quote the token.
func CheckToken(name, token string) error {
	switch {
	case name == "" || len(name) > 64 || strings.ContainsFunc(name, func(r rune) bool { return r < 0x21 || r == 0x7f || r == ':' || r == ',' }):
		return fmt.Errorf("token name %q: use 1 to 64 printable characters without spaces, ':' or ','", name)
	case len(token) < 16:
		return fmt.Errorf("the token of %q is %d characters long; use at least 16 random characters (e.g. `openssl rand -hex 24`)", name, len(token))
	case strings.ContainsFunc(token, func(r rune) bool { return r < 0x21 || r > 0x7e || r == ',' }):
		return fmt.Errorf("the token of %q holds a space, a comma or a character outside printable ASCII", name)
	}
	return nil
}

// routes wires the pages.
func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	s.mux = mux
	mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(s.static)))
	mux.HandleFunc("GET /login", s.loginPage)
	mux.HandleFunc("POST /login", s.takes(loginFields, s.login))
	mux.HandleFunc("POST /logout", s.takes(logoutFields, s.logout))
	mux.HandleFunc("GET /{$}", s.overview)
	mux.HandleFunc("GET /outbox/events", s.queries(eventsQueryFields, s.events))
	mux.HandleFunc("GET /outbox/events/{id}", s.event)
	mux.HandleFunc("GET /outbox/{action}", s.queries(confirmQueryFields, s.confirmOutbox))
	mux.HandleFunc("POST /outbox/{action}", s.act(s.takes(outboxActionFields, s.changeOutbox)))
	mux.HandleFunc("GET /dlq", s.deadLetterTopics)
	mux.HandleFunc("GET /dlq/{topic}", s.queries(dlqTopicFields, s.deadLetters))
	mux.HandleFunc("GET /dlq/{topic}/{partition}/{offset}", s.deadLetter)
	mux.HandleFunc("POST /dlq/{topic}/dry-run", s.takes(dryRunFields, s.dryRun))
	mux.HandleFunc("POST /dlq/{topic}/replay", s.act(s.takes(replayFields, s.replay)))
	mux.HandleFunc("GET /jobs/{id}", s.job)
	mux.HandleFunc("GET /jobs/{id}/progress", s.jobProgress)
	mux.HandleFunc("POST /jobs/{id}/cancel", s.takes(cancelFields, s.cancelJob))
	mux.HandleFunc("GET /health", s.health)
	mux.HandleFunc("GET /audit", s.audit)
	return s.protect(mux)
}

// ctxKey keys the request's session in its context.
type ctxKey struct{}

// maxFormBytes bounds the body of a POST: a form of filters and tokens.
const maxFormBytes = 64 << 10

// protect sends the security headers, answers only the console's own
// hosts (without tokens) and signed-in browsers or bearer tokens (with
// tokens), refuses what another site's page sends, and refuses a POST of
// a browser that is not from the console's own page with the session's
// anti-forgery token.
func (s *Server) protect(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		securityHeaders(w)
		if len(s.guard.tokens) == 0 && !IsLoopbackHost(r.Host) {
			s.fail(w, r, http.StatusForbidden, fmt.Errorf("this console answers only to localhost, 127.0.0.1 and [::1], not to %q: "+
				"without COURIER_CONSOLE_TOKEN it listens on the loopback only, and a page of another name is a DNS-rebinding attempt", r.Host))
			return
		}
		if crossSite(r) {
			s.fail(w, r, http.StatusForbidden, errors.New("refused as a cross-site request: another site's page asked for it"))
			return
		}
		if strings.HasPrefix(r.URL.Path, "/static/") {
			next.ServeHTTP(w, r)
			return
		}
		if r.Method == http.MethodPost {
			r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
			if status, err := readPost(r); err != nil {
				s.fail(w, r, status, err)
				return
			}
		}
		sess := s.sessionOf(w, r)
		if sess == nil {
			switch {
			case r.URL.Path == "/login" && r.Method == http.MethodGet:
				next.ServeHTTP(w, r)
			case r.URL.Path == "/login" && r.Method == http.MethodPost:
				if err := sameOrigin(r); err != nil {
					s.fail(w, r, http.StatusForbidden, fmt.Errorf("refused as a possible cross-site request: %w", err))
					return
				}
				next.ServeHTTP(w, r)
			case r.Method == http.MethodGet && !strings.HasSuffix(r.URL.Path, "/progress") && !wantsJSON(r):
				http.Redirect(w, r, "/login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
			default:
				s.fail(w, r, http.StatusUnauthorized, errors.New("sign in first: open /login with your token, or send it as Authorization: Bearer <token>"))
			}
			return
		}
		if r.Method == http.MethodPost && !sess.bearer {
			if err := sameOrigin(r); err != nil {
				s.fail(w, r, http.StatusForbidden, fmt.Errorf("refused as a possible cross-site request: %w", err))
				return
			}
			if token := r.PostForm.Get(csrfField); !equalToken(token, sess.csrf) {
				s.fail(w, r, http.StatusForbidden, errors.New("refused as a possible cross-site request: the form's anti-forgery token is missing or stale; reload the page and try again"))
				return
			}
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), ctxKey{}, sess)))
	})
}

// sessionOf returns the request's session: without tokens, the browser's
// (a random id in a cookie, set when missing); with tokens, the one its
// cookie names after a sign-in, or one for its bearer token. Nil: not
// signed in.
func (s *Server) sessionOf(w http.ResponseWriter, r *http.Request) *session {
	if len(s.guard.tokens) == 0 {
		c, err := r.Cookie(sessionCookie)
		if err != nil || !isBrowserID(c.Value) {
			c = &http.Cookie{Value: randomToken()}
			setSessionCookie(w, r, c.Value, 0)
		}
		return s.guard.anonymous(c.Value, s.cfg.LocalActor)
	}
	if c, err := r.Cookie(sessionCookie); err == nil {
		if sess, ok := s.guard.lookup(c.Value); ok {
			return sess
		}
	}
	if token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		if actor, ok := s.guard.actorOfToken(token); ok {
			return &session{actor: actor, bearer: true}
		}
	}
	return nil
}

// current is the request's session.
func current(r *http.Request) *session {
	sess, _ := r.Context().Value(ctxKey{}).(*session)
	return sess
}

// act wraps a handler that changes something: refused in read-only mode
// and while the audit table is missing.
func (s *Server) act(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		switch {
		case s.cfg.ReadOnly:
			s.fail(w, r, http.StatusForbidden, s.actionsRefused())
		case !s.auditable:
			s.fail(w, r, http.StatusConflict, s.actionsRefused())
		default:
			h(w, r)
		}
	}
}

// actionsOn reports whether the console changes things: not read-only,
// and with its audit table.
func (s *Server) actionsOn() bool { return !s.cfg.ReadOnly && s.auditable }

// actionsRefused says why the console changes nothing; nil when it does.
func (s *Server) actionsRefused() error {
	switch {
	case s.cfg.ReadOnly:
		return errors.New("this console is read-only (--read-only): it changes nothing")
	case !s.auditable:
		return s.auditMissing()
	}
	return nil
}

// auditMissing explains why actions are off.
func (s *Server) auditMissing() error {
	return fmt.Errorf("actions are off: the audit table %s.%s_audit does not exist; create it with `courier migrate up --schema %s --table %s`, then restart the console",
		s.cfg.Schema, s.cfg.Table, s.cfg.Schema, s.cfg.Table)
}

// page is what every template gets.
type page struct {
	Title    string
	Nav      string
	Actor    string
	CSRF     string
	ReadOnly bool
	// Actions is false when the console is read-only or the audit table
	// is missing: action forms are hidden.
	Actions bool
	Notice  string
	Error   string
	// SignOut is set for a signed-in session, which can sign out.
	SignOut bool
	Data    any
}

// render writes the page named name with data.
func (s *Server) render(w http.ResponseWriter, r *http.Request, status int, name, title, nav string, data any) {
	p := page{Title: title, Nav: nav, ReadOnly: s.cfg.ReadOnly, Actions: s.actionsOn(), Data: data,
		Notice: notice(r.URL.Query())}
	if sess := current(r); sess != nil {
		p.Actor, p.CSRF, p.SignOut = sess.actor, sess.csrf, sess.signedIn
	}
	if !s.auditable && !s.cfg.ReadOnly {
		p.Error = s.auditMissing().Error()
	}
	var buf bytes.Buffer
	if err := s.pages[name].ExecuteTemplate(&buf, "layout", p); err != nil {
		s.log.Error("console: render page", "page", name, "error", err)
		http.Error(w, "the console could not render this page; its log says why", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// fail shows err on an error page with status.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, status int, err error) {
	if status >= 500 {
		s.log.Error("console: request failed", "path", r.URL.Path, "error", err)
	}
	if strings.HasSuffix(r.URL.Path, "/progress") || wantsJSON(r) {
		writeJSON(w, status, map[string]string{"error": display.Text(err.Error())})
		return
	}
	s.render(w, r, status, "error", http.StatusText(status), "", err.Error())
}

// parsePages parses each page template with the layout.
func parsePages() (map[string]*template.Template, error) {
	layout, err := template.New("layout").Funcs(funcs).ParseFS(assets, "assets/templates/layout.html")
	if err != nil {
		return nil, fmt.Errorf("console: parse the layout: %w", err)
	}
	names, err := fs.Glob(assets, "assets/templates/*.html")
	if err != nil {
		return nil, err
	}
	pages := map[string]*template.Template{}
	for _, file := range names {
		name := strings.TrimSuffix(path.Base(file), ".html")
		if name == "layout" {
			continue
		}
		t, err := template.Must(layout.Clone()).ParseFS(assets, file)
		if err != nil {
			return nil, fmt.Errorf("console: parse page %s: %w", name, err)
		}
		pages[name] = t
	}
	return pages, nil
}
