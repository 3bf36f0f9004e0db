package console

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/courierkit/courier/cmd/courier/internal/display"
)

// The fields each POST takes. An action reads its filter from these and
// from nothing else, so a field it does not know (a typo, a filter of
// another page) is refused rather than left out: left out, it would widen
// the set the action touches.
var (
	outboxActionFields = slices.Concat([]string{csrfField, "expect", "status"}, outboxFilterFields)
	dryRunFields       = slices.Concat([]string{csrfField, "rate", "to_group"}, dlqFilterFields)
	replayFields       = slices.Concat(dryRunFields, []string{"expect", "set"})
	cancelFields       = []string{csrfField}
	loginFields        = []string{csrfField, "token", "next"}
	logoutFields       = []string{csrfField}
)

// repeatable are the fields a form may give more than once.
var repeatable = []string{"status"}

// readPost parses the body of a POST into r.PostForm, refusing what no
// page of the console sends and a script could mean otherwise: a body
// that is not a form (JSON, say, whose filter would be read as none), a
// query string (whose fields a POST does not read), a file. It returns
// the status to answer with when it refuses.
func readPost(r *http.Request) (int, error) {
	if r.URL.RawQuery != "" {
		return http.StatusBadRequest, fmt.Errorf("nothing was done: a POST takes its fields in its body, and this one has a query string (%s); "+
			"send them as form fields (curl --data-urlencode name=value), so that the action reads every one", quoteNames(r.URL.Query()))
	}
	mediaType := ""
	if ct := r.Header.Get("Content-Type"); ct != "" {
		var err error
		if mediaType, _, err = mime.ParseMediaType(ct); err != nil {
			return http.StatusUnsupportedMediaType, fmt.Errorf("nothing was done: the Content-Type %s cannot be read; send application/x-www-form-urlencoded", quote(ct))
		}
	}
	switch mediaType {
	case "application/x-www-form-urlencoded":
	case "multipart/form-data":
		if err := r.ParseMultipartForm(maxFormBytes); err != nil {
			return formError(err)
		}
		if r.MultipartForm != nil && len(r.MultipartForm.File) > 0 {
			return http.StatusBadRequest, errors.New("nothing was done: the form holds a file, and no action takes one")
		}
		return 0, nil
	case "":
		if r.ContentLength != 0 {
			return http.StatusUnsupportedMediaType, errors.New("nothing was done: the body names no Content-Type; send its fields as application/x-www-form-urlencoded")
		}
	default:
		return http.StatusUnsupportedMediaType, fmt.Errorf("nothing was done: the body is %s, and the console reads forms only: "+
			"send its fields as application/x-www-form-urlencoded (curl --data-urlencode name=value)", quote(mediaType))
	}
	if err := r.ParseForm(); err != nil {
		return formError(err)
	}
	return 0, nil
}

// formError is the answer to a form that cannot be parsed.
func formError(err error) (int, error) {
	if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
		return http.StatusRequestEntityTooLarge, fmt.Errorf("nothing was done: the form is over %d bytes", maxFormBytes)
	}
	return http.StatusBadRequest, fmt.Errorf("nothing was done: the form cannot be read: %s", display.Text(cut(err.Error(), 200)))
}

// The query fields of the pages whose filter a confirmation or an action
// goes on with: a field they do not know is refused rather than left out,
// which would show (and offer to act on) a wider set.
var (
	eventsQueryFields  = slices.Concat([]string{"status", "after", "done", "n"}, outboxFilterFields)
	confirmQueryFields = slices.Concat([]string{"status"}, outboxFilterFields)
	dlqTopicFields     = slices.Concat([]string{"after"}, dlqFilterFields)
)

// checkFields refuses fields v holds outside fields, or one of them more
// than once (but those in repeatable).
func checkFields(v url.Values, fields []string) error {
	for _, name := range slices.Sorted(maps.Keys(v)) {
		switch n := len(v[name]); {
		case !slices.Contains(fields, name):
			return fmt.Errorf("this takes no field %s; it takes %s", quote(name), strings.Join(fields, ", "))
		case n > 1 && !slices.Contains(repeatable, name):
			return fmt.Errorf("the field %s is given %d times; give it once", quote(name), n)
		}
	}
	return nil
}

// takes wraps a POST handler: it runs only when the form holds fields of
// its own (see checkFields).
func (s *Server) takes(fields []string, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if err := checkFields(r.PostForm, fields); err != nil {
			s.fail(w, r, http.StatusBadRequest, fmt.Errorf("nothing was done: %w", err))
			return
		}
		h(w, r)
	}
}

// queries wraps a GET handler: it runs only when the query holds fields
// of its own (see checkFields).
func (s *Server) queries(fields []string, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if err := checkFields(r.URL.Query(), fields); err != nil {
			s.fail(w, r, http.StatusBadRequest, err)
			return
		}
		h(w, r)
	}
}

// quoteNames quotes at most the first 10 names of v, in order.
func quoteNames(v url.Values) string {
	var quoted []string
	for i, name := range slices.Sorted(maps.Keys(v)) {
		if i == 10 {
			quoted = append(quoted, "…")
			break
		}
		quoted = append(quoted, quote(name))
	}
	return strings.Join(quoted, ", ")
}

// quote is s from a request, quoted for an error: control characters
// made visible, at most 100 bytes of it.
func quote(s string) string { return strconv.Quote(display.Text(cut(s, 100))) }

// wantsJSON reports whether r asks for JSON answers (Accept names
// application/json): a script's. Pages are HTML otherwise.
func wantsJSON(r *http.Request) bool {
	for part := range strings.SplitSeq(r.Header.Get("Accept"), ",") {
		if t, _, err := mime.ParseMediaType(strings.TrimSpace(part)); err == nil && t == "application/json" {
			return true
		}
	}
	return false
}

// writeJSON answers v as JSON with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
