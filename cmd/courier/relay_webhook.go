package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/courierkit/courier/cmd/courier/internal/webhook"
	"github.com/courierkit/courier/producer"
)

// webhookFlags are the options of courier relay's paging webhook.
type webhookFlags struct {
	url            string
	headers        []string
	timeout        time.Duration
	retries, queue int
}

// register adds the webhook flags to fs, each bound to its COURIER_*
// variable.
func (f *webhookFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.url, "webhook-url", "", "POST a JSON notification to this http or https URL for each dead-lettered event and each time the Kafka breaker opens or closes (empty: off)")
	fs.StringArrayVar(&f.headers, "webhook-header", nil, `header "Name: value" added to each webhook POST, e.g. "Authorization: Bearer <token>"; repeat for more (the variable holds one per line); values are never printed`)
	fs.DurationVar(&f.timeout, "webhook-timeout", webhook.DefaultTimeout, fmt.Sprintf("how long one webhook POST may take (%v to %v)", webhook.MinTimeout, webhook.MaxTimeout))
	fs.IntVar(&f.retries, "webhook-retries", webhook.DefaultRetries, fmt.Sprintf("how many times a webhook POST that met a network error, a 5xx or a 429 is sent again (0 to %d)", webhook.MaxRetries))
	fs.IntVar(&f.queue, "webhook-queue", webhook.DefaultQueueSize, fmt.Sprintf("notifications that may wait for the webhook; more are dropped and counted (1 to %d)", webhook.MaxQueueSize))
	bindEnv(fs, "webhook-url", "webhook-header", "webhook-timeout", "webhook-retries", "webhook-queue")
}

// validate checks the webhook flags; its errors name the flag and never
// print the URL's password or path or a header's value.
func (f *webhookFlags) validate() error {
	if f.url == "" {
		if len(f.headers) > 0 {
			return usageError{fmt.Errorf("--webhook-header needs --webhook-url")}
		}
		return nil
	}
	if _, err := webhook.ParseURL(f.url); err != nil {
		return usageError{fmt.Errorf("--webhook-url %w", err)}
	}
	if _, err := f.header(); err != nil {
		return err
	}
	if f.timeout < webhook.MinTimeout || f.timeout > webhook.MaxTimeout {
		return usageError{fmt.Errorf("--webhook-timeout %v: use a duration from %v to %v, such as 5s", f.timeout, webhook.MinTimeout, webhook.MaxTimeout)}
	}
	for _, n := range []struct {
		flag          string
		value, lo, hi int
	}{{"--webhook-retries", f.retries, 0, webhook.MaxRetries}, {"--webhook-queue", f.queue, 1, webhook.MaxQueueSize}} {
		if n.value < n.lo || n.value > n.hi {
			return usageError{fmt.Errorf("%s %d: use %d to %d", n.flag, n.value, n.lo, n.hi)}
		}
	}
	return nil
}

// header is the http.Header of --webhook-header: each value one header,
// or one per line.
func (f *webhookFlags) header() (http.Header, error) {
	h := http.Header{}
	i := 0
	for _, value := range f.headers {
		for line := range strings.Lines(value) {
			if strings.TrimSpace(line) == "" {
				continue
			}
			i++
			name, v, err := webhook.ParseHeader(line)
			if err != nil {
				return nil, usageError{fmt.Errorf("--webhook-header (header %d): %w", i, err)}
			}
			h.Add(name, v)
		}
	}
	if len(h) > webhook.MaxHeaders {
		return nil, usageError{fmt.Errorf("--webhook-header: %d names; use at most %d", len(h), webhook.MaxHeaders)}
	}
	return h, nil
}

// shown is --webhook-url as logs show it (webhook.Redacted), or "off".
func (f *webhookFlags) shown() string {
	u, err := webhook.ParseURL(f.url)
	if err != nil {
		return "off"
	}
	return webhook.Redacted(u)
}

// webhookSecrets are what must never be printed of the webhook the flag
// values describe: rawURL's (see webhook.Secrets) and the values of the
// "Name: value" lines of headers.
func webhookSecrets(rawURL string, headers ...string) []string {
	var values []string
	for _, value := range headers {
		for line := range strings.Lines(value) {
			if _, v, ok := strings.Cut(line, ":"); ok {
				values = append(values, v)
			}
		}
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		u = &url.URL{}
	}
	return webhook.Secrets(u, values...)
}

// startWebhook starts the notifier of the flags, if --webhook-url is set,
// and hooks it into cfg. stop ends it once the relay stopped: it sends
// what is queued for up to drain, and returns.
func (f *webhookFlags) start(ctx context.Context, cfg *producer.RelayConfig, drain time.Duration, log *slog.Logger) (stop func(), err error) {
	if f.url == "" {
		return func() {}, nil
	}
	header, err := f.header()
	if err != nil {
		return nil, err
	}
	retries := f.retries
	if retries == 0 {
		retries = webhook.NoRetries
	}
	n, err := webhook.New(webhook.Config{URL: f.url, Header: header, Timeout: f.timeout, Retries: retries, QueueSize: f.queue,
		DrainTimeout: drain, Relay: cfg.Source, Table: cfg.Schema + "." + cfg.Table,
		Logger: log.With("component", "webhook")})
	if err != nil {
		return nil, usageError{fmt.Errorf("webhook: %w", err)}
	}
	cfg.OnDeadLetter = n.OnDeadLetter
	cfg.Hooks = append(cfg.Hooks, n)
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		n.Run(runCtx)
	}()
	return func() {
		cancel()
		<-done
	}, nil
}
