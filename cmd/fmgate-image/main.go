// Command fmgate-image builds fmgate's container image without a container
// runtime: an OCI image index (linux/amd64 and linux/arm64 by default)
// written as an OCI layout directory and an OCI archive. scripts/image runs
// it with the version and commit of the checkout.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/fmgate/fmgate/internal/ociimage"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "fmgate-image:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("fmgate-image", flag.ContinueOnError)
	fs.SetOutput(stderr)
	version := fs.String("version", "dev", "version stamped into the binary and the image labels")
	commit := fs.String("commit", "", "commit stamped into the binary and the image labels")
	created := fs.Int64("created", 0, "image and file times, Unix seconds (default $SOURCE_DATE_EPOCH, else now)")
	platforms := fs.String("platforms", "linux/amd64,linux/arm64", "comma-separated os/arch list")
	certs := fs.String("ca-certs", "/etc/ssl/certs/ca-certificates.crt", "PEM bundle of CA certificates to put in the image")
	out := fs.String("layout", "dist/image", "OCI layout directory to write (replaced)")
	archive := fs.String("archive", "dist/fmgate-image.tar", "OCI archive to write (empty: none)")
	ref := fs.String("ref", "", "reference the layout names the index by (default fmgate:VERSION)")
	source := fs.String("source", "https://github.com/fmgate/fmgate", "repository URL for the source label")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	var plats []v1.Platform
	for _, s := range strings.Split(*platforms, ",") {
		p, err := v1.ParsePlatform(strings.TrimSpace(s))
		if err != nil || p.OS != "linux" || p.Architecture == "" {
			return fmt.Errorf("-platforms: %q is not linux/ARCH", s)
		}
		plats = append(plats, *p)
	}
	pem, err := os.ReadFile(*certs)
	if err != nil {
		return fmt.Errorf("-ca-certs: %w (install Debian's ca-certificates or name another bundle)", err)
	}
	when := time.Now()
	if *created != 0 {
		when = time.Unix(*created, 0)
	} else if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return fmt.Errorf("SOURCE_DATE_EPOCH: %w", err)
		}
		when = time.Unix(n, 0)
	}
	if *ref == "" {
		*ref = "fmgate:" + *version
	}
	tmp, err := os.MkdirTemp("", "fmgate-image-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	opts := ociimage.Options{
		Version: *version, Commit: *commit, Created: when.UTC(), Source: *source, CACerts: pem,
		Binary: func(ctx context.Context, p v1.Platform) (string, error) {
			bin := filepath.Join(tmp, "fmgate-"+p.OS+"-"+p.Architecture)
			fmt.Fprintf(stdout, "building %s/%s\n", p.OS, p.Architecture)
			return bin, ociimage.GoBuild(ctx, ".", p, *version, *commit, bin)
		},
	}
	idx, err := ociimage.Build(ctx, opts, plats)
	if err != nil {
		return err
	}
	if err := ociimage.WriteLayout(*out, *ref, idx); err != nil {
		return err
	}
	digest, err := idx.Digest()
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "OCI layout %s: %s %s\n", *out, *ref, digest)
	if *archive != "" {
		if err := ociimage.WriteArchive(*out, *archive); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "OCI archive %s\n", *archive)
	}
	return nil
}
