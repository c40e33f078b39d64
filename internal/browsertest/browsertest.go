// Package browsertest starts a real headless Chromium for the web pages'
// end-to-end tests. The browser is Debian's chromium (or $FMGATE_CHROMIUM);
// tests fail, not skip, when it is missing, because the pages are part of
// what CI proves.
package browsertest

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// Path is the browser binary tests use.
func Path() string {
	if p := os.Getenv("FMGATE_CHROMIUM"); p != "" {
		return p
	}
	if p, err := exec.LookPath("chromium"); err == nil {
		return p
	}
	return "/usr/bin/chromium"
}

// New starts a headless browser and returns a tab context that is cancelled
// (closing the browser) when the test ends or after timeout.
func New(tb testing.TB, timeout time.Duration) context.Context {
	tb.Helper()
	path := Path()
	if _, err := os.Stat(path); err != nil {
		tb.Fatalf("chromium not found at %s (apt-get install chromium, or set FMGATE_CHROMIUM): %v", path, err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("lang", "ja"),
		chromedp.UserDataDir(tb.TempDir()),
		chromedp.WindowSize(1200, 900),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(actx)
	ctx, cancelTimeout := context.WithTimeout(ctx, timeout)
	tb.Cleanup(func() {
		cancelTimeout()
		cancelTab()
		cancelAlloc()
	})
	return ctx
}
