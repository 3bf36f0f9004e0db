package console

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
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
	// Note is said on the job's page: why it was started.
	Note    string
	Started time.Time
	cancel  context.CancelFunc

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

// jobRequest is what a dry run or a replay was asked for.
type jobRequest struct {
	topic   string
	form    dlqFilter
	filter  dlq.Filter
	toGroup bool
	rate    float64
	// expect is the count the replay's dry run showed; 0 for a dry run.
	expect int
}

// readJobRequest reads and checks the form of a dry run or a replay.
func (s *Server) readJobRequest(r *http.Request, dryRun bool) (jobRequest, int, error) {
	topic, err := topicOf(r)
	if err != nil {
		return jobRequest{}, http.StatusNotFound, err
	}
	req := jobRequest{topic: topic, form: readDLQFilter(r.PostForm)}
	if req.filter, err = req.form.filter(time.Now()); err != nil {
		return jobRequest{}, http.StatusBadRequest, err
	}
	req.form = req.form.absolute(req.filter)
	switch v := r.PostForm.Get("to_group"); v {
	case "":
	case "on":
		if len(s.cfg.RetryDelays) == 0 {
			return jobRequest{}, http.StatusBadRequest, errors.New("replaying to the failed group only needs the groups' retry tiers: start the console with --retry-delays")
		}
		req.toGroup = true
	default:
		return jobRequest{}, http.StatusBadRequest, fmt.Errorf("to_group %s: send on to replay to the failed consumer group only, or leave it out", quote(v))
	}
	if rate := r.PostForm.Get("rate"); rate != "" {
		if req.rate, err = strconv.ParseFloat(rate, 64); err != nil || !(req.rate >= 0 && req.rate <= maxRate) {
			return jobRequest{}, http.StatusBadRequest, fmt.Errorf("rate %s: use records per second from 0 (no cap) to %d", quote(rate), maxRate)
		}
	}
	if !dryRun {
		expect, err := strconv.ParseInt(r.PostForm.Get("expect"), 10, 64)
		if err != nil || expect < 1 || expect > math.MaxInt32 {
			return jobRequest{}, http.StatusBadRequest, fmt.Errorf("expect %s: give the count of records the dry run would move, 1 or more; dry-run the replay first",
				quote(r.PostForm.Get("expect")))
		}
		req.expect = int(expect)
	}
	return req, 0, nil
}

// errNotStarted marks a replay that ended before its check passed (its
// set changed, Kafka failed, its audit row could not be written).
var errNotStarted = errors.New("the replay did not start")

// startJob starts a dry run or a replay of the form's filtered set. A
// dry run's page follows it. A replay first checks that its set still
// holds the count its dry run showed, and writes its audit row, before
// it writes anything; the answer waits for that: the replay's page when
// it started, else a new dry run's page (409) when the set changed.
func (s *Server) startJob(w http.ResponseWriter, r *http.Request, dryRun bool) {
	req, status, err := s.readJobRequest(r, dryRun)
	if err != nil {
		s.fail(w, r, status, err)
		return
	}
	j, checked, err := s.launch(req, current(r).actor, r.RemoteAddr, dryRun, "")
	if err != nil {
		s.fail(w, r, http.StatusConflict, err)
		return
	}
	if !dryRun {
		select {
		case err = <-checked:
		case <-r.Context().Done():
			return // the replay goes on; its page shows it
		}
		if changed, ok := errors.AsType[*dlq.SetChangedError](err); ok {
			s.setChanged(w, r, req, changed)
			return
		}
		if err != nil { // the job's page says why
			s.started(w, r, http.StatusBadGateway, j, nil)
			return
		}
	}
	s.started(w, r, http.StatusAccepted, j, nil)
}

// setChanged answers a replay refused because its set changed since its
// dry run: nothing was written, and a new dry run of the same filter
// shows the set as it is now.
func (s *Server) setChanged(w http.ResponseWriter, r *http.Request, req jobRequest, changed *dlq.SetChangedError) {
	note := fmt.Sprintf("The set changed since the dry run: it showed %d record(s), the replay found %d. Nothing was replayed. "+
		"This new dry run shows the set as it is now.", changed.Expected, changed.Found)
	req.expect = 0
	j, _, err := s.launch(req, current(r).actor, r.RemoteAddr, true, note)
	if err != nil {
		s.fail(w, r, http.StatusConflict, fmt.Errorf("%w; and no new dry run could start: %w", changed, err))
		return
	}
	s.started(w, r, http.StatusConflict, j, changed)
}

