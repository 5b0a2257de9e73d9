package main

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"context"
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
	"strings"
	"testing"
	"time"
)

const testRelease = "v0.0.0-releasetest"

// TestRelease runs scripts/release.sh as a release would and checks what
// it made: both archives, SHA256SUMS over them, static binaries for their
// architecture that name the release and the commit, and the container
// image built from the image context with buildah or podman — whose
// binary serves, as the image's user, from the image's own file tree.
func TestRelease(t *testing.T) {
	if testing.Short() {
		t.Skip("cross-builds two binaries")
	}
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	dist := filepath.Join(t.TempDir(), "dist")
	cmd := exec.Command("bash", "scripts/release.sh", testRelease)
	cmd.Dir = root
	// ALLOW_DIRTY: a developer runs the tests with uncommitted changes.
	cmd.Env = append(os.Environ(), "DIST="+dist, "ALLOW_DIRTY=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("scripts/release.sh: %v\n%s", err, out)
	}
	rev, err := exec.Command("git", "-C", root, "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatal(err)
	}
	revision := strings.TrimSpace(string(rev))

	t.Run("archives", func(t *testing.T) {
		sums, err := os.ReadFile(filepath.Join(dist, "SHA256SUMS"))
		if err != nil {
			t.Fatal(err)
		}
		check := exec.Command("sha256sum", "--check", "--strict", "SHA256SUMS")
		check.Dir = dist
		if out, err := check.CombinedOutput(); err != nil {
			t.Fatalf("sha256sum --check: %v\n%s", err, out)
		}
		for arch, machine := range map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64} {
			name := "checkpointd_" + testRelease + "_linux_" + arch
			if !strings.Contains(string(sums), "  "+name+".tar.gz\n") {
				t.Errorf("SHA256SUMS does not list %s.tar.gz:\n%s", name, sums)
			}
			files := untar(t, filepath.Join(dist, name+".tar.gz"), filepath.Join(t.TempDir(), arch))
			for _, want := range []string{"checkpointd", "README.md", "docs/systemd.md", "deploy/systemd/checkpointd.service",
				"deploy/prometheus/checkpointd-alerts.yml", "deploy/grafana/checkpointd-dashboard.json", "deploy/container/Containerfile"} {
				if _, ok := files[name+"/"+want]; !ok {
					t.Errorf("%s.tar.gz lacks %s/%s", name, name, want)
				}
			}
			bin := files[name+"/checkpointd"]
			if bin == "" {
				continue
			}
			checkStatic(t, bin, machine)
			if arch == runtime.GOARCH {
				out, err := exec.Command(bin, "version").CombinedOutput()
				want := "checkpointd " + testRelease + " (revision " + revision[:12]
				if err != nil || !strings.HasPrefix(string(out), want) {
					t.Errorf("%s version: %v, %q; want it to start with %q", name, err, out, want)
				}
			}
		}
	})

	t.Run("image", func(t *testing.T) {
		testImage(t, root, filepath.Join(dist, "image"), revision)
	})
}

// untar unpacks an archive into dir and returns its regular files by name.
func untar(t *testing.T, archive, dir string) map[string]string {
	t.Helper()
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{}
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			t.Fatalf("%s: %v", archive, err)
		}
		if h.Uid != 0 || h.Gid != 0 {
			t.Errorf("%s: %s is owned by %d:%d, want 0:0", archive, h.Name, h.Uid, h.Gid)
		}
		if h.Typeflag != tar.TypeReg || strings.Contains(h.Name, "..") {
			continue
		}
		path := filepath.Join(dir, h.Name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		out, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY, os.FileMode(h.Mode))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(out, tr); err != nil {
			t.Fatal(err)
		}
		out.Close()
		files[h.Name] = path
	}
}

// checkStatic: the binary is for machine and asks for no dynamic loader
// nor shared library, so it runs FROM scratch.
func checkStatic(t *testing.T, bin string, machine elf.Machine) {
	t.Helper()
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Machine != machine {
		t.Errorf("%s is for %v, want %v", bin, f.Machine, machine)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("%s is linked dynamically (%v)", bin, p.Type)
		}
	}
}

// imageTool drives buildah or podman on a storage of the test's own.
type imageTool struct {
	name string
	args []string // the storage flags
}

func (b imageTool) run(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command(b.name, append(append([]string{}, b.args...), args...)...).Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("%s %s: %v\n%s", b.name, strings.Join(args, " "), err, stderr)
	}
	return strings.TrimSpace(string(out))
}

