package integration_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"strings"
	"testing"
)

// module is courier's module path.
const module = "github.com/courierkit/courier"

// pkg is what `go list -json` says of a package: its imports, direct and
// all of them.
type pkg struct {
	ImportPath   string
	Imports      []string
	TestImports  []string
	XTestImports []string
	Deps         []string
}

// listPackages runs `go list -json ./...` from the module root.
func listPackages(t *testing.T) []pkg {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is not on PATH: %v", err)
	}
	cmd := exec.Command(goTool, "list", "-json", "./...")
	cmd.Dir = ".."
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("go list: %v\n%s", err, errOut.String())
	}
	var pkgs []pkg
	for dec := json.NewDecoder(&out); ; {
		var p pkg
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	if len(pkgs) < 10 {
		t.Fatalf("go list found %d packages; is the test running in the module?", len(pkgs))
	}
	return pkgs
}

// TestLayout keeps the tree's arrows pointing one way: nothing under
// internal/ depends (directly or not) on a public package, so
// internal/ stays low-level, and the examples import no internal package,
// as a user's program cannot. Their tests may import internal/testkit
// alone, which gives a test its own PostgreSQL schema, Redis prefix and
// Kafka topics.
func TestLayout(t *testing.T) {
	pkgs := listPackages(t)
	// The public packages: every one outside internal/, cmd/, examples/
	// and integration/, but migrations, which internal/testkit applies to
	// a test's schema (it imports no other courier package).
	public := map[string]bool{}
	for _, p := range pkgs {
		rel := strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, module), "/")
		if rel != "" && !strings.HasPrefix(rel, "internal/") && !strings.HasPrefix(rel, "cmd/") &&
			!strings.HasPrefix(rel, "examples/") && rel != "integration" && rel != "migrations" {
			public[p.ImportPath] = true
		}
	}
	if len(public) < 5 {
		t.Fatalf("found %d public packages; the layout changed under this test", len(public))
	}
	var internals, examples int
	for _, p := range pkgs {
		rel := strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, module), "/")
		switch {
		case strings.HasPrefix(rel, "internal/"):
			internals++
			for _, dep := range p.Deps {
				if public[dep] {
					t.Errorf("%s depends on %s: internal/ holds low-level pieces only; move it under cmd/courier/internal or the package that uses it", rel, dep)
				}
			}
		case strings.HasPrefix(rel, "examples/"):
			examples++
			for _, imp := range p.Imports {
				if internal(imp) {
					t.Errorf("%s imports %s: an example uses public packages only", rel, imp)
				}
			}
			for _, imp := range append(p.TestImports, p.XTestImports...) {
				if internal(imp) && imp != module+"/internal/testkit" && imp != module+"/internal/kfakeoauth" {
					t.Errorf("%s's tests import %s: an example's tests use public packages and the test brokers (internal/testkit, internal/kfakeoauth) only", rel, imp)
				}
			}
		}
	}
	if internals == 0 || examples == 0 {
		t.Fatalf("found %d internal and %d example packages; the layout changed under this test", internals, examples)
	}
}

// internal reports whether imp is one of courier's internal packages.
func internal(imp string) bool {
	return strings.HasPrefix(imp, module+"/") && (strings.Contains(imp, "/internal/") || strings.HasSuffix(imp, "/internal"))
}