// jobJSON is what a script gets for a dry run, a replay or a stop: the
// job's progress and its page; with Changed, the replay it asked for was
// refused and Job is a new dry run of the set as it is now.
type jobJSON struct {
	Job progress `json:"job"`
	// Filter is the job's filter, its times made absolute: a replay of
	// what a dry run showed posts it back, with expect set to the dry
	// run's moved.
	Filter  map[string][]string `json:"filter"`
	URL     string              `json:"url"`
	Changed *changedJSON        `json:"changed,omitempty"`
	Error   string              `json:"error,omitempty"`
}

// changedJSON is the count a refused replay expected and the one it
// found.
type changedJSON struct {
	Expected int `json:"expected"`
	Found    int `json:"found"`
}

// started answers a request that started (or stopped) j: a script gets
// jobJSON with status, a browser j's page (when changed is set, at once
// with status; else through a redirect).
func (s *Server) started(w http.ResponseWriter, r *http.Request, status int, j *job, changed *dlq.SetChangedError) {
	page := "/jobs/" + j.ID
	switch {
	case wantsJSON(r):
		w.Header().Set("Location", page)
		out := jobJSON{Job: j.snapshot(), Filter: j.Filter.values(), URL: page}
		if changed != nil {
			out.Changed, out.Error = &changedJSON{Expected: changed.Expected, Found: changed.Found}, display.Text(changed.Error())
		}
		writeJSON(w, status, out)
	case changed != nil:
		s.renderJob(w, r, status, j)
	default:
		http.Redirect(w, r, page, http.StatusSeeOther)
	}
}

// launch registers and starts a job for req by actor from remote, with
// note on its page. For a replay, checked receives nil once the replay's
// check passed and its audit row is written (it writes from then on), or
// the error that ended it before.
func (s *Server) launch(req jobRequest, actor, remote string, dryRun bool, note string) (*job, <-chan error, error) {
	j := &job{ID: randomToken()[:16], Topic: req.topic, Actor: actor, DryRun: dryRun, ToGroup: req.toGroup, Rate: req.rate,
		Filter: req.form, Note: note, Started: time.Now(), records: map[dlq.ReplayAction][]shownRecord{}}
	cfg := dlq.ReplayConfig{Brokers: s.cfg.Brokers, Sarama: s.cfg.Sarama, Topic: req.topic, Group: s.cfg.ReplayGroup, Filter: req.filter,
		DryRun: dryRun, Rate: req.rate, Expect: req.expect, OnRecord: j.onRecord, OnProgress: j.onProgress}
	if req.toGroup {
		cfg.Route = retrytopics.ReplayRoute(retrytopics.Config{Delays: s.cfg.RetryDelays, Suffix: s.cfg.RetrySuffix})
	}
	ctx, cancel := context.WithCancel(s.ctx)
	j.cancel = cancel
	if err := s.jobs.add(j); err != nil {
		cancel()
		return nil, nil, err
	}
	filterJSON, _ := json.Marshal(j.Filter.values())
	checked := make(chan error, 1)
	audited := false
	if !dryRun {
		cfg.OnChecked = func(dlq.ReplayReport) error {
			err := s.auditWithin(ctx, producer.AuditEntry{Actor: actor, Remote: remote, Action: "dlq.replay", Target: req.topic,
				Filter: filterJSON, Count: int64(req.expect), Detail: j.Describe() + "; started as job " + j.ID})
			if err != nil {
				return fmt.Errorf("write the audit row, so the replay did not start: %w", err)
			}
			audited = true
			checked <- nil
			return nil
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
		if !audited { // the check did not pass: say why to the request waiting for it
			checked <- errors.Join(errNotStarted, err)
			return
		}
		detail := fmt.Sprintf("job %s: moved %d, refused %d, skipped %d, corrupt %d", j.ID, report.Moved, report.Refused, report.Skipped, report.Corrupt)
		if err != nil {
			detail = cut(detail+"; stopped: "+err.Error(), producer.MaxAuditDetailBytes)
		}
		if err := s.auditWithin(ctx, producer.AuditEntry{Actor: actor, Action: "dlq.replay.done", Target: req.topic, Filter: filterJSON,
			Count: int64(report.Moved), Detail: detail}); err != nil {
			s.log.Error("console: write the audit row of a finished replay", "job", j.ID, "error", err)
		}
	})
	return j, checked, nil
}

// auditWithin writes e, within 10 seconds even after ctx ended (a
// replay stopped still records its end).
func (s *Server) auditWithin(ctx context.Context, e producer.AuditEntry) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	return s.admin.Audit(ctx, e)
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
	s.renderJob(w, r, http.StatusOK, j)
}

// renderJob shows j's page with status.
func (s *Server) renderJob(w http.ResponseWriter, r *http.Request, status int, j *job) {
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
	s.render(w, r, status, "job", title, "dlq", d)
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
	s.started(w, r, http.StatusOK, j, nil)
}