func testImage(t *testing.T, root, context, revision string) {
	tool := ""
	for _, name := range []string{"buildah", "podman"} {
		if _, err := exec.LookPath(name); err == nil {
			tool = name
			break
		}
	}
	if tool == "" {
		needTool(t, "buildah", "building the container image")
	}
	storage := t.TempDir()
	b := imageTool{name: tool, args: []string{"--root", filepath.Join(storage, "root"), "--runroot", filepath.Join(storage, "run"),
		"--storage-driver", "vfs"}}
	t.Cleanup(func() {
		// vfs layers are plain directories; the storage's mounts are not
		// mounts, so removing the tree is enough once the tool let go.
		_ = exec.Command(b.name, append(b.args, "rm", "--all")...).Run()
	})
	build := "bud"
	if tool == "podman" {
		build = "build"
	}
	image := "localhost/checkpointd:" + testRelease
	b.run(t, build, "--quiet", "--platform", "linux/"+runtime.GOARCH, "-f", filepath.Join(root, "deploy/container/Containerfile"),
		"-t", image, context)

	type config struct {
		User       string
		Entrypoint []string
		Cmd        []string
		Volumes    map[string]struct{}
		Env        []string
	}
	var c config
	if tool == "podman" {
		var inspected []struct{ Config config }
		raw := b.run(t, "image", "inspect", image)
		if err := json.Unmarshal([]byte(raw), &inspected); err != nil || len(inspected) != 1 {
			t.Fatalf("podman image inspect: %v\n%s", err, raw)
		}
		c = inspected[0].Config
	} else {
		var inspected struct {
			OCIv1 struct{ Config config }
		}
		raw := b.run(t, "inspect", "--type", "image", image)
		if err := json.Unmarshal([]byte(raw), &inspected); err != nil {
			t.Fatalf("buildah inspect: %v\n%s", err, raw)
		}
		c = inspected.OCIv1.Config
	}
	if c.User != "65532:65532" {
		t.Errorf("the image runs as %q, want 65532:65532 (not root)", c.User)
	}
	if strings.Join(c.Entrypoint, " ") != "/usr/local/bin/checkpointd" || strings.Join(c.Cmd, " ") != "serve" {
		t.Errorf("the image runs %v %v, want /usr/local/bin/checkpointd serve", c.Entrypoint, c.Cmd)
	}
	if _, ok := c.Volumes["/var/lib/checkpointd"]; !ok {
		t.Errorf("the image's volumes %v lack /var/lib/checkpointd", c.Volumes)
	}

	// The image's file tree, as a container would see it.
	var rootfs string
	if tool == "podman" {
		rootfs = b.run(t, "image", "mount", image)
	} else {
		ctr := b.run(t, "from", "--quiet", image)
		rootfs = b.run(t, "mount", ctr)
	}
	for _, want := range []string{"usr/local/bin/checkpointd", "etc/ssl/certs/ca-certificates.crt", "var/lib/checkpointd"} {
		if _, err := os.Stat(filepath.Join(rootfs, want)); err != nil {
			t.Errorf("the image lacks /%s: %v", want, err)
		}
	}
	if _, err := os.Stat(filepath.Join(rootfs, "bin/sh")); err == nil {
		t.Errorf("the image has a shell: FROM scratch should hold the binary alone")
	}
	out, err := exec.Command(filepath.Join(rootfs, "usr/local/bin/checkpointd"), "version").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "checkpointd "+testRelease+" (revision "+revision[:12]) {
		t.Errorf("the image's checkpointd version: %v, %q", err, out)
	}
	chroot, err := exec.LookPath("chroot")
	if os.Geteuid() != 0 || err != nil {
		t.Logf("not root or no chroot: the image's daemon was not started in its file tree")
		return
	}
	serveInImage(t, chroot, rootfs, c.Env)
}

var jsonServingRE = regexp.MustCompile(`"msg":"serving","addr":"([^"]+)"`)

// serveInImage starts the image's daemon in the image's file tree as the
// image's user, with the image's environment, and asks it /readyz: the
// data directory the image made must be writable by that user.
func serveInImage(t *testing.T, chroot, rootfs string, env []string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, chroot, "--userspec=65532:65532", rootfs, "/usr/local/bin/checkpointd", "serve", "--listen", "127.0.0.1:0")
	cmd.Env = env
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
	}()
	addr := make(chan string, 1)
	var log strings.Builder
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			log.WriteString(sc.Text() + "\n")
			if m := jsonServingRE.FindStringSubmatch(sc.Text()); m != nil {
				addr <- m[1]
			}
		}
		close(addr)
	}()
	a, ok := <-addr
	if !ok {
		_ = cmd.Wait()
		t.Fatalf("the image's daemon did not serve:\n%s", log.String())
	}
	waitReady(t, "http://"+a)
	resp, err := http.Get("http://" + a + "/readyz")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("the image's daemon: /readyz %s", describe(resp, err))
	}
	resp.Body.Close()
	fi, err := os.Stat(filepath.Join(rootfs, "var/lib/checkpointd/operator.token"))
	if err != nil {
		t.Fatalf("the image's daemon wrote no operator token in its volume: %v", err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("operator.token mode %v, want 0600", fi.Mode().Perm())
	}
}
