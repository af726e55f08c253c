package main

import (
	"archive/tar"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

const testVersion = "v9.9.9-imagetest"

// TestImage builds the image the way `make image` does, reads it back from disk with the
// library, and runs the binary out of its layer.
func TestImage(t *testing.T) {
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	m := meta{version: testVersion, revision: "0123abc", created: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), arch: runtime.GOARCH}
	res, err := build(options{repo: repo, out: out, arches: []string{runtime.GOARCH}, meta: m})
	if err != nil {
		t.Fatal(err)
	}
	img := readOCILayout(t, filepath.Join(out, "oci"), res.digest)

	t.Run("config", func(t *testing.T) { checkConfig(t, img, m) })
	t.Run("docker archive holds the same image", func(t *testing.T) {
		archived, err := tarball.ImageFromPath(filepath.Join(out, "pulsar-proxy.tar"), nil)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := img.ConfigName()
		if got, err := archived.ConfigName(); err != nil || got != want {
			t.Errorf("docker archive config %v (%v), OCI layout's %v", got, err, want)
		}
	})

	root := t.TempDir()
	extract(t, img, root)
	binary := filepath.Join(root, binaryPath)
	t.Run("version", func(t *testing.T) {
		b, err := exec.Command(binary, "--version").CombinedOutput()
		if err != nil || strings.TrimSpace(string(b)) != "pulsar-proxy "+testVersion {
			t.Errorf("--version: %q, %v; want %q", b, err, "pulsar-proxy "+testVersion)
		}
	})
	t.Run("runs with the image's config", func(t *testing.T) { runProxy(t, binary, filepath.Join(root, configPath)) })
}

func readOCILayout(t *testing.T, dir, digest string) v1.Image {
	t.Helper()
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	h, err := v1.NewHash(digest)
	if err != nil {
		t.Fatal(err)
	}
	img, err := idx.Image(h)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func checkConfig(t *testing.T, img v1.Image, m meta) {
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cf.Config
	if c.User != "65532:65532" {
		t.Errorf("user %q, want the numeric non-root 65532:65532", c.User)
	}
	if !slices.Equal(c.Entrypoint, []string{"/pulsar-proxy"}) || !slices.Equal(c.Cmd, []string{"--config", "/etc/pulsar-proxy/config.yaml"}) {
		t.Errorf("entrypoint %q cmd %q", c.Entrypoint, c.Cmd)
	}
	for _, p := range []string{"6650/tcp", "6651/tcp", "8080/tcp", "8443/tcp"} {
		if _, ok := c.ExposedPorts[p]; !ok {
			t.Errorf("port %s not exposed: %v", p, c.ExposedPorts)
		}
	}
	want := map[string]string{
		"org.opencontainers.image.title":    "pulsar-proxy",
		"org.opencontainers.image.version":  testVersion,
		"org.opencontainers.image.revision": "0123abc",
		"org.opencontainers.image.created":  "2026-01-02T03:04:05Z",
	}
	for k, v := range want {
		if c.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, c.Labels[k], v)
		}
	}
	if cf.OS != "linux" || cf.Architecture != m.arch || !cf.Created.Time.Equal(m.created) {
		t.Errorf("os/arch/created %s/%s/%v", cf.OS, cf.Architecture, cf.Created)
	}
	if layers, _ := img.Layers(); len(layers) != 1 {
		t.Errorf("%d layers, want 1", len(layers))
	}
}

// extract writes the image's files under root, checking that they belong to root and that
// the non-root user can read (and run) them.
func extract(t *testing.T, img v1.Image, root string) {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	var files []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		// Owned by root, writable by root only, readable by all; the binary and the
		// directories also executable by all.
		need := int64(0o004)
		if h.Typeflag == tar.TypeDir || "/"+h.Name == binaryPath {
			need = 0o005
		}
		if h.Uid != 0 || h.Gid != 0 || h.Mode&need != need || h.Mode&0o022 != 0 {
			t.Errorf("%s: uid %d gid %d mode %o", h.Name, h.Uid, h.Gid, h.Mode)
		}
		dst := filepath.Join(root, h.Name)
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(dst, 0o755)
		case tar.TypeReg:
			files = append(files, "/"+h.Name)
			var b []byte
			if b, err = io.ReadAll(tr); err == nil {
				err = os.WriteFile(dst, b, os.FileMode(h.Mode))
			}
		default:
			t.Errorf("%s: unexpected entry type %c", h.Name, h.Typeflag)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	slices.Sort(files)
	if !slices.Equal(files, []string{configPath, binaryPath}) {
		t.Fatalf("image files %q, want the config and the binary", files)
	}
}

// runProxy starts the binary with the image's config, the listeners moved to loopback and a
// broker that refuses connections: alive, not ready (naming the broker), and a clean exit
// on SIGTERM.
func runProxy(t *testing.T, binary, config string) {
	pulsarAddr, httpAddr, brokerAddr := freeAddr(t), freeAddr(t), freeAddr(t)
	broker := "pulsar://" + brokerAddr
	p := exec.Command(binary, "--config", config)
	p.Env = []string{
		"PULSAR_PROXY_LISTEN_PULSAR=" + pulsarAddr,
		"PULSAR_PROXY_LISTEN_HTTP=" + httpAddr,
		"PULSAR_PROXY_DISCOVERY_STATIC_BROKERS=" + broker,
		"PULSAR_PROXY_BROKER_ALLOWED_PORTS=" + brokerAddr[strings.LastIndexByte(brokerAddr, ':')+1:],
		"PULSAR_PROXY_DISCOVERY_HEALTH_CHECK_INTERVAL=200ms",
	}
	logFile, err := os.Create(filepath.Join(t.TempDir(), "proxy.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	log := func() string { b, _ := os.ReadFile(logFile.Name()); return string(b) }
	p.Stdout, p.Stderr = logFile, logFile
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	var waitErr error
	exited := make(chan struct{})
	go func() { waitErr = p.Wait(); close(exited) }()
	defer func() {
		select {
		case <-exited:
		default:
			p.Process.Kill()
			<-exited
		}
	}()

	base := "http://" + httpAddr
	deadline := time.Now().Add(20 * time.Second)
	var code int
	var body string
	for time.Now().Before(deadline) {
		if code, _ = get(base + "/healthz"); code == 200 {
			if code, body = get(base + "/readyz"); strings.Contains(body, "refused") {
				break
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	if code != http.StatusServiceUnavailable || !strings.Contains(body, broker) {
		t.Fatalf("/readyz: %d %q, want 503 naming %s\nlog:\n%s", code, body, broker, log())
	}

	t.Logf("/readyz: %d %s", code, strings.TrimSpace(body))
	p.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
		if waitErr != nil {
			t.Errorf("exit after SIGTERM: %v\nlog:\n%s", waitErr, log())
		}
	case <-time.After(20 * time.Second):
		t.Errorf("still running 20s after SIGTERM\nlog:\n%s", log())
	}
}

func get(url string) (int, string) {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// freeAddr is a loopback address nothing listens on (its listener is closed at once).
func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
