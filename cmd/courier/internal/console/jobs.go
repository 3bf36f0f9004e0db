package console

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"net/http"
	"regexp"
	"slices"
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
	// checked is closed once a replay's check ended: it passed (writing
	// began), or the replay ended before. Nil for a dry run.
	checked chan struct{}

	mu       sync.Mutex
	report   dlq.ReplayReport
	records  map[dlq.ReplayAction][]shownRecord
	done     bool
	err      error
	finished time.Time
	// writing is set once a replay's check passed: it writes.
	writing bool
	// changed and next are set when a replay's set changed since its dry
	// run: what it found, and the new dry run started to show it (nil
	// when none could start).
	changed *dlq.SetChangedError
	next    *job
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
	// Checking is set while a replay counts its set, before it writes.
	Checking bool `json:"checking,omitempty"`
	// Set names what a finished dry run would move (dlq ReplayReport.Set),
	// or what a replay moved.
	Set string `json:"set,omitempty"`
	// Replay, for a finished dry run that would move records, is the form
	// that replays exactly those: post it to /dlq/<topic>/replay.
	Replay map[string][]string `json:"replay,omitempty"`
	// Changed and Next are set for a replay refused because its set
	// changed since its dry run: the counts, and the new dry run's page.
	Changed *changedJSON `json:"changed,omitempty"`
	Next    string       `json:"next,omitempty"`
}

