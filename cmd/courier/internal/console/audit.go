package console

import (
	"fmt"
	"net/http"
	"strconv"

	"github.com/courierkit/courier/producer"
)

// auditData is a page of the audit log.
type auditData struct {
	Entries []producer.AuditEntry
	Next    int64
	First   bool
}

// audit shows what the console's users did, newest first.
func (s *Server) audit(w http.ResponseWriter, r *http.Request) {
	if !s.auditable {
		s.fail(w, r, http.StatusConflict, s.auditMissing())
		return
	}
	var before int64
	if b := r.URL.Query().Get("before"); b != "" {
		var err error
		if before, err = strconv.ParseInt(b, 10, 64); err != nil || before < 0 {
			s.fail(w, r, http.StatusBadRequest, fmt.Errorf("before %q: use an audit entry's id", b))
			return
		}
	}
	entries, err := s.admin.AuditLog(r.Context(), before, pageSize+1)
	if err != nil {
		s.fail(w, r, http.StatusBadGateway, err)
		return
	}
	d := auditData{Entries: entries, First: before == 0}
	if len(entries) > pageSize {
		d.Entries = entries[:pageSize]
		d.Next = d.Entries[pageSize-1].ID
	}
	s.render(w, r, http.StatusOK, "audit", "Audit", "audit", d)
}
