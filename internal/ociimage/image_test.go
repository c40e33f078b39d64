package ociimage

import (
	"archive/tar"
	"bufio"
	"context"
	"crypto/x509"
	"debug/elf"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The image is built into an OCI archive, read back from it as a registry
// client would, and checked: its config runs fmgate serve as a non-root
// user in the data volume, its layers hold the binary, the certificates and
// the user, and the binary taken out of it answers a turn. The test builds
// the host's platform only; scripts/image builds linux/amd64 and
// linux/arm64.
func TestImage(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the image's binary runs on linux only")
	}
	pem, err := os.ReadFile("/etc/ssl/certs/ca-certificates.crt")
	if err != nil {
		t.Fatalf("CA certificates: %v (apt-get install ca-certificates)", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Minute)
	defer cancel()
	dir := t.TempDir()
	host := v1.Platform{OS: "linux", Architecture: runtime.GOARCH}
	o := Options{
		Version: "9.8.7", Commit: "c0ffee1", Created: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
		Source: "https://github.com/fmgate/fmgate", CACerts: pem,
		Binary: func(ctx context.Context, p v1.Platform) (string, error) {
			bin := filepath.Join(dir, "fmgate-"+p.Architecture)
			return bin, GoBuild(ctx, "../..", p, "9.8.7", "c0ffee1", bin)
		},
	}
	idx, err := Build(ctx, o, []v1.Platform{host})
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteLayout(filepath.Join(dir, "layout"), "fmgate:9.8.7", idx); err != nil {
		t.Fatal(err)
	}
	archive := filepath.Join(dir, "fmgate.tar")
	if err := WriteArchive(filepath.Join(dir, "layout"), archive); err != nil {
		t.Fatal(err)
	}

	img := readArchive(t, archive, filepath.Join(dir, "unpacked"), host)
	checkConfig(t, img, o)
	root := filepath.Join(dir, "rootfs")
	checkFiles(t, img, root)
	runBinary(t, ctx, filepath.Join(root, strings.TrimPrefix(BinaryPath, "/")), filepath.Join(dir, "data"))
}

// readArchive unpacks an OCI archive and returns the image for platform
// from the index the layout names fmgate:9.8.7.
func readArchive(t *testing.T, archive, into string, platform v1.Platform) v1.Image {
	t.Helper()
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(into, filepath.FromSlash(h.Name))
		if h.Typeflag == tar.TypeDir {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	lp, err := layout.FromPath(into)
	if err != nil {
		t.Fatal(err)
	}
	top, err := lp.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	im, err := top.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 || im.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != "fmgate:9.8.7" || im.Manifests[0].MediaType != types.OCIImageIndex {
		t.Fatalf("layout index.json = %+v, want one OCI image index named fmgate:9.8.7", im.Manifests)
	}
	idx, err := top.ImageIndex(im.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range m.Manifests {
		if d.Platform != nil && d.Platform.OS == platform.OS && d.Platform.Architecture == platform.Architecture {
			if d.MediaType != types.OCIManifestSchema1 {
				t.Errorf("manifest media type %s, want %s", d.MediaType, types.OCIManifestSchema1)
			}
			img, err := idx.Image(d.Digest)
			if err != nil {
				t.Fatal(err)
			}
			return img
		}
	}
	t.Fatalf("no %s/%s image in the index: %+v", platform.OS, platform.Architecture, m.Manifests)
	return nil
}

func checkConfig(t *testing.T, img v1.Image, o Options) {
	t.Helper()
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cf.Config
	if c.User != "65532:65532" {
		t.Errorf("user %q, want 65532:65532 (non-root)", c.User)
	}
	if !slices.Equal(c.Entrypoint, []string{"/usr/local/bin/fmgate", "serve"}) || !slices.Equal(c.Cmd, []string{"-addr", "0.0.0.0:8080"}) {
		t.Errorf("entrypoint %q cmd %q, want fmgate serve -addr 0.0.0.0:8080", c.Entrypoint, c.Cmd)
	}
	if _, ok := c.Volumes["/var/lib/fmgate"]; !ok || c.WorkingDir != "/var/lib/fmgate" {
		t.Errorf("volumes %v workdir %q, want /var/lib/fmgate as both", c.Volumes, c.WorkingDir)
	}
	if _, ok := c.ExposedPorts["8080/tcp"]; !ok {
		t.Errorf("exposed ports %v, want 8080/tcp", c.ExposedPorts)
	}
	if !slices.Contains(c.Env, "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt") {
		t.Errorf("env %q, want SSL_CERT_FILE", c.Env)
	}
	for k, want := range map[string]string{
		"org.opencontainers.image.version":  "9.8.7",
		"org.opencontainers.image.revision": "c0ffee1",
		"org.opencontainers.image.source":   o.Source,
		"org.opencontainers.image.created":  "2026-01-02T03:04:05Z",
	} {
		if c.Labels[k] != want {
			t.Errorf("label %s = %q, want %q", k, c.Labels[k], want)
		}
	}
	if cf.OS != "linux" || cf.Architecture != runtime.GOARCH {
		t.Errorf("config platform %s/%s", cf.OS, cf.Architecture)
	}
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range layers {
		if mt, _ := l.MediaType(); mt != types.OCILayer {
			t.Errorf("layer media type %s, want %s", mt, types.OCILayer)
		}
	}
}

// checkFiles walks the image's flattened file system into root and checks
// what the gateway needs at run time.
func checkFiles(t *testing.T, img v1.Image, root string) {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	seen := map[string]*tar.Header{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		seen["/"+strings.TrimSuffix(h.Name, "/")] = h
		if h.Typeflag != tar.TypeReg {
			continue
		}
		p := filepath.Join(root, filepath.FromSlash(h.Name))
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, os.FileMode(h.Mode)&0o777); err != nil {
			t.Fatal(err)
		}
	}
	if h := seen[BinaryPath]; h == nil || h.Mode&0o111 == 0 {
		t.Fatalf("%s missing or not executable: %+v", BinaryPath, h)
	}
	if h := seen[DataDir]; h == nil || h.Typeflag != tar.TypeDir || h.Uid != UID || h.Gid != GID {
		t.Errorf("%s = %+v, want a directory owned by %d:%d so the non-root user can write its state", DataDir, h, UID, GID)
	}
	if h := seen["/tmp"]; h == nil || h.Mode&0o1777 != 0o1777 {
		t.Errorf("/tmp = %+v, want mode 1777", h)
	}
	passwd, err := os.ReadFile(filepath.Join(root, "etc/passwd"))
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^fmgate:x:65532:65532:`).Match(passwd) {
		t.Errorf("/etc/passwd has no fmgate user 65532:\n%s", passwd)
	}
	pem, err := os.ReadFile(filepath.Join(root, strings.TrimPrefix(CertsPath, "/")))
	if err != nil {
		t.Fatal(err)
	}
	if !x509.NewCertPool().AppendCertsFromPEM(pem) {
		t.Errorf("%s holds no certificate", CertsPath)
	}
	// A static binary: no ELF interpreter, so it runs without a libc in
	// the image.
	f, err := elf.Open(filepath.Join(root, strings.TrimPrefix(BinaryPath, "/")))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("%s is dynamically linked (it has an ELF interpreter)", BinaryPath)
		}
	}
}

// runBinary runs the image's binary as the container would (the image's
// working directory is the data volume) and has it answer a turn.
func runBinary(t *testing.T, ctx context.Context, bin, data string) {
	t.Helper()
	out, err := exec.CommandContext(ctx, bin, "version").CombinedOutput()
	if err != nil {
		t.Fatalf("fmgate version: %v\n%s", err, out)
	}
	if want := "fmgate 9.8.7 (commit c0ffee1, go"; !strings.HasPrefix(string(out), want) {
		t.Errorf("fmgate version = %q, want it to start %q", out, want)
	}

	if err := os.MkdirAll(data, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, bin, "serve", "-addr", "127.0.0.1:0")
	cmd.Dir = data
	cmd.Env = []string{"PATH=/usr/bin:/bin", "FMGATE_ADMIN_TOKEN=test-admin-token-0123456789"}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})

	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		re := regexp.MustCompile(`on http://([0-9.:]+)`)
		for sc.Scan() {
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				addr <- m[1]
			}
		}
	}()
	var base string
	select {
	case a := <-addr:
		base = "http://" + a
	case err := <-exited:
		t.Fatalf("fmgate serve exited before listening: %v\n%s", err, stderr.String())
	case <-time.After(2 * time.Minute):
		t.Fatalf("fmgate serve did not say where it listens within 2 minutes\n%s", stderr.String())
	}

	client := &http.Client{Timeout: 30 * time.Second}
	req, _ := http.NewRequestWithContext(ctx, "POST", base+"/v1/chat",
		strings.NewReader(`{"sessionId":"s1","message":"Which manga should I read after One Piece?","locale":"en","stream":false}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-User-Id", "u1")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var turn struct {
		Text string `json:"text"`
		Tier string `json:"tier"`
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || json.Unmarshal(body, &turn) != nil || turn.Text == "" || turn.Tier == "" {
		t.Fatalf("POST /v1/chat: %s %s", resp.Status, body)
	}

	// Stopped as Kubernetes stops it, it drains and exits 0, and its state
	// is in the working directory, the image's volume.
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		exited <- err
		if err != nil {
			t.Fatalf("fmgate serve after SIGTERM: %v\n%s", err, stderr.String())
		}
	case <-time.After(time.Minute):
		t.Fatal("fmgate serve still running a minute after SIGTERM")
	}
	if _, err := os.Stat(filepath.Join(data, "var", "events.db")); err != nil {
		t.Errorf("the event store is not in the working directory (the data volume): %v", err)
	}
}
