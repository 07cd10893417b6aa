// Package kubernetes holds the Kubernetes recipe of docs/cluster.md as
// manifests, and the test that decodes them. It is tests only: no part of
// the stockade binary imports it, so k8s.io/api stays out of the binary.
package kubernetes

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/stockade/stockade/cluster"
	"github.com/stockade/stockade/gateway"
	"github.com/stockade/stockade/internal/clitest"
)

// manifests are the files kubectl applies.
var manifests = []string{"secrets.yaml", "node-daemonset.yaml", "gateway-deployment.yaml"}

// objects is every object of the manifests, decoded strictly.
type objects struct {
	secrets     map[string]*corev1.Secret
	configMaps  map[string]*corev1.ConfigMap
	daemonSets  []*appsv1.DaemonSet
	deployments []*appsv1.Deployment
	count       int
}

// decode reads each document of each manifest into the k8s.io/api type
// its apiVersion and kind name, refusing unknown fields (a misspelt or
// misplaced key) and kinds this test does not know.
func decode(t *testing.T) *objects {
	t.Helper()
	o := &objects{secrets: map[string]*corev1.Secret{}, configMaps: map[string]*corev1.ConfigMap{}}
	for _, file := range manifests {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(b), -1) {
			if strings.TrimSpace(stripComments(doc)) == "" {
				continue
			}
			var head struct {
				APIVersion string `json:"apiVersion"`
				Kind       string `json:"kind"`
			}
			if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
				t.Fatalf("%s, document %d: %v", file, i, err)
			}
			var obj any
			switch head.APIVersion + " " + head.Kind {
			case "v1 Namespace":
				obj = &corev1.Namespace{}
			case "v1 Secret":
				obj = &corev1.Secret{}
			case "v1 ConfigMap":
				obj = &corev1.ConfigMap{}
			case "v1 Service":
				obj = &corev1.Service{}
			case "apps/v1 DaemonSet":
				obj = &appsv1.DaemonSet{}
			case "apps/v1 Deployment":
				obj = &appsv1.Deployment{}
			case "policy/v1 PodDisruptionBudget":
				obj = &policyv1.PodDisruptionBudget{}
			default:
				t.Fatalf("%s, document %d: a kind this test does not decode: %q %q", file, i, head.APIVersion, head.Kind)
			}
			if err := strict([]byte(doc), obj); err != nil {
				t.Fatalf("%s, document %d (%s): %v", file, i, head.Kind, err)
			}
			o.count++
			switch v := obj.(type) {
			case *corev1.Secret:
				o.secrets[v.Name] = v
			case *corev1.ConfigMap:
				o.configMaps[v.Name] = v
			case *appsv1.DaemonSet:
				o.daemonSets = append(o.daemonSets, v)
			case *appsv1.Deployment:
				o.deployments = append(o.deployments, v)
			}
		}
	}
	return o
}

// strict decodes a YAML document as the API server does: duplicate keys,
// unknown fields and fields in the wrong case (procmount for procMount,
// which encoding/json would take) are refused.
func strict(doc []byte, obj any) error {
	j, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return err
	}
	errs, err := kjson.UnmarshalStrict(j, obj)
	if err != nil {
		return err
	}
	return errors.Join(errs...)
}

func stripComments(doc string) string {
	return regexp.MustCompile(`(?m)^\s*#.*$`).ReplaceAllString(doc, "")
}

// Each manifest decodes strictly against the k8s.io/api types, and a key
// those types do not have is refused: the test can fail.
func TestManifestsDecodeStrictly(t *testing.T) {
	o := decode(t)
	if o.count < 8 || len(o.daemonSets) != 1 || len(o.deployments) != 1 {
		t.Fatalf("decoded %d objects, %d DaemonSets, %d Deployments", o.count, len(o.daemonSets), len(o.deployments))
	}
	for _, field := range []string{"hostUser: false", "hostusers: false"} {
		bad := "apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: x}\nspec:\n  template:\n    spec:\n      " + field + "\n"
		if err := strict([]byte(bad), &appsv1.DaemonSet{}); err == nil || !strings.Contains(err.Error(), strings.TrimSuffix(field, ": false")) {
			t.Errorf("a misspelt field (%s) was not refused: %v", field, err)
		}
	}
}

