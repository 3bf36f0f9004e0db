package kubernetes

// Loading the manifests: every YAML file under this directory, each
// document decoded strictly into its Go type, and every kustomization
// rendered as `kubectl apply -k` renders it.

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/kustomize/api/krusty"
	kustomize "sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// kinds maps apiVersion/kind to a new value of its Go type: the kinds the
// manifests may hold. A kind missing here fails the decoding, so that no
// object goes unchecked.
var kinds = map[string]func() any{
	"v1/ConfigMap":                  func() any { return new(corev1.ConfigMap) },
	"v1/Secret":                     func() any { return new(corev1.Secret) },
	"v1/Service":                    func() any { return new(corev1.Service) },
	"v1/ServiceAccount":             func() any { return new(corev1.ServiceAccount) },
	"apps/v1/Deployment":            func() any { return new(appsv1.Deployment) },
	"policy/v1/PodDisruptionBudget": func() any { return new(policyv1.PodDisruptionBudget) },
	"keda.sh/v1alpha1/ScaledObject": func() any { return new(kedav1alpha1.ScaledObject) },
	"keda.sh/v1alpha1/TriggerAuthentication": func() any {
		return new(kedav1alpha1.TriggerAuthentication)
	},
	kustomizationKind: func() any { return new(kustomize.Kustomization) },
}

const kustomizationKind = "kustomize.config.k8s.io/v1beta1/Kustomization"

// decode decodes one YAML document strictly (an unknown or repeated field
// is an error) into the Go type of its apiVersion and kind.
func decode(doc []byte) (any, error) {
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(doc, &tm); err != nil {
		return nil, err
	}
	if tm.APIVersion == "" || tm.Kind == "" {
		return nil, errors.New("the document has no apiVersion or no kind")
	}
	newValue, ok := kinds[tm.APIVersion+"/"+tm.Kind]
	if !ok {
		return nil, fmt.Errorf("%s %s is not a kind these tests know: add its Go type to kinds in manifest_test.go", tm.APIVersion, tm.Kind)
	}
	v := newValue()
	if err := yaml.UnmarshalStrict(doc, v); err != nil {
		return nil, fmt.Errorf("%s: %w", tm.Kind, err)
	}
	return v, nil
}

// documents splits a YAML stream into its documents, leaving out those
// that hold nothing but comments.
func documents(data []byte) ([][]byte, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var docs [][]byte
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, err
		}
		blank := true
		for line := range strings.Lines(string(doc)) {
			if l := strings.TrimSpace(line); l != "" && l != "---" && !strings.HasPrefix(l, "#") {
				blank = false
				break
			}
		}
		if !blank {
			docs = append(docs, doc)
		}
	}
}

// An object is one document, decoded.
type object struct {
	source string // where it comes from: a file and its document, or a kustomization
	value  any    // a pointer to its Go type, e.g. *appsv1.Deployment
}

// A bundle is what `kubectl apply -k dir` applies: dir's kustomization rendered.
type bundle struct {
	dir     string
	objects []object
}

// clone returns a deep copy of b, for a test to break.
func (b *bundle) clone() *bundle {
	c := &bundle{dir: b.dir}
	for _, o := range b.objects {
		c.objects = append(c.objects, object{o.source, o.value.(runtime.Object).DeepCopyObject()})
	}
	return c
}

// ofType returns b's objects of type T.
func ofType[T any](b *bundle) []T {
	var out []T
	for _, o := range b.objects {
		if v, ok := o.value.(T); ok {
			out = append(out, v)
		}
	}
	return out
}

// manifests is every YAML file under this directory, decoded, and every
// kustomization rendered.
type manifests struct {
	files          map[string][]object                 // each file's documents, by its path from here
	kustomizations map[string]*kustomize.Kustomization // by directory
	patches        map[string]bool                     // the files a kustomization names as patches
	bundles        []*bundle                           // each kustomization's directory, rendered, by name
}

var loaded = sync.OnceValues(load)

// load reads the manifests once for every test.
func load() (*manifests, error) {
	m := &manifests{files: map[string][]object{}, kustomizations: map[string]*kustomize.Kustomization{}, patches: map[string]bool{}}
	var files []string
	err := filepath.WalkDir(".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if ext := filepath.Ext(p); !d.IsDir() && (ext == ".yaml" || ext == ".yml") {
			files = append(files, filepath.ToSlash(p))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(files) < 10 {
		return nil, fmt.Errorf("found %d YAML files, want the relay's, the consumer's and their kustomizations: %q", len(files), files)
	}
	var problems []error
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		if path.Base(f) == "kustomization.yaml" {
			v, err := decode(data)
			if err != nil {
				problems = append(problems, fmt.Errorf("%s: %w", f, err))
				continue
			}
			k, ok := v.(*kustomize.Kustomization)
			if !ok {
				problems = append(problems, fmt.Errorf("%s holds a %T, not a Kustomization", f, v))
				continue
			}
			dir := path.Dir(f)
			m.kustomizations[dir] = k
			for _, p := range k.Patches {
				m.patches[path.Join(dir, p.Path)] = true
			}
			for _, p := range k.PatchesStrategicMerge {
				m.patches[path.Join(dir, string(p))] = true
			}
			continue
		}
		m.files[f] = nil
	}
	for f := range m.files {
		if m.patches[f] {
			continue // a patch is no object of its own: its result is checked in the bundle it patches
		}
		data, _ := os.ReadFile(f)
		docs, err := documents(data)
		if err != nil {
			problems = append(problems, fmt.Errorf("%s: %w", f, err))
			continue
		}
		for i, doc := range docs {
			v, err := decode(doc)
			if err != nil {
				problems = append(problems, fmt.Errorf("%s, document %d: %w", f, i+1, err))
				continue
			}
			m.files[f] = append(m.files[f], object{fmt.Sprintf("%s#%d", f, i+1), v})
		}
	}
	dirs := make([]string, 0, len(m.kustomizations))
	for dir := range m.kustomizations {
		dirs = append(dirs, dir)
	}
	slices.Sort(dirs)
	for _, dir := range dirs {
		b, err := render(dir)
		if err != nil {
			problems = append(problems, err)
			continue
		}
		m.bundles = append(m.bundles, b)
	}
	return m, errors.Join(problems...)
}

