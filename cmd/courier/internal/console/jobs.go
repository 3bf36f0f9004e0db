package console

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/courierkit/courier/cmd/courier/internal/display"
	"github.com/courierkit/courier/dlq"
	"github.com/courierkit/courier/producer"
	"github.com/courierkit/courier/retrytopics"
)

// Bounds of the replay jobs kept in memory.
const (
	maxJobs        = 100 // finished jobs beyond this are forgotten, oldest first
	maxRunningJobs = 4
	maxShownPerAct = 100 // records listed per action on a job's page
	maxRate        = 100_000
)

// job is a replay or dry run of a dead-letter topic, running or done.
type job struct {
	ID, Topic, Actor string
	DryRun, ToGroup  bool
	Rate             float64
	Filter           dlqFilter
	Started          time.Time
	cancel           context.CancelFunc

	mu       sync.Mutex
	report   dlq.ReplayReport
	records  map[dlq.ReplayAction][]shownRecord
	done     bool
	err      error
	finished time.Time
}

// shownRecord is what a job's page lists of a record acted on: its place
// and where it went or why not, without its envelope.
type shownRecord struct {
	Partition     int32
	Offset        int64
	OriginalTopic string
	To            string
	ToPartition   int32
	ToOffset      int64
	Reason        string
}

// jobs are the console's replay jobs.
type jobs struct {
	mu    sync.Mutex
	byID  map[string]*job
	order []string
}

func newJobs() *jobs { return &jobs{byID: map[string]*job{}} }

// add registers j unless too many run or one already runs on its topic.
func (js *jobs) add(j *job) error {
	js.mu.Lock()
	defer js.mu.Unlock()
	running := 0
	for _, other := range js.byID {
		if other.running() {
			running++
			if other.Topic == j.Topic && !other.DryRun && !j.DryRun {
				return fmt.Errorf("a replay of %s is running already (job %s); wait for it or cancel it", j.Topic, other.ID)
			}
		}
	}
	if running >= maxRunningJobs {
		return fmt.Errorf("%d replays and dry runs are running already; wait for one to end", running)
	}
	js.byID[j.ID] = j
	js.order = append(js.order, j.ID)
	// Forget the oldest finished jobs beyond maxJobs (running ones stay:
	// at most maxRunningJobs).
	for i := 0; len(js.order) > maxJobs && i < len(js.order); {
		if old := js.byID[js.order[i]]; !old.running() {
			delete(js.byID, js.order[i])
			js.order = append(js.order[:i], js.order[i+1:]...)
			continue
		}
		i++
	}
	return nil
}

// get returns the job of id.
func (js *jobs) get(id string) (*job, bool) {
	js.mu.Lock()
	defer js.mu.Unlock()
	j, ok := js.byID[id]
	return j, ok
}

func (j *job) running() bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return !j.done
}

// onRecord keeps the first records of each action for the job's page.
func (j *job) onRecord(rec dlq.ReplayedRecord) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if len(j.records[rec.Action]) < maxShownPerAct {
		j.records[rec.Action] = append(j.records[rec.Action], shownRecord{Partition: rec.Entry.Partition, Offset: rec.Entry.Offset,
			OriginalTopic: rec.Entry.Envelope.OriginalTopic, To: rec.To, ToPartition: rec.ToPartition, ToOffset: rec.ToOffset, Reason: rec.Reason})
	}
}

func (j *job) onProgress(r dlq.ReplayReport) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.report = r
}

// progress is a job's state as its page and /progress show it.
type progress struct {
	ID          string  `json:"id"`
	Topic       string  `json:"topic"`
	DryRun      bool    `json:"dry_run"`
	ToGroup     bool    `json:"to_group"`
	Done        bool    `json:"done"`
	Error       string  `json:"error,omitempty"`
	Total       int64   `json:"total"`
	Read        int64   `json:"read"`
	Moved       int     `json:"moved"`
	Refused     int     `json:"refused"`
	Skipped     int     `json:"skipped"`
	Corrupt     int     `json:"corrupt"`
	NotSelected int     `json:"not_selected"`
	Already     int     `json:"already_replayed"`
	Percent     float64 `json:"percent"`
	PerSecond   float64 `json:"per_second"`
	Elapsed     string  `json:"elapsed"`
}