// Every Secret, ConfigMap and key a pod names is in secrets.yaml, every
// volume a container mounts is its pod's, and each pod's command line
// uses flags the built binary has.
func TestManifestsReferencesResolve(t *testing.T) {
	o := decode(t)
	var pods []corev1.PodTemplateSpec
	for _, d := range o.daemonSets {
		pods = append(pods, d.Spec.Template)
	}
	for _, d := range o.deployments {
		pods = append(pods, d.Spec.Template)
	}
	secretKey := func(where, name, key string) {
		s, ok := o.secrets[name]
		if !ok {
			t.Errorf("%s: no Secret %q in secrets.yaml", where, name)
			return
		}
		if _, ok := s.StringData[key]; key != "" && !ok {
			t.Errorf("%s: Secret %q has no key %q", where, name, key)
		}
	}
	for _, p := range pods {
		name := p.Labels["app"]
		vols := map[string]bool{}
		for _, v := range p.Spec.Volumes {
			vols[v.Name] = true
			switch {
			case v.Secret != nil:
				secretKey(name+" volume "+v.Name, v.Secret.SecretName, "")
				for _, it := range v.Secret.Items {
					secretKey(name+" volume "+v.Name, v.Secret.SecretName, it.Key)
				}
			case v.ConfigMap != nil:
				if _, ok := o.configMaps[v.ConfigMap.Name]; !ok {
					t.Errorf("%s volume %s: no ConfigMap %q", name, v.Name, v.ConfigMap.Name)
				}
			}
		}
		for _, c := range append(slices.Clone(p.Spec.InitContainers), p.Spec.Containers...) {
			for _, m := range c.VolumeMounts {
				if !vols[m.Name] {
					t.Errorf("%s container %s mounts %q, which its pod does not have", name, c.Name, m.Name)
				}
			}
			// The flags, with the built binary (make test gives it).
			if len(c.Command) > 1 && c.Command[0] == "stockade" && os.Getenv("STOCKADE_BIN") != "" {
				flags := clitest.HelpFlags(t, c.Command[1])
				for _, a := range c.Command[2:] {
					if f, ok := strings.CutPrefix(a, "--"); ok && !flags[f] {
						t.Errorf("%s container %s: stockade %s has no flag --%s", name, c.Name, c.Command[1], f)
					}
				}
			}
		}
	}
}

// The node's pod is docs/deploying.md's shape: its own user namespace,
// the jail's four capabilities and no others, an unmasked /proc, never
// privileged; nothing of the Kubernetes API reaches it.
func TestNodePodIsTheDeployingShape(t *testing.T) {
	o := decode(t)
	p := o.daemonSets[0].Spec.Template.Spec
	if p.HostUsers == nil || *p.HostUsers || p.AutomountServiceAccountToken == nil || *p.AutomountServiceAccountToken {
		t.Fatalf("the node pod: hostUsers %v, automountServiceAccountToken %v; want both false", p.HostUsers, p.AutomountServiceAccountToken)
	}
	c := p.Containers[0]
	sc := c.SecurityContext
	var caps []string
	for _, c := range sc.Capabilities.Add {
		caps = append(caps, string(c))
	}
	slices.Sort(caps)
	if sc.Privileged != nil && *sc.Privileged || strings.Join(caps, " ") != "CHOWN SETFCAP SETGID SETUID" ||
		!slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || sc.ProcMount == nil || *sc.ProcMount != corev1.UnmaskedProcMount ||
		sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeUnconfined {
		t.Fatalf("the node container's securityContext is not deploying.md's: %+v", sc)
	}
	if !slices.Contains(c.Command, "--cluster") {
		t.Fatalf("the node runs %v, not serve --cluster", c.Command)
	}
}

