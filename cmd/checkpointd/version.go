package main

import (
	"runtime/debug"
	"strings"
)

// releaseVersion and releaseRevision describe a release build, stamped by
// the linker (scripts/release.sh does):
//
//	go build -ldflags "-X main.releaseVersion=v1.4.0 -X main.releaseRevision=$(git rev-parse HEAD)" ./cmd/checkpointd
//
// Empty otherwise: the module version or the VCS revision the go command
// records says which code this is (docs/upgrade.md). The stamped revision
// is what a build with -buildvcs=false (or from a tarball) can know.
var releaseVersion, releaseRevision string

// releaseVersionVar and releaseRevisionVar are their names for -ldflags -X.
const (
	releaseVersionVar  = "main.releaseVersion"
	releaseRevisionVar = "main.releaseRevision"
)

// build says which code this binary is: `checkpointd version` prints it
// and the metric checkpointd_build_info carries it.
type build struct {
	Version   string // the release, else the module version, else "devel"
	Revision  string // the full commit id, "" when nothing recorded it
	Time      string // the commit time the go command recorded, if any
	Modified  bool   // the tree had uncommitted changes
	GoVersion string
}

// thisBuild reads the stamped release and the go command's build info.
func thisBuild() build {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		bi = nil
	}
	return readBuild(releaseVersion, releaseRevision, bi)
}

// version is what `checkpointd version` prints after the program name.
func version() string { return thisBuild().String() }

// readBuild names the build: the release version, else the module version
// (go install …@v1.4.0), else "devel"; the stamped revision, else the VCS
// revision the go command recorded (a build in a git checkout; not in a
// git worktree, nor with -buildvcs=false), with its commit time and
// whether the tree was modified.
func readBuild(release, revision string, bi *debug.BuildInfo) build {
	b := build{Version: release, Revision: revision}
	if b.Version == "" && bi != nil && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		b.Version = bi.Main.Version
	}
	if b.Version == "" {
		b.Version = "devel"
	}
	if bi == nil {
		return b
	}
	b.GoVersion = bi.GoVersion
	var rev, at string
	var modified bool
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if b.Revision == "" || b.Revision == rev {
		b.Revision, b.Time, b.Modified = rev, at, modified
	}
	return b
}

// String is the version, then in parentheses the short revision with its
// time and "modified", and the Go version. A build that recorded nothing
// says so rather than print a bare "(devel)".
func (b build) String() string {
	var details []string
	if b.Revision != "" {
		what := "revision " + b.Revision[:min(len(b.Revision), 12)]
		if b.Time != "" {
			what += ", " + b.Time
		}
		if b.Modified {
			what += ", modified"
		}
		details = append(details, what)
	}
	if b.Version == "devel" && len(details) == 0 {
		details = append(details, "no version or revision recorded: see docs/upgrade.md")
	}
	if b.GoVersion != "" {
		details = append(details, b.GoVersion)
	}
	if len(details) == 0 {
		return b.Version
	}
	return b.Version + " (" + strings.Join(details, "; ") + ")"
}
