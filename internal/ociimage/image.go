// Package ociimage builds fmgate's container image without a container
// runtime: a static fmgate binary, a non-root user, CA certificates and the
// data directory, assembled layer by layer into an OCI image per platform
// and an OCI image index over them, written as an OCI layout (a directory)
// and optionally as an OCI archive (that directory as a tar file, what
// skopeo, podman and crane take).
package ociimage

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Where things live inside the image.
const (
	BinaryPath = "/usr/local/bin/fmgate"
	CertsPath  = "/etc/ssl/certs/ca-certificates.crt"
	// DataDir is the gateway's working directory and volume: the embedded
	// event store (var/events.db) and the write-ahead log (var/wal) of the
	// default profile land under it.
	DataDir = "/var/lib/fmgate"
	// UID and GID of the fmgate user (the distroless "nonroot" ids).
	UID = 65532
	GID = 65532
	// Port the gateway listens on inside the container.
	Port = 8080
)

// Platforms the release image is built for.
var Platforms = []v1.Platform{{OS: "linux", Architecture: "amd64"}, {OS: "linux", Architecture: "arm64"}}

// Options say what goes in the image.
type Options struct {
	// Version and Commit are stamped into the binary and the image labels.
	Version, Commit string
	// Created is the image's creation time and every file's time; the
	// commit's time makes builds reproducible.
	Created time.Time
	// Source is the repository URL for the source label.
	Source string
	// CACerts is a PEM bundle of CA certificates, e.g. the build machine's
	// /etc/ssl/certs/ca-certificates.crt.
	CACerts []byte
	// Binary returns the path of a static fmgate binary for a platform
	// (see GoBuild).
	Binary func(ctx context.Context, p v1.Platform) (string, error)
}

// Build returns an OCI image index with one image per platform.
func Build(ctx context.Context, o Options, platforms []v1.Platform) (v1.ImageIndex, error) {
	if len(o.CACerts) == 0 {
		return nil, errors.New("ociimage: no CA certificates")
	}
	base, err := baseLayer(o)
	if err != nil {
		return nil, err
	}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, p := range platforms {
		bin, err := o.Binary(ctx, p)
		if err != nil {
			return nil, fmt.Errorf("ociimage: %s/%s binary: %w", p.OS, p.Architecture, err)
		}
		img, err := image(o, p, base, bin)
		if err != nil {
			return nil, fmt.Errorf("ociimage: %s/%s: %w", p.OS, p.Architecture, err)
		}
		p := p
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &p}})
	}
	return idx, nil
}

// Labels are the OCI annotations the image config carries.
func Labels(o Options) map[string]string {
	return map[string]string{
		"org.opencontainers.image.title":       "fmgate",
		"org.opencontainers.image.description": "A resilient gateway for LLM chat apps",
		"org.opencontainers.image.version":     o.Version,
		"org.opencontainers.image.revision":    o.Commit,
		"org.opencontainers.image.source":      o.Source,
		"org.opencontainers.image.created":     o.Created.UTC().Format(time.RFC3339),
	}
}