// The cluster files the recipe makes pass the cluster package's own
// strict reading (the node's once its pod fills in name and password),
// and the tenants file passes the gateway's.
func TestManifestsConfigFilesLoad(t *testing.T) {
	o := decode(t)
	dir := t.TempDir()
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	gw := o.secrets["gateway-config"].StringData
	if _, err := cluster.Load(write("gateway.json", gw["gateway.json"]), false); err != nil {
		t.Error(err)
	}
	tmpl := o.configMaps["node-cluster"].Data["cluster.json.in"]
	node := strings.NewReplacer("@NODE@", "worker-1", "@PASSWORD@", strings.Repeat("ab", 32)).Replace(tmpl)
	if c, err := cluster.Load(write("node.json", node), true); err != nil || c.Node != "worker-1" {
		t.Errorf("the node's cluster file: %+v, %v", c, err)
	}
	if _, err := gateway.LoadTenants(write("tenants.toml", gw["tenants.toml"])); err != nil {
		t.Error(err)
	}
}

// The NATS chart's values: every password the servers' authorization
// names comes from the container's environment, each from a key of the
// Secret nats-users, and the node users are the ones the node pods' names
// give (the same subjects as the bare-server nats.conf).
func TestNATSValuesMatchTheSecrets(t *testing.T) {
	o := decode(t)
	b, err := os.ReadFile("nats-values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Container struct {
			Env map[string]corev1.EnvVar `json:"env"`
		} `json:"container"`
		Config struct {
			Merge struct {
				Authorization struct {
					Users []struct {
						User, Password string
					} `json:"users"`
				} `json:"authorization"`
			} `json:"merge"`
		} `json:"config"`
	}
	if err := yaml.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	users := v.Config.Merge.Authorization.Users
	if len(users) < 2 {
		t.Fatalf("nats-values.yaml: %d users", len(users))
	}
	for _, u := range users {
		m := regexp.MustCompile(`^<< \$([A-Z0-9_]+) >>$`).FindStringSubmatch(u.Password)
		if m == nil {
			t.Errorf("user %s: password %q is not << $ENV >>", u.User, u.Password)
			continue
		}
		env, ok := v.Container.Env[m[1]]
		if !ok || env.ValueFrom == nil || env.ValueFrom.SecretKeyRef == nil {
			t.Errorf("user %s: no container.env %s from a Secret", u.User, m[1])
			continue
		}
		ref := env.ValueFrom.SecretKeyRef
		if ref.Name != "nats-users" || ref.Key != u.User {
			t.Errorf("user %s: password from Secret %s key %s; want nats-users key %s", u.User, ref.Name, ref.Key, u.User)
		}
		if _, ok := o.secrets["nats-users"].StringData[u.User]; !ok {
			t.Errorf("user %s: not in the Secret nats-users", u.User)
		}
	}
	if !bytes.Contains(b, []byte(`"stockade.node.worker-1.api"`)) || !bytes.Contains(b, []byte(`"$KV.stockade_nodes.worker-1"`)) {
		t.Error("nats-values.yaml: worker-1 is not scoped to its own subjects")
	}
}

// k8s.io/api is this test's alone: the stockade binary links none of it.
func TestBinaryDoesNotLinkKubernetes(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go on PATH")
	}
	out, err := exec.Command(goBin, "list", "-deps", "github.com/stockade/stockade/cmd/stockade").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 50 || !slices.Contains(deps, "github.com/stockade/stockade/server") {
		t.Fatalf("go list -deps gave %d packages", len(deps))
	}
	for _, d := range deps {
		if strings.HasPrefix(d, "k8s.io/") || strings.HasPrefix(d, "sigs.k8s.io/") {
			t.Errorf("cmd/stockade links %s", d)
		}
	}
}