// render builds the kustomization in dir as `kubectl apply -k dir` does
// and decodes every object it yields strictly.
func render(dir string) (*bundle, error) {
	resources, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w", dir, err)
	}
	out, err := resources.AsYaml()
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w", dir, err)
	}
	docs, err := documents(out)
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w", dir, err)
	}
	b := &bundle{dir: dir}
	for i, doc := range docs {
		v, err := decode(doc)
		if err != nil {
			return nil, fmt.Errorf("kustomize build %s, object %d: %w", dir, i+1, err)
		}
		b.objects = append(b.objects, object{fmt.Sprintf("kustomize build %s, object %d", dir, i+1), v})
	}
	return b, nil
}

// mustLoad returns the manifests, failing t if any could not be read,
// decoded or rendered.
func mustLoad(t *testing.T) *manifests {
	t.Helper()
	m, err := loaded()
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// bundle returns the rendered kustomization of dir.
func (m *manifests) bundle(t *testing.T, dir string) *bundle {
	t.Helper()
	for _, b := range m.bundles {
		if b.dir == dir {
			return b
		}
	}
	t.Fatalf("no kustomization in %s", dir)
	return nil
}

// TestEveryManifestDecodesStrictly: every document of every YAML file under
// deploy/kubernetes, and every object its kustomizations render, decodes
// into its Go type from k8s.io/api, KEDA or kustomize with no unknown field.
func TestEveryManifestDecodesStrictly(t *testing.T) {
	m := mustLoad(t)
	objects := 0
	for f, objs := range m.files {
		if !m.patches[f] && len(objs) == 0 {
			t.Errorf("%s holds no object", f)
		}
		objects += len(objs)
	}
	for _, b := range m.bundles {
		if len(b.objects) == 0 {
			t.Errorf("kustomize build %s renders nothing", b.dir)
		}
		t.Logf("kustomize build %s: %d objects", b.dir, len(b.objects))
	}
	if len(m.bundles) < 3 {
		t.Errorf("rendered %d kustomizations, want relay, relay-msk-iam and consumer", len(m.bundles))
	}
	t.Logf("decoded %d objects from %d files", objects, len(m.files))
}

// TestStrictDecodingRefusesUnknownFields: a field the Kubernetes API does
// not know (a typo) fails the decoding, as it fails kubectl apply
// --validate=strict.
func TestStrictDecodingRefusesUnknownFields(t *testing.T) {
	for _, c := range []struct{ file, from, to string }{
		{"relay/deployment.yaml", "terminationGracePeriodSeconds:", "terminationGracePeriod:"},
		{"relay/poddisruptionbudget.yaml", "maxUnavailable:", "maxUnavaliable:"},
		{"consumer/scaledobject.yaml", "maxReplicaCount:", "maxReplicas:"},
		{"consumer/triggerauthentication.yaml", "secretTargetRef:", "secretTargetRefs:"},
		{"relay/kustomization.yaml", "resources:", "resource:"},
	} {
		data, err := os.ReadFile(c.file)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(data, []byte(c.from)) {
			t.Fatalf("%s has no %q to break", c.file, c.from)
		}
		if _, err := decode(data); err != nil {
			t.Fatalf("%s as it is: %v", c.file, err)
		}
		if _, err := decode(bytes.Replace(data, []byte(c.from), []byte(c.to), 1)); err == nil || !strings.Contains(err.Error(), "unknown field") {
			t.Errorf("%s with %q for %q decoded with error %v, want an unknown field", c.file, c.to, c.from, err)
		}
	}
}

// TestApplyingTheFilesAppliesTheKustomization: every directory of
// manifests has a kustomization that lists each of its YAML files as a
// resource or a patch, so that kubectl apply -k leaves none out and none
// escapes these tests.
func TestApplyingTheFilesAppliesTheKustomization(t *testing.T) {
	m := mustLoad(t)
	for f := range m.files {
		dir := path.Dir(f)
		k, ok := m.kustomizations[dir]
		if !ok {
			t.Errorf("%s: its directory %s has no kustomization.yaml; add one that lists it", f, dir)
			continue
		}
		if !m.patches[f] && !slices.Contains(k.Resources, path.Base(f)) {
			t.Errorf("%s is not among the resources of %s/kustomization.yaml, so kubectl apply -k %s leaves it out", f, dir, dir)
		}
	}
}
