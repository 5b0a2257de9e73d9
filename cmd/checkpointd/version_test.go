package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
)

// TestVersionString proves what `checkpointd version` says for each way
// the binary can be built: a release stamped with -ldflags -X, a module
// version from go install, a checkout's VCS revision (with its time and
// whether the tree was modified), and nothing at all, which says so
// instead of a bare "(devel)".
func TestVersionString(t *testing.T) {
	t.Parallel()
	vcs := func(mod string, kv ...string) *debug.BuildInfo {
		bi := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/checkpointd/checkpointd", Version: mod}}
		for i := 0; i+1 < len(kv); i += 2 {
			bi.Settings = append(bi.Settings, debug.BuildSetting{Key: kv[i], Value: kv[i+1]})
		}
		return bi
	}
	const rev = "4adf5e7415fc014beb2be7286f19c1b523aec0ea"
	for _, tc := range []struct {
		name     string
		release  string
		revision string
		bi       *debug.BuildInfo
		want     string
	}{
		{"release with vcs", "v1.4.0", "", vcs("(devel)", "vcs.revision", rev, "vcs.time", "2026-12-01T11:01:17Z", "vcs.modified", "false"),
			"v1.4.0 (revision 4adf5e7415fc, 2026-12-01T11:01:17Z; go1.26.8)"},
		{"release alone", "v1.4.0", "", vcs("(devel)"), "v1.4.0 (go1.26.8)"},
		{"go install", "", "", vcs("v1.3.2"), "v1.3.2 (go1.26.8)"},
		{"checkout", "", "", vcs("(devel)", "vcs.revision", rev, "vcs.time", "2026-12-01T11:01:17Z", "vcs.modified", "false"),
			"devel (revision 4adf5e7415fc, 2026-12-01T11:01:17Z; go1.26.8)"},
		{"modified checkout", "", "", vcs("(devel)", "vcs.revision", rev, "vcs.time", "2026-12-01T11:01:17Z", "vcs.modified", "true"),
			"devel (revision 4adf5e7415fc, 2026-12-01T11:01:17Z, modified; go1.26.8)"},
		{"pseudo-version", "", "", vcs("v0.0.0-20261201110117-4adf5e7415fc+dirty", "vcs.revision", rev, "vcs.time", "2026-12-01T11:01:17Z", "vcs.modified", "true"),
			"v0.0.0-20261201110117-4adf5e7415fc+dirty (revision 4adf5e7415fc, 2026-12-01T11:01:17Z, modified; go1.26.8)"},
		{"nothing recorded", "", "", vcs("(devel)"), "devel (no version or revision recorded: see docs/upgrade.md; go1.26.8)"},
		{"no build info", "", "", nil, "devel (no version or revision recorded: see docs/upgrade.md)"},
		{"release stamped without vcs", "v1.4.0", rev, vcs("(devel)"), "v1.4.0 (revision 4adf5e7415fc; go1.26.8)"},
		{"stamped revision is the vcs one", "v1.4.0", rev, vcs("(devel)", "vcs.revision", rev, "vcs.time", "2026-12-01T11:01:17Z", "vcs.modified", "true"),
			"v1.4.0 (revision 4adf5e7415fc, 2026-12-01T11:01:17Z, modified; go1.26.8)"},
		{"stamped revision wins over another vcs one", "v1.4.0", rev, vcs("(devel)", "vcs.revision", "0000000000000000000000000000000000000000", "vcs.time", "2026-12-01T11:01:17Z"),
			"v1.4.0 (revision 4adf5e7415fc; go1.26.8)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := readBuild(tc.release, tc.revision, tc.bi).String(); got != tc.want {
				t.Errorf("readBuild(…).String() = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestVersionLdflags builds the binary the way docs/upgrade.md tells a
// release to and runs `checkpointd version`: the -X variable it names
// must exist (the linker ignores a wrong name silently).
func TestVersionLdflags(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	t.Parallel()
	bin := filepath.Join(t.TempDir(), "checkpointd")
	build := exec.Command("go", "build", "-ldflags", "-X "+releaseVersionVar+"=v9.8.7-test -X "+releaseRevisionVar+"=4adf5e7415fc014beb2be7286f19c1b523aec0ea", "-o", bin, ".")
	build.Env = append(os.Environ(), "GOFLAGS=-buildvcs=false")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "version").CombinedOutput()
	if err != nil {
		t.Fatalf("checkpointd version: %v\n%s", err, out)
	}
	if !strings.HasPrefix(string(out), "checkpointd v9.8.7-test (revision 4adf5e7415fc; go") {
		t.Errorf("checkpointd version printed %q, want it to start with checkpointd v9.8.7-test (revision 4adf5e7415fc; go", out)
	}
	doc, err := os.ReadFile("../../docs/upgrade.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), "-X "+releaseVersionVar+"=") {
		t.Errorf("docs/upgrade.md does not show -ldflags \"-X %s=…\"", releaseVersionVar)
	}
}