func image(o Options, p v1.Platform, base v1.Layer, binPath string) (v1.Image, error) {
	bin, err := os.ReadFile(binPath)
	if err != nil {
		return nil, err
	}
	binLayer, err := layer(o.Created, []file{{name: strings.TrimPrefix(BinaryPath, "/"), mode: 0o755, data: bin}})
	if err != nil {
		return nil, err
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.AppendLayers(img, base, binLayer)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Variant = p.OS, p.Architecture, p.Variant
	cf.Created = v1.Time{Time: o.Created}
	cf.Config = v1.Config{
		User: fmt.Sprintf("%d:%d", UID, GID),
		// "fmgate serve" listening on every interface; a command given to
		// the container replaces the -addr flag, so name it again (or set
		// server.addr in the config file).
		Entrypoint:   []string{BinaryPath, "serve"},
		Cmd:          []string{"-addr", fmt.Sprintf("0.0.0.0:%d", Port)},
		WorkingDir:   DataDir,
		Volumes:      map[string]struct{}{DataDir: {}},
		ExposedPorts: map[string]struct{}{fmt.Sprintf("%d/tcp", Port): {}},
		Env: []string{
			"PATH=/usr/local/bin:/usr/bin:/bin",
			"SSL_CERT_FILE=" + CertsPath,
			"TMPDIR=/tmp",
		},
		Labels:     Labels(o),
		StopSignal: "SIGTERM",
	}
	return mutate.ConfigFile(img, cf)
}

// baseLayer holds what every platform shares: the user, the certificates
// and the directories fmgate writes to.
func baseLayer(o Options) (v1.Layer, error) {
	passwd := fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\nfmgate:x:%d:%d:fmgate:%s:/sbin/nologin\n", UID, GID, DataDir)
	group := fmt.Sprintf("root:x:0:\nfmgate:x:%d:\n", GID)
	return layer(o.Created, []file{
		{name: "etc/", dir: true, mode: 0o755},
		{name: "etc/passwd", mode: 0o644, data: []byte(passwd)},
		{name: "etc/group", mode: 0o644, data: []byte(group)},
		{name: "etc/ssl/", dir: true, mode: 0o755},
		{name: "etc/ssl/certs/", dir: true, mode: 0o755},
		{name: strings.TrimPrefix(CertsPath, "/"), mode: 0o644, data: o.CACerts},
		{name: "tmp/", dir: true, mode: 0o1777},
		{name: "usr/", dir: true, mode: 0o755},
		{name: "usr/local/", dir: true, mode: 0o755},
		{name: "usr/local/bin/", dir: true, mode: 0o755},
		{name: "var/", dir: true, mode: 0o755},
		{name: "var/lib/", dir: true, mode: 0o755},
		{name: strings.TrimPrefix(DataDir, "/") + "/", dir: true, mode: 0o750, uid: UID, gid: GID},
	})
}

type file struct {
	name     string
	dir      bool
	mode     int64
	uid, gid int
	data     []byte
}

func layer(mtime time.Time, files []file) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		h := &tar.Header{Name: f.name, Mode: f.mode, Uid: f.uid, Gid: f.gid, ModTime: mtime, Format: tar.FormatPAX}
		if f.dir {
			h.Typeflag = tar.TypeDir
		} else {
			h.Typeflag = tar.TypeReg
			h.Size = int64(len(f.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	b := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(b)), nil
	}, tarball.WithMediaType(types.OCILayer))
}

// WriteLayout writes the index as an OCI layout in dir, tagged ref (e.g.
// "fmgate:1.2.0"), replacing what dir held.
func WriteLayout(dir, ref string, idx v1.ImageIndex) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("ociimage: layout: %w", err)
	}
	if err := p.AppendIndex(idx, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": ref})); err != nil {
		return fmt.Errorf("ociimage: layout: %w", err)
	}
	return nil
}

// WriteArchive writes the OCI layout in dir as a tar file: an OCI archive.
func WriteArchive(dir, out string) error {
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(f)
	err = filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || path == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		info, err := d.Info()
		if err != nil {
			return err
		}
		h, err := tar.FileInfoHeader(info, "")
		if err != nil {
			return err
		}
		h.Name = filepath.ToSlash(rel)
		if d.IsDir() {
			h.Name += "/"
		}
		h.Uid, h.Gid, h.Uname, h.Gname = 0, 0, "", ""
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		src, err := os.Open(path)
		if err != nil {
			return err
		}
		defer src.Close()
		_, err = io.Copy(tw, src)
		return err
	})
	if cerr := tw.Close(); err == nil {
		err = cerr
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("ociimage: archive: %w", err)
	}
	return nil
}

// GoBuild builds a static fmgate binary (CGO_ENABLED=0, -trimpath) of the
// module in moduleDir for a platform into out, with the version and commit
// stamped in.
func GoBuild(ctx context.Context, moduleDir string, p v1.Platform, version, commit, out string) error {
	ldflags := fmt.Sprintf("-s -w -X main.version=%s -X main.commit=%s", version, commit)
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags", ldflags, "-o", out, "./cmd/fmgate")
	cmd.Dir = moduleDir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+p.OS, "GOARCH="+p.Architecture)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s/%s: %w\n%s", p.OS, p.Architecture, err, b)
	}
	return nil
}
