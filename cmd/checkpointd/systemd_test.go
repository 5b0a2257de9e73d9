package main

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/checkpointd/checkpointd/store/storetest"
)

const systemdUnitFile = "../../deploy/systemd/checkpointd.service"

// TestSystemdUnitVerifies: `systemd-analyze verify` accepts the unit with
// nothing to say (it warns and still exits 0 on a misspelt directive, so
// any output fails). Its ExecStart binary must exist, so the copy checked
// runs this test's binary instead; nothing else is changed.
func TestSystemdUnitVerifies(t *testing.T) {
	analyze := needTool(t, "systemd-analyze", "verifying the systemd unit")
	unit, err := os.ReadFile(systemdUnitFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"\nType=notify\n", "\nExecStart=/usr/local/bin/checkpointd serve\n", "\nStateDirectory=checkpointd\n",
		"\nNoNewPrivileges=yes\n", "\nProtectSystem=strict\n"} {
		if !strings.Contains(string(unit), want) {
			t.Errorf("the unit lacks %q", strings.TrimSpace(want))
		}
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	copied := filepath.Join(t.TempDir(), "checkpointd.service")
	if err := os.WriteFile(copied, []byte(strings.Replace(string(unit), "ExecStart=/usr/local/bin/checkpointd ", "ExecStart="+self+" ", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(analyze, "verify", copied).CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
}

// TestServeNotifiesSystemd: under Type=notify, serve sends READY=1 to
// $NOTIFY_SOCKET once it answers, and STOPPING=1 when it shuts down.
func TestServeNotifiesSystemd(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	t.Setenv("NOTIFY_SOCKET", sock)
	read := func() string {
		t.Helper()
		buf := make([]byte, 256)
		_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		n, err := conn.Read(buf)
		if err != nil {
			t.Fatalf("no notification: %v", err)
		}
		return string(buf[:n])
	}
	d := startServe(t, nil, storeArgs(t.TempDir(), backendURL(t, storetest.SQLite))...)
	if got := read(); got != "READY=1" {
		t.Errorf("first notification %q, want READY=1", got)
	}
	call(t, "GET", d.URL+"/readyz", "", nil).expect(t, 200)
	if err := d.stop(); err != nil {
		t.Fatal(err)
	}
	if got := read(); got != "STOPPING=1" {
		t.Errorf("notification at shutdown %q, want STOPPING=1", got)
	}
}
