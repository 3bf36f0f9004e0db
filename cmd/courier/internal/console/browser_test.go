package console_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/courierkit/courier/internal/testkit"
)

// chromiumPath is Debian's Chromium, which `make test` installs.
const chromiumPath = "/usr/bin/chromium"

// envScreenshots names a directory where the browser tests save a
// screenshot of every page they check (for the console guide, docs/console.md), besides the ones
// saved when a test fails.
const envScreenshots = "COURIER_CONSOLE_SCREENSHOTS"

// browser is a headless Chromium tab for a test.
type browser struct {
	t   *testing.T
	ctx context.Context
	// base is the console's address.
	base string
}

// stepTimeout bounds one step: a page load, a look for an element.
const stepTimeout = 30 * time.Second

// newBrowser starts headless Chromium; when the test fails, the page it
// shows then is saved as a PNG whose path the test's log gives.
func newBrowser(t *testing.T, base string) *browser {
	t.Helper()
	path := chromiumPath
	if _, err := os.Stat(path); err != nil {
		p, err := exec.LookPath("chromium")
		if err != nil {
			t.Fatalf("Chromium is not installed at %s: `make test` installs it (apt-get install chromium)", chromiumPath)
		}
		path = p
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1400, 1000),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true), chromedp.Flag("disable-quic", true))
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(allocCtx)
	b := &browser{t: t, ctx: ctx, base: base}
	if err := chromedp.Do(ctx); err != nil { // starts the browser, for as long as ctx lives
		cancelTab()
		cancelAlloc()
		t.Fatalf("start Chromium: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			b.screenshot("failed")
		}
		cancelTab()
		cancelAlloc()
	})
	return b
}

// step runs one action within stepTimeout.
func step[T any](b *browser, a chromedp.Action[T]) (T, error) {
	ctx, cancel := context.WithTimeout(b.ctx, stepTimeout)
	defer cancel()
	return chromedp.Run(ctx, a)
}

// screenshotDir is where screenshots go.
func (b *browser) screenshotDir() string {
	if dir := os.Getenv(envScreenshots); dir != "" {
		return dir
	}
	return filepath.Join(os.TempDir(), "courier-console-screenshots")
}

// screenshot saves the page as <dir>/<test>-<name>.png.
func (b *browser) screenshot(name string) {
	png, err := step(b, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Logf("screenshot %s: %v", name, err)
		return
	}
	dir := b.screenshotDir()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.t.Logf("screenshot %s: %v", name, err)
		return
	}
	file := filepath.Join(dir, strings.NewReplacer("/", "_", " ", "_").Replace(b.t.Name())+"-"+name+".png")
	if err := os.WriteFile(file, png, 0o644); err != nil {
		b.t.Logf("screenshot %s: %v", name, err)
		return
	}
	b.t.Logf("screenshot of the page: %s", file)
}

// keep saves a screenshot named name when envScreenshots is set.
func (b *browser) keep(name string) {
	if os.Getenv(envScreenshots) != "" {
		b.screenshot(name)
	}
}

// do runs actions, failing the test on an error.
func (b *browser) do(what string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	if _, err := step(b, chromedp.Steps(actions...)); err != nil {
		b.t.Fatalf("%s: %v", what, err)
	}
}

// eval evaluates a JavaScript expression in the page.
func eval[T any](b *browser, expr string) T {
	b.t.Helper()
	v, err := step(b, chromedp.Evaluate[T](expr))
	if err != nil {
		b.t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// open loads a page of the console and waits for its heading.
func (b *browser) open(path string) {
	b.t.Helper()
	b.do("open "+path, chromedp.Navigate(b.base+path), chromedp.WaitVisible(chromedp.CSS("h1")))
}

// text returns the text of the first element sel matches.
func (b *browser) text(sel string) string {
	b.t.Helper()
	s, err := step(b, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		b.t.Fatalf("read %s: %v", sel, err)
	}
	return strings.TrimSpace(s)
}

// waitText waits until the text of sel holds want, reloading the page
// between looks when reload is set.
func (b *browser) waitText(sel, want string, reload bool) {
	b.t.Helper()
	testkit.WaitFor(b.t, 30*time.Second, sel+" to say "+want, func() bool {
		if reload {
			b.do("reload", chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS("h1")))
		}
		present, err := step(b, chromedp.Evaluate[bool](`document.querySelector(`+strconv.Quote(sel)+`) !== null`))
		if err != nil || !present {
			return false
		}
		s, err := step(b, chromedp.Text(chromedp.CSS(sel)))
		return err == nil && strings.Contains(s, want)
	})
}

// click clicks sel, which loads another page, and waits until it has.
func (b *browser) click(sel string) {
	b.t.Helper()
	eval[bool](b, `window.courierOldPage = true`)
	b.do("click "+sel, chromedp.Click(chromedp.CSS(sel)))
	// While the page changes, a look may fail (its document went away):
	// that is no answer, and the next look comes.
	testkit.WaitFor(b.t, stepTimeout, "the page after clicking "+sel, func() bool {
		loaded, err := step(b, chromedp.Evaluate[bool](`window.courierOldPage === undefined && document.readyState === "complete"`))
		return err == nil && loaded
	})
	b.do("the page after clicking "+sel, chromedp.WaitVisible(chromedp.CSS("h1")))
}