// snapshot is the job's progress now.
func (j *job) snapshot() progress {
	j.mu.Lock()
	defer j.mu.Unlock()
	r := j.report
	p := progress{ID: j.ID, Topic: j.Topic, DryRun: j.DryRun, ToGroup: j.ToGroup, Done: j.done, Total: r.Total, Read: r.Read,
		Moved: r.Moved, Refused: r.Refused, Skipped: r.Skipped, Corrupt: r.Corrupt, NotSelected: r.NotSelected, Already: r.AlreadyReplayed,
		Checking: !j.DryRun && !j.writing && !j.done}
	if j.done {
		p.Set = r.Set
	}
	if j.done && j.DryRun && j.err == nil && r.Moved > 0 {
		p.Replay = j.replayForm(r)
	}
	if j.changed != nil {
		p.Changed = newChangedJSON(j.changed)
		if j.next != nil {
			p.Next = j.next.page()
		}
	}
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

// replayForm is the form that replays what the dry run j reported in r
// would move: its filter, where the records go, the count and the set
// (a rate cap is the replay's own choice).
func (j *job) replayForm(r dlq.ReplayReport) map[string][]string {
	form := j.Filter.values()
	if j.ToGroup {
		form.Set("to_group", "on")
	}
	form.Set("expect", strconv.Itoa(r.Moved))
	form.Set("set", r.Set)
	return form
}

// ReplayForm is replayForm of the job's report now, for its page.
func (j *job) ReplayForm() [][2]string {
	j.mu.Lock()
	form := j.replayForm(j.report)
	j.mu.Unlock()
	var out [][2]string
	for _, name := range slices.Sorted(maps.Keys(form)) {
		for _, v := range form[name] {
			out = append(out, [2]string{name, v})
		}
	}
	return out
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
	// expect and set are the count and the set the replay's dry run
	// showed; 0 and "" for a dry run.
	expect int
	set    string
}

// readJobRequest reads and checks the form of a dry run or a replay.
func (s *Server) readJobRequest(r *http.Request, dryRun bool) (jobRequest, int, error) {
	topic, err := topicOf(r)
	if err != nil {
		return jobRequest{}, http.StatusNotFound, err
	}
	if err := s.exists(topic); err != nil {
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
		if req.rate, err = strconv.ParseFloat(rate, 64); err != nil || !(req.rate >= 0 && req.rate <= maxRate) || req.rate > 0 && req.rate < dlq.MinReplayRate {
			return jobRequest{}, http.StatusBadRequest, fmt.Errorf("rate %s: use 0 (no cap), or records per second from %v to %d", quote(rate), dlq.MinReplayRate, maxRate)
		}
	}
	if !dryRun {
		expect, err := strconv.ParseInt(r.PostForm.Get("expect"), 10, 64)
		if err != nil || expect < 1 || expect > math.MaxInt32 {
			return jobRequest{}, http.StatusBadRequest, fmt.Errorf("expect %s: give the count of records the dry run would move, 1 or more; dry-run the replay first",
				quote(r.PostForm.Get("expect")))
		}
		req.expect = int(expect)
		if req.set = r.PostForm.Get("set"); !setPattern.MatchString(req.set) {
			return jobRequest{}, http.StatusBadRequest, fmt.Errorf("set %s: give the set of the dry run (its job's set), so that the replay moves exactly what it showed; dry-run the replay first",
				quote(req.set))
		}
	}
	return req, 0, nil
}

// setPattern matches a dry run's set (dlq ReplayReport.Set).
var setPattern = regexp.MustCompile(`^[0-9a-f]{32}$`)

// checkWait bounds how long a replay's request waits for its check (a
// read of its whole set) before it answers with the replay's page, which
// follows the check: a proxy in front of the console would time out.
const checkWait = 10 * time.Second

// startJob starts a dry run or a replay of the form's filtered set. A
// dry run's page follows it. A replay first checks that its set is still
// the one its dry run showed, and writes its audit row, before it writes
// anything; the answer waits for that, up to checkWait: the replay's page
// when it started (or still checks), else, when the set changed, the page
// of a new dry run that shows the set as it is now (for a script, a 409).
func (s *Server) startJob(w http.ResponseWriter, r *http.Request, dryRun bool) {
	req, status, err := s.readJobRequest(r, dryRun)
	if err != nil {
		s.fail(w, r, status, err)
		return
	}
	j, err := s.launch(req, current(r).actor, r.RemoteAddr, dryRun, "")
	if err != nil {
		s.fail(w, r, http.StatusConflict, err)
		return
	}
	status = http.StatusAccepted
	if !dryRun {
		timer := time.NewTimer(checkWait)
		defer timer.Stop()
		select {
		case <-j.checked:
		case <-timer.C: // still counting: the replay's page follows it
		case <-r.Context().Done():
			return // the replay goes on; its page shows it
		}
		j.mu.Lock()
		changed, next, failed := j.changed, j.next, j.done && !j.writing
		j.mu.Unlock()
		switch {
		case changed != nil && next != nil:
			s.answerJob(w, r, http.StatusConflict, next, changed)
			return
		case changed != nil:
			s.answerJob(w, r, http.StatusConflict, j, changed)
			return
		case failed: // its page says why
			status = http.StatusBadGateway
		}
	}
	s.answerJob(w, r, status, j, nil)
}

// jobJSON is what a script gets for a dry run, a replay or a stop: the
// job's progress (its replay form once a dry run is done) and its page;
// with Changed, the replay asked for was refused, and Job is the new dry
// run of the set as it is now.
type jobJSON struct {
	Job     progress     `json:"job"`
	URL     string       `json:"url"`
	Changed *changedJSON `json:"changed,omitempty"`
	Error   string       `json:"error,omitempty"`
}

// changedJSON is what a replay refused because its set changed expected
// and found.
type changedJSON struct {
	Expected     int  `json:"expected"`
	Found        int  `json:"found"`
	OtherRecords bool `json:"other_records,omitempty"`
}

func newChangedJSON(e *dlq.SetChangedError) *changedJSON {
	return &changedJSON{Expected: e.Expected, Found: e.Found, OtherRecords: e.OtherRecords}
}

// page is the job's page.
func (j *job) page() string { return "/jobs/" + j.ID }

// answerJob answers a request that started, refused or stopped a job,
// with j's page: for a script, jobJSON with status (and changed, when a
// replay was refused); for a browser, a redirect to the page, which
// follows the job and says what happened.
func (s *Server) answerJob(w http.ResponseWriter, r *http.Request, status int, j *job, changed *dlq.SetChangedError) {
	page := j.page()
	if !wantsJSON(r) {
		http.Redirect(w, r, page, http.StatusSeeOther)
		return
	}
	w.Header().Set("Location", page)
	out := jobJSON{Job: j.snapshot(), URL: page}
	if changed != nil {
		out.Changed, out.Error = newChangedJSON(changed), display.Text(changed.Error())
	}
	writeJSON(w, status, out)
}

// launch registers and starts a job for req by actor from remote, with
// note on its page. A replay writes its audit row when its check passed,
// before its first write; when its set changed, it starts a new dry run
// of the same filter, and its page and progress name it.
func (s *Server) launch(req jobRequest, actor, remote string, dryRun bool, note string) (*job, error) {
	j := &job{ID: randomToken()[:16], Topic: req.topic, Actor: actor, DryRun: dryRun, ToGroup: req.toGroup, Rate: req.rate,
		Filter: req.form, Note: note, Started: time.Now(), records: map[dlq.ReplayAction][]shownRecord{}}
	cfg := dlq.ReplayConfig{Brokers: s.cfg.Brokers, Sarama: s.cfg.Sarama, Topic: req.topic, Group: s.cfg.ReplayGroup, Filter: req.filter,
		DryRun: dryRun, Rate: req.rate, Expect: req.expect, ExpectSet: req.set, OnRecord: j.onRecord, OnProgress: j.onProgress}
	if req.toGroup {
		cfg.Route = retrytopics.ReplayRoute(retrytopics.Config{Delays: s.cfg.RetryDelays, Suffix: s.cfg.RetrySuffix})
	}
	ctx, cancel := context.WithCancel(s.ctx)
	j.cancel = cancel
	if !dryRun {
		j.checked = make(chan struct{})
	}
	if err := s.jobs.add(j); err != nil {
		cancel()
		return nil, err
	}
	filterJSON := j.filterJSON()
	if !dryRun {
		cfg.OnChecked = func(dlq.ReplayReport) error {
			err := s.auditWithin(ctx, producer.AuditEntry{Actor: actor, Remote: remote, Action: "dlq.replay", Target: req.topic,
				Filter: filterJSON, Count: int64(req.expect), Detail: j.Describe() + "; set " + req.set + "; started as job " + j.ID})
			if err != nil {
				return fmt.Errorf("write the audit row, so the replay did not start: %w", err)
			}
			j.mu.Lock()
			j.writing = true
			j.mu.Unlock()
			close(j.checked)
			return nil
		}
	}
	s.wg.Go(func() {
		defer cancel()
		report, err := dlq.Replay(ctx, cfg)
		j.onProgress(report)
		if dryRun {
			j.finish(err)
			return
		}
		j.mu.Lock()
		writing := j.writing
		j.mu.Unlock()
		if !writing {
			s.refused(j, req, actor, remote, err)
			return
		}
		j.finish(err)
		detail := fmt.Sprintf("job %s: moved %d, refused %d, skipped %d, corrupt %d", j.ID, report.Moved, report.Refused, report.Skipped, report.Corrupt)
		if err != nil {
			detail = cut(detail+"; stopped: "+err.Error(), producer.MaxAuditDetailBytes)
		}
		if err := s.auditWithin(ctx, producer.AuditEntry{Actor: actor, Action: "dlq.replay.done", Target: req.topic, Filter: filterJSON,
			Count: int64(report.Moved), Detail: detail}); err != nil {
			s.log.Error("console: write the audit row of a finished replay", "job", j.ID, "error", err)
		}
	})
	return j, nil
}

// refused ends the replay j, which ended with err before its check
// passed: when its set changed, a new dry run of req shows the set as it
// is now. Nothing was written; no audit row says otherwise.
func (s *Server) refused(j *job, req jobRequest, actor, remote string, err error) {
	defer close(j.checked)
	changed, ok := errors.AsType[*dlq.SetChangedError](err)
	if !ok {
		j.finish(err)
		return
	}
	s.log.Info("console: a replay was refused: its set changed since its dry run", "job", j.ID, "topic", j.Topic, "actor", actor,
		"expected", changed.Expected, "found", changed.Found)
	found := fmt.Sprintf("the replay found %d", changed.Found)
	if changed.OtherRecords {
		found = fmt.Sprintf("the replay found %d, but not the same ones or not for the same places", changed.Found)
	}
	note := fmt.Sprintf("The set changed since the dry run: it showed %d record(s), %s. Nothing was replayed. "+
		"This new dry run shows the set as it is now.", req.expect, found)
	req.expect, req.set = 0, ""
	next, nextErr := s.launch(req, actor, remote, true, note)
	if nextErr != nil {
		err = fmt.Errorf("%w; and no new dry run could start: %w", err, nextErr)
	}
	j.mu.Lock()
	j.changed, j.next = changed, next
	j.mu.Unlock()
	j.finish(err)
}

// auditWithin writes e, within 10 seconds even after ctx ended (a
// replay stopped still records its end).
func (s *Server) auditWithin(ctx context.Context, e producer.AuditEntry) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	return s.admin.Audit(ctx, e)
}

// filterJSON is the job's filter as its audit rows record it.
func (j *job) filterJSON() []byte {
	b, _ := json.Marshal(j.Filter.values()) // a map of strings always encodes
	return b
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

// Next is the page of the dry run that a replay refused because its set
// changed started; "" for another job.
func (j *job) Next() string {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.next == nil {
		return ""
	}
	return j.next.page()
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
		j.mu.Lock()
		writing := j.writing
		j.mu.Unlock()
		if writing { // a replay still checking has written nothing, and its audit row is none
			if err := s.admin.Audit(r.Context(), producer.AuditEntry{Actor: current(r).actor, Remote: r.RemoteAddr, Action: "dlq.replay.cancel",
				Target: j.Topic, Filter: j.filterJSON(), Detail: "job " + j.ID}); err != nil {
				s.log.Error("console: write the audit row of a cancel", "job", j.ID, "error", err)
			}
		}
	}
	s.answerJob(w, r, http.StatusOK, j, nil)
}
