package console

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/courierkit/courier/cmd/courier/internal/grouplag"
)

// relayTimeout bounds the call to a relay's health URL.
const relayTimeout = 2 * time.Second

// relayState is a relay's answer on the health page.
type relayState struct {
	URL     string
	Status  string
	Breaker string
	Problem string
	// Held are the partitions the relay holds (Kafka's condition), at
	// most maxHeld of them; HeldMore is how many more it named.
	Held     []heldPart
	HeldMore int
}

// heldPart is a partition a relay says it holds.
type heldPart struct {
	Topic     string    `json:"topic"`
	Partition int32     `json:"partition"`
	Since     time.Time `json:"since"`
	Error     string    `json:"error"`
}

// maxHeld bounds the held partitions the page shows of one relay.
const maxHeld = 20

// BreakerClass is the page's style of the breaker's state: one of a fixed
// set, whatever the relay answered.
func (st relayState) BreakerClass() string {
	switch st.Breaker {
	case "closed", "open", "half-open":
		return "breaker-" + st.Breaker
	}
	return "breaker-unknown"
}

// healthData is the health page.
type healthData struct {
	Groups    []grouplag.Group
	GroupsErr string
	Relays    []relayState
}

// health shows each consumer group's lag per partition and each relay's
// breaker.
func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	var d healthData
	var wg sync.WaitGroup
	d.Relays = make([]relayState, len(s.cfg.Relays))
	for i, u := range s.cfg.Relays {
		wg.Go(func() { d.Relays[i] = readRelay(r.Context(), u) })
	}
	groups, err := grouplag.Read(r.Context(), s.cfg.Kafka)
	if err != nil {
		d.GroupsErr = err.Error()
	}
	d.Groups = groups
	wg.Wait()
	s.render(w, r, http.StatusOK, "health", "Health", "health", d)
}

// CheckRelayURL refuses a relay health URL the console cannot call: it
// must be http or https with a host.
func CheckRelayURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
		return fmt.Errorf("relay URL %q: use http://host:port/healthz of a relay started with --metrics-addr (no user or password in it)", raw)
	}
	return nil
}

// readRelay asks one relay's /healthz for its state.
func readRelay(ctx context.Context, u string) relayState {
	st := relayState{URL: u}
	ctx, cancel := context.WithTimeout(ctx, relayTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		st.Problem = err.Error()
		return st
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		st.Problem = "unreachable: " + err.Error()
		return st
	}
	defer resp.Body.Close()
	var body struct {
		Status  string     `json:"status"`
		Breaker string     `json:"breaker"`
		Held    []heldPart `json:"held"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&body); err != nil {
		st.Problem = fmt.Sprintf("answered %s, not courier's health JSON", resp.Status)
		return st
	}
	st.Status, st.Breaker = body.Status, body.Breaker
	st.Held, st.HeldMore = body.Held[:min(len(body.Held), maxHeld)], max(len(body.Held)-maxHeld, 0)
	if resp.StatusCode != http.StatusOK && st.Status == "" {
		st.Status = resp.Status
	}
	return st
}
