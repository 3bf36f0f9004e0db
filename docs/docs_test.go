package docs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"
)

// root is the repository's top directory, from this package.
const root = ".."

// markdownFiles returns the repository's Markdown files that git tracks
// or would add (untracked but not ignored), relative to root.
func markdownFiles(t *testing.T) []string {
	t.Helper()
	out, err := exec.Command("git", "-C", root, "ls-files", "--cached", "--others", "--exclude-standard", "*.md").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	var files []string
	for _, f := range strings.Fields(string(out)) {
		if _, err := os.Stat(filepath.Join(root, f)); err == nil {
			files = append(files, f)
		}
	}
	if len(files) < 10 {
		t.Fatalf("found %d Markdown files, want the README, ARCHITECTURE.md and the guides: %q", len(files), files)
	}
	return files
}

// outsideFences returns doc's lines outside fenced code blocks, each
// with its line number.
func outsideFences(doc string) []numbered {
	var out []numbered
	fence := ""
	for i, line := range strings.Split(doc, "\n") {
		trimmed := strings.TrimLeft(line, " ")
		if fence != "" {
			if strings.HasPrefix(trimmed, fence) {
				fence = ""
			}
			continue
		}
		if strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~") {
			fence = trimmed[:3]
			continue
		}
		out = append(out, numbered{i + 1, line})
	}
	return out
}

// prose returns doc's lines outside fenced code blocks, inline code spans
// blanked, each with its line number.
func prose(doc string) []numbered {
	lines := outsideFences(doc)
	for i := range lines {
		lines[i].text = inlineCode.ReplaceAllString(lines[i].text, "``")
	}
	return lines
}

type numbered struct {
	n    int
	text string
}