// snapshot is the job's progress now.
func (j *job) snapshot() progress {
	j.mu.Lock()
	defer j.mu.Unlock()
	r := j.report
	p := progress{ID: j.ID, Topic: j.Topic, DryRun: j.DryRun, ToGroup: j.ToGroup, Done: j.done, Total: r.Total, Read: r.Read,
		Moved: r.Moved, Refused: r.Refused, Skipped: r.Skipped, Corrupt: r.Corrupt, NotSelected: r.NotSelected, Already: r.AlreadyReplayed}
	end := time.Now()
	if j.done {
		end = j.finished
		if j.err != nil {
			p.Error = display.Text(j.err.Error())
		}
	}
	elapsed := end.Sub(j.Started)
	p.Elapsed = roundDuration(elapsed)
	switch {
	case j.done && j.err == nil:
		p.Percent = 100
	case r.Total > 0:
		p.Percent = min(100, float64(r.Read)*100/float64(r.Total))
	case j.done:
		p.Percent = 100
	}
	if s := elapsed.Seconds(); s > 0 {
		p.PerSecond = float64(r.Moved) / s
	}
	return p
}

// shown returns the records kept for action.
func (j *job) shown(action dlq.ReplayAction) []shownRecord {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.records[action]
}

// startJob starts a dry run or a replay of the form's filtered set and
// sends the browser to its page.
func (s *Server) startJob(w http.ResponseWriter, r *http.Request, dryRun bool) {
	topic, err := topicOf(r)
	if err != nil {
		s.fail(w, r, http.StatusNotFound, err)
		return
	}
	df := readDLQFilter(r.PostForm)
	f, err := df.filter(time.Now())
	if err != nil {
		s.fail(w, r, http.StatusBadRequest, err)
		return
	}
	j := &job{ID: randomToken()[:16], Topic: topic, Actor: current(r).actor, DryRun: dryRun, ToGroup: r.PostFormValue("to_group") == "on",
		Filter: df.absolute(f), Started: time.Now(), records: map[dlq.ReplayAction][]shownRecord{}}
	var expect int64
	if !dryRun {
		if expect, err = strconv.ParseInt(r.PostFormValue("expect"), 10, 64); err != nil || expect < 0 {
			s.fail(w, r, http.StatusBadRequest, errors.New("the form names no count from a dry run; dry-run the replay first"))
			return
		}
	}
	if rate := r.PostFormValue("rate"); rate != "" {
		if j.Rate, err = strconv.ParseFloat(rate, 64); err != nil || !(j.Rate >= 0 && j.Rate <= maxRate) {
			s.fail(w, r, http.StatusBadRequest, fmt.Errorf("rate %q: use records per second from 0 (no cap) to %d", rate, maxRate))
			return
		}
	}
	cfg := dlq.ReplayConfig{Brokers: s.cfg.Brokers, Sarama: s.cfg.Sarama, Topic: topic, Group: s.cfg.ReplayGroup, Filter: f,
		DryRun: dryRun, Rate: j.Rate, OnRecord: j.onRecord, OnProgress: j.onProgress}
	if j.ToGroup {
		if len(s.cfg.RetryDelays) == 0 {
			s.fail(w, r, http.StatusBadRequest, errors.New("replaying to the failed group only needs the groups' retry tiers: start the console with --retry-delays"))
			return
		}
		cfg.Route = retrytopics.ReplayRoute(retrytopics.Config{Delays: s.cfg.RetryDelays, Suffix: s.cfg.RetrySuffix})
	}
	ctx, cancel := context.WithCancel(s.ctx)
	j.cancel = cancel
	if err := s.jobs.add(j); err != nil {
		cancel()
		s.fail(w, r, http.StatusConflict, err)
		return
	}
	filterJSON, _ := json.Marshal(j.Filter.values())
	if !dryRun {
		if err := s.admin.Audit(r.Context(), producer.AuditEntry{Actor: j.Actor, Remote: r.RemoteAddr, Action: "dlq.replay", Target: topic,
			Filter: filterJSON, Count: expect, Detail: j.Describe() + "; started as job " + j.ID}); err != nil {
			cancel()
			j.finish(err)
			s.fail(w, r, http.StatusBadGateway, fmt.Errorf("write the audit row, so the replay did not start: %w", err))
			return
		}
	}
	s.wg.Go(func() {
		defer cancel()
		report, err := dlq.Replay(ctx, cfg)
		j.onProgress(report)
		j.finish(err)
		if dryRun {
			return
		}
		detail := fmt.Sprintf("job %s: moved %d, refused %d, skipped %d, corrupt %d", j.ID, report.Moved, report.Refused, report.Skipped, report.Corrupt)
		if err != nil {
			detail = cut(detail+"; stopped: "+err.Error(), producer.MaxAuditDetailBytes)
		}
		audit, cancelAudit := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancelAudit()
		if err := s.admin.Audit(audit, producer.AuditEntry{Actor: j.Actor, Action: "dlq.replay.done", Target: topic, Filter: filterJSON,
			Count: int64(report.Moved), Detail: detail}); err != nil {
			s.log.Error("console: write the audit row of a finished replay", "job", j.ID, "error", err)
		}
	})
	http.Redirect(w, r, "/jobs/"+j.ID, http.StatusSeeOther)
}

