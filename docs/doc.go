// Package docs holds courier's guides, one topic a Markdown page; the
// README is their front page and links to each.
//
// It has no Go API. Its tests keep the Markdown of the whole repository
// from drifting away from the code: every relative link and #anchor
// resolves, every test a page names (in a `go test -run` command or as
// `TestName`) exists, and every guide opens with what its reader will
// have at the end of it. The CLI reference, docs/cli-reference.md, is
// generated from the commands by a test of cmd/courier (`make docs`).
package docs