var (
	inlineCode = regexp.MustCompile("`[^`]*`")
	link       = regexp.MustCompile(`!?\[((?:[^\[\]]|\[[^\]]*\])*)\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	heading    = regexp.MustCompile(`^(#{1,6})\s+(.*?)\s*#*\s*$`)
	linkText   = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
	htmlAnchor = regexp.MustCompile(`<a (?:id|name)="([^"]+)"`)
)

// anchors returns the anchors GitHub gives doc's headings: the heading's
// text in lower case, without punctuation, spaces as hyphens, and "-1",
// "-2", … after a repeated one.
func anchors(doc string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, l := range outsideFences(doc) {
		line := l.text
		for _, m := range htmlAnchor.FindAllStringSubmatch(line, -1) {
			out[m[1]] = true
		}
		m := heading.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		a := slug(m[2])
		if n := seen[a]; n > 0 {
			out[fmt.Sprintf("%s-%d", a, n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}

// slug is GitHub's anchor of a heading's text.
func slug(text string) string {
	text = linkText.ReplaceAllString(text, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

// checkGenerated compares the block of the Markdown file path (relative
// to root) between the lines start and end with want, which holds them
// too; with -update it writes want there instead.
func checkGenerated(t *testing.T, path, start, end, want string) {
	t.Helper()
	full := filepath.Join(root, path)
	doc, err := os.ReadFile(full)
	if err != nil {
		t.Fatal(err)
	}
	i, j := strings.Index(string(doc), start), strings.Index(string(doc), end)
	if i < 0 || j < i {
		t.Fatalf("%s has no block between %q and %q", path, start, end)
	}
	current := string(doc)[i : j+len(end)]
	if *update {
		if err := os.WriteFile(full, []byte(strings.Replace(string(doc), current, want, 1)), 0o644); err != nil {
			t.Fatal(err)
		}
	} else if current != want {
		t.Errorf("%s's generated block is stale; run `make docs`. It is:\n%s", path, want)
	}
}

// TestEveryLinkResolves: every relative link and image of every Markdown
// file names a file or directory of the repository, and every #anchor a
// heading of the page it points to.
func TestEveryLinkResolves(t *testing.T) {
	files := markdownFiles(t)
	pageAnchors := map[string]map[string]bool{}
	anchorsOf := func(page string) map[string]bool {
		if a, ok := pageAnchors[page]; ok {
			return a
		}
		doc, err := os.ReadFile(filepath.Join(root, page))
		if err != nil {
			return nil
		}
		pageAnchors[page] = anchors(string(doc))
		return pageAnchors[page]
	}
	checked := 0
	for _, file := range files {
		doc, err := os.ReadFile(filepath.Join(root, file))
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range prose(string(doc)) {
			for _, m := range link.FindAllStringSubmatch(line.text, -1) {
				target := m[2]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				checked++
				path, frag, _ := strings.Cut(target, "#")
				page := file
				if path != "" {
					page = filepath.ToSlash(filepath.Clean(filepath.Join(filepath.Dir(file), path)))
					if strings.HasPrefix(page, "../") {
						t.Errorf("%s:%d: %s leaves the repository", file, line.n, target)
						continue
					}
					if _, err := os.Stat(filepath.Join(root, page)); errors.Is(err, fs.ErrNotExist) {
						t.Errorf("%s:%d: %s names %s, which does not exist", file, line.n, target, page)
						continue
					}
				}
				if frag == "" {
					continue
				}
				if !strings.HasSuffix(page, ".md") {
					t.Errorf("%s:%d: %s has an anchor on a file that is not Markdown", file, line.n, target)
					continue
				}
				if !anchorsOf(page)[frag] {
					t.Errorf("%s:%d: %s: %s has no heading whose anchor is #%s", file, line.n, target, page, frag)
				}
			}
		}
	}
	if checked < 100 {
		t.Errorf("checked %d links; the README and the guides hold hundreds, so the link pattern is wrong", checked)
	}
}

// tests returns the Test, Benchmark, Fuzz and Example functions of each
// directory's _test.go files, by directory relative to root.
func tests(t *testing.T) map[string][]string {
	t.Helper()
	out, err := exec.Command("git", "-C", root, "ls-files", "--cached", "--others", "--exclude-standard", "*_test.go").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	found := map[string][]string{}
	for _, f := range strings.Fields(string(out)) {
		src, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			continue
		}
		dir := filepath.ToSlash(filepath.Dir(f))
		for _, m := range testFunc.FindAllStringSubmatch(string(src), -1) {
			found[dir] = append(found[dir], m[1])
		}
	}
	return found
}

var (
	testFunc = regexp.MustCompile(`(?m)^func ((?:Test|Benchmark|Fuzz|Example)\w*)\(`)
	goTest   = regexp.MustCompile("go test[^\n`;&]*")
	runFlag  = regexp.MustCompile(`-(?:test\.)?(run|bench|fuzz)[= ](?:'([^']*)'|"([^"]*)"|(\S+))`)
	pkgArg   = regexp.MustCompile(`(?:^|\s)(\./\S*)`)
	testName = regexp.MustCompile("`((?:[a-z][\\w/]*\\.)?(?:Test|Benchmark|Fuzz)[A-Z]\\w*)(?:/[^`]*)?`")
)

// TestEveryCitedTestExists: every -run, -bench and -fuzz pattern of a
// `go test` command in a Markdown file matches a test of the packages the
// command names (each alternative of an a|b pattern on its own), and
// every test named in backquotes (`TestX`, `consumer.TestX`) exists.
func TestEveryCitedTestExists(t *testing.T) {
	all := tests(t)
	var everywhere []string
	for _, names := range all {
		everywhere = append(everywhere, names...)
	}
	commands, names := 0, 0
	for _, file := range markdownFiles(t) {
		doc, err := os.ReadFile(filepath.Join(root, file))
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(doc), "\n") {
			for _, cmd := range goTest.FindAllString(line, -1) {
				scope := packagesOf(cmd, all)
				if scope == nil {
					t.Errorf("%s:%d: %q names a package that does not exist", file, i+1, cmd)
					continue
				}
				for _, m := range runFlag.FindAllStringSubmatch(cmd, -1) {
					commands++
					pattern := m[2] + m[3] + m[4]
					top, _, _ := strings.Cut(pattern, "/")
					for _, alt := range alternatives(top) {
						re, err := regexp.Compile(alt)
						if err != nil {
							t.Errorf("%s:%d: -%s %q is not a pattern go test takes: %v", file, i+1, m[1], pattern, err)
							continue
						}
						if !slices.ContainsFunc(scope, re.MatchString) {
							t.Errorf("%s:%d: -%s %q: no test of %s matches %q", file, i+1, m[1], pattern, strings.Join(packageArgs(cmd), " "), alt)
						}
					}
				}
			}
			for _, m := range testName.FindAllStringSubmatch(line, -1) {
				names++
				qualifier, name := "", m[1]
				if dot := strings.LastIndex(m[1], "."); dot >= 0 {
					qualifier, name = m[1][:dot], m[1][dot+1:]
				}
				if !definedIn(all, qualifier, name) {
					t.Errorf("%s:%d: %s names a test that does not exist", file, i+1, m[1])
				}
			}
		}
	}
	if commands < 5 || names < 100 {
		t.Errorf("checked %d go test patterns and %d test names; the guides cite far more, so a pattern is wrong", commands, names)
	}
}

// packageArgs returns the ./… package arguments of a go test command.
func packageArgs(cmd string) []string {
	var out []string
	for _, m := range pkgArg.FindAllStringSubmatch(cmd, -1) {
		out = append(out, m[1])
	}
	return out
}

// packagesOf returns the test names of the packages cmd names (every
// package for ./... or for none); nil when one of them does not exist.
func packagesOf(cmd string, all map[string][]string) []string {
	args := packageArgs(cmd)
	var names []string
	if len(args) == 0 {
		args = []string{"./..."}
	}
	for _, arg := range args {
		dir, recursive := strings.CutSuffix(strings.TrimSuffix(arg, "/"), "/...")
		if dir == "./..." || arg == "./..." {
			dir, recursive = ".", true
		}
		dir = filepath.ToSlash(filepath.Clean(dir))
		if info, err := os.Stat(filepath.Join(root, dir)); err != nil || !info.IsDir() {
			return nil
		}
		for d, n := range all {
			if d == dir || recursive && (dir == "." || strings.HasPrefix(d, dir+"/")) {
				names = append(names, n...)
			}
		}
	}
	if names == nil {
		names = []string{}
	}
	return names
}

// alternatives splits a go test pattern at its top-level |, each
// anchored as go test anchors none (a pattern matches anywhere in a
// name); the idiom ^$ (no test) gives none.
func alternatives(pattern string) []string {
	var out []string
	depth, start := 0, 0
	for i, r := range pattern {
		switch r {
		case '(':
			depth++
		case ')':
			depth--
		case '|':
			if depth == 0 {
				out = append(out, pattern[start:i])
				start = i + 1
			}
		}
	}
	out = append(out, pattern[start:])
	kept := out[:0]
	for _, alt := range out {
		if strings.Trim(alt, "^$") != "" {
			kept = append(kept, alt)
		}
	}
	return kept
}

// definedIn reports whether a test called name exists in a directory
// whose path ends with qualifier (any directory when it is empty).
func definedIn(all map[string][]string, qualifier, name string) bool {
	for dir, names := range all {
		if qualifier != "" && dir != qualifier && !strings.HasSuffix(dir, "/"+qualifier) {
			continue
		}
		if slices.Contains(names, name) {
			return true
		}
	}
	return false
}

// TestReadmeIsAFrontPage: the README stays a front page, and every guide
// opens, under its title, with what its reader will have at its end.
func TestReadmeIsAFrontPage(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(readme), "\n"); n > 300 {
		t.Errorf("README.md is %d lines; keep it a front page of at most 300 and move the rest to a guide in docs/", n)
	}
	guides, err := filepath.Glob("*.md")
	if err != nil || len(guides) < 10 {
		t.Fatalf("guides: %q, %v", guides, err)
	}
	for _, g := range guides {
		doc, err := os.ReadFile(g)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(readme), "(docs/"+g+")") && !strings.Contains(string(readme), "(docs/"+g+"#") {
			t.Errorf("the README's map of the guides does not link docs/%s", g)
		}
		if g == "cli-reference.md" { // generated; the CLI guide opens it
			continue
		}
		lines := strings.SplitN(string(doc), "\n", 4)
		if len(lines) < 3 || !strings.HasPrefix(lines[0], "# ") || lines[1] != "" || !strings.HasPrefix(lines[2], "At the end of this page") {
			t.Errorf("docs/%s should open with its title, then a paragraph starting \"At the end of this page\": what its reader will have", g)
		}
	}
}

// TestHeadingsDoNotSkipALevel: in every Markdown file a heading is at
// most one level below the one before it (a page's first is its # title),
// so each page's outline reads as one.
func TestHeadingsDoNotSkipALevel(t *testing.T) {
	for _, file := range markdownFiles(t) {
		doc, err := os.ReadFile(filepath.Join(root, file))
		if err != nil {
			t.Fatal(err)
		}
		level := 0
		for _, line := range prose(string(doc)) {
			m := heading.FindStringSubmatch(line.text)
			if m == nil {
				continue
			}
			if n := len(m[1]); n > level+1 {
				t.Errorf("%s:%d: %q is a level-%d heading under a level-%d one", file, line.n, line.text, n, level)
			} else {
				level = n
			}
		}
	}
}