// Describe says where the job writes.
func (j *job) Describe() string {
	to := "to each record's original topic"
	if j.ToGroup {
		to = "to the failed consumer group only, through its first retry tier"
	}
	if j.Rate > 0 {
		to += fmt.Sprintf(", at most %g records/s", j.Rate)
	}
	return to
}

// finish records the job's end.
func (j *job) finish(err error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.done, j.err, j.finished = true, err, time.Now()
}

func (s *Server) dryRun(w http.ResponseWriter, r *http.Request) { s.startJob(w, r, true) }
func (s *Server) replay(w http.ResponseWriter, r *http.Request) { s.startJob(w, r, false) }

// jobData is a job's page.
type jobData struct {
	Job                              *job
	Progress                         progress
	Moved, Refused, Skipped, Corrupt []shownRecord
	// CanStop is whether this page may stop the job: a dry run anyone
	// may stop; a replay only where actions are on.
	CanStop bool
}

// job shows a job: its progress while it runs (the page's script polls
// /progress), what it did or would do when done.
func (s *Server) job(w http.ResponseWriter, r *http.Request) {
	j, ok := s.jobs.get(r.PathValue("id"))
	if !ok {
		s.fail(w, r, http.StatusNotFound, errors.New("no such replay job (the console keeps the last 100, until it restarts)"))
		return
	}
	moved := dlq.ActionMoved
	if j.DryRun {
		moved = dlq.ActionWouldMove
	}
	d := jobData{Job: j, Progress: j.snapshot(), Moved: j.shown(moved), Refused: j.shown(dlq.ActionRefused),
		Skipped: j.shown(dlq.ActionSkipped), Corrupt: j.shown(dlq.ActionCorrupt), CanStop: j.DryRun || s.actionsOn()}
	title := "Replay of " + j.Topic
	if j.DryRun {
		title = "Dry run of " + j.Topic
	}
	s.render(w, r, http.StatusOK, "job", title, "dlq", d)
}

// jobProgress answers a job's progress as JSON.
func (s *Server) jobProgress(w http.ResponseWriter, r *http.Request) {
	j, ok := s.jobs.get(r.PathValue("id"))
	if !ok {
		s.fail(w, r, http.StatusNotFound, errors.New("no such replay job"))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(j.snapshot())
}

// cancelJob stops a running job after its batch in flight. Anyone may
// stop a dry run, which changes nothing; stopping a replay is an action.
func (s *Server) cancelJob(w http.ResponseWriter, r *http.Request) {
	j, ok := s.jobs.get(r.PathValue("id"))
	if !ok {
		s.fail(w, r, http.StatusNotFound, errors.New("no such replay job"))
		return
	}
	if !j.DryRun {
		if err := s.actionsRefused(); err != nil {
			s.fail(w, r, http.StatusForbidden, err)
			return
		}
	}
	if j.running() {
		j.cancel()
		if !j.DryRun {
			filterJSON, _ := json.Marshal(j.Filter.values())
			if err := s.admin.Audit(r.Context(), producer.AuditEntry{Actor: current(r).actor, Remote: r.RemoteAddr, Action: "dlq.replay.cancel",
				Target: j.Topic, Filter: filterJSON, Detail: "job " + j.ID}); err != nil {
				s.log.Error("console: write the audit row of a cancel", "job", j.ID, "error", err)
			}
		}
	}
	http.Redirect(w, r, "/jobs/"+j.ID, http.StatusSeeOther)
}
